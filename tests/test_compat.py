"""Pins what kdispatch relies on from pykka and CPython beyond their public API
(actors/_compat.py): a pykka or Python upgrade that changes any of it fails here first."""

from __future__ import annotations

import concurrent.futures
import inspect
import sysconfig
import threading
from typing import Any

import pykka
import pytest
from pykka import messages as pykka_messages

from kdispatch.actors import _compat
from kdispatch.actors._compat import (
    ACTOR_HOOKS,
    PYKKA_MESSAGES,
    ActorStop,
    Envelope,
    LazyEvent,
    LazyFuture,
    ThreadingFuture,
    ask_into,
)

WAIT = 10.0  # bound for waits that must succeed; never used to sequence anything


# --------------------------------------------------------------------------- pykka


class _Inbox:
    def __init__(self) -> None:
        self.items: list[Any] = []

    def put(self, item: Any) -> None:
        self.items.append(item)


class _Bare(pykka.Actor):
    """A pykka actor whose fields are set by hand, as PooledActor sets them."""

    def __init__(self) -> None:  # pykka.Actor.__init__ deliberately not called
        self.actor_urn = "urn:test"
        self.actor_inbox = _Inbox()  # type: ignore[assignment]
        self.actor_stopped = threading.Event()
        self._actor_ref = pykka.ActorRef(self)
        self.calls: list[str] = []

    @staticmethod
    def _create_actor_inbox() -> Any:  # abstract in pykka.Actor
        return _Inbox()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return ThreadingFuture()

    def _start_actor_loop(self) -> None:  # abstract in pykka.Actor; never started here
        raise AssertionError("not started")

    def _stop(self) -> None:
        self.calls.append("_stop")

    def on_start(self) -> None:
        self.calls.append("on_start")

    def on_receive(self, message: Any) -> Any:
        return ("received", message)


def test_pykka_actor_hooks_exist() -> None:
    for name in ACTOR_HOOKS:
        assert callable(getattr(pykka.Actor, name)), name
    assert isinstance(inspect.getattr_static(pykka.Actor, "actor_ref"), property)


def test_pykka_ref_reads_the_fields_an_actor_sets() -> None:
    actor = _Bare()
    ref = actor.actor_ref
    assert ref is actor._actor_ref
    assert (ref.actor_urn, ref.actor_inbox, ref.actor_stopped) == (
        "urn:test",
        actor.actor_inbox,
        actor.actor_stopped,
    )
    assert ref.actor_class is _Bare
    assert ref.is_alive()
    actor.actor_stopped.set()  # is_alive reads the stop flag's is_set()
    assert not ref.is_alive()


def test_pykka_tell_ask_and_stop_put_envelopes_in_the_inbox() -> None:
    actor = _Bare()
    ref = actor.actor_ref
    inbox: _Inbox = actor.actor_inbox  # type: ignore[assignment]
    ref.tell("t")
    future = ref.ask("a", block=False)
    ref.stop(block=False)
    told, asked, stop = inbox.items
    assert isinstance(told, Envelope) and told.message == "t" and told.reply_to is None
    assert isinstance(asked, Envelope) and asked.message == "a"
    assert asked.reply_to is future and isinstance(future, ThreadingFuture)  # _create_future
    assert isinstance(stop, Envelope) and isinstance(stop.message, ActorStop)
    assert ActorStop is pykka_messages._ActorStop


def test_pykka_handle_receive_stops_on_a_stop_and_passes_the_rest() -> None:
    actor = _Bare()
    assert actor._handle_receive("plain") == ("received", "plain")
    actor._handle_receive(ActorStop())
    assert actor.calls == ["_stop"]
    actor._actor_loop_setup()  # runs on_start
    assert actor.calls == ["_stop", "on_start"]
    assert set(PYKKA_MESSAGES) == {
        ActorStop,
        pykka_messages.ProxyCall,
        pykka_messages.ProxyGetAttr,
        pykka_messages.ProxySetAttr,
    }


def test_ask_into_answers_into_the_callers_future() -> None:
    actor = _Bare()
    reply: ThreadingFuture[Any] = ThreadingFuture()
    ask_into(actor.actor_ref, "v", reply)
    [envelope] = actor.actor_inbox.items  # type: ignore[attr-defined]
    assert envelope.message == "v" and envelope.reply_to is reply
    assert Envelope("x").reply_to is None


# --------------------------------------------------------------------------- CPython


def test_the_interpreter_lock_is_there() -> None:
    """The lock-free code relies on it (see the module docstring of actors/_compat.py)."""
    assert not sysconfig.get_config_var("Py_GIL_DISABLED")


def test_future_private_state_is_what_lazy_future_rebuilds() -> None:
    plain: concurrent.futures.Future[int] = concurrent.futures.Future()
    assert set(vars(plain)) == {
        "_condition",
        "_state",
        "_result",
        "_exception",
        "_waiters",
        "_done_callbacks",
    }
    lazy: LazyFuture[int] = LazyFuture()
    assert lazy._state == plain._state == "PENDING"
    plain.set_result(1)
    assert plain._state == "FINISHED"


def test_lazy_future_builds_no_condition_unless_watched() -> None:
    quiet: LazyFuture[int] = LazyFuture()
    quiet.set_result(1)
    assert quiet._cond is None and quiet.done() and quiet.result() == 1
    with pytest.raises(concurrent.futures.InvalidStateError):
        quiet.set_result(2)
    failed: LazyFuture[int] = LazyFuture()
    failed.set_exception(ValueError("x"))
    assert isinstance(failed.exception(), ValueError)
    assert not failed.cancel() and not failed.cancelled() and not failed.running()


def test_lazy_future_works_with_waiters_callbacks_wait_and_as_completed() -> None:
    futures: list[LazyFuture[int]] = [LazyFuture() for _ in range(3)]
    seen: list[int] = []
    futures[0].add_done_callback(lambda f: seen.append(f.result()))
    assert futures[0]._cond is not None  # adding a callback builds the condition
    got: list[int] = []
    waiting = threading.Event()

    def waiter() -> None:
        waiting.set()
        got.append(futures[1].result(timeout=WAIT))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(WAIT)
    for i, future in enumerate(futures):
        future.set_result(i)
    thread.join(WAIT)
    assert seen == [0] and got == [1]
    done, not_done = concurrent.futures.wait(futures, timeout=WAIT)
    assert done == set(futures) and not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, WAIT)) == [0, 1, 2]


class SleeperSeen:
    """Wraps ``_compat._new_lock``: ``blocked`` is set once a sleeper blocks on its lock."""

    def __init__(self) -> None:
        self.blocked = threading.Semaphore(0)

    def __call__(self) -> Any:
        seen, lock = self, threading.Lock()

        class Sleeper:
            def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
                if lock.locked() and blocking:
                    seen.blocked.release()
                return lock.acquire(blocking, timeout)

            def release(self) -> None:
                lock.release()

        return Sleeper()


@pytest.fixture
def sleepers(monkeypatch: pytest.MonkeyPatch) -> SleeperSeen:
    seen = SleeperSeen()
    monkeypatch.setattr(_compat, "_new_lock", seen)
    return seen


def in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` on a thread; its result or exception lands in the returned list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


@pytest.mark.parametrize("fail", [False, True], ids=["result", "exception"])
def test_lazy_future_waits_without_a_condition(sleepers: SleeperSeen, fail: bool) -> None:
    """``result()``/``exception()`` on a pending future sleep on a lock of their own, and the
    resolution wakes every one of them; no condition is built."""
    future: LazyFuture[int] = LazyFuture()
    waits = [in_thread(lambda: future.result(WAIT)), in_thread(lambda: future.exception(WAIT))]
    for _ in waits:
        assert sleepers.blocked.acquire(timeout=WAIT)
    assert len(future._sleepers) == 2
    error = ValueError("x")
    if fail:
        future.set_exception(error)
    else:
        future.set_result(7)
    for thread, _out in waits:
        thread.join(WAIT)
    assert [out for _t, out in waits] == ([[error], [error]] if fail else [[7], [None]])
    assert future._cond is None and not future._sleepers


def test_lazy_future_sleeper_times_out_and_leaves(sleepers: SleeperSeen) -> None:
    future: LazyFuture[int] = LazyFuture()
    with pytest.raises(TimeoutError):
        future.result(timeout=0)
    assert future._sleepers == () and not future.done()
    future.set_result(1)
    assert future.result(timeout=0) == 1


def test_lazy_future_sleeper_is_woken_by_the_standard_path_too(sleepers: SleeperSeen) -> None:
    """A sleeper that blocked before a callback built the condition is still woken (the
    resolution takes the standard path, then releases the sleepers)."""
    future: LazyFuture[int] = LazyFuture()
    thread, out = in_thread(lambda: future.result(WAIT))
    assert sleepers.blocked.acquire(timeout=WAIT)
    seen: list[int] = []
    future.add_done_callback(lambda f: seen.append(f.result()))
    assert future._cond is not None
    _late, late_out = in_thread(lambda: future.result(WAIT))  # the standard wait now
    future.set_result(3)
    thread.join(WAIT)
    _late.join(WAIT)
    assert out == [3] and late_out == [3] and seen == [3] and future._sleepers == ()


def test_event_private_state_is_what_lazy_event_rebuilds() -> None:
    assert set(vars(threading.Event())) == {"_cond", "_flag"}
    assert callable(threading.Event._at_fork_reinit)  # type: ignore[attr-defined]
    ev = LazyEvent()
    assert ev._cond is None and not ev.is_set()
    ev.set()
    assert ev._cond is None and ev.wait(0) is True  # set and read without a condition
