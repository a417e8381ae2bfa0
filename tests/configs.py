"""Dispatcher configurations and the property-test budget the tests share."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import settings

from kdispatch.actors.model.config import DispatcherConfig, RateLimitConfig, RetryConfig


def fast(**retry: Any) -> DispatcherConfig:
    """No request-rate limit (burst 1) and no backoff between retries; ``retry`` sets other
    :class:`RetryConfig` fields (``max_attempts``, ``budget`` ...)."""
    return DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1),
        retry=RetryConfig(**{"base_backoff": 0.0, "max_backoff": 0.0, **retry}),
    )


FAST = fast()
"""The default retry policy's attempts, without waiting between them."""


PROPS = settings(max_examples=150, deadline=None)
"""The budget of the call types' property tests (merge and apply laws)."""
