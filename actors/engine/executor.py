"""The shared executor: the only component that talks to the apiserver.

Object actors call it (:meth:`Executor.ready`, :meth:`Executor.job`, :meth:`Executor.refund`)
and nobody ever blocks on it. A call travels: ``ready`` → a *grant* (a token and a worker slot
reserved by the :class:`~.lanes.LaneScheduler`) → the actor hands over its *current* merged
call (``job``), or ``refund`` if nothing is left → a worker sends it (:class:`~.sender.Sender`)
→ ``Done`` to the actor. When nothing waits and a token and a slot are free, ``ready`` grants
on the spot (no ``Grant`` message); otherwise whichever thread frees a slot or brings work
grants, and a timer thread covers token refills and backoff expiries. With a non-blocking
backend and no QPS limit on either bucket (*inline sends*), ``job`` sends on the actor's own
turn and returns its ``Done``: no worker threads at all.

Every request the apiserver sees takes a token (see the docs' concepts page): a grant reserves
the first; a job's further requests wait for theirs ahead of new grants; a job that sent
nothing gives its token back.
"""

from __future__ import annotations

import heapq
import math
import random
import threading
import time
from collections.abc import Callable, Collection, Iterable
from queue import SimpleQueue
from typing import Any

from loguru import logger

from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import BEST_EFFORT
from kdispatch.actors.model.config import MAX_WAIT, ExecutorConfig, RateLimitConfig, RetryConfig
from kdispatch.actors.model.effects import Done, Result, Send
from kdispatch.actors.model.errors import DispatcherClosed, RequestDropped

from .lanes import DROP, GrantTo, LaneScheduler
from .messages import Grant
from .metrics import Metrics
from .sender import Sender

__all__ = ["Executor", "SendGate"]

SendGate = Callable[[], bool]


class Executor(LaneScheduler):
    """Rate-limited, lane-prioritised, bounded-parallelism request executor (see the module
    docstring). Every public method may be called from any thread and never blocks for long
    (one short lock), except :meth:`job` with inline sends, which sends the request on the
    calling thread. The worker threads and the timer thread are the executor's own."""

    def __init__(
        self,
        backend: ApiBackend,
        *,
        relevances: Iterable[int],
        rate_limit: RateLimitConfig,
        retry: RetryConfig,
        config: ExecutorConfig,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        name: str = "kdispatch-executor",
        send_gate: SendGate | None = None,
        rand: Callable[[], float] = random.random,
        log_calls: bool = False,
    ) -> None:
        # Requests run on the actors' threads only when they can never wait: the backend never
        # blocks, no token is ever waited for (neither bucket limits: an Event's follow-up
        # request waits for a token of the Events' own bucket), and the calls' sends do not
        # block either (ExecutorConfig.inline_sends: the user's promise for custom sends).
        events = rate_limit.events_budget()
        inline = (
            config.inline_sends
            and getattr(backend, "non_blocking", False) is True
            and rate_limit.qps == math.inf
            and (events is None or events[0] == math.inf)
        )
        LaneScheduler.__init__(self, relevances, rate_limit, config, metrics, clock, inline=inline)
        self._name = name
        self.send_gate = send_gate
        self.sender = Sender(self, backend, retry, metrics, rand=rand, log_calls=log_calls)
        """Sends one request and classifies how it ended (the worker threads use it)."""
        self._jobs: SimpleQueue[tuple[Any, Send] | None] = SimpleQueue()  # (actor, send)
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Caller thread. Start the worker threads (none for inline sends) and the timer."""
        workers = 0 if self._inline else self._config.workers
        for i in range(workers):
            self._spawn_thread(self._work, f"{self._name}-{i}")
        self._spawn_thread(self._timer, f"{self._name}-timer")

    def _spawn_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def pause_intake(self) -> None:
        """Caller thread. Stop granting; queued jobs are dropped unsent (their actors resolve
        them as closed); requests already being sent finish."""
        with self._lock:
            self._stopping = True
            while not self._jobs.empty():
                self._jobs.get_nowait()
            for _ in range(self._config.workers):
                self._jobs.put(None)
            self._timer_cond.notify_all()
            self._token_cond.notify_all()

    def stop(self, timeout: float | None = None) -> None:
        """Caller thread. :meth:`pause_intake`, then join the threads (a worker sending a
        request finishes it first, bounded by the backend's request timeout)."""
        self.pause_intake()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
        if self._threads:
            logger.warning("executor threads still running after stop: {}", len(self._threads))

    # ------------------------------------------------------------------ the actor interface

    def ready(self, uid: str, actor: Any, relevance: int, not_before: float) -> bool:
        """Any thread (object actors). The object has a call to send in lane ``relevance``,
        not before ``not_before``. True when it is granted on the spot (nothing else waits, a
        token and a slot are free, or its turn came among the grants this call made; a gang
        member's token was paid by its block): the caller then goes on as if told a ``Grant``,
        with no message and no wait for the actor's next turn."""
        with self._lock:
            if not_before and not_before > self._clock():
                heapq.heappush(self._delayed, (not_before, next(self._seq), uid, actor, relevance))
                self._timer_cond.notify()
                if not (self._blocks.of and self._leave_block_locked(uid)):
                    return False  # (a member backing off leaves its block: it would stall it)
                grants = self._grant_locked()
            else:
                if (
                    not self._stopping
                    and not self._waiting
                    and self._busy < self._slots
                    and uid not in self._sending
                ):
                    if relevance != BEST_EFFORT:
                        if not self._followups and self._calls.try_take() == 0:
                            self._take_slot(uid, False)
                            return True
                    elif (
                        not self._lanes[BEST_EFFORT]
                        and self._spare_slot(self._slots - self._busy)
                        and self._take_event_token() == 0
                    ):
                        self._take_slot(uid, True)
                        return True
                self._enqueue(uid, actor, relevance)
                grants = self._grant_locked()
        for i, grant in enumerate(grants):  # granted among others: on the spot all the same
            if grant[0] == uid and grant[1] is actor and grant[3] != DROP:
                del grants[i]
                self.metrics.waited(grant[3], max(0.0, self._clock() - grant[2]))
                self._tell_grants(grants)
                return True
        self._tell_grants(grants)
        return False

    def job(self, actor: Any, send: Send) -> Done | None:
        """Any thread (object actors): ``actor``'s answer to a grant, ``send``. With inline
        sends the request runs here and its ``Done`` is returned; otherwise a worker sends it
        and the ``Done`` arrives as a message (None is returned). Nothing is sent once
        stopping."""
        call = send.call
        if self._dropping:
            uid = call.ref.uid
            if uid in self._dropping:  # set membership and discard: atomic (no lock)
                self._dropping.discard(uid)
                return self._dropped(send)
        if not self._inline:
            self._jobs.put((actor, send))
            return None
        if self._stopping:
            self.refund_token(call.best_effort)
            return None
        done, requests = self.sender.send(send)
        if not requests:  # nothing was sent: the grant's token goes back
            self.refund_token(call.best_effort)
        if call.best_effort:
            self._best_effort.discard(call.ref.uid)  # atomic under the interpreter lock
        return done

    def refund(self, uid: str | None = None) -> None:
        """Any thread (object actors): the answer to a grant when there is nothing to send.
        ``uid``: the object's (a grant that only dropped reserved nothing to give back)."""
        with self._lock:
            if uid is not None and uid in self._dropping:
                self._dropping.discard(uid)
                return
            self._bucket_of(uid).refund()
            self._free_slot(uid or "")
            grants = self._grant_locked()
        self._tell_grants(grants)

    def reserve_block(self, uids: Collection[str], relevance: int) -> None:
        """Any thread (a gang's release, before its members are let go): book one token per
        member of ``uids``, taken as one block when its turn in lane ``relevance`` comes
        (:mod:`.blocks`). Nothing to do without a rate limit."""
        if self._calls.unlimited or len(uids) < 2:
            return
        with self._lock:
            if self._stopping or not self._reserve_block_locked(uids, relevance):
                return
            grants = self._grant_locked()
        self._tell_grants(grants)

    def leave_block(self, uid: str) -> None:
        """Any thread (a gang member's future resolved): ``uid`` leaves its token block if it
        was not granted from it (:meth:`_leave_block_locked`)."""
        if not self._blocks.of:  # no block: nothing to leave (read without the lock)
            return
        with self._lock:
            if not self._leave_block_locked(uid):
                return
            grants = self._grant_locked()
        self._tell_grants(grants)

    def wake(self) -> None:
        """Any thread. Re-check the clock (tests that advance a fake clock call this)."""
        with self._lock:
            grants = self._grant_locked()
            self._timer_cond.notify_all()
            self._token_cond.notify_all()
        self._tell_grants(grants)

    # ------------------------------------------------------------------ a job's requests

    def take_followup_token(self, best_effort: bool = False) -> None:
        """Job thread: wait for the token of a job's second (third, ...) request; such
        requests go before new grants. A best-effort job's comes from the Events' bucket, or,
        when they share the calls' bucket, only if one is spare now (otherwise
        :class:`RequestDropped`). Raises ``DispatcherClosed`` when stopping."""
        with self._lock:
            if best_effort and self._events is None:
                if self._stopping:
                    raise DispatcherClosed("dispatcher stopped during a call")
                if self._followups or self._waiting or self._calls.try_take() > 0:
                    self.metrics.event_dropped("throttled")
                    raise RequestDropped("no spare token for a best-effort follow-up request")
                return
            bucket = self._events if best_effort and self._events is not None else self._calls
            if best_effort:
                self._event_followups += 1
            else:
                self._followups += 1
            try:
                while True:
                    if self._stopping:
                        raise DispatcherClosed("dispatcher stopped during a call")
                    wait = bucket.try_take()
                    if wait == 0:
                        return
                    self._token_cond.wait(wait)
            finally:
                if best_effort:
                    self._event_followups -= 1
                else:
                    self._followups -= 1

    def _dropped(self, send: Send) -> Done:
        """A dropping grant's job: answered unsent (the drop was counted)."""
        call = send.call
        err = RequestDropped(
            f"{call.call_type} dropped unsent: {self._config.events_max_pending} Events "
            "already waited for a token"
        )
        return Done(call, Result.FAILED, None, err, 0.0)

    def _tell_grants(self, grants: list[GrantTo]) -> None:
        """Outside the lock: tell each granted actor (one that has left refunds at once)."""
        if not grants:
            return
        now = self._clock()
        for uid, actor, since, lane in grants:
            if lane != DROP:
                self.metrics.waited(lane, max(0.0, now - since))
            if not actor.tell(Grant(now)):
                self.refund(uid)

    # ------------------------------------------------------------------ threads

    def _timer(self) -> None:
        """Timer thread: grant when tokens refill or backoffs expire."""
        with self._lock:
            while not self._stopping:
                wake_at = self._delayed[0][0] if self._delayed else math.inf
                if self._token_at is not None:
                    wake_at = min(wake_at, self._token_at)
                timeout = None
                if wake_at < math.inf:  # far off (a tiny QPS): wait what a lock can, then again
                    timeout = min(max(0.0, wake_at - self._clock()), MAX_WAIT)
                self._timer_cond.wait(timeout)
                self._token_at = None
                grants = self._grant_locked()
                if grants:
                    self._lock.release()
                    try:
                        self._tell_grants(grants)
                    finally:
                        self._lock.acquire()

    def _work(self) -> None:
        """Worker thread: send jobs one at a time; each request's end frees its slot and grants
        the next objects in one locked step."""
        jobs = self._jobs
        sender = self.sender
        while True:
            job = jobs.get()
            if job is None or self._stopping:  # a job taken while stopping is dropped unsent
                return
            actor, send = job
            uid = send.call.ref.uid
            requests = 0
            try:
                done, requests = sender.send(send)
                # the result's turn runs here when the actor is idle: no pool wake-up
                if not actor.run_or_tell(done):
                    logger.debug("object actor gone before its result arrived")
            except Exception:  # pragma: no cover - defensive: a worker must never die
                logger.opt(exception=True).error("executor worker error")
            with self._lock:
                if not requests:  # nothing was sent: the grant's token goes back
                    self._bucket_of(uid).refund()
                self._free_slot(uid)
                grants = self._grant_locked()
            self._tell_grants(grants)
