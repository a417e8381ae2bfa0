"""Token blocks (a gang's bindings take their tokens as one block): pure bookkeeping on a
token bucket with a fake clock."""

from __future__ import annotations

import pytest

from kdispatch.actors.engine.blocks import Block, TokenBlocks
from kdispatch.actors.runtime.ratelimit import TokenBucket
from tests.clocks import ManualClock


def active(blocks: TokenBlocks, uids: list[str]) -> Block:
    """A block of ``uids`` whose turn in its lane came."""
    block = blocks.reserve(uids, 2)
    assert block is not None
    blocks.activate(block)
    return block


def test_a_block_within_the_burst_takes_its_tokens_in_one_take() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=10, burst=5, clock=clock)
    for _ in range(4):
        bucket.try_take()  # one token left
    blocks = TokenBlocks()
    block = active(blocks, ["a", "b", "c"])
    assert (block.need, block.paid) == (3, 0)
    assert blocks.pay(bucket) == pytest.approx(0.2)  # two more tokens to come
    assert bucket.available() == pytest.approx(1.0)  # nothing taken meanwhile
    clock.advance(0.1)
    assert blocks.pay(bucket) == pytest.approx(0.1)
    clock.advance(0.1)
    assert blocks.pay(bucket) == 0.0
    assert (block.need, block.paid, bucket.taken) == (0, 3, 7)
    assert not blocks.unpaid


def test_a_block_larger_than_the_burst_takes_the_bucket_then_each_refill() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    blocks = TokenBlocks()
    block = active(blocks, [f"m{i}" for i in range(5)])
    assert blocks.pay(bucket) == pytest.approx(0.1)
    assert (block.need, block.paid) == (3, 2)
    clock.advance(0.1)
    assert blocks.pay(bucket) == pytest.approx(0.1)
    assert (block.need, block.paid) == (2, 3)
    clock.advance(0.2)
    assert blocks.pay(bucket) == 0.0
    assert (block.need, block.paid) == (0, 5)


def test_blocks_are_paid_oldest_first() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=10, burst=4, clock=clock)
    blocks = TokenBlocks()
    first = active(blocks, ["a", "b", "c"])
    second = active(blocks, ["d", "e"])
    assert blocks.pay(bucket) > 0  # the first took 3, the second waits for 2 with 1 there
    assert (first.paid, second.paid) == (3, 0)
    clock.advance(0.1)
    assert blocks.pay(bucket) == 0.0
    assert second.paid == 2


def test_granting_and_leaving_keep_members_equal_to_tokens_owed() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=10, burst=1, clock=clock)
    blocks = TokenBlocks()
    block = active(blocks, ["a", "b", "c"])
    assert blocks.leave("a") == (False, False)  # before any token: one fewer to take
    assert block.need == 2
    assert blocks.pay(bucket) > 0  # took the one token there, waits for the next
    assert blocks.leave("b") == (False, False)  # one fewer to take rather than one back
    assert (block.need, block.paid) == (0, 1)
    assert blocks.leave("b") is None  # left already
    assert blocks.pay(bucket) == 0.0
    active(blocks, ["x", "y"])
    assert blocks.pay(bucket) > 0
    assert blocks.leave("x") == (False, False) and blocks.leave("y") == (False, True)
    assert blocks.granted("c") is True  # the last member: the block is over
    assert not blocks.of and (block.need, block.paid) == (0, 0)


def test_fewer_than_two_members_or_members_of_another_block_make_no_block() -> None:
    blocks = TokenBlocks()
    assert blocks.reserve(["a"], 2) is None
    assert blocks.reserve(["a", "b"], 2) is not None
    assert blocks.reserve(["b", "c"], 2) is None  # b is taken: one member left
    assert set(blocks.of) == {"a", "b"}


def test_try_take_of_n_takes_all_or_nothing() -> None:
    clock = ManualClock()
    bucket = TokenBucket(qps=10, burst=5, clock=clock)
    assert bucket.try_take(3) == 0.0
    assert bucket.try_take(3) == pytest.approx(0.1)
    assert bucket.available() == pytest.approx(2.0) and bucket.taken == 3
    unlimited = TokenBucket(qps=float("inf"), burst=1, clock=clock)
    assert unlimited.try_take(7) == 0.0 and unlimited.taken == 7


def test_a_member_leaving_a_paid_block_gives_its_token_back() -> None:
    bucket = TokenBucket(qps=10, burst=3, clock=ManualClock())
    blocks = TokenBlocks()
    block = active(blocks, ["a", "b"])
    assert blocks.pay(bucket) == 0.0
    assert blocks.leave("a") == (True, False)
    assert blocks.granted("b") is True
    assert (block.need, block.paid) == (0, 0)


def test_a_block_takes_no_token_before_its_turn_and_an_active_one_counts_until_empty() -> None:
    bucket = TokenBucket(qps=10, burst=5, clock=ManualClock())
    blocks = TokenBlocks()
    block = blocks.reserve(["a", "b"], 2)
    assert block is not None
    assert blocks.pay(bucket) == 0.0 and bucket.taken == 0 and blocks.active == 0
    blocks.activate(block)
    assert blocks.active == 1 and blocks.pay(bucket) == 0.0 and bucket.taken == 2
    assert blocks.granted("a") is False and blocks.active == 1
    assert blocks.leave("b") == (True, True) and blocks.active == 0
    gone = blocks.reserve(["c", "d"], 2)
    assert gone is not None
    blocks.leave("c")
    blocks.leave("d")
    blocks.activate(gone)  # its turn came after every member left: nothing to take
    assert blocks.active == 0 and not blocks.unpaid
