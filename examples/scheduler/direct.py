"""``DirectApi``: the ``--all-blocking`` API layer — every call blocks the calling thread.

Each call is executed before :meth:`DirectApi.submit` returns, with the same rules a careful
synchronous client would apply: no-op calls are not sent, 409 re-reads the object and retries
(bounded), retryable errors back off (``base_backoff·2^n``, at least Retry-After) up to
``max_attempts``. The returned future is already resolved, so the scheduler code is identical
in every mode; only where the time goes differs. No scheduler that is run blocks on its
bindings like this (kube-scheduler bound in separate goroutines long before KEP-5229: that shape is
:class:`~examples.scheduler.prekep.PreKepApi`); it is the lower bound of the comparison.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import Future
from typing import Any

from examples.scheduler.steps import CallFuture, ChainedSteps, GangSteps, PerPodGang, Steps
from kdispatch import (
    ApiBackend,
    ApiError,
    Call,
    CallConflict,
    CallFailed,
    CallOutcomeError,
    CallStale,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
    Obj,
    ObjectNotFound,
    Outcome,
    PodPreemption,
    RetryConfig,
    is_newer,
    uid_of,
)


class DirectApi:
    """:class:`~examples.scheduler.api.SchedulerApi` making blocking calls (thread-safe)."""

    mode = "all-blocking"

    def __init__(self, backend: ApiBackend, retry: RetryConfig | None = None) -> None:
        self._backend = backend
        self._retry = retry or RetryConfig()
        self._lock = threading.Lock()
        self._last: dict[str, Obj] = {}
        self._sent: Counter[str] = Counter()
        self._outcomes: Counter[str] = Counter()
        self._retries = 0

    # ------------------------------------------------------------------ calls

    def submit(self, call: Call) -> CallFuture:
        """Calling thread: blocks for the whole call (all attempts)."""
        future: CallFuture = Future()
        future.set_running_or_notify_cancel()
        try:
            outcome = self._execute(call)
        except CallOutcomeError as err:
            self._count(call, err.result_label)
            future.set_exception(err)
        else:
            self._count(call, outcome.value)
            future.set_result(outcome)
        return future

    def preempt(self, pod: Obj, *, preemptor: str) -> CallFuture:
        """Calling thread: condition patch and deletion, blocking."""
        return self.submit(PodPreemption.for_pod(pod, preemptor=preemptor))

    def group(self, owner: Obj) -> Steps:
        """Any thread. :class:`ChainedSteps`: every future is resolved when ``submit`` returns,
        so a held call is sent at once, on the calling thread, after its prerequisites."""
        del owner
        return ChainedSteps(self)

    def gang(self, owner: Obj, members: int) -> GangSteps:
        """Any thread. :class:`PerPodGang`: one binding per member, sent as submitted."""
        del owner, members
        return PerPodGang(self)

    def _count(self, call: Call, label: str) -> None:
        with self._lock:
            self._outcomes[f"{call.call_type}:{label}"] += 1

    def _newest(self, call: Call) -> Obj | None:
        last = self._last.get(call.ref.uid)
        basis = call.basis
        if basis is None:
            return last
        return last if last is not None and is_newer(last, basis) else basis

    def _execute(self, call: Call) -> Outcome:
        ref = call.ref
        obj = self._newest(call)
        if call.is_noop(obj):
            return Outcome.SKIPPED
        reason = call.precheck(obj)
        if reason is not None:
            raise CallConflict(reason, ref=ref, call_type=call.call_type)
        attempt = conflicts = 0
        while True:
            if obj is None and call.reads_object:
                obj = self._refetch(call)
            stale = call.revalidate(call.basis, obj)
            if stale is not None:
                raise CallStale(stale, ref=ref, call_type=call.call_type)
            attempt += 1
            with self._lock:
                self._sent[call.call_type] += 1
            try:
                result = call.send(self._backend, obj)
            except NotFoundError as err:
                raise ObjectNotFound(str(err), ref=ref, call_type=call.call_type) from err
            except ConflictError as err:
                conflicts += 1
                if conflicts > self._retry.max_conflict_retries:
                    raise CallConflict(str(err), ref=ref, call_type=call.call_type) from err
                obj = self._refetch(call)
                if call.landed(obj):
                    return Outcome.SUCCESS
                if call.is_noop(obj):
                    return Outcome.SKIPPED
                reason = call.precheck(obj)
                if reason is not None:
                    raise CallConflict(reason, ref=ref, call_type=call.call_type) from err
                continue
            except ApiError as err:
                if not err.retryable or attempt >= (self._retry.max_attempts or 8):
                    raise CallFailed(
                        f"{call.call_type} failed: {err}",
                        ref=ref,
                        call_type=call.call_type,
                        cause=err,
                    ) from err
                with self._lock:
                    self._retries += 1
                time.sleep(self._retry.delay(attempt, err.retry_after))
                continue
            self._remember(call, obj, result)
            return Outcome.SUCCESS

    def _refetch(self, call: Call) -> Obj:
        ref = call.ref
        try:
            obj = self._backend.get(ref.kind, ref.namespace, ref.name)
        except NotFoundError as err:
            raise ObjectNotFound(str(err), ref=ref, call_type=call.call_type) from err
        except ApiError as err:
            raise CallFailed(
                f"re-read after conflict failed: {err}",
                ref=ref,
                call_type=call.call_type,
                cause=err,
            ) from err
        if uid_of(obj) != ref.uid:
            raise ObjectNotFound("object replaced", ref=ref, call_type=call.call_type)
        return obj

    def _remember(self, call: Call, obj: Obj | None, result: Obj | None) -> None:
        newest = result if result is not None else (call.apply(obj) if obj is not None else None)
        if newest is not None and not call.exclusive:
            with self._lock:
                self._last[call.ref.uid] = newest

    # ------------------------------------------------------------------ the rest

    def view(self, uid: str) -> Obj | None:
        """Any thread. The last object a call of ours produced (the server has it already)."""
        return self._last.get(uid)

    def on_add(self, obj: Obj) -> None:
        """Informer thread. Nothing to track."""

    def on_update(self, obj: Obj) -> None:
        """Informer thread. Nothing to track."""

    def on_delete(self, obj: Obj) -> None:
        """Informer thread. Forget the object."""
        try:
            uid = uid_of(obj)
        except InvalidObjectError:
            return
        with self._lock:
            self._last.pop(uid, None)

    def stats(self) -> dict[str, Any]:
        """Any thread."""
        with self._lock:
            return {
                "sent": dict(self._sent),
                "outcomes": dict(self._outcomes),
                "retries": self._retries,
                "tokens_taken": sum(self._sent.values()),
            }

    def outstanding(self) -> int:
        """Always 0: every future is resolved before ``submit`` returns."""
        return 0

    def close(self, *, drain: bool, timeout: float) -> bool:
        """Nothing to stop."""
        del drain, timeout
        return True
