from __future__ import annotations

import time
import uuid

from jobs.ids import uuid7


def test_uuid7_has_version_7_and_rfc_variant() -> None:
    value = uuid7()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122


def test_uuid7_orders_by_time__later_millisecond_sorts_after() -> None:
    first = uuid7()
    time.sleep(0.002)
    second = uuid7()
    assert first < second
    assert abs((first.int >> 80) - time.time_ns() // 1_000_000) < 5_000


def test_uuid7_is_unique_within_one_millisecond() -> None:
    assert len({uuid7() for _ in range(10_000)}) == 10_000
