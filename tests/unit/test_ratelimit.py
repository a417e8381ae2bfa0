"""Token bucket: refill, burst cap, refunds, unlimited mode (fake clock)."""

from __future__ import annotations

import math

import pytest

from kdispatch.actors.runtime.ratelimit import TokenBucket
from tests.clocks import ManualClock


def test_burst_then_throttled() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.try_take() for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = bucket.try_take()
    assert wait == pytest.approx(0.1)
    clock.now += 0.05
    assert bucket.try_take() == pytest.approx(0.05)
    clock.now += 0.05
    assert bucket.try_take() == 0.0
    assert bucket.taken == 4


def test_refill_is_capped_at_burst() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=100, burst=5, clock=clock)
    for _ in range(5):
        bucket.try_take()
    clock.now += 1000
    assert bucket.available() == 5
    assert sum(1 for _ in range(10) if bucket.try_take() == 0.0) == 5


def test_refund_returns_a_token() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock)
    assert bucket.try_take() == 0.0
    assert bucket.try_take() > 0
    bucket.refund()
    assert bucket.taken == 0
    assert bucket.try_take() == 0.0


def test_unlimited_never_waits() -> None:
    bucket = TokenBucket(qps=math.inf, burst=1, clock=ManualClock())
    assert all(bucket.try_take() == 0.0 for _ in range(1000))
    assert bucket.unlimited
    assert bucket.taken == 1000
