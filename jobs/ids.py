"""Time-ordered UUIDs (version 7, RFC 9562) for primary keys.

Random UUIDs (v4) land all over the primary-key index, so every insert touches a cold page of
a large B-tree (and its full-page WAL image after a checkpoint); v7 keys grow with time, so
inserts stay at the right edge and cost the same at 10k or 10M rows. Python 3.14 has
uuid.uuid7; this is the same layout for 3.12.
"""

from __future__ import annotations

import os
import time
import uuid

_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62


def uuid7() -> uuid.UUID:
    """48-bit Unix milliseconds, version 7, 74 random bits."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits, 74 used
    rand_a = (rand >> 62) & 0xFFF
    rand_b = rand & ((1 << 62) - 1)
    value = ((millis & ((1 << 48) - 1)) << 80) | _VERSION_7 | (rand_a << 64) | _VARIANT_RFC | rand_b
    return uuid.UUID(int=value)
