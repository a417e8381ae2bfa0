"""The shared executor: the only component that talks to the apiserver.

It is an actor in protocol: its only input is :meth:`Executor.tell` with :class:`Ready` messages
from object actors, its only outputs are ``Take`` asks and ``Done`` messages back to them. Inside,
a mailbox-free scheduler keeps one FIFO *lane* per relevance (upstream queues object UIDs, not
calls; so does this), a heap of objects backing off, and a token bucket; ``workers`` threads send
requests, so parallelism is bounded.

Scheduling, when tokens or workers are scarce: the highest-relevance non-empty lane goes first
(deletions, then bindings, then status patches), except that each lower lane with work is
guaranteed ``lane_min_share`` of the dispatches, so nothing starves. A worker takes a token
*first* and only then asks the object for its current merged call, so merges, no-op elision and
cancellations apply until the last instant; a token for an object that had nothing left to send is
refunded.

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
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import pykka
from loguru import logger

from actors.backend import ApiBackend
from actors.config import ExecutorConfig, RateLimitConfig, RetryConfig
from actors.errors import (
    ApiConnectionError,
    ApiError,
    ConflictError,
    NotFoundError,
    RequestTimeoutError,
    TooManyRequestsError,
)
from actors.messages import Done, Ready, Result, Take, Taken
from actors.metrics import Metrics
from actors.ratelimit import TokenBucket

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

    ``tell`` may be called from any thread; the worker threads are the executor's own.
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
        ask_timeout: float = 30.0,
    ) -> None:
        self._backend = backend
        self._retry = retry
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._name = name
        self._ask_timeout = ask_timeout
        self._bucket = TokenBucket(rate_limit.qps, rate_limit.burst, clock)
        self._lanes: dict[int, _Lane] = {
            r: OrderedDict() for r in sorted(set(relevances), reverse=True)
        }
        self._credit: dict[int, float] = dict.fromkeys(self._lanes, 0.0)
        self._delayed: list[tuple[float, int, str, Any, int]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._busy = 0
        self.sent = 0
        """Requests started (attempts), for stats."""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Caller thread. Start the worker threads."""
        for i in range(self._config.workers):
            t = threading.Thread(target=self._work, name=f"{self._name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float | None = None) -> None:
        """Caller thread. Stop dispatching; workers finish the request they are sending (bounded
        by the backend's request timeout) and are joined."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
        if self._threads:
            logger.warning("executor workers still sending after stop: {}", len(self._threads))

    def pause_intake(self) -> None:
        """Caller thread. Stop handing out new work (workers finish what they hold)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ the actor interface

    def tell(self, msg: Ready) -> None:
        """Any thread. An object has a call to send. Duplicate notifications for an object that
        is already queued keep its place (like upstream's UID queue)."""
        with self._cond:
            if msg.not_before > self._clock():
                heapq.heappush(
                    self._delayed,
                    (msg.not_before, next(self._seq), msg.uid, msg.ref, msg.relevance),
                )
            else:
                self._enqueue(msg.uid, msg.ref, msg.relevance)
            self._cond.notify()

    def wake(self) -> None:
        """Any thread. Re-check the clock (tests that advance a fake clock call this)."""
        with self._cond:
            self._cond.notify_all()

    def backlog(self) -> int:
        """Any thread. Objects queued or backing off."""
        with self._cond:
            return sum(len(lane) for lane in self._lanes.values()) + len(self._delayed)

    def idle(self) -> bool:
        """Any thread. Nothing queued, backing off or being sent."""
        with self._cond:
            return self._busy == 0 and not self._delayed and not any(self._lanes.values())

    @property
    def tokens_taken(self) -> int:
        """Tokens used (taken and not refunded)."""
        with self._cond:
            return self._bucket.taken

    # ------------------------------------------------------------------ scheduling (under lock)

    def _enqueue(self, uid: str, ref: Any, relevance: int) -> None:
        lane = self._lanes.get(relevance)
        if lane is None:  # a relevance registered after start: give it a lane
            self._lanes = dict(
                sorted({**self._lanes, relevance: OrderedDict()}.items(), reverse=True)
            )
            self._credit[relevance] = 0.0
            lane = self._lanes[relevance]
        if uid not in lane:
            lane[uid] = (ref, self._clock())

    def _promote_due(self, now: float) -> float | None:
        """Move due backoffs into their lanes; return when the next one is due."""
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, _, uid, ref, relevance = heapq.heappop(delayed)
            self._enqueue(uid, ref, relevance)
        return delayed[0][0] if delayed else None

    def _pick(self) -> tuple[str, Any, float, int] | None:
        """Choose the next object: highest lane first, lower lanes get their minimum share."""
        nonempty = [r for r, lane in self._lanes.items() if lane]
        if not nonempty:
            return None
        chosen = nonempty[0]
        share = self._config.lane_min_share
        for r in nonempty[1:]:
            self._credit[r] += share
        for r in reversed(nonempty[1:]):
            if self._credit[r] >= 1.0:
                self._credit[r] -= 1.0
                chosen = r
                break
        for r, lane in self._lanes.items():
            if not lane:
                self._credit[r] = 0.0
        uid, (ref, since) = self._lanes[chosen].popitem(last=False)
        return uid, ref, since, chosen

    def _next_work(self) -> tuple[str, Any, float, int] | None:
        """Worker thread, under the lock: wait for a due object and a token."""
        while not self._stopping:
            now = self._clock()
            next_due = self._promote_due(now)
            if not any(self._lanes.values()):
                self._cond.wait(None if next_due is None else max(0.0, next_due - now))
                continue
            wait = self._bucket.try_take()
            if wait > 0:
                if next_due is not None:
                    wait = min(wait, max(0.0, next_due - now))
                self._cond.wait(wait)
                continue
            picked = self._pick()
            assert picked is not None
            self._busy += 1
            return picked
        return None

    # ------------------------------------------------------------------ workers

    def _work(self) -> None:
        """Worker thread body."""
        while True:
            with self._cond:
                picked = self._next_work()
            if picked is None:
                return
            uid, ref, since, lane = picked
            try:
                self._serve(uid, ref, since, lane)
            except Exception:  # pragma: no cover - defensive: a worker must never die
                logger.opt(exception=True).error("executor worker error")
            finally:
                with self._cond:
                    self._busy -= 1

    def _serve(self, uid: str, ref: Any, since: float, lane: int) -> None:
        try:
            taken = ref.ask(Take(self._clock()), timeout=self._ask_timeout)
        except (pykka.ActorDeadError, pykka.Timeout):
            taken = None
        if not isinstance(taken, Taken):
            with self._cond:
                self._bucket.refund()
            return
        self._metrics.limiter_wait.labels(str(lane)).observe(max(0.0, self._clock() - since))
        done = self.execute(taken)
        try:
            ref.tell(done)
        except pykka.ActorDeadError:
            logger.bind(uid=uid).debug("object actor gone before its result arrived")

    def execute(self, taken: Taken) -> Done:
        """Worker thread. Send one attempt and classify its result."""
        call = taken.call
        log = logger.bind(uid=call.ref.uid, call_type=call.call_type, attempt=taken.attempt)
        with self._cond:
            self.sent += 1
        start = time.perf_counter()
        result = Result.SUCCESS
        obj = None
        error: BaseException | None = None
        delay = 0.0
        try:
            obj = call.send(self._backend, taken.obj)
        except NotFoundError as exc:
            result, error = Result.NOT_FOUND, exc
        except ConflictError as exc:
            result, error = Result.CONFLICT, exc
            try:
                obj = self._backend.get(call.ref.kind, call.ref.namespace, call.ref.name)
            except NotFoundError:
                result = Result.NOT_FOUND
            except ApiError as get_exc:
                log.debug("refetch after conflict failed: {}", get_exc)
        except ApiError as exc:
            error = exc
            if exc.retryable:
                result = Result.RETRY
                retry_after = exc.retry_after if isinstance(exc, TooManyRequestsError) else 0.0
                delay = backoff_delay(self._retry, taken.attempt, retry_after)
                self._metrics.retries.labels(call.call_type, _retry_reason(exc)).inc()
            else:
                result = Result.FAILED
        except Exception as exc:  # a bug in a call's send(): fail this call only
            result, error = Result.FAILED, exc
            log.opt(exception=exc).error("call send raised")
        elapsed = time.perf_counter() - start
        label = result.value
        self._metrics.executions.labels(call.call_type, label).inc()
        self._metrics.duration.labels(call.call_type, label).observe(elapsed)
        log.bind(result=label).debug("attempt finished in {:.1f} ms", elapsed * 1000)
        return Done(call, result, obj, error, delay)
