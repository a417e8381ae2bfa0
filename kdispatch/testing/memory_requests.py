"""The request path of the in-memory apiserver: what every ``ApiBackend`` request goes through.

:class:`RequestGate` waits the injected latency on the calling thread, then, under the
server's lock, draws a fault (:class:`~kdispatch.testing.memory_faults.FaultInjector`),
applies the request, and logs (:class:`~kdispatch.testing.audit.RequestRecord`) and counts
its outcome; :meth:`RequestGate.wait_for` blocks until the log holds a given request. The
admin surface of the server (``create`` of a whole object, ``update``, ``list``, ``watch``
...) does not come through here: no latency, no faults, no log.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import NamedTuple, TypeVar, TypeVarTuple

from loguru import logger

from kdispatch.actors.model.errors import ApiError

from .audit import RequestRecord, request_writer
from .memory_faults import APPLY_THEN_FAIL, OPS, FaultInjector, fault_name

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Req(NamedTuple):
    """One request as the gate logs it: its op, its object and its UID precondition (``""``
    for none)."""

    op: str
    kind: str
    namespace: str
    name: str
    uid: str

    @property
    def what(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class RequestGate:
    """Latency, faults, the request log and the counters of one in-memory apiserver.

    ``lock`` is the server's lock (it guards the store too, so a request is applied, logged
    and counted atomically); the gate takes it for its own state and for ``faults``, the
    server's latency and fault models. ``sleep``: how latency is waited. ``log_limit``: the
    log keeps the newest this many records.
    """

    def __init__(
        self,
        lock: threading.Lock,
        faults: FaultInjector,
        sleep: Callable[[float], None],
        log_limit: int,
    ) -> None:
        self._lock = lock
        # Wakes wait_for; taken without the server lock held by the waiter (it reads the log
        # through log(), outside this condition), so the two never nest the other way.
        self._logged = threading.Condition(threading.Lock())
        self._log_count = 0
        self._faults = faults
        self._fixed_latency = self._faults.latency.jitter == 0
        self._sleep = sleep
        self._log: deque[RequestRecord] = deque(maxlen=log_limit)
        self._counts: Counter[str] = Counter()
        self._fault_counts: Counter[str] = Counter()

    def run(self, req: Req, apply: Callable[[Req, *Ts], T], *args: *Ts) -> T:
        """Latency, then fault draw, ``apply(req, *args)``, log and count under the lock.
        Request thread."""
        if self._fixed_latency:
            delay = self._faults.latency.base(req.op)
        else:
            with self._lock:
                delay = self._faults.delay(req.op)
        if delay > 0:
            self._sleep(delay)
        with self._lock:
            fault = self._faults.draw(req.op, req.name)
            if fault is not None and fault != APPLY_THEN_FAIL:
                self._fault(req, fault_name(fault))
                raise self._faults.error(fault, req.op, req.what)
            try:
                result = apply(req, *args)
            except ApiError as err:
                if fault == APPLY_THEN_FAIL:
                    self._fault(req, APPLY_THEN_FAIL)
                    raise self._faults.error(fault, req.op, req.what) from err
                self._record(req, err.reason)
                raise
            if fault == APPLY_THEN_FAIL:
                self._fault(req, APPLY_THEN_FAIL)
                raise self._faults.error(fault, req.op, req.what)
            self._counts[req.op] += 1
            self._record(req, "ok")
            return result

    def _fault(self, req: Req, fault: str) -> None:
        """Count and log an injected fault. Lock held."""
        self._fault_counts[fault] += 1
        self._record(req, fault)
        logger.debug("injected {} on {} {}", fault, req.op, req.what)

    def _record(self, req: Req, outcome: str) -> None:
        """Log a request's outcome and wake :meth:`wait_for`. Lock held."""
        self._log.append(
            RequestRecord(
                req.op,
                req.kind,
                req.namespace,
                req.name,
                req.uid,
                outcome,
                time.monotonic(),
                request_writer.get(),
            )
        )
        with self._logged:
            self._log_count += 1
            self._logged.notify_all()

    # ================================================================ scripting, observation

    def script(self, op: str, faults: tuple[str | ApiError, ...], name: str | None) -> None:
        """Queue ``faults`` for the next ``op`` requests (on ``name`` if given). Any thread."""
        with self._lock:
            self._faults.script(op, faults, name)

    def pending_faults(self) -> int:
        """Scripted faults that have not fired yet. Any thread."""
        with self._lock:
            return self._faults.pending_scripted()

    def log(self) -> list[RequestRecord]:
        """A copy of the request log (oldest first). Any thread."""
        with self._lock:
            return list(self._log)

    def wait_for(
        self, op: str, name: str | None, outcome: str | None, timeout: float
    ) -> RequestRecord:
        """The first logged request ``op`` (on ``name``, with ``outcome``, where given), once
        there is one; :class:`TimeoutError` after ``timeout`` seconds. Any thread but the one
        serving requests."""
        deadline = time.monotonic() + timeout
        while True:
            with self._logged:
                seen = self._log_count
            for record in self.log():
                if (
                    record.op == op
                    and name in (None, record.name)
                    and outcome in (None, record.outcome)
                ):
                    return record
            with self._logged:
                left = deadline - time.monotonic()
                if self._log_count == seen and (
                    left <= 0 or not self._logged.wait_for(self._log_moved(seen), left)
                ):
                    what = (
                        f"{op}"
                        + (f" of {name}" if name else "")
                        + (f" answered {outcome}" if outcome else "")
                    )
                    raise TimeoutError(f"no request {what} within {timeout:g} s")

    def _log_moved(self, seen: int) -> Callable[[], bool]:
        return lambda: self._log_count != seen

    def counts(self) -> dict[str, int]:
        """Successful requests per op (every op of :data:`OPS` present). Any thread."""
        with self._lock:
            return {op: self._counts[op] for op in sorted(OPS)}

    def fault_counts(self) -> dict[str, int]:
        """Injected faults (scripted and random) by name. Any thread."""
        with self._lock:
            return dict(self._fault_counts)

    @property
    def non_blocking(self) -> bool:
        """Whether no request ever waits (no latency configured). Any thread."""
        lat = self._faults.latency
        return lat.fixed == 0 and lat.jitter == 0 and not any(lat.per_op.values())
