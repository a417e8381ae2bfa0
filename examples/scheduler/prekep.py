"""``PreKepApi``: kube-scheduler's API calls before KEP-5229 (``--pre-kep``), the fair baseline.

Before the ``APIDispatcher``, kube-scheduler already ran each pod's binding cycle (PreBind, such
as DRA writing the ResourceClaim status, then Bind) in a goroutine of its own, so the scheduling
cycle never waited for a binding; it blocked only where it called the apiserver itself: the
``PodScheduled=False`` / ``nominatedNodeName`` status patch of a pod that did not fit, and the
preemption of victims (without the ``SchedulerAsyncPreemption`` gate). This layer does the same:

* ``pod_status_patch`` and ``pod_preemption`` run on the calling (scheduling) thread, which
  blocks for the whole call, as :class:`~examples.scheduler.direct.DirectApi` does;
* ``pod_binding`` and ``claim_status_patch`` (the binding cycle's calls) run on a bounded pool
  of ``binding_threads`` binding threads, standing for the binding-cycle goroutines; give it the
  dispatcher's executor worker count for the same thread budget. The scheduler's continuations
  hand each step to the next (claims, then the binding) through :meth:`PreKepApi.group`
  (:class:`~examples.scheduler.steps.ChainedSteps`).

* ``event_record`` (Events) runs on one event thread, standing for client-go's event
  broadcaster goroutine; at most 1,000 wait (its ``maxQueuedEvents``), a further one is dropped
  (its future fails ``CallFailed``, counted in ``stats()["events_dropped"]``).

Every request waits for one client-side token bucket (:class:`~examples.scheduler.limiter.
ClientLimiter`, ``qps``/``burst``), as every request of a client-go clientset does: Events,
bindings and status patches compete for the same tokens, first come first served.

Every call goes through the same backend and the same retry rules as ``DirectApi``; the returned
future of a binding-cycle call resolves on a binding thread, exactly once, with the call's
outcome, or :class:`~kdispatch.DispatcherClosed` when ``close`` abandons it.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from examples.scheduler.api import ForwardedObjects
from examples.scheduler.direct import DirectApi
from examples.scheduler.limiter import ClientLimiter, ThrottledBackend
from examples.scheduler.steps import CallFuture, ChainedSteps, GangSteps, PerPodGang, Steps
from kdispatch import (
    ApiBackend,
    Call,
    CallFailed,
    DispatcherClosed,
    InvalidInputError,
    Obj,
    PodPreemption,
    RetryConfig,
)

BINDING_CYCLE: Final = frozenset({"pod_binding", "claim_status_patch"})
"""Call types the binding cycle makes (they run on the binding threads)."""

EVENT_CALL: Final = "event_record"
MAX_QUEUED_EVENTS: Final = 1000


class PreKepApi(ForwardedObjects):
    """:class:`~examples.scheduler.api.SchedulerApi` of a pre-KEP-5229 scheduler (thread-safe).
    :meth:`view` gives the last object a call of ours produced."""

    mode = "pre-kep"

    def __init__(
        self,
        backend: ApiBackend,
        retry: RetryConfig | None = None,
        *,
        binding_threads: int,
        qps: float = 0.0,
        burst: int = 100,
    ) -> None:
        if isinstance(binding_threads, bool) or not isinstance(binding_threads, int):
            raise InvalidInputError(f"binding_threads must be an int, got {binding_threads!r}")
        if binding_threads < 1:
            raise InvalidInputError(f"binding_threads must be >= 1, got {binding_threads}")
        self.limiter = ClientLimiter(qps, burst)
        self._direct = self._objects = DirectApi(ThrottledBackend(backend, self.limiter), retry)
        self._pool = ThreadPoolExecutor(binding_threads, thread_name_prefix="binding")
        self._event_thread = ThreadPoolExecutor(1, thread_name_prefix="events")
        self._events_queued = 0
        self._events_dropped = 0
        self._cond = threading.Condition(threading.Lock())
        self._outstanding = 0
        self._closed = False
        self._abandon = False
        self.binding_threads = binding_threads

    # ------------------------------------------------------------------ calls

    def submit(self, call: Call) -> CallFuture:
        """Scheduling thread. A status patch (or preemption) blocks for the whole call; a
        binding-cycle call is queued for a binding thread and an Event for the event thread;
        both return at once. Raises :class:`DispatcherClosed` after :meth:`close`."""
        event = call.call_type == EVENT_CALL
        if call.call_type not in BINDING_CYCLE and not event:
            self._check_open()
            return self._direct.submit(call)
        future: CallFuture = Future()
        future.set_running_or_notify_cancel()
        with self._cond:
            if self._closed:
                raise DispatcherClosed("API layer is closed")
            if event and self._events_queued >= MAX_QUEUED_EVENTS:
                self._events_dropped += 1
                future.set_exception(CallFailed("event queue full", call_type=EVENT_CALL))
                return future
            self._outstanding += 1
            self._events_queued += event
        pool = self._event_thread if event else self._pool
        pool.submit(self._bind_cycle_call, call, future)
        return future

    def preempt(self, pod: Obj, *, preemptor: str) -> CallFuture:
        """Scheduling thread: condition patch and deletion, blocking."""
        return self.submit(PodPreemption.for_pod(pod, preemptor=preemptor))

    def group(self, owner: Obj) -> Steps:
        """Any thread. :class:`ChainedSteps`: a held binding-cycle call is queued for a binding
        thread by the binding thread that finished its last prerequisite, as the binding
        goroutine went from PreBind to Bind; a preemption held on the (blocking) nomination
        runs on the scheduling thread right after it."""
        del owner
        return ChainedSteps(self)

    def gang(self, owner: Obj, members: int) -> GangSteps:
        """Any thread. :class:`PerPodGang`: one binding per member, sent as submitted."""
        del owner, members
        return PerPodGang(self)

    def _check_open(self) -> None:
        with self._cond:
            if self._closed:
                raise DispatcherClosed("API layer is closed")

    def _bind_cycle_call(self, call: Call, future: CallFuture) -> None:
        """Binding (or event) thread: run the call (blocking), then resolve ``future``
        exactly once."""
        try:
            if self._abandon:
                future.set_exception(DispatcherClosed(f"closed before the {call.call_type} ran"))
                return
            done = self._direct.submit(call)  # resolved before it returns
            error = done.exception()
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result())
        except BaseException as err:  # pragma: no cover - DirectApi reports through the future
            if not future.done():
                future.set_exception(err)
        finally:
            with self._cond:
                self._outstanding -= 1
                self._events_queued -= call.call_type == EVENT_CALL
                if self._outstanding == 0:
                    self._cond.notify_all()

    # ------------------------------------------------------------------ the rest

    def stats(self) -> dict[str, Any]:
        """Any thread. ``tokens_taken``: the client-side limiter's."""
        out = self._direct.stats()
        with self._cond:
            out["events_dropped"] = self._events_dropped
        out["tokens_taken"] = self.limiter.taken
        return out

    @property
    def closed(self) -> bool:
        """Any thread. True once :meth:`close` was called."""
        with self._cond:
            return self._closed

    def outstanding(self) -> int:
        """Any thread. Binding-cycle calls queued or running."""
        with self._cond:
            return self._outstanding

    def close(self, *, drain: bool, timeout: float) -> bool:
        """Caller thread. Stop intake; with ``drain`` wait up to ``timeout`` for the binding
        threads to finish what is queued; what is left resolves :class:`DispatcherClosed` (a
        call already running finishes first). Joins the binding threads. True if all finished."""
        with self._cond:
            self._closed = True
            if drain:
                self._cond.wait_for(lambda: self._outstanding == 0, timeout)
            drained = self._outstanding == 0
            self._abandon = True
        self._pool.shutdown(wait=True)
        self._event_thread.shutdown(wait=True)
        return drained


__all__ = ["BINDING_CYCLE", "PreKepApi"]
