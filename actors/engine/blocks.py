"""Token blocks: a gang's bindings take their tokens as one block (docs/gangs.md tells the
rules).

:meth:`~.executor.Executor.reserve_block` books one token per member still to be sent, and the
block takes one place in its members' lane. At its turn it becomes *active* and takes its tokens
before any other grant (requests of jobs already started still go first), at most the burst at
once, then each as the bucket refills; its members are granted from the blocks' own lane, each
with a token the block paid for. A member that leaves before its grant (its future resolved)
costs no token, or gives its paid one back: ``len(members) == need + paid`` for every block.
A member is granted from its block only for a Ready in the block's lane (its binding's): one
queued for another call of its pod when the block was made waits *parked* until its actor tells
(a Ready in that lane, or it leaves the block: its binding is not its next request).

:class:`TokenBlocks` is bookkeeping only: the :class:`~.lanes.LaneScheduler` calls it with its
lock held, on whichever thread granted.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Any

from kdispatch.actors.runtime.ratelimit import TokenBucket

__all__ = ["Block", "TokenBlocks"]


class Block:
    """The members of one gang still to be granted, and their tokens."""

    __slots__ = ("active", "lane", "members", "need", "paid", "started")

    def __init__(self, members: set[str], lane: int) -> None:
        self.members = members
        """Members not yet granted (nor left)."""
        self.lane = lane
        """The lane of its place, its members' bindings' lane."""
        self.need = len(members)
        """Tokens still to take."""
        self.paid = 0
        """Tokens taken and not yet used by a member's grant."""
        self.started = False
        """Whether the block took its first tokens."""
        self.active = False
        """Whether its turn in its lane came: it takes tokens, and no lane does meanwhile."""


class TokenBlocks:
    """The blocks of one executor (see the module docstring). Lock held by the caller."""

    __slots__ = ("active", "lane", "of", "queued", "unpaid")

    def __init__(self) -> None:
        self.of: dict[str, Block] = {}
        """A member's UID -> its block, until the member is granted or leaves."""
        self.unpaid: deque[Block] = deque()
        """Blocks still taking tokens, oldest first."""
        self.lane: OrderedDict[str, tuple[Any, float, int]] = OrderedDict()
        """Members ready to send: UID -> (actor, ready since, relevance); parked while the
        relevance is not their block's lane (see the module docstring)."""
        self.active = 0
        """Active blocks with members left: while there is one, no lane takes a token."""
        self.queued = 0
        """Blocks waiting for their turn in a lane (one entry each there)."""

    def reserve(self, uids: Iterable[str], lane: int) -> Block | None:
        """A new block of ``uids`` (those in no other block) in ``lane``, or None if fewer than
        two."""
        members = {uid for uid in uids if uid not in self.of}
        if len(members) < 2:
            return None
        block = Block(members, lane)
        for uid in members:
            self.of[uid] = block
        return block

    def activate(self, block: Block) -> None:
        """``block``'s turn in its lane came: it takes tokens from now on (unless no member
        is left)."""
        if block.members:
            block.active = True
            self.active += 1
            self.unpaid.append(block)

    def pay(self, bucket: TokenBucket) -> float:
        """Take tokens for the unpaid blocks, oldest first: a block's first tokens as one take
        of ``min(need, burst)``, the rest one by one. 0.0 when every block is paid, else the
        seconds until the oldest unpaid one can take more."""
        unpaid = self.unpaid
        while unpaid:
            block = unpaid[0]
            if not block.started and block.need:
                chunk = min(block.need, bucket.burst)
                wait = bucket.try_take(chunk)
                if wait > 0:
                    return wait
                block.started = True
                block.need -= chunk
                block.paid += chunk
            while block.need:
                wait = bucket.try_take()
                if wait > 0:
                    return wait
                block.need -= 1
                block.paid += 1
            unpaid.popleft()
        return 0.0

    def granted(self, uid: str) -> bool:
        """``uid`` is granted with its block's token. True when the block has no member left."""
        block = self.of.pop(uid)
        block.paid -= 1
        block.members.discard(uid)
        return self._emptied(block)

    def _emptied(self, block: Block) -> bool:
        """Whether ``block`` has no member left (an active one then stops holding the lanes)."""
        if block.members:
            return False
        if block.active:
            block.active = False
            self.active -= 1
        return True

    def leave(self, uid: str) -> tuple[bool, bool] | None:
        """``uid`` leaves its block before its grant: None if it is in none; else (whether a
        paid token goes back to the bucket, whether the block has no member left)."""
        block = self.of.pop(uid, None)
        if block is None:
            return None
        block.members.discard(uid)
        if block.need:
            block.need -= 1
            refund = False
        else:
            block.paid -= 1
            refund = True
        return refund, self._emptied(block)
