"""load/PERFORMANCE.md's sections: each benchmark owns the text between its two marker comments
and rewrites only that, so one benchmark's run leaves the others' numbers alone. A rewrite that
would drop or reorder any other section's markers is refused (a benchmark once rewrote the file
from its own marker to the end and erased three sections: tests/test_perfdoc.py)."""
import pathlib
import re

PERF = pathlib.Path(__file__).resolve().parent / "PERFORMANCE.md"
MARKER = re.compile(r"<!-- [^>]*-->")


def replaced(text, begin, end, block, before=None):
    """`text` with `block` (from the `begin` marker to the `end` marker and a newline) in place
    of the section between those markers; a new section goes before the marker `before` when the
    text has it, else at the end. Raises ValueError if any marker outside the section would be
    lost, duplicated or moved."""
    if not (block.startswith(begin) and block.rstrip("\n").endswith(end)):
        raise ValueError(f"a section must run from {begin!r} to {end!r}")
    if begin in text and end in text:
        out = text[:text.index(begin)] + block + text[text.index(end) + len(end) + 1:]
    elif before and before in text:
        at = text.index(before)
        out = text[:at] + block + "\n" + text[at:]
    else:
        out = text + "\n" + block
    others = lambda t: [m for m in MARKER.findall(t) if m not in (begin, end)]  # noqa: E731
    if others(out) != others(text):
        raise ValueError(f"writing {begin!r} would change other sections: {others(text)} -> {others(out)}")
    return out


def write_section(begin, end, block, before=None):
    """Rewrites the section `begin`..`end` of load/PERFORMANCE.md (see `replaced`)."""
    text = PERF.read_text() if PERF.exists() else "# Floe performance\n"
    PERF.write_text(replaced(text, begin, end, block, before))
