"""Configuration: a tree of frozen dataclasses with validated defaults. Every value is checked
in ``__post_init__``: a bad value raises :class:`~kdispatch.InvalidConfigError` when the config
is built, not when it is first used. docs/configuration.md lists every field: its default, its
environment variable and what it means.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Self

from .backoff import backoff_delay
from .errors import InvalidConfigError, InvalidInputError

MAX_WAIT: Final = threading.TIMEOUT_MAX
"""The longest wait, in seconds, a lock or an event can do (about 292 years): a longer one is
no limit."""


def check_timeout(timeout: object, *, allow_zero: bool = False) -> float | None:
    """A method's ``timeout`` argument as seconds, or None for no limit (None, or longer than
    :data:`MAX_WAIT`). :class:`~kdispatch.InvalidInputError` for anything else: not an int or
    float, NaN, infinite, negative, or 0 unless ``allow_zero``."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (timeout >= 0 if allow_zero else timeout > 0)  # also refuses NaN
        or math.isinf(timeout)
    ):
        least = "a number >= 0" if allow_zero else "a positive number"
        raise InvalidInputError(f"timeout must be {least} or None, got {timeout!r}")
    return None if timeout > MAX_WAIT else float(timeout)


def check_positive(
    name: str,
    value: object,
    *,
    allow_zero: bool = False,
    integer: bool = False,
    finite: bool = False,
) -> None:
    """:class:`InvalidConfigError` naming ``name`` unless ``value`` is a number (an int if
    ``integer``; never a bool) that is > 0 (>= 0 if ``allow_zero``): NaN and ints too large for
    a float are refused, infinity only if ``finite``."""
    ok_type = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        raise InvalidConfigError(
            f"{name} must be {'an int' if integer else 'a number'}, got {value!r}"
        )
    if isinstance(value, float) and math.isnan(value):
        raise InvalidConfigError(f"{name} must not be NaN")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidConfigError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if finite and math.isinf(value):
        raise InvalidConfigError(f"{name} must be finite, got {value!r}")
    if isinstance(value, int):
        as_float(name, value)  # rate limits and timers compute in floats


def as_float(name: str, value: int | float) -> float:
    """``float(value)``, or :class:`InvalidConfigError` naming ``name`` for an int too large
    for a float (beyond about 1.8e308), instead of Python's ``OverflowError``."""
    try:
        return float(value)
    except OverflowError:
        raise InvalidConfigError(f"{name} is too large: want at most about 1.8e308") from None


GC_THRESHOLD_MAX: Final = 2**31 - 1
"""The largest threshold ``gc.set_threshold()`` takes (a C int)."""

UPSTREAM_METRICS_PREFIX = "scheduler"
"""The prefix of upstream's metric names (kube-scheduler's ``scheduler_...``)."""

_METRICS_PREFIX = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def check_metrics_prefix(prefix: object) -> str:
    """``prefix`` if it can start a Prometheus metric name (``[a-zA-Z_:][a-zA-Z0-9_:]*``, no
    trailing ``_``), else :class:`InvalidConfigError`."""
    if not isinstance(prefix, str) or not _METRICS_PREFIX.match(prefix) or prefix.endswith("_"):
        raise InvalidConfigError(
            f"metrics_prefix must match [a-zA-Z_:][a-zA-Z0-9_:]* without a trailing '_', "
            f"got {prefix!r}"
        )
    return prefix


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """The client-side rate limit: a token bucket for the calls' requests, and one for the
    Events' (best-effort calls); docs/configuration.md, "RateLimitConfig", tells each field."""

    qps: float = 50.0
    burst: int = 100
    events_qps: float | None = None
    events_burst: int | None = None
    events_shared: bool = False

    def __post_init__(self) -> None:
        check_positive("qps", self.qps)
        check_positive("burst", self.burst, integer=True)
        if self.events_qps is not None:
            check_positive("events_qps", self.events_qps)
        if self.events_burst is not None:
            check_positive("events_burst", self.events_burst, integer=True)
        if not isinstance(self.events_shared, bool):
            raise InvalidConfigError(f"events_shared must be a bool, got {self.events_shared!r}")
        if self.events_shared and (self.events_qps is not None or self.events_burst is not None):
            raise InvalidConfigError(
                "events_shared: Events take spare tokens of the calls' bucket and have no "
                "figures of their own (leave events_qps and events_burst None)"
            )

    def events_budget(self) -> tuple[float, int] | None:
        """``(qps, burst)`` of the Events' own bucket, or None when they share the calls'."""
        if self.events_shared:
            return None
        qps = self.qps if self.events_qps is None else self.events_qps
        burst = self.burst if self.events_burst is None else self.events_burst
        return qps, burst


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """Retry policy: a time budget per call, capped exponential backoff with jitter
    (docs/concepts.md, "Retries"). A retryable error (429, 5xx, timeout, connection lost) puts
    the call back on its object after :meth:`delay`; it fails (``CallFailed``) once the next
    attempt would start more than ``budget`` seconds after its first retryable failure (or
    after ``max_attempts`` failed requests, re-reads included). A 409 rebases, at most
    ``max_conflict_retries`` times. docs/configuration.md, "RetryConfig", tells each field."""

    budget: float = 60.0
    base_backoff: float = 0.005
    max_backoff: float = 2.0
    jitter: float = 0.2
    max_retry_after: float = 30.0
    max_attempts: int | None = None
    max_conflict_retries: int = 3

    def __post_init__(self) -> None:
        check_positive("budget", self.budget, allow_zero=True)
        # an infinite first delay or jitter would give up at the first retryable failure
        check_positive("base_backoff", self.base_backoff, allow_zero=True, finite=True)
        check_positive("max_backoff", self.max_backoff, allow_zero=True)
        check_positive("jitter", self.jitter, allow_zero=True, finite=True)
        check_positive("max_retry_after", self.max_retry_after, allow_zero=True)
        if self.max_attempts is not None:
            check_positive("max_attempts", self.max_attempts, integer=True)
        check_positive(
            "max_conflict_retries", self.max_conflict_retries, allow_zero=True, integer=True
        )
        if self.max_backoff < self.base_backoff:
            raise InvalidConfigError("max_backoff must be >= base_backoff")
        if math.isinf(self.budget):
            raise InvalidConfigError("budget must be finite")

    def delay(self, attempt: int, retry_after: float = 0.0, rand: float = 0.0) -> float:
        """Seconds before attempt ``attempt + 1`` after a retryable failure of ``attempt``;
        ``rand`` in [0, 1) draws the jitter (:func:`~kdispatch.actors.model.backoff.backoff_delay`,
        the formula the informers use too), never less than the server's Retry-After. Pure."""
        jittered = backoff_delay(
            attempt,
            initial=self.base_backoff,
            cap=self.max_backoff,
            jitter=self.jitter,
            rand=rand,
        )
        return max(jittered, min(retry_after, self.max_retry_after))


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """The shared executor: its request workers and lanes; docs/configuration.md,
    "ExecutorConfig", tells each field."""

    workers: int = 8
    lane_min_share: float = 0.1
    events_max_pending: int = 10_000
    inline_sends: bool = True

    def __post_init__(self) -> None:
        check_positive("workers", self.workers, integer=True)
        check_positive("events_max_pending", self.events_max_pending, integer=True)
        if not isinstance(self.inline_sends, bool):
            raise InvalidConfigError(f"inline_sends must be a bool, got {self.inline_sends!r}")
        check_positive("lane_min_share", self.lane_min_share, allow_zero=True)
        if self.lane_min_share >= 1:
            raise InvalidConfigError("lane_min_share must be < 1")


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """The pooled actor runtime: ``workers`` threads drain all object actors' inboxes, each
    actor handling at most ``batch`` messages per turn before yielding. ``gc_freeze`` and
    ``gc_young_threshold`` tune the process-wide garbage collector while the dispatcher runs;
    ``stop()`` restores it. docs/configuration.md, "RuntimeConfig", tells each field."""

    workers: int = 1
    batch: int = 16
    gc_freeze: bool = False
    gc_young_threshold: int | None = 10_000

    def __post_init__(self) -> None:
        check_positive("workers", self.workers, integer=True)
        check_positive("batch", self.batch, integer=True)
        if not isinstance(self.gc_freeze, bool):
            raise InvalidConfigError(f"gc_freeze must be a bool, got {self.gc_freeze!r}")
        if self.gc_young_threshold is not None:
            check_positive("gc_young_threshold", self.gc_young_threshold, integer=True)
            if self.gc_young_threshold > GC_THRESHOLD_MAX:
                raise InvalidConfigError(
                    f"gc_young_threshold must be at most {GC_THRESHOLD_MAX} (gc.set_threshold "
                    f"takes a C int), got {self.gc_young_threshold!r}"
                )


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """The UID registry: how long idle actors live, how long and how many deleted UIDs (and
    what reaped actors knew) are remembered, the cap on live actors;
    docs/configuration.md, "RegistryConfig", tells each field."""

    idle_timeout: float = 60.0
    tombstone_ttl: float = 300.0
    tombstone_max: int = 200_000
    max_live: int | None = None

    def __post_init__(self) -> None:
        check_positive("idle_timeout", self.idle_timeout)
        check_positive("tombstone_ttl", self.tombstone_ttl)
        check_positive("tombstone_max", self.tombstone_max, integer=True)
        if self.max_live is not None:
            check_positive("max_live", self.max_live, integer=True)


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    """Top-level configuration of a :class:`~kdispatch.Dispatcher`; docs/configuration.md tells
    each field."""

    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    reap_interval: float = 5.0
    metrics_prefix: str = UPSTREAM_METRICS_PREFIX
    log_calls: bool = False

    def __post_init__(self) -> None:
        for name, typ in (
            ("rate_limit", RateLimitConfig),
            ("retry", RetryConfig),
            ("executor", ExecutorConfig),
            ("runtime", RuntimeConfig),
            ("registry", RegistryConfig),
        ):
            if not isinstance(getattr(self, name), typ):
                raise InvalidConfigError(f"{name} must be a {typ.__name__}")
        check_positive("reap_interval", self.reap_interval)
        check_metrics_prefix(self.metrics_prefix)
        if not isinstance(self.log_calls, bool):
            raise InvalidConfigError(f"log_calls must be a bool, got {self.log_calls!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """A config from nested mappings of field names, e.g. parsed YAML or JSON:
        ``{"rate_limit": {"qps": 20}, "retry": {"max_attempts": 3}}``. Unset fields keep their
        defaults; strings are coerced to the field's type (``"20"``, ``"inf"``, ``"true"``,
        ``"none"``). Raises :class:`InvalidConfigError` naming the key for unknown keys and
        bad values."""
        from .config_load import load_dataclass

        return load_dataclass(cls, data)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, prefix: str = "KDISPATCH_"
    ) -> Self:
        """A config from environment variables named ``KDISPATCH_<SECTION>_<FIELD>``, upper
        case (``KDISPATCH_RATE_LIMIT_QPS=20``, ``KDISPATCH_RETRY_MAX_ATTEMPTS=3``,
        ``KDISPATCH_REAP_INTERVAL=1``); ``environ`` defaults to ``os.environ``. Every variable
        starting with ``prefix`` must name a field: a typo raises
        :class:`InvalidConfigError`."""
        from .config_load import load_env

        return load_env(cls, environ, prefix=prefix)
