"""The queue policy of one object: which of its calls wait, merged how, and in what order
(docs/behaviour.md, "The queue"). An :class:`Entry` carries the intents of every call merged
into it, so one call can be withdrawn by its future; a held entry (``after=``) is never placed
ahead of a call it waits for (:func:`place`), nor supersedes one. Pure.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final

from .calls import Call

__all__ = ["FRESH", "NO_HOLDS", "Entry", "RetryState", "place", "superseded_by"]

NO_HOLDS: Final[frozenset[Any]] = frozenset()
"""The holds (and ``behind``) of a call that waits for nothing: most calls (shared)."""

_NOTHING: Final[tuple[Any, ...]] = ()


@dataclass(frozen=True, slots=True)
class RetryState:
    """A call's retry bookkeeping as one value (docs/behaviour.md, "Retry bookkeeping").

    ``attempt``: requests sent (re-reads not counted); ``conflicts``: 409s rebased on;
    ``failures``: retryable failures (sends and re-reads; the backoff doubles with each);
    ``not_before``: backoff after the last failure; ``deadline``: end of the retry budget,
    which runs from the first failure; ``unanswered``: a request of the call went unanswered
    (it may have landed), so it reads the object back before it fails.
    """

    attempt: int = 0
    conflicts: int = 0
    failures: int = 0
    not_before: float = 0.0
    deadline: float | None = None
    unanswered: bool = False

    def merged(self, other: RetryState) -> RetryState:
        """The bookkeeping of the merge of two calls: as far along as the further of the two
        (larger counts and backoff, the earlier deadline)."""
        if other is FRESH:
            return self
        if self is FRESH:
            return other
        deadlines = [d for d in (self.deadline, other.deadline) if d is not None]
        return RetryState(
            max(self.attempt, other.attempt),
            max(self.conflicts, other.conflicts),
            max(self.failures, other.failures),
            max(self.not_before, other.not_before),
            min(deadlines) if deadlines else None,
            self.unanswered or other.unanswered,
        )

    def sent(self) -> RetryState:
        """One more request of the call went out."""
        if self is FRESH:
            return SENT_ONCE  # most calls: no new object
        return RetryState(
            self.attempt + 1,
            self.conflicts,
            self.failures,
            self.not_before,
            self.deadline,
            self.unanswered,
        )

    def conflicted(self) -> RetryState:
        """One more 409 to rebase on."""
        return RetryState(
            self.attempt,
            self.conflicts + 1,
            self.failures,
            self.not_before,
            self.deadline,
            self.unanswered,
        )

    def waiting_until(self, at: float) -> RetryState:
        """The same bookkeeping, backing off until ``at`` at least."""
        if at <= self.not_before:
            return self
        return RetryState(
            self.attempt, self.conflicts, self.failures, at, self.deadline, self.unanswered
        )

    def failed(self, at: float, deadline: float, *, unanswered: bool = False) -> RetryState:
        """One more retryable failure: back off until ``at``, within ``deadline``;
        ``unanswered``: it was a request of the call that went unanswered."""
        return RetryState(
            self.attempt,
            self.conflicts,
            self.failures + 1,
            at,
            deadline,
            self.unanswered or unanswered,
        )


FRESH: Final = RetryState()
"""The bookkeeping of a call never sent (shared)."""
SENT_ONCE: Final = RetryState(attempt=1)
"""The bookkeeping of a call sent once and never failed (shared)."""


class Entry:
    """A tracked call: the call (merged), the caller's future, and what the rules keep of it.
    ``judged``: the observed object (by identity) it last passed elision and staleness
    against, with nothing in flight and the object trusted. The machine's thread."""

    __slots__ = (
        "behind",
        "call",
        "carried",
        "future",
        "holds",
        "judged",
        "retry",
        "sent_rv",
        "unanswered",
        "withdrawn",
        "withdrawn_for",
    )

    def __init__(
        self,
        call: Call,
        future: Any,
        holds: frozenset[Hashable] = NO_HOLDS,
        behind: frozenset[Any] = NO_HOLDS,
    ) -> None:
        self.call = call
        self.future = future
        self.holds = holds  # prerequisite tokens not released yet: not sendable while any
        self.behind = behind  # while held: futures of calls on this object it waits for
        self.carried: tuple[Any, ...] = _NOTHING  # futures of the calls merged into it
        self.withdrawn: frozenset[Any] | None = None  # which intents were withdrawn
        self.withdrawn_for: BaseException | None = None  # why, when not by its caller
        # Set when the retries ran out and a request went unanswered: why it gave up,
        # and the last error; the object is read once (verify) before the call resolves.
        self.unanswered: tuple[str, BaseException | None] | None = None
        self.retry = FRESH
        self.sent_rv: str | None = None  # resourceVersion the last attempt was computed on
        self.judged: Any = None

    def __repr__(self) -> str:
        return f"<Entry {self.call.describe()} holds={len(self.holds)}>"

    def carries(self, future: Any) -> bool:
        """Whether this entry carries the intent of the call of ``future``."""
        return future is self.future or future in self.carried

    def carries_any(self, futures: frozenset[Any]) -> bool:
        """Whether this entry carries the intent of any of ``futures``."""
        return self.future in futures or any(f in futures for f in self.carried)

    @property
    def cancelled(self) -> bool:
        """Whether every intent this entry carries was withdrawn."""
        withdrawn = self.withdrawn
        return (
            withdrawn is not None
            and self.future in withdrawn
            and all(f in withdrawn for f in self.carried)
        )

    def withdraw(self, future: Any, cause: BaseException | None = None) -> None:
        """Mark the intent of ``future`` withdrawn (for ``cause``, if not by its caller)."""
        if cause is not None:
            self.withdrawn_for = cause
        withdrawn = self.withdrawn
        self.withdrawn = frozenset((future,)) if withdrawn is None else withdrawn | {future}

    def absorb(self, older: Entry) -> None:
        """``older`` was merged into (or superseded by) this entry: carry its intents too."""
        self.carried = (*older.carried, older.future, *self.carried)
        if older.withdrawn is not None:
            self.withdrawn = older.withdrawn | (self.withdrawn or frozenset())
            if self.withdrawn_for is None:
                self.withdrawn_for = older.withdrawn_for

    def supersede(self, older: Entry) -> None:
        """This entry replaces ``older``, a call of a type it supersedes: it carries ``older``'s
        intents, holds what ``older`` held and waits out its backoff (nothing else of its
        history: it is another call)."""
        self.retry = self.retry.waiting_until(older.retry.not_before)
        self._hold_as(older)
        self.absorb(older)

    def merge_older(self, older: Entry) -> None:
        """Absorb ``older``, a pending entry of the same type: the newer values win, the older
        call fills the gaps, the retry bookkeeping merges (:meth:`RetryState.merged`), and
        the entry holds what either held."""
        call = self.call
        merged = call.merge(older.call)
        if not isinstance(merged, Call) or (merged.call_type, merged.ref) != (
            call.call_type,
            call.ref,
        ):  # a custom merge's bug: it fails this object's calls, never writes another's
            raise TypeError(
                f"{type(call).__name__}.merge returned {merged!r}, not a call for {call.ref}"
            )
        self.call = merged
        self.retry = self.retry.merged(older.retry)
        self._hold_as(older)
        self.absorb(older)

    def _hold_as(self, older: Entry) -> None:
        """Hold what ``older`` held too: a call that carries a held call's intent is never sent
        before that call's prerequisites succeeded (docs/groups.md, "Merges")."""
        if older.holds:
            self.holds = self.holds | older.holds
            if older.behind:
                self.behind = self.behind | older.behind

    def release(self, token: Hashable) -> None:
        """A prerequisite of ``token`` succeeded: the entry no longer holds it."""
        holds = self.holds
        if token in holds:
            self.holds = holds = holds - {token}
            if not holds:
                self.behind = NO_HOLDS


def place(queue: list[Entry], entry: Entry, at: int) -> None:
    """Queue ``entry`` at index ``at`` (a merge or a supersession gives it an older call's
    slot) or, if it is held, right behind the last call it waits for that would otherwise be
    behind it: a held call never holds back its own prerequisites."""
    behind = entry.behind
    if entry.holds and behind:
        for j in range(len(queue) - 1, at - 1, -1):
            if queue[j].carries_any(behind):
                at = j + 1
                break
    queue.insert(at, entry)


def superseded_by(call: Call, tracked: list[Entry], inflight: Entry | None) -> bool:
    """Whether a tracked call (pending or in flight) supersedes ``call``'s type: then ``call``
    resolves ``SKIPPED``."""
    ctype = call.call_type
    if inflight is not None and ctype in inflight.call.supersedes:
        return True
    return any(ctype in e.call.supersedes for e in tracked)


def exclusive_tracked(queue: list[Entry], inflight: Entry | None) -> bool:
    """Whether an exclusive call (a deletion) is pending or in flight: nothing more may queue."""
    if inflight is not None and inflight.call.exclusive:
        return True
    return any(e.call.exclusive for e in queue)
