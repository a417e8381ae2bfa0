"""What the scheduler intended, and how long things took.

Every API call the scheduler makes is recorded as an :class:`Intent` (what the server should
show once it succeeded) together with its future; :mod:`examples.scheduler.verify` checks the
final apiserver state against them. Latency samples (submit, binding) and per-victim preemption
counts live here too. Thread-safe: appends come from scheduling threads and future callbacks.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from examples.scheduler.steps import CallFuture
from kdispatch import Outcome

BIND: Final = "bind"
STATUS: Final = "status"
PREEMPT: Final = "preempt"
CLAIM: Final = "claim"
GROUP: Final = "podgroup"


@dataclass(slots=True)
class Intent:
    """One call the scheduler made. ``expect`` describes the state it asks for (per kind:
    ``node``; ``reason``/``nominated``; nothing; ``allocation``/``reserve``/``unreserve``;
    ``status``/``reason`` of ``PodGroupInitiallyScheduled``)."""

    kind: str
    uid: str
    key: str
    expect: Mapping[str, Any]
    future: CallFuture
    seq: int
    submitted: float
    resolved: float | None = None
    callbacks: int = 0


@dataclass
class Tracker:
    """Intents and latency samples of one run."""

    clock: Callable[[], float] = time.monotonic
    intents: list[Intent] = field(default_factory=list)
    submit_latencies: list[float] = field(default_factory=list)
    loop_submit_latencies: list[float] = field(default_factory=list)
    """The submits made on the scheduling threads (the scheduling loop) only."""
    binding_latencies: list[float] = field(default_factory=list)
    gang_latencies: dict[str, float] = field(default_factory=dict)
    """Seconds from a gang's cycle to its last member bound, by PodGroup (``namespace/name``;
    the last gang of a group)."""
    preempted: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self,
        kind: str,
        uid: str,
        key: str,
        *,
        expect: Mapping[str, Any],
        future: CallFuture,
        submit_seconds: float,
        on_loop: bool = False,
    ) -> Intent:
        """Any thread. Record a call just submitted (``submit_seconds``: how long the submit
        itself blocked the caller; ``on_loop``: the caller is a scheduling thread)."""
        with self._lock:
            intent = Intent(
                kind, uid, key, expect, future, len(self.intents), self.clock() - submit_seconds
            )
            self.intents.append(intent)
            self.submit_latencies.append(submit_seconds)
            if on_loop:
                self.loop_submit_latencies.append(submit_seconds)
            if kind == PREEMPT:
                self.preempted[uid] += 1
        future.add_done_callback(lambda _f: self._resolved(intent))
        return intent

    def _resolved(self, intent: Intent) -> None:
        """Future callback (the resolving thread: never blocks)."""
        with self._lock:
            intent.callbacks += 1
            intent.resolved = self.clock()

    def binding_done(self, seconds: float) -> None:
        """Binding continuation. A binding cycle finished successfully after ``seconds``."""
        with self._lock:
            self.binding_latencies.append(seconds)

    def gang_done(self, group: str, seconds: float) -> None:
        """Gang continuation. Every member of ``group``'s gang was bound ``seconds`` after its
        cycle."""
        with self._lock:
            self.gang_latencies[group] = seconds

    def active_window(self) -> float:
        """Any thread. Seconds from the first call submitted (a binding, a status patch, a
        claim write or a preemption) to the last one that resolved having changed something
        (``Outcome.SUCCESS``, or a binding found applied on its retry: a retried patch found
        to be a no-op does not stretch it); 0.0 before any did."""
        with self._lock:
            start = min((i.submitted for i in self.intents), default=None)
            end = max(
                (i.resolved for i in self.intents if i.resolved is not None and _changed(i)),
                default=None,
            )
        if start is None or end is None:
            return 0.0
        return max(0.0, end - start)

    def snapshot(self) -> list[Intent]:
        """Any thread. A copy of the intents list."""
        with self._lock:
            return list(self.intents)

    def unresolved(self) -> int:
        """Any thread. Intents whose future has not resolved."""
        with self._lock:
            return sum(1 for i in self.intents if not i.future.done())


def _changed(intent: Intent) -> bool:
    """Whether the intent's call resolved ``Outcome.SUCCESS`` (it was sent and applied), or
    is a binding that resolved ``Outcome.SKIPPED``: a retry found the pod already bound to
    its node (the attempt before was applied, its answer lost), a pod this scheduler placed
    (``pods_bound`` counts it)."""
    fut = intent.future
    if not fut.done() or fut.exception() is not None:
        return False
    outcome = fut.result()
    return outcome is Outcome.SUCCESS or (intent.kind == BIND and outcome is Outcome.SKIPPED)
