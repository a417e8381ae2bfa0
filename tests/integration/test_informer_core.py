"""The informers' shared pieces: the backoff formula, the I/O-free core (driven directly, no
threads), and ``wait_for_sync`` against an apiserver nobody listens on, for both shells."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kubernetes.aio import client as aclient

from kdispatch.actors.model.backoff import backoff_delay
from kdispatch.actors.model.config import RetryConfig
from kdispatch.actors.model.errors import (
    ApiConnectionError,
    BadResponseError,
    ForbiddenError,
    InformerSyncTimeout,
    InvalidInputError,
)
from kdispatch.adapters.aio_informer import AioInformer
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.informer_core import Handler, InformerCore
from kdispatch.adapters.kubernetes import KubernetesBackend
from tests.aio import async_test
from tests.factories import pod

DEAD = "http://127.0.0.1:1"  # nothing listens on port 1


# ------------------------------------------------------------------ backoff


def test_backoff_doubles_caps_then_jitters() -> None:
    delays = [backoff_delay(n, initial=0.05, cap=1.0, jitter=0.2, rand=0.0) for n in range(1, 8)]
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff_delay(3, initial=0.05, cap=1.0, jitter=0.2, rand=0.5) == pytest.approx(0.22)
    assert backoff_delay(0, initial=0.05, cap=1.0, jitter=0.2, rand=0.0) == 0.05
    assert backoff_delay(10_000, initial=0.05, cap=1.0, jitter=0.0, rand=0.9) == 1.0
    with pytest.raises(InvalidInputError):
        backoff_delay(1, initial=0.05, cap=1.0, jitter=0.2, rand=1.0)


def test_the_executor_retry_delay_is_the_same_formula() -> None:
    retry = RetryConfig(base_backoff=0.005, max_backoff=2.0, jitter=0.2)
    for attempt in (1, 4, 20):
        for rand in (0.0, 0.3, 0.99):
            assert retry.delay(attempt, 0.0, rand) == backoff_delay(
                attempt, initial=0.005, cap=2.0, jitter=0.2, rand=rand
            )
    assert retry.delay(1, retry_after=3.0) == 3.0  # the server's Retry-After wins


# ------------------------------------------------------------------ the core, no I/O


class Seen:
    def __init__(self, core: InformerCore) -> None:
        self.log: list[tuple[str, str, str]] = []
        core.add_handler(Handler(self.add, self.update, self.delete))

    def add(self, obj: dict[str, Any]) -> None:
        self.log.append(("add", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.log.append(("update", new["metadata"]["name"], new["metadata"]["resourceVersion"]))

    def delete(self, obj: dict[str, Any]) -> None:
        self.log.append(("delete", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))


def test_relist_diffs_into_deletes_then_adds_and_updates() -> None:
    core = InformerCore(name="t", kind="Pod")
    seen = Seen(core)
    core.listed([pod("a", rv=1), pod("b", rv=2)], "2")
    assert core.synced and core.relists == 1 and core.resource_version == "2"
    # b vanished, a changed, c is new, and "a" kept its uid; a re-created "b" has a new uid
    core.listed([pod("a", rv=5), pod("c", rv=6), pod("b", "u-b2", 7)], "7")
    assert seen.log == [
        ("add", "a", "1"),
        ("add", "b", "2"),
        ("delete", "b", "2"),
        ("update", "a", "5"),
        ("add", "c", "6"),
        ("add", "b", "7"),
    ]
    assert set(core.cache) == {"uid-a", "uid-c", "u-b2"}


def test_events_are_ordered_by_resource_version_and_the_resume_point_never_moves_back() -> None:
    core = InformerCore(name="t", kind="Pod", typed=lambda o: {**o, "kind": "Pod"})
    seen = Seen(core)
    core.listed([pod("a", rv=3)], "3")
    assert not core.event("MODIFIED", pod("a", rv=3))  # a duplicate
    assert not core.event("MODIFIED", pod("a", rv=2))  # older than the cache
    assert core.event("MODIFIED", pod("a", rv=9))
    assert core.event("BOOKMARK", {"metadata": {"resourceVersion": "12"}})
    assert not core.event("DELETED", pod("ghost", rv=13))  # never cached: nothing to tell
    assert core.resource_version == "13"
    core.event("ADDED", pod("late", rv=4))  # a stale event does not move the resume point back
    assert core.resource_version == "13"
    assert core.cache["uid-a"]["kind"] == "Pod"
    assert seen.log == [("add", "a", "3"), ("update", "a", "9"), ("add", "late", "4")]
    with pytest.raises(BadResponseError, match="unknown event type"):
        core.event("EXPLODED", pod("a", rv=20))


def test_a_raising_handler_never_stops_the_others() -> None:
    core = InformerCore(name="t", kind="Pod")

    def boom(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    core.add_handler(Handler(boom, None, None))
    seen = Seen(core)
    core.listed([pod("a", rv=1)], "1")
    assert seen.log == [("add", "a", "1")]


def test_sync_failure_only_for_a_permanent_error_that_came_while_waiting() -> None:
    core = InformerCore(name="pods", kind="Pod")
    core.failed(ForbiddenError("pods is forbidden"))
    assert core.sync_failure(errors_before=core.errors) is None  # an old one: wait for the next
    before = core.errors
    core.failed(ForbiddenError("still forbidden"))
    assert isinstance(core.sync_failure(before), ForbiddenError)
    core.failed(ApiConnectionError("list Pod: cannot connect (NewConnectionError)"))
    assert core.sync_failure(before) is None  # not permanent: wait out the timeout
    error = core.sync_timeout(2.0, DEAD)
    assert isinstance(error, TimeoutError) and error.last_error is core.last_error
    assert str(error) == (
        "informer pods (Pod) did not sync within 2 s: cannot connect to http://127.0.0.1:1: "
        "list Pod: cannot connect (NewConnectionError)"
    )
    core.listed([], "1")
    assert core.sync_failure(before) is None and core.last_error is None


# ------------------------------------------------------------------ a dead apiserver


def test_threaded_informer_on_a_dead_apiserver_raises_naming_the_connection_failure() -> None:
    backend = KubernetesBackend.for_url(DEAD)
    inf = Informer(ClientListWatch(backend, "Pod"), name="pods").start()
    started = time.monotonic()
    try:
        with pytest.raises(InformerSyncTimeout) as caught:
            inf.wait_for_sync(timeout=2)
        assert time.monotonic() - started < 4
    finally:
        assert inf.stop()
        backend.close()
    assert f"cannot connect to {DEAD}: " in str(caught.value)
    assert isinstance(caught.value.last_error, ApiConnectionError)


@async_test
async def test_aio_informer_on_a_dead_apiserver_raises_naming_the_connection_failure() -> None:
    async with aclient.ApiClient(aclient.Configuration(host=DEAD)) as api:
        core_v1 = aclient.CoreV1Api(api)
        # the client builds its models on its first request, holding the loop for seconds
        with pytest.raises(Exception):  # noqa: B017 - any connection error
            await core_v1.list_pod_for_all_namespaces_without_preload_content()
        inf = AioInformer(core_v1.list_pod_for_all_namespaces, kind="Pod")
        inf.start()
        started = asyncio.get_running_loop().time()
        try:
            with pytest.raises(InformerSyncTimeout) as caught:
                await inf.wait_for_sync(timeout=2)
            assert asyncio.get_running_loop().time() - started < 4
        finally:
            await inf.stop()
    assert f"cannot connect to {DEAD}: " in str(caught.value)
    assert isinstance(caught.value.last_error, ApiConnectionError)
