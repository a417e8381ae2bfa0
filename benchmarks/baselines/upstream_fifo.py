"""Baseline ``upstream_fifo``: a model of kube-scheduler's ``APIDispatcher`` (KEP-5229,
``pkg/scheduler/backend/api_dispatcher`` in kubernetes/kubernetes), written from its described
behaviour for the benchmarks. Benchmark-only code.

What each part models (upstream name in parentheses):

* ``_calls`` — one map UID → call, pending *or* in flight (``callQueue.apiCalls``); at most one
  tracked call per object.
* ``_fifo`` — a FIFO of object UIDs (``callQueue.callsQueue``); a UID is queued once, a newer
  call for it keeps the slot. Removing a pending UID rebuilds the queue, O(n)
  (``removeFromQueue``).
* ``_in_flight`` — UIDs whose call is executing (``inFlightEntities``).
* :meth:`_merge` — relevance (``apicalls.Relevances``: ``pod_binding`` 2 > ``pod_status_patch``
  1): a less relevant new call is skipped; a more relevant one overwrites a pending call (the old
  caller is told "overwritten") or waits behind an in-flight one; the same type merges
  (``PodStatusPatchCall.Merge``: newer conditions win, older ones of other types are kept; the
  new call keeps its own pod-status snapshot) and the old caller is told "overwritten" — even
  when the old call is already in flight, whose later result is then dropped (upstream's
  non-blocking send to a channel that already holds a result). One deliberate difference: a
  call queued behind an in-flight one and then replaced by a more relevant call gets no result
  upstream; here it resolves "overwritten" so a waiting benchmark cannot hang.
* :meth:`_enqueue` — no-op skip at add (``IsNoOp`` against the call's pod-status snapshot) unless
  a call for the object is in flight; a call added behind an in-flight one is re-queued, at the
  back of the FIFO, when the in-flight one is finalized (``finalize``, compared by ``callID``).
* :meth:`observe` — ``SyncObject``: an informer update refreshes the snapshot of a call that
  has not started executing and drops it if it became a no-op.
* :meth:`_execute` — ``PodStatusPatchCall.Execute`` computes the two-way patch between the
  snapshot and the snapshot with the conditions applied and sends nothing if they are equal;
  ``util.PatchPodStatus`` carries a UID precondition only. ``PodBindingCall.Execute`` posts the
  binding. No retries: an error is handed to the caller.
* worker threads — ``goroutinesLimiter`` (``parallelism``, 16 by default) + one goroutine per
  popped call: a call is popped only when one of ``workers`` threads is free, so at most
  ``workers`` calls are in flight. No priority between objects: strict FIFO.
* ``_limiter`` — the scheduler's shared client rate limiter (client-go's token bucket, QPS 50 /
  burst 100 by default): the request inside ``Execute`` blocks in ``Wait()`` while holding its
  goroutine, so a popped call may sit in flight waiting for a token.
* :meth:`stop` — ``Close``: pending callers get an error, workers exit.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from benchmarks.baselines.base import (
    ClientRateLimiter,
    Cond,
    OutcomeFuture,
    send_binding,
    send_status,
    settle,
)
from kdispatch import ApiBackend, DispatcherClosed, Obj, Outcome, PodBinding, PodStatusPatch

UpstreamCall = PodStatusPatch | PodBinding


@dataclass(eq=False, slots=True)
class _Queued:
    """A tracked call (``queuedAPICall``): the call, its caller's result and its identity."""

    call: UpstreamCall
    future: OutcomeFuture
    call_id: int
    executed: bool = False

    @property
    def uid(self) -> str:
        return self.call.ref.uid

    def is_noop(self) -> bool:
        """Against the call's own snapshot; a binding is never a no-op."""
        call = self.call
        return isinstance(call, PodStatusPatch) and call.is_noop(call.basis)


class UpstreamFifoContender:
    """The model; see the module docstring. ``submit_*``/``observe`` run on caller threads and
    only take the queue lock; ``workers`` threads execute."""

    name = "upstream_fifo"

    def __init__(self, backend: ApiBackend, qps: float, burst: int, workers: int = 16) -> None:
        self._backend = backend
        self._limiter = ClientRateLimiter(qps, burst)
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # workers wait here for a queued UID
        self._idle = threading.Condition(lock)  # stop(drain=True) waits here for an empty map
        self._calls: dict[str, _Queued] = {}
        self._fifo: deque[str] = deque()
        self._in_flight: dict[str, _Queued] = {}
        self._ids = itertools.count()
        self._closed = False
        self.counts = {"sent": 0, "skipped": 0, "overwritten": 0, "noop_at_execute": 0}
        self._threads = [
            threading.Thread(target=self._work, name=f"bench-upstream-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ Add

    def submit_status(self, pod: Obj, cond: Cond) -> OutcomeFuture:
        """Caller thread (``Add`` of a ``PodStatusPatchCall``)."""
        return self._add(PodStatusPatch.for_pod(pod, conditions=[cond]))

    def submit_binding(self, pod: Obj, node: str) -> OutcomeFuture:
        """Caller thread (``Add`` of a ``PodBindingCall``)."""
        return self._add(PodBinding.for_pod(pod, node))

    def submit_call(self, call: UpstreamCall) -> OutcomeFuture:
        """Caller thread: ``Add`` of a call built beforehand (W1 times the submission alone)."""
        return self._add(call)

    def _add(self, call: UpstreamCall) -> OutcomeFuture:
        fut: OutcomeFuture = Future()
        with self._cond:
            if self._closed:
                settle(fut, error=DispatcherClosed("api dispatcher is closed"))
                return fut
            new = _Queued(call, fut, next(self._ids))
            old = self._calls.get(new.uid)
            if old is not None and not self._merge(old, new):
                return fut
            self._enqueue(new, old_present=old is not None)
        return fut

    def _merge(self, old: _Queued, new: _Queued) -> bool:
        """Lock held. False when the new call was skipped."""
        if new.call.relevance < old.call.relevance:
            self.counts["skipped"] += 1
            settle(new.future, Outcome.SKIPPED)
            return False
        if type(new.call) is not type(old.call):
            if old.uid not in self._in_flight:
                self.counts["overwritten"] += 1
                settle(old.future, Outcome.OVERWRITTEN)
            elif self._in_flight[old.uid] is not old:
                # ``old`` waits behind an in-flight call and is replaced without a word
                # upstream (its caller never hears back); report it as overwritten so that
                # waiting workloads finish. Requests are unaffected.
                self.counts["overwritten"] += 1
                settle(old.future, Outcome.OVERWRITTEN)
            return True
        if isinstance(new.call, PodStatusPatch) and isinstance(old.call, PodStatusPatch):
            merged = new.call.merge(old.call)
            new.call = dataclasses.replace(merged, basis=new.call.basis)
        self.counts["overwritten"] += 1
        settle(old.future, Outcome.OVERWRITTEN)
        return True

    def _enqueue(self, new: _Queued, *, old_present: bool) -> None:
        """Lock held."""
        uid = new.uid
        if new.is_noop() and uid not in self._in_flight:
            if old_present:
                self._remove_pending(uid)
            self.counts["skipped"] += 1
            settle(new.future, Outcome.SKIPPED)
            return
        self._calls[uid] = new
        if old_present:
            return
        self._fifo.append(uid)
        self._cond.notify()

    def _remove_pending(self, uid: str) -> None:
        """Lock held. Forget a call that was not popped yet (rebuilds the FIFO, O(n))."""
        if self._calls.pop(uid, None) is not None and uid not in self._in_flight:
            self._fifo = deque(u for u in self._fifo if u != uid)
        if not self._calls:
            self._idle.notify_all()

    # ------------------------------------------------------------------ SyncObject

    def observe(self, pod: Obj) -> None:
        """Informer thread (``SyncObject``)."""
        uid = pod["metadata"]["uid"]
        with self._cond:
            q = self._calls.get(uid)
            if q is None:
                return
            if isinstance(q.call, PodStatusPatch) and not q.executed:
                q.call = dataclasses.replace(q.call, basis=pod)
            if q.is_noop() and uid not in self._in_flight:
                self._remove_pending(uid)
                self.counts["skipped"] += 1
                settle(q.future, Outcome.SKIPPED)

    # ------------------------------------------------------------------ Run

    def _pop(self) -> _Queued | None:
        """Worker thread: block for the next UID in FIFO order and mark it in flight."""
        with self._cond:
            while not self._fifo and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            uid = self._fifo.popleft()
            q = self._in_flight[uid] = self._calls[uid]
            return q

    def _work(self) -> None:
        """Worker thread body (a goroutine of the limiter, reused)."""
        while True:
            q = self._pop()
            if q is None:
                return
            error: BaseException | None = None
            try:
                self._execute(q)
            except Exception as exc:  # no retries: the caller gets the error
                error = exc
            self._finalize(q)
            settle(q.future, Outcome.SUCCESS, error)

    def _execute(self, q: _Queued) -> None:
        """Worker thread (``APICall.Execute``)."""
        with self._cond:
            q.executed = True
            call = q.call
        if isinstance(call, PodStatusPatch):
            pod = call.basis
            assert pod is not None
            body = call.status_patch(pod)
            if body is None:
                with self._cond:
                    self.counts["noop_at_execute"] += 1
                return
            self._limiter.wait()
            with self._cond:
                self.counts["sent"] += 1
            send_status(self._backend, pod, body)
        else:
            self._limiter.wait()
            with self._cond:
                self.counts["sent"] += 1
            assert call.basis is not None
            send_binding(self._backend, call.basis, call.node)

    def _finalize(self, q: _Queued) -> None:
        """Worker thread (``finalize``): forget the call, or re-queue the object at the back of
        the FIFO when a newer call arrived while this one was in flight."""
        uid = q.uid
        with self._cond:
            current = self._calls.get(uid)
            if current is q:
                del self._calls[uid]
            elif current is not None:
                self._fifo.append(uid)
                self._cond.notify()
            self._in_flight.pop(uid, None)
            if not self._calls:
                self._idle.notify_all()

    # ------------------------------------------------------------------ Close

    def pending(self) -> int:
        """Any thread. Objects queued and not yet popped."""
        with self._cond:
            return len(self._fifo)

    def stop(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Caller thread. With ``drain``, wait until nothing is tracked (up to ``timeout``);
        then ``Close``: every tracked caller gets :class:`DispatcherClosed`, workers exit after
        the request they are sending."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while drain and self._calls and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            self._closed = True
            for q in self._calls.values():
                settle(q.future, error=DispatcherClosed("api dispatcher is closed"))
            self._cond.notify_all()
        for t in self._threads:
            t.join()

    def stats(self) -> dict[str, Any]:
        """Requests sent, calls skipped/overwritten, no-ops found at execution."""
        with self._cond:
            return {**self.counts, "tokens_taken": self._limiter.taken}
