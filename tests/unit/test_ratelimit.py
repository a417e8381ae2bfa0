"""Token bucket: refill, burst cap, refunds, unlimited mode (fake clock)."""

from __future__ import annotations

import math

import pytest

from kdispatch.actors.model.errors import InvalidConfigError
from kdispatch.actors.runtime.ratelimit import TokenBucket
from tests.clocks import ManualClock

pytestmark = pytest.mark.timeout(30)


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


@pytest.mark.parametrize(
    ("qps", "burst", "match"),
    [
        (math.nan, 1, "qps must not be NaN"),
        (-1, 1, "qps must be > 0"),
        (0, 1, "qps must be > 0"),
        ("10", 1, "qps must be a number"),
        (10**400, 1, "qps is too large"),
        (1, -1, "burst must be > 0"),
        (1, 1.5, "burst must be an int"),
        (1, 10**400, "burst is too large"),
    ],
)
def test_a_bad_rate_or_burst_is_refused_when_the_bucket_is_built(
    qps: object, burst: object, match: str
) -> None:
    """A NaN rate would refill the bucket to full on every take: no limit at all."""
    with pytest.raises(InvalidConfigError, match=match):
        TokenBucket(qps, burst, clock=ManualClock())  # type: ignore[arg-type]
