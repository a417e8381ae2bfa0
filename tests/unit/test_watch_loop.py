"""The informers' list/watch loop decisions (:class:`WatchLoop`): pure, driven directly."""

from __future__ import annotations

import pytest

from kdispatch.actors.model.errors import ApiConnectionError, ServerError, TooManyRequestsError
from kdispatch.adapters.informer_core import WatchLoop

pytestmark = pytest.mark.timeout(10)


def test_it_lists_first_then_watches_at_once() -> None:
    plan = WatchLoop()
    assert plan.need_list
    plan.listed()
    assert not plan.need_list and plan.failures == 0


@pytest.mark.parametrize(("progress", "full_course"), [(True, False), (False, True), (True, True)])
def test_a_watch_that_delivered_or_ran_its_course_is_renewed_at_once(
    progress: bool, full_course: bool
) -> None:
    plan = WatchLoop()
    plan.listed()
    plan.failed(ApiConnectionError("reset"), progress=False)
    assert plan.watched(progress, full_course)
    assert plan.failures == 0 and not plan.need_list


def test_a_watch_that_ended_early_with_nothing_backs_off_longer_each_time() -> None:
    plan = WatchLoop()
    plan.listed()
    assert [plan.watched(False, False) for _ in range(3)] == [False, False, False]
    assert plan.failures == 3 and not plan.need_list


def test_gone_relists_at_once_then_backs_off_while_it_repeats_without_events() -> None:
    plan = WatchLoop()
    plan.listed()
    assert plan.gone(progress=False)  # the first 410: re-list at once
    assert plan.need_list
    plan.listed()
    assert not plan.gone(progress=False)  # again with nothing in between: back off
    assert plan.failures == 1
    plan.listed()
    assert plan.gone(progress=True)  # events came in between: at once again
    assert plan.need_list


def test_a_server_error_relists_and_other_failures_resume_the_watch() -> None:
    plan = WatchLoop()
    plan.listed()
    assert not plan.failed(ApiConnectionError("reset"), progress=False)
    assert not plan.failed(TooManyRequestsError("slow down"), progress=False)
    assert not plan.need_list and plan.failures == 2
    assert not plan.failed(ServerError("PrevKv=nil"), progress=False)
    assert plan.need_list and plan.failures == 3


def test_a_watch_that_delivered_events_before_failing_starts_the_backoff_afresh() -> None:
    plan = WatchLoop()
    plan.listed()
    for _ in range(4):
        plan.failed(ApiConnectionError("reset"), progress=False)
    plan.failed(ApiConnectionError("reset"), progress=True)
    assert plan.failures == 1
