"""A rewrite of docs/benchmarks.md from a run's results keeps the hand-written notes
(bench/splice.carry_notes): an A/B or a reading of a table is not in any run's results."""

from __future__ import annotations

from bench.splice import carry_notes

OLD = """# Benchmarks

### 4d. Statements

| old table |

<!-- note: reading -->
**What it says.** The accept is half.
<!-- note: end reading -->

<!-- note: ab -->
### 4e. An A/B

| off | on |
<!-- note: end ab -->

### 5. Accept -> start

| old latency |

<!-- note: last -->
A note at the end.
<!-- note: end last -->
"""

NEW = """# Benchmarks

### 4d. Statements

| new table |

### 5. Accept -> start

| new latency |
"""


def test_notes_return_in_their_order_before_the_heading_that_followed_them() -> None:
    doc = carry_notes(OLD, NEW)

    assert "| new table |" in doc and "| old table |" not in doc
    assert doc.index("| new table |") < doc.index("**What it says.**")
    assert doc.index("**What it says.**") < doc.index("### 4e. An A/B")
    assert doc.index("### 4e. An A/B") < doc.index("### 5. Accept -> start")
    assert doc.index("| new latency |") < doc.index("A note at the end.")


def test_carrying_twice_changes_nothing() -> None:
    once = carry_notes(OLD, NEW)

    assert carry_notes(once, once) == once
    assert carry_notes(OLD, once) == once


def test_a_note_the_new_doc_has__is_its_own() -> None:
    new = NEW + "\n<!-- note: reading -->\nRewritten.\n<!-- note: end reading -->\n"

    doc = carry_notes(OLD, new)

    assert "Rewritten." in doc and "The accept is half." not in doc
