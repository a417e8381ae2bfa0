"""Latency and fault models of the in-memory apiserver.

:class:`Latency` and :class:`FaultPlan` are frozen, validated value types. :class:`FaultInjector`
holds the mutable part (the seeded random generators and the scripted faults) and is only ever
used under the server's lock, so its draws are deterministic for a given seed and request order.

Pure module: no threads of its own, no pykka, no kubernetes.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kdispatch.actors.model.errors import (
    ApiConnectionError,
    ApiError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    RequestTimeoutError,
    ServerError,
    TooManyRequestsError,
)

OPS: frozenset[str] = frozenset(
    {"get", "patch_status", "bind", "delete", "patch", "evict", "create"}
)
"""The faultable requests: the methods of the ``ApiBackend`` protocol, plus the generic
object ``patch`` and ``create`` (``create(kind, namespace, body)``) and ``evict``
(``pods/eviction``)."""

APPLY_THEN_FAIL = "apply_then_fail"

FAULTS: frozenset[str] = frozenset(
    {"429", "500", "timeout", "conn_reset", APPLY_THEN_FAIL, "404", "409"}
)
"""Fault names accepted by :meth:`InMemoryApiServer.script` and :attr:`FaultPlan.weights`.
Each fails the request, before it is applied, with an ``ApiError``: ``"429"``
:class:`~kdispatch.TooManyRequestsError` (``Retry-After``: the plan's ``retry_after``),
``"500"`` :class:`~kdispatch.ServerError`, ``"timeout"`` :class:`~kdispatch.RequestTimeoutError`,
``"conn_reset"`` :class:`~kdispatch.ApiConnectionError`, ``"404"``
:class:`~kdispatch.NotFoundError`, ``"409"`` :class:`~kdispatch.ConflictError`; except
``"apply_then_fail"``, which applies the request and then loses the reply (a
``RequestTimeoutError``), as a connection cut after sending does."""

Fault = str | ApiError
"""A fault name from :data:`FAULTS`, or an ``ApiError`` instance to raise as is."""


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{name} must be a number, got {value!r}")
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise InvalidInputError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def check_op(op: object) -> str:
    """Return ``op`` if it is one of :data:`OPS`, else raise :class:`InvalidInputError`."""
    if not isinstance(op, str) or op not in OPS:
        raise InvalidInputError(f"unknown op {op!r}: want one of {sorted(OPS)}")
    return op


def check_fault(fault: object) -> Fault:
    """Return ``fault`` if it is a known fault name or an ``ApiError``, else raise."""
    if isinstance(fault, ApiError):
        return fault
    if not isinstance(fault, str) or fault not in FAULTS:
        raise InvalidInputError(
            f"unknown fault {fault!r}: want one of {sorted(FAULTS)} or an ApiError"
        )
    return fault


def fault_name(fault: Fault) -> str:
    """The name a fault is logged and counted under (an ``ApiError`` instance: its reason)."""
    return fault if isinstance(fault, str) else fault.reason


@dataclass(frozen=True)
class Latency:
    """Per-request latency model.

    Every faultable request (the ``ApiBackend`` methods) takes ``per_op.get(op, fixed)`` seconds
    plus ``uniform(0, jitter)`` drawn from the server's seeded generator. The wait happens on the
    calling thread, outside the server lock, through the server's injectable ``sleep``.
    """

    fixed: float = 0.0
    per_op: Mapping[str, float] = field(default_factory=dict)
    jitter: float = 0.0

    def __post_init__(self) -> None:
        _number("fixed", self.fixed)
        _number("jitter", self.jitter)
        if not isinstance(self.per_op, Mapping):
            raise InvalidInputError(f"per_op must be a mapping, got {self.per_op!r}")
        for op, seconds in self.per_op.items():
            check_op(op)
            _number(f"per_op[{op!r}]", seconds)
        object.__setattr__(self, "per_op", MappingProxyType(dict(self.per_op)))

    def base(self, op: str) -> float:
        """Seconds before jitter for ``op``."""
        return float(self.per_op.get(op, self.fixed))


DEFAULT_FAULT_WEIGHTS: MappingProxyType[str, float] = MappingProxyType(
    {"429": 1.0, "500": 1.0, "timeout": 1.0, APPLY_THEN_FAIL: 1.0}
)
""":attr:`FaultPlan.weights` by default: the faults a retry rides out, equally likely."""


@dataclass(frozen=True)
class FaultPlan:
    """Random faults: each request of an op in ``ops`` fails with probability ``rate``; the
    fault is drawn from ``weights`` (relative, over :data:`FAULTS`). A 429 carries
    ``retry_after`` seconds."""

    rate: float = 0.0
    weights: Mapping[str, float] = field(default_factory=DEFAULT_FAULT_WEIGHTS.copy)
    retry_after: float = 0.05
    ops: frozenset[str] = frozenset({"patch_status", "bind", "delete"})

    def __post_init__(self) -> None:
        rate = _number("rate", self.rate)
        if rate > 1.0:
            raise InvalidInputError(f"rate must be <= 1, got {rate!r}")
        _number("retry_after", self.retry_after)
        if not isinstance(self.weights, Mapping):
            raise InvalidInputError(f"weights must be a mapping, got {self.weights!r}")
        for name, weight in self.weights.items():
            if not isinstance(name, str) or name not in FAULTS:
                raise InvalidInputError(f"unknown fault {name!r} in weights")
            _number(f"weights[{name!r}]", weight)
        if rate > 0 and sum(self.weights.values()) <= 0:
            raise InvalidInputError("weights must not all be zero when rate > 0")
        if isinstance(self.ops, str):
            raise InvalidInputError("ops must be a collection of op names, not a string")
        ops = frozenset(self.ops)
        for op in ops:
            check_op(op)
        object.__setattr__(self, "ops", ops)
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))


class FaultInjector:
    """Seeded latency draws, scripted faults and random faults. Not thread-safe by itself:
    every method runs on a request thread while it holds the server lock."""

    def __init__(self, latency: Latency | None, faults: FaultPlan | None, seed: int) -> None:
        if latency is not None and not isinstance(latency, Latency):
            raise InvalidInputError(f"latency must be a Latency, got {latency!r}")
        if faults is not None and not isinstance(faults, FaultPlan):
            raise InvalidInputError(f"faults must be a FaultPlan, got {faults!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidInputError(f"seed must be an int, got {seed!r}")
        self.latency = latency or Latency()
        self.plan = faults or FaultPlan()
        # Separate streams: adding jitter does not change which requests fault.
        self._fault_rng = random.Random(f"faults:{seed}")
        self._latency_rng = random.Random(f"latency:{seed}")
        self._scripted: dict[str, deque[tuple[str | None, Fault]]] = {op: deque() for op in OPS}
        names = sorted(self.plan.weights)
        self._names = [n for n in names if self.plan.weights[n] > 0]
        self._weights = [float(self.plan.weights[n]) for n in self._names]

    def delay(self, op: str) -> float:
        """Seconds the next ``op`` request waits (draws jitter)."""
        seconds = self.latency.base(op)
        if self.latency.jitter > 0:
            seconds += self._latency_rng.uniform(0.0, self.latency.jitter)
        return seconds

    def script(self, op: str, faults: tuple[Fault, ...], name: str | None) -> None:
        """Queue ``faults`` for the next ``op`` requests (on object ``name`` if given)."""
        check_op(op)
        if name is not None and not isinstance(name, str):
            raise InvalidInputError(f"name must be a string or None, got {name!r}")
        checked = [check_fault(f) for f in faults]
        self._scripted[op].extend((name, f) for f in checked)

    def pending_scripted(self) -> int:
        """How many scripted faults have not fired yet."""
        return sum(len(q) for q in self._scripted.values())

    def draw(self, op: str, name: str) -> Fault | None:
        """The fault for this request, or None: the first matching scripted fault, else a
        random one with probability ``rate`` if ``op`` is in the plan's ops."""
        queue = self._scripted[op]
        for i, (target, fault) in enumerate(queue):
            if target is None or target == name:
                del queue[i]
                return fault
        if (
            self.plan.rate > 0
            and op in self.plan.ops
            and self._names
            and self._fault_rng.random() < self.plan.rate
        ):
            return self._fault_rng.choices(self._names, self._weights)[0]
        return None

    def error(self, fault: Fault, op: str, what: str) -> ApiError:
        """The exception a fault raises (for ``apply_then_fail``: the lost reply's timeout)."""
        if isinstance(fault, ApiError):
            return fault
        if fault == "429":
            return TooManyRequestsError(
                f"injected 429 on {op} {what}", retry_after=self.plan.retry_after
            )
        if fault == "500":
            return ServerError(f"injected 500 on {op} {what}")
        if fault == "conn_reset":
            return ApiConnectionError(f"injected connection reset on {op} {what}")
        if fault == "404":
            return NotFoundError(f"injected 404 on {op} {what}")
        if fault == "409":
            return ConflictError(f"injected 409 on {op} {what}")
        if fault == APPLY_THEN_FAIL:
            return RequestTimeoutError(f"injected timeout after {op} {what} was applied")
        return RequestTimeoutError(f"injected timeout on {op} {what}")
