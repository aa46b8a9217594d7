"""The Helm chart (deploy/helm/floe): `helm lint --strict`, `helm template` with a single-node
and a 3-node fleet values file, and the rendered manifests' structure; the configs it renders
pass `floe-proxy check` and `floe-control check`. No cluster needed."""
import os
import pathlib
import subprocess

import pytest
import yaml

from conftest import CACHE, CONTROL_BIN, FLOE_BIN

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "floe"
HELM = CACHE / "bin" / "helm"
pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm is installed by tests/run.sh")


def helm(*args):
    r = subprocess.run([str(HELM), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def render(values):
    out = helm("template", "lake", str(CHART), "--namespace", "data", "-f", str(CHART / "ci" / values))
    docs = [d for d in yaml.safe_load_all(out) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def container(sts):
    c, = sts["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("values", ["single-values.yaml", "fleet-values.yaml"])
def test_the_chart_lints_strictly(values):
    helm("lint", "--strict", str(CHART), "-f", str(CHART / "ci" / values))


def test_a_fleet_renders_a_statefulset_with_peers_probes_drain_and_sized_resources():
    m = render("fleet-values.yaml")
    sts = m[("StatefulSet", "lake-floe")]
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == "lake-floe-peers"
    peers = m[("Service", "lake-floe-peers")]["spec"]
    assert peers["clusterIP"] == "None" and peers["publishNotReadyAddresses"] is True
    assert {(p["name"], p.get("protocol", "TCP")) for p in peers["ports"]} >= {("peer", "TCP"), ("gossip", "UDP")}
    c = container(sts)
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["lifecycle"]["preStop"]["httpGet"]["path"] == "/drainz?seconds=5"
    assert c["lifecycle"]["preStop"]["httpGet"]["httpHeaders"] == [{"name": "X-Floe-Drain", "value": "yes"}]
    assert sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 5 + 30
    # Memory from the DRAM ceilings; the volume from the disk and write-back ceilings.
    assert int(c["resources"]["requests"]["memory"]) >= (1 << 30) + (256 << 20)
    claim, = sts["spec"]["volumeClaimTemplates"]
    assert int(claim["spec"]["resources"]["requests"]["storage"]) >= (20 << 30) + (2 << 30) + (20 << 30)
    zones = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    keys = [t["podAffinityTerm"]["topologyKey"] for t in zones["preferredDuringSchedulingIgnoredDuringExecution"]]
    assert "topology.kubernetes.io/zone" in keys
    assert m[("PodDisruptionBudget", "lake-floe")]["spec"]["maxUnavailable"] == 1
    assert ("ServiceMonitor", "lake-floe") in m
    assert sts["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    # Secrets are referenced, never inlined.
    assert not [k for k in m if k[0] == "Secret"]
    env = {e["name"]: e for e in c["env"]}
    for name in ("FLOE_FLEET_SECRET", "FLOE_ADMIN_TOKEN", "FLOE_CLIENT_ENGINES_SECRET"):
        assert "secretKeyRef" in env[name]["valueFrom"], name
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    conf = yaml.safe_load(m[("ConfigMap", "lake-floe")]["data"]["floe.yaml"])
    assert conf["fleet"]["dns"] == "lake-floe-peers.data.svc.cluster.local:9200"
    assert conf["writeback"]["capacity_bytes"] == 20 << 30
    control = m[("Deployment", "lake-floe-control")]
    cconf = yaml.safe_load(m[("ConfigMap", "lake-floe-control")]["data"]["control.yaml"])
    assert cconf["nodes"][0]["admin"] == "http://lake-floe-0.lake-floe-peers.data.svc.cluster.local:9101"
    assert container(control)["args"][:1] == ["floe-control"]


def test_one_node_renders_no_fleet_and_no_control_plane():
    m = render("single-values.yaml")
    sts = m[("StatefulSet", "lake-floe")]
    assert sts["spec"]["replicas"] == 1
    conf = yaml.safe_load(m[("ConfigMap", "lake-floe")]["data"]["floe.yaml"])
    assert "fleet" not in conf and "writeback" not in conf
    assert "FLOE_FLEET_SECRET" not in {e["name"] for e in container(sts)["env"]}
    assert not [k for k in m if k[0] == "Deployment"]


@pytest.mark.parametrize("values", ["single-values.yaml", "fleet-values.yaml"])
def test_the_rendered_configs_pass_the_binaries_own_checks(values, tmp_path):
    m = render(values)
    env = dict(os.environ, POD_IP="10.1.2.3", HOSTNAME="lake-floe-0", FLOE_FLEET_SECRET="s" * 32,
               FLOE_ADMIN_TOKEN="t", FLOE_ORIGIN_ACCESS_KEY_ID="k", FLOE_ORIGIN_SECRET_ACCESS_KEY="s",
               FLOE_CLIENT_ENGINES_SECRET="e")
    proxy = tmp_path / "floe.yaml"
    text = m[("ConfigMap", "lake-floe")]["data"]["floe.yaml"]
    # The pod's paths, here under tmp_path (the check opens the cache and write-back dirs).
    proxy.write_text(text.replace("/var/lib/floe", str(tmp_path / "var")))
    r = subprocess.run([str(FLOE_BIN), "check", str(proxy)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    if ("ConfigMap", "lake-floe-control") in m:
        control = tmp_path / "control.yaml"
        control.write_text(m[("ConfigMap", "lake-floe-control")]["data"]["control.yaml"]
                           .replace("/var/lib/floe-control", str(tmp_path / "control")))
        r = subprocess.run([str(CONTROL_BIN), "check", str(control)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
