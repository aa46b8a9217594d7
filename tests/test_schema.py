"""The configs' JSON Schemas (conf/floe-proxy.schema.json, conf/floe-control.schema.json),
generated from the config types by `floe-proxy schema` and `floe-control schema`: the committed
files are what the binaries generate, every shipped config and every config the Helm chart
renders validates, and every broken fixture is refused by the schema as by the binary."""
import json
import pathlib
import subprocess

import jsonschema
import pytest
import yaml

from conftest import FLOE_BIN
from test_control import CONTROL_BIN
from test_helm import render

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
SCHEMA = {"proxy": CONF / "floe-proxy.schema.json", "control": CONF / "floe-control.schema.json"}
BIN = {"proxy": FLOE_BIN, "control": CONTROL_BIN}
SHIPPED = {"quickstart.yaml": "proxy", "example.yaml": "proxy", "control.yaml": "control",
           "scheduler.yaml": "control"}
BROKEN = {"wrongkey.yaml": "proxy", "fleet-wrongkey.yaml": "proxy", "writeback-wrongkey.yaml": "proxy",
          "control-wrongkey.yaml": "control", "control-sched-wrongkey.yaml": "control"}


def validator(kind):
    schema = json.loads(SCHEMA[kind].read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("kind", ["proxy", "control"])
def test_the_committed_schema_is_what_the_binary_generates(kind):
    out = subprocess.run([str(BIN[kind]), "schema"], capture_output=True, text=True, check=True).stdout
    assert out == SCHEMA[kind].read_text(), \
        f"regenerate: {BIN[kind].name} schema > conf/{SCHEMA[kind].name}"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_config_validates(name):
    doc = yaml.safe_load((CONF / name).read_text())
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator(SHIPPED[name]).iter_errors(doc)]
    assert not errors, errors
    # And names its schema for editors (yaml-language-server).
    first = (CONF / name).read_text().splitlines()[0]
    assert first == f"# yaml-language-server: $schema={SCHEMA[SHIPPED[name]].name}", first


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_every_broken_fixture_is_refused_by_the_schema(name):
    doc = yaml.safe_load((CONF / "testdata" / name).read_text())
    errors = list(validator(BROKEN[name]).iter_errors(doc))
    assert errors, f"{name} validates against the schema but the binary refuses it"
    def messages(es):
        for e in es:
            yield e.message
            yield from messages(e.context or [])
    unexpected = [m for m in messages(errors) if "was unexpected" in m]
    assert unexpected, [e.message for e in errors]


@pytest.mark.parametrize("values", ["single-values.yaml", "fleet-values.yaml"])
def test_the_configs_the_chart_renders_validate(values):
    m = render(values)
    docs = [("proxy", m[("ConfigMap", "lake-floe")]["data"]["floe.yaml"])]
    if ("ConfigMap", "lake-floe-control") in m:
        docs.append(("control", m[("ConfigMap", "lake-floe-control")]["data"]["control.yaml"]))
    for kind, text in docs:
        errors = [f"{'.'.join(map(str, e.path))}: {e.message}"
                  for e in validator(kind).iter_errors(yaml.safe_load(text))]
        assert not errors, (kind, errors)
