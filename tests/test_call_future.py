"""CallFuture: a standard ``concurrent.futures.Future`` whose condition exists only when
somebody waits on it (most of a pending call's memory otherwise)."""

from __future__ import annotations

import concurrent.futures as cf
import threading

import pytest

from kdispatch.actors.errors import CallCancelled, Outcome
from kdispatch.actors.messages import CallFuture


def test_resolved_before_anyone_looked_has_no_condition() -> None:
    f = CallFuture()
    assert not f.done()
    f.set_result(Outcome.SUCCESS)
    assert f.done()
    assert f.result() is Outcome.SUCCESS
    assert f.exception() is None
    assert f._cond is None  # never created: nobody waited


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
    """The race the lazy condition must not lose: a waiter arriving while futures resolve
    must count each exactly once (never return early, never hang)."""
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
