"""load/PERFORMANCE.md keeps every benchmark's figures: each section is written through
load/perfdoc.py, which refuses a rewrite that would drop or move another section (a benchmark once
rewrote the file from its own marker to the end and erased the Soak, Scheduler and Hedged
sections). No binaries or services needed."""
import pathlib
import re
import sys

import pytest

LOAD = pathlib.Path(__file__).resolve().parent.parent / "load"
sys.path.insert(0, str(LOAD))
import perfdoc  # noqa: E402

SCRIPTS = sorted(p for p in LOAD.iterdir() if p.suffix in (".py", ".sh") and p.name != "perfdoc.py")


def markers_named_by(path):
    return set(perfdoc.MARKER.findall(path.read_text()))


def test_every_section_a_benchmark_writes_is_in_the_document_once():
    doc = perfdoc.PERF.read_text()
    named = set().union(*(markers_named_by(p) for p in SCRIPTS))
    assert len(named) >= 16, named  # bench, compaction, writeback, fleet, scheduler, soak, hedge, wave
    for marker in sorted(named):
        assert doc.count(marker) == 1, f"{marker} appears {doc.count(marker)} times in PERFORMANCE.md"


def test_no_benchmark_writes_the_document_except_through_perfdoc():
    for p in SCRIPTS:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            writes = "write_text" in line or "open(" in line and "w" in line
            assert not (writes and re.search(r"PERF\b|PERFORMANCE", line)), f"{p.name}:{n}: {line.strip()}"


def test_a_rewrite_replaces_its_own_section_and_keeps_every_other():
    doc = perfdoc.PERF.read_text()
    begin = "<!-- hedge section: written by load/hedge_bench.py -->"
    end = "<!-- hedge section end -->"
    out = perfdoc.replaced(doc, begin, end, f"{begin}\n\n## Hedged origin reads\n\nnew figures\n\n{end}\n")
    assert "new figures" in out
    assert out[:out.index(begin)] == doc[:doc.index(begin)]
    assert out[out.index(end):] == doc[doc.index(end):]
    # A new section goes before the marker asked for, and the others stay.
    new = perfdoc.replaced(doc, "<!-- x:begin -->", "<!-- x:end -->", "<!-- x:begin -->\nx\n<!-- x:end -->\n",
                           before="<!-- wave:begin -->")
    assert new.index("<!-- x:end -->") < new.index("<!-- wave:begin -->")


def test_a_rewrite_that_would_erase_another_section_is_refused():
    doc = perfdoc.PERF.read_text()
    fleet = "<!-- fleet section: written by load/fleet_bench.py -->"
    # The old eraser: a section ending at the document's last marker swallows everything after.
    with pytest.raises(ValueError, match="other sections"):
        perfdoc.replaced(doc, fleet, "<!-- wave:end -->", f"{fleet}\nnew\n<!-- wave:end -->\n")
    with pytest.raises(ValueError, match="must run from"):
        perfdoc.replaced(doc, fleet, "<!-- fleet section end -->", f"{fleet}\nno end marker\n")
