"""Replace one scenario's section and target rows of docs/benchmarks.md, leaving the rest.

A scenario recorded alone (`run_all.py --only <name> --write-docs`) rewrites only what it
measured: its section between its markers, and the rows of the targets table whose names
start with its prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TARGETS_HEADER = "| target | measured | result |"
# A hand-written note (an A/B, a reading of a table) between its markers; a rewrite of the
# whole doc keeps it (carry_notes).
_NOTE = re.compile(r"<!-- note: (?P<name>[\w-]+) -->\n.*?<!-- note: end (?P=name) -->\n", re.S)


@dataclass(frozen=True)
class Section:
    begin: str  # the markers around the section: HTML comments
    end: str
    insert_before: str  # where a first recording goes: before this heading
    target_prefix: str  # the names of its rows in the targets table start with this


def recorded_alone(meta: dict[str, Any] | None, note: str = "") -> list[str]:
    """The lines that say which run recorded a section alone: none for a full run's."""
    if meta is None:
        return []
    return [
        f"Recorded alone by `{meta['command'].strip()}` on {meta['date']}, "
        f"{meta['elapsed_s']:.0f} s{note}.",
        "",
    ]


def carry(old: str, new: str, where: Section) -> str:
    """`new` with `old`'s section kept: a section another command records (the soak's) that
    a rewrite of the whole doc would drop."""
    if where.begin not in old or where.end not in old or where.begin in new:
        return new
    kept = where.begin + old.split(where.begin, 1)[1].split(where.end, 1)[0] + where.end
    return splice(new, where, kept.split("\n"), [])


def splice(doc: str, where: Section, section: list[str], checks: list[dict[str, Any]]) -> str:
    """`doc` with the section and its target rows replaced by these (or added)."""
    text = "\n".join(section) + "\n"
    if where.begin in doc and where.end in doc:
        head, rest = doc.split(where.begin, 1)
        tail = rest.split(where.end, 1)[1].lstrip("\n")
        doc = head + text + tail
    elif where.insert_before in doc:
        head, tail = doc.split(where.insert_before, 1)
        doc = head + text + where.insert_before + tail
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    lines = [ln for ln in doc.split("\n") if not ln.startswith(f"| {where.target_prefix}")]
    rows = [f"| {t['name']} | {t['value']} | {'PASS' if t['ok'] else '**FAIL**'} |" for t in checks]
    if TARGETS_HEADER in lines:
        at = lines.index(TARGETS_HEADER) + 2
        while at < len(lines) and lines[at].startswith("|"):
            at += 1
        lines[at:at] = rows
    return "\n".join(lines)


def carry_notes(old: str, new: str) -> str:
    """`new` with every hand-written note of `old` kept (between `<!-- note: NAME -->` and
    `<!-- note: end NAME -->`), each before the first heading that followed it in `old` and
    is in `new`, else at the end; a note `new` already has is left as it is."""
    for match in _NOTE.finditer(old):
        note = match.group(0)
        if f"<!-- note: {match.group('name')} -->" in new:
            continue
        headings = [ln for ln in old[match.end() :].split("\n") if ln.startswith("#")]
        heading = next((h for h in headings if f"\n{h}\n" in new), None)
        if heading is None:
            new = new.rstrip("\n") + "\n\n" + note
        else:
            new = new.replace(f"\n{heading}\n", f"\n{note}\n{heading}\n", 1)
    return new
