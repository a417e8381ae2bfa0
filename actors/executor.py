"""The shared executor: the only component that talks to the apiserver.

It is an actor in protocol: its only input is :meth:`Executor.tell` (``Ready``, ``Job`` and
``Refund`` messages from object actors) and its only outputs are ``Grant`` and ``Done`` messages
back to them; nobody ever blocks on it. Inside, one lock guards a scheduler that keeps one FIFO
*lane* of object UIDs per relevance (upstream queues UIDs, not calls; so does this), a heap of
objects backing off, and a token bucket; ``workers`` threads send the requests.

A call travels ``Ready`` (the object has something to send) → ``Grant`` (a token and a worker
slot are reserved for it) → ``Job`` (the actor hands over its *current* merged call, so merges,
no-op elision and cancellations apply until that instant; or ``Refund`` if nothing is left, which
gives the token back) → a worker sends it → ``Done`` to the actor. Grants are handed out inline,
on the thread that freed a slot or brought work; a timer thread covers token refills and backoff
expiries. At most ``workers`` grants and jobs exist at once: parallelism is bounded.

Scheduling when tokens or slots are scarce: the highest-relevance non-empty lane goes first
(deletions, then bindings, then status patches), except that each lower lane with work is
guaranteed ``lane_min_share`` of the grants, so nothing starves.

Retries: retryable errors (429, 5xx, timeouts, connection errors) go back to the object actor
with a per-object backoff of ``base_backoff·2^(attempt-1)`` capped at ``max_backoff`` and at
least the server's Retry-After; 409 makes the worker fetch the object so the actor can rebase;
404 and permanent errors end the call.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any

import pykka
from loguru import logger

from .backend import ApiBackend
from .config import ExecutorConfig, RateLimitConfig, RetryConfig
from .errors import (
    ApiConnectionError,
    ApiError,
    ConflictError,
    NotFoundError,
    RequestTimeoutError,
    TooManyRequestsError,
)
from .messages import Done, Grant, Job, Ready, Refund, Result
from .metrics import Metrics
from .objects import get_path
from .ratelimit import TokenBucket

_Lane = OrderedDict[str, tuple[Any, float]]  # uid -> (actor ref, ready since)


def backoff_delay(retry: RetryConfig, attempt: int, retry_after: float = 0.0) -> float:
    """Seconds before attempt ``attempt + 1``: exponential per object, at least Retry-After."""
    exp: float = retry.base_backoff * 2.0 ** max(0, attempt - 1)
    return max(min(exp, retry.max_backoff), retry_after)


def _retry_reason(err: ApiError) -> str:
    if isinstance(err, TooManyRequestsError):
        return "429"
    if isinstance(err, RequestTimeoutError):
        return "timeout"
    if isinstance(err, ApiConnectionError):
        return "connection"
    return "5xx"


class Executor:
    """Rate-limited, lane-prioritised, bounded-parallelism request executor.

    ``tell`` may be called from any thread and never blocks for long (one short lock); the
    worker threads and the timer thread are the executor's own.
    """

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
    ) -> None:
        self._backend = backend
        self._retry = retry
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._name = name
        self._bucket = TokenBucket(rate_limit.qps, rate_limit.burst, clock)
        self._lanes: dict[int, _Lane] = {}
        self._credit: dict[int, float] = {}
        for r in relevances:
            self._add_lane(r)
        self._delayed: list[tuple[float, int, str, Any, int]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._jobs_ready = threading.Condition(self._lock)  # workers wait here
        self._timer_cond = threading.Condition(self._lock)  # the timer waits here
        self._jobs: deque[Job] = deque()
        # Requests being sent, by UID, and objects whose turn came while one of theirs was
        # still being sent (only possible when a crashed actor was replaced): never two
        # requests for one object at once.
        self._sending: set[str] = set()
        self._deferred: dict[str, tuple[Any, int]] = {}
        self._granted = 0  # grants not yet answered
        self._running = 0  # jobs queued or being sent
        self._token_at: float | None = None  # when the bucket will have a token again
        self._threads: list[threading.Thread] = []
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Caller thread. Start the worker threads and the timer thread."""
        for i in range(self._config.workers):
            t = threading.Thread(target=self._work, name=f"{self._name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._timer, name=f"{self._name}-timer", daemon=True)
        t.start()
        self._threads.append(t)

    def pause_intake(self) -> None:
        """Caller thread. Stop granting; queued jobs are dropped unsent (their actors resolve
        them as closed); requests already being sent finish."""
        with self._lock:
            self._stopping = True
            self._jobs.clear()
            self._jobs_ready.notify_all()
            self._timer_cond.notify_all()

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

    def tell(self, msg: Ready | Job | Refund) -> None:
        """Any thread (object actors on pool threads). Never blocks on I/O."""
        with self._lock:
            if isinstance(msg, Ready):
                if msg.not_before > self._clock():
                    heapq.heappush(
                        self._delayed,
                        (msg.not_before, next(self._seq), msg.uid, msg.ref, msg.relevance),
                    )
                    self._timer_cond.notify()
                else:
                    self._enqueue(msg.uid, msg.ref, msg.relevance)
            elif isinstance(msg, Job):
                self._granted -= 1
                if self._stopping:
                    return
                self._running += 1
                self._sending.add(msg.call.ref.uid)
                self._jobs.append(msg)
                self._jobs_ready.notify()
                return
            else:
                self._granted -= 1
                self._bucket.refund()
            grants = self._grant_locked()
        self._send_grants(grants)

    def wake(self) -> None:
        """Any thread. Re-check the clock (tests that advance a fake clock call this)."""
        with self._lock:
            grants = self._grant_locked()
            self._timer_cond.notify_all()
        self._send_grants(grants)

    def backlog(self) -> int:
        """Any thread. Objects queued or backing off."""
        with self._lock:
            return sum(len(lane) for lane in self._lanes.values()) + len(self._delayed)

    @property
    def tokens_taken(self) -> int:
        """Tokens used (taken and not refunded)."""
        with self._lock:
            return self._bucket.taken

    # ------------------------------------------------------------------ scheduling (under lock)

    def _add_lane(self, relevance: int) -> None:
        lanes = {**self._lanes, relevance: OrderedDict()}
        self._lanes = dict(sorted(lanes.items(), reverse=True))
        self._credit.setdefault(relevance, 0.0)

    def _enqueue(self, uid: str, ref: Any, relevance: int) -> None:
        if relevance not in self._lanes:  # a relevance registered after start
            self._add_lane(relevance)
        lane = self._lanes[relevance]
        if uid not in lane:  # already queued: keep its place
            lane[uid] = (ref, self._clock())

    def _pick_sendable(self) -> tuple[str, Any, float, int] | None:
        """The next object to grant, skipping (and deferring) objects with a request still
        being sent. None when no lane has a sendable object."""
        while True:
            nonempty = [r for r, lane in self._lanes.items() if lane]
            if not nonempty:
                return None
            uid, ref, since, lane = self._pick(nonempty)
            if uid not in self._sending:
                return uid, ref, since, lane
            self._deferred[uid] = (ref, lane)

    def _pick(self, nonempty: list[int]) -> tuple[str, Any, float, int]:
        """Highest lane first; each lower lane with work earns ``lane_min_share`` per grant."""
        chosen = nonempty[0]
        share = self._config.lane_min_share
        if share > 0:
            for r in nonempty[1:]:
                self._credit[r] += share
            for r in reversed(nonempty[1:]):
                if self._credit[r] >= 1.0:
                    self._credit[r] -= 1.0
                    chosen = r
                    break
        uid, (ref, since) = self._lanes[chosen].popitem(last=False)
        return uid, ref, since, chosen

    def _grant_locked(self) -> list[tuple[str, Any, float, int]]:
        """Reserve tokens and slots for as many queued objects as possible."""
        grants: list[tuple[str, Any, float, int]] = []
        if self._stopping:
            return grants
        now = self._clock()
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, _, uid, ref, relevance = heapq.heappop(delayed)
            self._enqueue(uid, ref, relevance)
        slots = self._config.workers - self._granted - self._running
        while slots > 0:
            nonempty = [r for r, lane in self._lanes.items() if lane]
            if not nonempty:
                for r in self._credit:
                    self._credit[r] = 0.0
                break
            wait = self._bucket.try_take()
            if wait > 0:
                self._token_at = now + wait
                self._timer_cond.notify()
                break
            picked = self._pick_sendable()
            if picked is None:
                self._bucket.refund()
                break
            grants.append(picked)
            self._granted += 1
            slots -= 1
        return grants

    def _send_grants(self, grants: list[tuple[str, Any, float, int]]) -> None:
        """Outside the lock: tell each granted actor (a dead one refunds at once)."""
        if not grants:
            return
        now = self._clock()
        for uid, ref, since, lane in grants:
            self._metrics.waited(lane, max(0.0, now - since))
            try:
                ref.tell(Grant(now))
            except pykka.ActorDeadError:
                self.tell(Refund(uid))

    # ------------------------------------------------------------------ threads

    def _timer(self) -> None:
        """Timer thread: grant when tokens refill or backoffs expire."""
        with self._lock:
            while not self._stopping:
                wake_at = [
                    t
                    for t in (self._token_at, self._delayed[0][0] if self._delayed else None)
                    if t is not None
                ]
                timeout = max(0.0, min(wake_at) - self._clock()) if wake_at else None
                self._timer_cond.wait(timeout)
                self._token_at = None
                grants = self._grant_locked()
                if grants:
                    self._lock.release()
                    try:
                        self._send_grants(grants)
                    finally:
                        self._lock.acquire()

    def _work(self) -> None:
        """Worker thread: send jobs one at a time."""
        while True:
            with self._lock:
                while not self._jobs and not self._stopping:
                    self._jobs_ready.wait()
                if self._stopping:
                    return
                job = self._jobs.popleft()
            try:
                done = self.execute(job)
                try:
                    job.ref.tell(done)
                except pykka.ActorDeadError:
                    logger.debug("object actor gone before its result arrived")
            except Exception:  # pragma: no cover - defensive: a worker must never die
                logger.opt(exception=True).error("executor worker error")
            with self._lock:
                self._running -= 1
                uid = job.call.ref.uid
                self._sending.discard(uid)
                deferred = self._deferred.pop(uid, None)
                if deferred is not None:
                    self._enqueue(uid, deferred[0], deferred[1])
                grants = self._grant_locked()
            self._send_grants(grants)

    def execute(self, job: Job) -> Done:
        """Worker thread. Send one attempt and classify its result."""
        call = job.call
        start = time.perf_counter()
        result = Result.SUCCESS
        obj = None
        error: BaseException | None = None
        delay = 0.0
        try:
            obj = call.send(self._backend, job.obj)
        except NotFoundError as exc:
            result, error = Result.NOT_FOUND, exc
        except ConflictError as exc:
            result, error = Result.CONFLICT, exc
            try:
                obj = self._backend.get(call.ref.kind, call.ref.namespace, call.ref.name)
            except NotFoundError:
                result = Result.NOT_FOUND
            except ApiError as get_exc:
                logger.debug("refetch after conflict failed: {}", get_exc)
            else:
                fetched_uid = get_path(obj, "metadata", "uid")
                if not isinstance(fetched_uid, str):
                    obj = None  # garbage: retry the conflict without a fresh basis (bounded)
                elif fetched_uid != call.ref.uid:
                    # same name, another object: ours was deleted and re-created
                    result, obj = Result.NOT_FOUND, None
        except ApiError as exc:
            error = exc
            if exc.retryable:
                result = Result.RETRY
                retry_after = exc.retry_after if isinstance(exc, TooManyRequestsError) else 0.0
                delay = backoff_delay(self._retry, job.attempt, retry_after)
                self._metrics.retry(call.call_type, _retry_reason(exc))
            else:
                result = Result.FAILED
        except Exception as exc:  # a bug in a call's send(): fail this call only
            result, error = Result.FAILED, exc
            logger.opt(exception=exc).error("{} send raised", call.call_type)
        self._metrics.executed(call.call_type, result.value, time.perf_counter() - start)
        logger.debug(
            "{call_type} {uid} attempt {attempt}: {result}",
            uid=call.ref.uid,
            call_type=call.call_type,
            attempt=job.attempt,
            result=result.value,
            pod=call.ref.name,
        )
        return Done(call, result, obj, error, delay)
