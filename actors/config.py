"""Configuration: a tree of frozen dataclasses with documented, validated defaults.

Every value is checked in ``__post_init__``; a bad value raises
:class:`~kdispatch.actors.errors.InvalidConfigError` when the config is built, not when it is first
used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import InvalidConfigError


def _positive(name: str, value: object, *, allow_zero: bool = False, integer: bool = False) -> None:
    ok_type = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        raise InvalidConfigError(
            f"{name} must be a {'int' if integer else 'number'}, got {value!r}"
        )
    if isinstance(value, float) and math.isnan(value):
        raise InvalidConfigError(f"{name} must not be NaN")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidConfigError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """Token bucket shared by every request (client-side rate limit).

    ``qps``: tokens per second (kube-scheduler's client default is 50); ``math.inf`` disables
    the limit. ``burst``: bucket size (default 100).
    """

    qps: float = 50.0
    burst: int = 100

    def __post_init__(self) -> None:
        _positive("qps", self.qps)
        _positive("burst", self.burst, integer=True)


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """Retry policy of the executor.

    Retryable errors (429, 5xx, timeouts, connection errors) back off per object by
    ``base_backoff * 2**(attempt-1)`` capped at ``max_backoff`` (client-go's 5 ms start), and at
    least the server's Retry-After for 429. After ``max_attempts`` attempts the call fails.
    A 409 makes the object actor rebase on a freshly fetched object and retry, at most
    ``max_conflict_retries`` times.
    """

    max_attempts: int = 6
    base_backoff: float = 0.005
    max_backoff: float = 5.0
    max_conflict_retries: int = 3

    def __post_init__(self) -> None:
        _positive("max_attempts", self.max_attempts, integer=True)
        _positive("base_backoff", self.base_backoff, allow_zero=True)
        _positive("max_backoff", self.max_backoff, allow_zero=True)
        _positive("max_conflict_retries", self.max_conflict_retries, allow_zero=True, integer=True)
        if self.max_backoff < self.base_backoff:
            raise InvalidConfigError("max_backoff must be >= base_backoff")


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    """The shared executor.

    ``workers``: request threads (bounded parallelism; size the client's connection pool to at
    least this). ``lane_min_share``: the share of tokens guaranteed to lower-relevance lanes
    while they have work, so status patches are delayed but never starved by bindings.
    """

    workers: int = 8
    lane_min_share: float = 0.1

    def __post_init__(self) -> None:
        _positive("workers", self.workers, integer=True)
        _positive("lane_min_share", self.lane_min_share, allow_zero=True)
        if self.lane_min_share >= 1:
            raise InvalidConfigError("lane_min_share must be < 1")


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """The pooled actor runtime: ``workers`` threads drain all object actors' inboxes, each
    actor handling at most ``batch`` messages per turn before yielding.

    Garbage collection (process-wide settings: they affect every thread of the process).
    Every live object actor with a pending call holds a few dozen objects the cyclic collector
    tracks; with 100,000 of them a full (generation 2) collection scans millions of objects and
    stops every thread, ``submit()`` included, for seconds.

    ``gc_freeze``: keep the collector off the long-lived objects. ``Dispatcher.start()`` and every
    ``Dispatcher.freeze_gc()`` collect the young generations (0 and 1) and then ``gc.freeze()``
    everything alive; while the dispatcher runs, every collection of generation 1 is followed by
    a ``gc.freeze()``, so whatever survived the two young collections is never scanned again and
    a full collection only scans what is younger. Frozen objects are still freed by reference
    counting, but garbage *cycles* among them (e.g. an object actor reaped after it was frozen)
    are reclaimed only after ``Dispatcher.stop()`` gives them back (``gc.unfreeze()``): memory
    for pauses. Default off.

    ``gc_young_threshold``: if set, ``gc.set_threshold()``'s first value (allocations between two
    young collections; CPython's default is 700) while the dispatcher runs; ``stop()`` restores
    the previous thresholds. Default None: leave the thresholds alone.
    """

    workers: int = 2
    batch: int = 16
    gc_freeze: bool = False
    gc_young_threshold: int | None = None

    def __post_init__(self) -> None:
        _positive("workers", self.workers, integer=True)
        _positive("batch", self.batch, integer=True)
        if not isinstance(self.gc_freeze, bool):
            raise InvalidConfigError(f"gc_freeze must be a bool, got {self.gc_freeze!r}")
        if self.gc_young_threshold is not None:
            _positive("gc_young_threshold", self.gc_young_threshold, integer=True)


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """The UID registry.

    ``idle_timeout``: an object actor with nothing pending or in flight for this long is
    stopped (it is re-spawned on demand). ``tombstone_ttl``/``tombstone_max``: how long and how
    many deleted UIDs are remembered so late events cannot resurrect them. ``max_live``: cap on
    live actors (None = unbounded); exceeding it raises ``ActorLimitExceeded``.
    """

    idle_timeout: float = 60.0
    tombstone_ttl: float = 300.0
    tombstone_max: int = 200_000
    max_live: int | None = None

    def __post_init__(self) -> None:
        _positive("idle_timeout", self.idle_timeout)
        _positive("tombstone_ttl", self.tombstone_ttl)
        _positive("tombstone_max", self.tombstone_max, integer=True)
        if self.max_live is not None:
            _positive("max_live", self.max_live, integer=True)


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    """Top-level configuration of a :class:`~kdispatch.actors.dispatcher.Dispatcher`."""

    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    reap_interval: float = 5.0
    """How often idle actors are reaped."""

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
        _positive("reap_interval", self.reap_interval)
