"""CallFuture: a standard ``concurrent.futures.Future`` that is never cancelled, resolved
through ``settle`` (which tells a step's group)."""

from __future__ import annotations

import concurrent.futures as cf
import threading

import pytest

from kdispatch.actors.engine.messages import CallFuture, settle
from kdispatch.actors.model.errors import CallCancelled, Outcome


def test_settle_resolves_once_and_tells_the_group_once() -> None:
    told: list[CallFuture] = []

    class Group:
        def _step_done(self, future: CallFuture) -> None:
            told.append(future)

        def _refusal(self, call: object, held: bool) -> None:
            return None

    f = CallFuture()
    f.group = Group()
    assert settle(f, Outcome.SUCCESS) is True
    assert settle(f, CallCancelled("late", uid="u", call_type="pod_binding")) is False
    assert f.result() is Outcome.SUCCESS
    assert told == [f]


def test_exception_and_double_resolution() -> None:
    f = CallFuture()
    f.set_exception(CallCancelled("gone", uid="u", call_type="pod_binding"))
    with pytest.raises(CallCancelled):
        f.result()
    assert isinstance(f.exception(), CallCancelled)
    with pytest.raises(cf.InvalidStateError):
        f.set_result(Outcome.SUCCESS)
    assert "raised CallCancelled" in repr(f)


def test_callbacks_run_once_whether_added_before_or_after() -> None:
    seen: list[Outcome] = []
    before = CallFuture()
    before.add_done_callback(lambda x: seen.append(x.result()))
    before.set_result(Outcome.SKIPPED)
    after = CallFuture()
    after.set_result(Outcome.OVERWRITTEN)
    after.add_done_callback(lambda x: seen.append(x.result()))
    assert seen == [Outcome.SKIPPED, Outcome.OVERWRITTEN]


def test_result_waits_for_a_later_resolution() -> None:
    f = CallFuture()
    waiting = threading.Event()

    def resolve() -> None:
        waiting.wait(5)
        f.set_result(Outcome.SUCCESS)

    t = threading.Thread(target=resolve)
    t.start()
    try:
        with pytest.raises(cf.TimeoutError):
            f.result(timeout=0.01)  # creates the condition; nothing resolved yet
        waiting.set()
        assert f.result(timeout=5) is Outcome.SUCCESS
    finally:
        t.join()


def test_never_cancelled() -> None:
    f = CallFuture()
    assert f.cancel() is False
    assert not f.cancelled() and not f.running()
    f.set_result(Outcome.SUCCESS)
    assert not f.cancelled()


@pytest.mark.parametrize("how", ["wait", "as_completed"])
def test_wait_and_as_completed_while_another_thread_resolves(how: str) -> None:
    """A waiter arriving while futures resolve counts each exactly once (never returns early,
    never hangs)."""
    for _ in range(100):
        futures = [CallFuture() for _ in range(40)]
        go = threading.Event()

        def resolve(fs: list[CallFuture] = futures, start: threading.Event = go) -> None:
            start.wait(5)
            for f in fs:
                f.set_result(Outcome.SUCCESS)

        t = threading.Thread(target=resolve)
        t.start()
        go.set()
        try:
            if how == "wait":
                done, pending = cf.wait(futures, timeout=10)
                assert not pending
                assert len(done) == len(futures)
            else:
                assert len(list(cf.as_completed(futures, timeout=10))) == len(futures)
            assert all(f.result() is Outcome.SUCCESS for f in futures)
        finally:
            t.join()
