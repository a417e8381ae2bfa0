"""The executor's grant bookkeeping: which ready object gets the next token and worker slot.

:class:`LaneScheduler` keeps one FIFO *lane* of object UIDs per relevance (upstream queues UIDs,
not calls; so does this), a heap of objects backing off, the token buckets and the worker slots,
all under one lock. The highest non-empty lane goes first, but each lower lane with work earns
``lane_min_share`` of the grants; best-effort objects (Events, lane ``BEST_EFFORT``) get the
slots the other lanes leave free, with tokens of their own bucket (see the Events page of the
docs). A gang's bindings take one place in their lane and their tokens as one block
(:mod:`.blocks`). Every method here runs with the lock held, on whichever thread granted (an
actor, a worker, the timer), unless its docstring says otherwise.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from kdispatch.actors.model.calls import BEST_EFFORT
from kdispatch.actors.model.config import ExecutorConfig, RateLimitConfig
from kdispatch.actors.runtime.ratelimit import TokenBucket

from .blocks import Block, TokenBlocks
from .metrics import Metrics

__all__ = ["DROP", "GrantTo", "LaneScheduler"]

_Lane = OrderedDict[str, tuple[Any, float]]  # uid -> (actor, ready since)
GrantTo = tuple[str, Any, float, int]  # uid, actor, ready since, lane (or DROP)
DROP = -1  # the lane of a grant that drops a best-effort object's call


class LaneScheduler:
    """Lanes, backoffs, token buckets and worker slots of one :class:`~.executor.Executor`
    (its base class: the executor adds the threads and the actors' interface)."""

    def __init__(
        self,
        relevances: Iterable[int],
        rate_limit: RateLimitConfig,
        config: ExecutorConfig,
        metrics: Metrics,
        clock: Callable[[], float],
        *,
        inline: bool,
    ) -> None:
        self._inline = inline
        self._config = config
        self.metrics = metrics
        self._clock = clock
        self._calls = TokenBucket(rate_limit.qps, rate_limit.burst, clock)
        budget = rate_limit.events_budget()  # None: Events share the calls' bucket
        self._events = None if budget is None else TokenBucket(budget[0], budget[1], clock)
        self._lanes: dict[int, _Lane] = {}
        self._credit: dict[int, float] = {}
        for r in relevances:
            self._add_lane(r)
        # Entries of the lanes above the best-effort one (objects, and token blocks waiting for
        # their turn), plus one per token block with members still to grant: while it is
        # non-zero, nothing is granted on the spot.
        self._waiting = 0
        self._blocks = TokenBlocks()
        self._delayed: list[tuple[float, int, str, Any, int]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._timer_cond = threading.Condition(self._lock)  # the timer waits here
        self._token_cond = threading.Condition(self._lock)  # follow-up requests wait here
        # Slots (worker mode): grants and jobs under way, at most ``workers``. Objects granted
        # or being sent, and objects whose turn came meanwhile (a crashed actor replaced):
        # never two requests for one object at once. Inline sends need neither.
        self._slots = math.inf if inline else config.workers
        self._busy = 0
        self._sending: set[str] = set()
        self._deferred: dict[str, tuple[Any, int]] = {}
        # Best-effort objects granted only to be dropped (their lane was full), and their
        # grants not yet told; best-effort objects granted or being sent (capped).
        self._dropping: set[str] = set()
        self._overflow: list[GrantTo] = []
        self._best_effort: set[str] = set()
        self._best_effort_cap = max(1, config.workers // 4)
        self._followups = 0  # requests of started jobs waiting for a token
        self._event_followups = 0  # the same for best-effort jobs (the Events' bucket)
        self._token_at: float | None = None  # when a bucket will have a token again
        self._stopping = False

    def backlog(self) -> int:
        """Any thread. Objects queued or backing off."""
        with self._lock:
            queued = sum(len(lane) for lane in self._lanes.values())
            blocks = self._blocks
            return queued - blocks.queued + len(blocks.lane) + len(self._delayed)

    @property
    def tokens_taken(self) -> int:
        """Tokens of the calls' bucket used (taken and not refunded): one per request sent,
        but those of Events with a bucket of their own (:attr:`event_tokens_taken`)."""
        with self._lock:
            return self._calls.taken

    @property
    def event_tokens_taken(self) -> int:
        """Tokens of the Events' own bucket used (0 when they share the calls' bucket)."""
        with self._lock:
            return 0 if self._events is None else self._events.taken

    @property
    def events_waiting(self) -> int:
        """Best-effort objects (Events) waiting in their lane for a slot and a token (none
        once stopping: what waited resolves closed)."""
        with self._lock:
            return 0 if self._stopping else len(self._lanes[BEST_EFFORT])

    def _take_slot(self, uid: str, best_effort: bool) -> None:
        """A grant: a worker slot and the object's one request under way (inline sends need
        neither: they run on the actor's own turn)."""
        if best_effort:
            self._best_effort.add(uid)  # which bucket a refund goes back to
        if not self._inline:
            self._busy += 1
            self._sending.add(uid)

    def _free_slot(self, uid: str) -> None:
        """A grant answered without a request, or a request ended."""
        self._best_effort.discard(uid)
        if not self._inline:
            self._busy -= 1
            self._sending.discard(uid)
            deferred = self._deferred.pop(uid, None)
            if deferred is not None:
                self._enqueue(uid, deferred[0], deferred[1], admitted=True)

    def refund_token(self, best_effort: bool) -> None:
        """A token taken for a request that was not sent (an inline send's grant that sent
        nothing, a follow-up request the send gate refused after its wait) goes back to the
        bucket it came from. Any thread (the sending one)."""
        with self._lock:  # the set entry goes with the job's end
            if best_effort and self._events is not None:
                self._events.refund()
            else:
                self._calls.refund()

    def _take_event_token(self) -> float:
        """A token for a new best-effort grant: the Events' bucket's, or, shared, the calls'
        bucket's only when nothing else waits for one."""
        if self._events is None:
            if self._followups or self._waiting:
                return math.inf
            return self._calls.try_take()
        if self._event_followups:
            return math.inf
        return self._events.try_take()

    def _bucket_of(self, uid: str | None) -> TokenBucket:
        """The bucket the grant of ``uid`` took its token from."""
        if self._events is not None and uid is not None and uid in self._best_effort:
            return self._events
        return self._calls

    def _spare_slot(self, free: float) -> bool:
        """Whether a best-effort grant leaves a worker free for what comes next and keeps
        best-effort requests under their share of the workers (inline sends use no worker)."""
        if self._inline:
            return True
        if len(self._best_effort) >= self._best_effort_cap:
            return False
        return free >= 2 or self._config.workers == 1

    def _add_lane(self, relevance: int) -> None:
        lanes = {**self._lanes, relevance: OrderedDict()}
        lanes.setdefault(BEST_EFFORT, OrderedDict())
        self._lanes = dict(sorted(lanes.items(), reverse=True))
        self._credit.setdefault(relevance, 0.0)

    def _enqueue(self, uid: str, actor: Any, relevance: int, *, admitted: bool = False) -> None:
        """Queue ``uid`` in its lane; an object already queued keeps its place (with its new
        actor, if the old one crashed), and one queued in a lower lane leaves it (a binding
        replaced its queued status patch: that place would take a grant that sends nothing).
        A member of a token block is queued in the blocks' lane, or, ready in another lane
        than its block's (another call than its binding), leaves its block. A best-effort
        object finding its lane full is dropped: a grant that reserves nothing, told with the
        next grants; unless it was ``admitted`` already (back from a backoff, or its turn
        deferred behind its own request under way: an Event that waits is never dropped)."""
        if relevance not in self._lanes:  # a relevance registered after start
            self._add_lane(relevance)
        blocks = self._blocks
        block = blocks.of.get(uid) if blocks.of and relevance != BEST_EFFORT else None
        if block is not None:
            if relevance == block.lane:
                in_block = blocks.lane.get(uid)
                since = self._clock() if in_block is None else in_block[1]
                blocks.lane[uid] = (actor, since, relevance)  # not in _waiting: its block is
                return
            self._leave_block_locked(uid)  # its next call is not its binding: on its own
        lane = self._lanes[relevance]
        queued = lane.get(uid)
        if queued is not None:
            if queued[0] is not actor:
                lane[uid] = (actor, queued[1])
            return
        if relevance != BEST_EFFORT:  # its next call moved up a lane: one place, not two
            for r, lower in self._lanes.items():
                if BEST_EFFORT < r < relevance and lower.pop(uid, None) is not None:
                    self._waiting -= 1
                    break
        now = self._clock()
        if relevance == BEST_EFFORT:
            if not admitted and len(lane) >= self._config.events_max_pending:
                self._dropping.add(uid)
                self._overflow.append((uid, actor, now, DROP))
                self.metrics.event_dropped("queue_full")
                return
        else:
            self._waiting += 1
        lane[uid] = (actor, now)

    def _reserve_block_locked(self, uids: Iterable[str], relevance: int) -> bool:
        """A token block for ``uids`` (:mod:`.blocks`), queued in lane ``relevance`` as one
        entry; members queued already move to the blocks' lane (parked if queued in another
        lane: for another call), members backing off stay out of it. False when no block was
        made."""
        delayed = {entry[2] for entry in self._delayed}
        blocks = self._blocks
        block = blocks.reserve((uid for uid in uids if uid not in delayed), relevance)
        if block is None:
            return False
        for uid in block.members:
            for r, lane in self._lanes.items():
                queued = lane.pop(uid, None) if r != BEST_EFFORT else None
                if queued is not None:
                    self._waiting -= 1
                    blocks.lane[uid] = (queued[0], queued[1], r)
                    break
        if relevance not in self._lanes:
            self._add_lane(relevance)
        self._lanes[relevance][f"\0block-{next(self._seq)}"] = (block, self._clock())
        blocks.queued += 1
        self._waiting += 2  # its place in the lane, and the block until its last member goes
        return True

    def _leave_block_locked(self, uid: str) -> bool:
        """``uid`` leaves its token block before its grant: the token it was owed is not
        taken, or goes back to the bucket, and queued in the block's lane it moves to its own
        lane. False when it was in no block."""
        left = self._blocks.leave(uid)
        if left is None:
            return False
        refund, empty = left
        if refund:
            self._calls.refund()
        if empty:
            self._waiting -= 1
        queued = self._blocks.lane.pop(uid, None)
        if queued is not None:
            self._enqueue(uid, queued[0], queued[2])
        return True

    def _grant_blocks(self, slots: float, grants: list[GrantTo]) -> float:
        """Take the unpaid blocks' tokens, then grant ready members whose block has one, while
        ``slots`` last (not a parked member: its block's token is for its binding); the slots
        left."""
        blocks = self._blocks
        if blocks.unpaid and not self._followups:
            wait = blocks.pay(self._calls)
            if wait > 0:
                self._token_at = min(self._token_at or math.inf, self._clock() + wait)
                self._timer_cond.notify()
        for uid in list(blocks.lane):
            if slots <= 0:
                break
            block = blocks.of[uid]
            if block.paid == 0 or blocks.lane[uid][2] != block.lane:
                continue
            actor, since, relevance = blocks.lane.pop(uid)
            if uid in self._sending:
                self._deferred[uid] = (actor, relevance)
                continue
            if blocks.granted(uid):
                self._waiting -= 1
            grants.append((uid, actor, since, relevance))
            self._take_slot(uid, False)
            slots -= 1
        return slots

    def _pick(self, best_effort: bool) -> GrantTo | None:
        """The next object to grant from the lanes above the best-effort one (or from that
        lane alone), in the order the module docstring gives; objects with a request still
        under way are deferred. None when nothing is sendable."""
        while True:
            if best_effort:
                nonempty = [BEST_EFFORT] if self._lanes[BEST_EFFORT] else []
            else:
                nonempty = [r for r, lane in self._lanes.items() if lane and r != BEST_EFFORT]
            if not nonempty:
                return None
            chosen = nonempty[0]
            share = self._config.lane_min_share
            if share > 0 and len(nonempty) > 1:
                credit = self._credit
                for r in nonempty[1:]:
                    credit[r] += share
                for r in reversed(nonempty[1:]):
                    if credit[r] >= 1.0:
                        credit[r] -= 1.0
                        chosen = r
                        break
            uid, (actor, since) = self._lanes[chosen].popitem(last=False)
            if chosen != BEST_EFFORT:
                self._waiting -= 1
            if uid not in self._sending:
                return uid, actor, since, chosen
            self._deferred[uid] = (actor, chosen)

    def _grant_locked(self) -> list[GrantTo]:
        """Reserve tokens and slots for as many queued objects as possible: the lanes above
        the best-effort one first, then that lane with the slots they leave (and the drops of
        Events that found their lane full)."""
        grants: list[GrantTo] = []
        delayed = self._delayed
        if self._stopping or not (
            self._waiting
            or delayed
            or self._lanes[BEST_EFFORT]
            or self._overflow
            or self._followups
        ):
            return grants  # nothing to grant (the usual end of a request)
        now = self._clock()
        while delayed and delayed[0][0] <= now:
            _, _, uid, actor, relevance = heapq.heappop(delayed)
            self._enqueue(uid, actor, relevance, admitted=True)
        slots = self._slots - self._busy
        if self._followups:  # started jobs take the next tokens
            self._token_cond.notify_all()
        elif not self._waiting and any(self._credit.values()):
            for r in self._credit:
                self._credit[r] = 0.0
        if self._blocks.of:
            slots = self._grant_blocks(slots, grants)
        while slots > 0 and self._waiting and not self._followups and not self._blocks.active:
            wait = self._calls.try_take()
            if wait > 0:
                self._token_at = min(self._token_at or math.inf, now + wait)
                self._timer_cond.notify()
                break
            picked = self._pick(best_effort=False)
            if picked is None:
                self._calls.refund()
                break
            if type(picked[1]) is Block:  # a block's turn: it takes its own tokens
                self._calls.refund()
                self._blocks.queued -= 1
                self._blocks.activate(picked[1])
                slots = self._grant_blocks(slots, grants)
                continue
            grants.append(picked)
            self._take_slot(picked[0], False)
            slots -= 1
        if (self._events is not None or not self._followups) and not self._blocks.active:
            self._grant_best_effort(now, slots, grants)  # (an active block holds Events too)
        if self._overflow:
            grants.extend(self._overflow)
            self._overflow = []
        return grants

    def _grant_best_effort(self, now: float, slots: float, grants: list[GrantTo]) -> None:
        """Grant best-effort objects the ``slots`` the other lanes left free, keeping one free
        for what comes next and within their share of the workers."""
        lane = self._lanes[BEST_EFFORT]
        while lane and slots > 0 and self._spare_slot(slots):
            wait = self._take_event_token()
            if wait > 0:
                # inf: something else goes first, and its end grants again; else the timer
                # grants once the bucket has a token
                if math.isfinite(wait):
                    self._token_at = min(self._token_at or math.inf, now + wait)
                    self._timer_cond.notify()
                return
            picked = self._pick(best_effort=True)
            if picked is None:
                (self._calls if self._events is None else self._events).refund()
                return
            grants.append(picked)
            self._take_slot(picked[0], True)
            slots -= 1
