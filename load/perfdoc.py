"""load/PERFORMANCE.md's sections: each benchmark owns the text between its two marker comments
and rewrites only that, so one benchmark's run leaves the others' numbers alone."""
import pathlib

PERF = pathlib.Path(__file__).resolve().parent / "PERFORMANCE.md"


def write_section(begin, end, block, before=None):
    """Puts `block` (from the `begin` marker to the `end` marker and a newline) in place of the
    section between those markers; a new section goes before the marker `before` when the file
    has it, else at the end."""
    text = PERF.read_text() if PERF.exists() else "# Floe performance\n"
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end) + 1:]
    elif before and before in text:
        at = text.index(before)
        text = text[:at] + block + "\n" + text[at:]
    else:
        text += "\n" + block
    PERF.write_text(text)
