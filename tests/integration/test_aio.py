"""asyncio: asubmit/aview on the caller's loop, cancellation, and the kubernetes.aio informer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Self, cast

import kopf
import pytest
from kubernetes.aio import client as aclient

from kdispatch.actors.engine.aio import NoEventLoopError
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.config import DispatcherConfig, RateLimitConfig, RuntimeConfig
from kdispatch.actors.model.errors import (
    ApiError,
    CallCancelled,
    CallConflict,
    InvalidCallError,
    InvalidInputError,
    InvalidObjectError,
    Outcome,
)
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.adapters.aio_informer import AioInformer
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from kdispatch.testing.waiting import until
from tests.aio import async_test
from tests.backends import GatedBackend
from tests.configs import FAST
from tests.factories import call_types_with, cond

pytestmark = pytest.mark.timeout(60)

SLOW = DispatcherConfig(rate_limit=RateLimitConfig(qps=0.001, burst=1), runtime=RuntimeConfig(1))
"""One token, then none for 1000 s; one pool worker."""

WAIT = 10.0
"""Seconds any wait for observable state may take."""


def bound_node(server: InMemoryApiServer, name: str) -> str | None:
    obj = server.get_object("Pod", "default", name)
    assert obj is not None
    node = obj["spec"].get("nodeName")
    return node if isinstance(node, str) else None


# ------------------------------------------------------------------ asubmit


@async_test
async def test_asubmit_resolves_on_the_loop_and_the_pod_is_bound() -> None:
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, FAST) as d:
        fut = d.asubmit(PodBinding.for_pod(pod, "n1"))
        assert isinstance(fut, asyncio.Future)
        assert await fut is Outcome.SUCCESS
    assert bound_node(server, "p1") == "n1"


@async_test
async def test_the_call_is_submitted_when_asubmit_is_called_not_when_awaited() -> None:
    """docs/asyncio.md: the binding lands while its future is not yet awaited (the loop is
    blocked meanwhile: no task of it could have sent anything)."""
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, FAST) as d:
        fut = d.asubmit(PodBinding.for_pod(pod, "n1"))
        server.wait_for_request("bind", name="p1")
        assert bound_node(server, "p1") == "n1"
        assert await fut is Outcome.SUCCESS


@async_test
async def test_asubmit_never_blocks_the_loop_while_the_request_is_held() -> None:
    """The apiserver holds the binding; the loop keeps running other work meanwhile, and the
    awaited result arrives once the server answers."""
    server = InMemoryApiServer()
    gated = GatedBackend(server)
    gated.gate.clear()
    pod = server.create(make_pod("p1"))
    with Dispatcher(gated, FAST) as d:
        fut = d.asubmit(PodBinding.for_pod(pod, "n1"))
        ticks = 0
        while not gated.calls:  # the request reached the server and is held there
            ticks += 1
            await asyncio.sleep(0.005)
        other = asyncio.ensure_future(asyncio.sleep(0, "other work"))
        assert await other == "other work"  # another task ran on the loop meanwhile
        assert not fut.done()
        gated.gate.set()
        assert await asyncio.wait_for(fut, 10) is Outcome.SUCCESS
    assert bound_node(server, "p1") == "n1"


@async_test
async def test_cancelling_the_awaiting_task_does_not_withdraw_the_call() -> None:
    """Cancel the task awaiting a binding that is in flight: the binding still lands, its
    outcome is counted exactly once, nothing stays outstanding."""
    server = InMemoryApiServer()
    gated = GatedBackend(server)
    gated.gate.clear()
    pod = server.create(make_pod("p1"))
    with Dispatcher(gated, FAST) as d:

        async def bind() -> Outcome:
            return await d.asubmit(PodBinding.for_pod(pod, "n1"))

        task = asyncio.ensure_future(bind())
        await until(lambda: bool(gated.calls), WAIT, "a request on the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert d.outstanding == 1  # the call is still the dispatcher's
        gated.gate.set()
        await until(lambda: d.outstanding == 0, WAIT, "no call outstanding")
        assert (
            d.metrics.value(
                "kdispatch_call_outcomes_total", call_type="pod_binding", outcome="success"
            )
            == 1
        )
        assert d.stats()["sent"] == {"pod_binding": 1}
    assert bound_node(server, "p1") == "n1"


@async_test
async def test_dispatcher_cancel_withdraws_what_the_await_cannot() -> None:
    """A pending call whose await was cancelled is withdrawn with dispatcher.cancel(uid): it is
    never sent and resolves CallCancelled exactly once."""
    server = InMemoryApiServer()
    p0, p1 = server.create(make_pod("p0")), server.create(make_pod("p1"))
    d = Dispatcher(server, SLOW).start()
    try:
        assert await d.asubmit(PodStatusPatch.for_pod(p0, conditions=[cond()])) is Outcome.SUCCESS
        fut = d.asubmit(PodStatusPatch.for_pod(p1, conditions=[cond()]))  # waits for a token
        fut.cancel()
        d.cancel(p1["metadata"]["uid"])
        await until(lambda: d.outstanding == 0, WAIT, "no call outstanding")
        assert (
            d.metrics.value(
                "kdispatch_call_outcomes_total", call_type="pod_status_patch", outcome="cancelled"
            )
            == 1
        )
    finally:
        d.stop(drain=False, timeout=10)
    obj = server.get_object("Pod", "default", "p1")
    assert obj is not None and not obj["status"].get("conditions")
    assert [r.name for r in server.request_log if r.op == "patch_status"] == ["p0"]


@async_test
async def test_asubmit_raises_what_result_would() -> None:
    """A binding for a pod already bound elsewhere fails fast: the await raises CallConflict."""
    server = InMemoryApiServer()
    bound = make_pod("p1")
    bound["spec"]["nodeName"] = "n2"
    pod = server.create(bound)
    with Dispatcher(server, FAST) as d, pytest.raises(CallConflict):
        await d.asubmit(PodBinding.for_pod(pod, "n1"))
    assert bound_node(server, "p1") == "n2"


def test_asubmit_outside_a_loop_is_a_typed_error_and_submits_nothing() -> None:
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, FAST) as d:
        with pytest.raises(NoEventLoopError):
            d.asubmit(PodBinding.for_pod(pod, "n1"))
        assert d.outstanding == 0
    assert bound_node(server, "p1") is None


@async_test
async def test_asubmit_bad_input_raises_at_the_call() -> None:
    with Dispatcher(InMemoryApiServer(), FAST) as d:
        with pytest.raises(InvalidCallError):
            d.asubmit("bind p1")  # type: ignore[arg-type]
        with pytest.raises(InvalidObjectError):
            d.aview("not a uid!").close()
        with pytest.raises(InvalidInputError):
            d.aview("uid-1", timeout=-1).close()
        with pytest.raises(InvalidInputError):
            d.aview("uid-1", timeout=math.nan).close()


# ------------------------------------------------------------------ aview


@dataclass(frozen=True, slots=True)
class SlowLabel(Call):
    """Sets a label; its ``apply`` (run by the object's actor, e.g. for a view) waits for
    ``RELEASE``, holding the only pool worker."""

    call_type = "slow_label"
    kind = "Widget"
    relevance = 1

    ref: ObjectRef
    value: str
    basis: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def merge(self, older: Self) -> Self:
        return self

    def is_noop(self, obj: Obj | None) -> bool:
        return obj is not None and obj.get("metadata", {}).get("labels", {}).get("l") == self.value

    def apply(self, obj: Obj) -> Obj:
        ENTERED.set()
        assert RELEASE.wait(30)
        meta = dict(obj.get("metadata", {}))
        meta["labels"] = {**meta.get("labels", {}), "l": self.value}
        return {**obj, "metadata": meta}

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        raise AssertionError("never sent in this test (no token)")


ENTERED, RELEASE = threading.Event(), threading.Event()


@contextlib.asynccontextmanager
async def _widget_behind_a_busy_actor() -> AsyncIterator[tuple[Dispatcher, Obj]]:
    """A started dispatcher whose one token went to pod p0, with a :class:`SlowLabel` of widget
    ``w-1`` submitted (its actor is held once it runs, until ``RELEASE``)."""
    ENTERED.clear()
    RELEASE.clear()
    server = InMemoryApiServer()
    p0 = server.create(make_pod("p0"))
    widget = {"kind": "Widget", "metadata": {"name": "w", "namespace": "default", "uid": "w-1"}}
    types = call_types_with("Widget")
    types.register(SlowLabel)
    d = Dispatcher(server, SLOW, call_types=types).start()
    try:
        await d.asubmit(PodStatusPatch.for_pod(p0, conditions=[cond()]))  # takes the one token
        d.submit(SlowLabel(ObjectRef.of(widget), "x", basis=widget))
        yield d, p0
    finally:
        RELEASE.set()
        d.stop(drain=False, timeout=10)


@async_test
async def test_aview_waits_for_a_busy_actor_without_blocking_the_loop() -> None:
    async with _widget_behind_a_busy_actor() as (d, p0):
        view = asyncio.ensure_future(d.aview("w-1"))
        # the loop runs while the actor's worker is held
        await until(ENTERED.is_set, WAIT, "the held actor entered")
        assert not view.done()
        RELEASE.set()
        obj = await asyncio.wait_for(view, 10)
        assert obj is not None and obj["metadata"]["labels"] == {"l": "x"}
        assert await d.aview("untracked-uid") is None
        assert await d.aview(p0["metadata"]["uid"]) == d.view(p0["metadata"]["uid"])


@async_test
async def test_aview_times_out_with_timeout_error_and_the_late_reply_is_dropped() -> None:
    async with _widget_behind_a_busy_actor() as (d, _):
        first = asyncio.ensure_future(d.aview("w-1"))
        await until(ENTERED.is_set, WAIT, "the held actor entered")
        with pytest.raises(TimeoutError):
            await d.aview("w-1", timeout=0.05)
        RELEASE.set()
        late = await asyncio.wait_for(first, 10)  # the actor answers both; the late one is dropped
        assert late is not None and late["metadata"]["labels"] == {"l": "x"}
        assert await d.aview("w-1") == late


# ------------------------------------------------------------------ kubernetes.aio informer


@async_test
async def test_aio_informer_feeds_the_dispatcher_over_http() -> None:
    """kubernetes.aio over real HTTP: the informer's delete cancels a pending call; an add of a
    pod the informer lists reaches the dispatcher as a plain dict."""
    mem = InMemoryApiServer()
    p0, p1 = mem.create(make_pod("p0")), mem.create(make_pod("p1"))
    http = ApiServerHTTP(mem, watch_poll=0.02).start()
    d = Dispatcher(mem, SLOW).start()
    errors: list[BaseException] = []
    try:
        async with aclient.ApiClient(aclient.Configuration(host=http.url)) as api:
            informer = AioInformer(
                aclient.CoreV1Api(api).list_pod_for_all_namespaces,
                kind="Pod",
                api_version="v1",
                watch_timeout=5,
                on_error=errors.append,
            ).attach(d)
            informer.start()
            assert await informer.wait_for_sync(10)
            assert set(informer.cache) == {p0["metadata"]["uid"], p1["metadata"]["uid"]}
            await d.asubmit(PodStatusPatch.for_pod(p0, conditions=[cond()]))  # the token
            pending = d.asubmit(PodStatusPatch.for_pod(p1, conditions=[cond()]))
            mem.remove("Pod", "default", "p1")
            with pytest.raises(CallCancelled):
                await asyncio.wait_for(pending, 10)
            await until(
                lambda: p1["metadata"]["uid"] not in informer.cache, WAIT, "p1 out of the cache"
            )
            await informer.stop()
    finally:
        d.stop(drain=False, timeout=10)
        http.stop()
    assert errors == [] and informer.last_error is None


@async_test
async def test_aio_informer_reports_errors_and_recovers() -> None:
    mem = InMemoryApiServer()
    mem.create(make_pod("p0"))
    http = ApiServerHTTP(mem, token="right", watch_poll=0.02).start()
    errors: list[BaseException] = []
    try:
        config = aclient.Configuration(host=http.url, api_key={"authorization": "wrong"})
        config.api_key_prefix = {"authorization": "Bearer"}
        async with aclient.ApiClient(config) as api:
            informer = AioInformer(
                aclient.CoreV1Api(api).list_pod_for_all_namespaces,
                kind="Pod",
                backoff_initial=0.01,
                backoff_max=0.02,
                on_error=errors.append,
            )
            informer.start()
            await until(lambda: len(errors) >= 2, WAIT, "two handler errors")
            assert not informer.has_synced()
            assert isinstance(informer.last_error, ApiError)
            assert informer.last_error.status == 401
            config.api_key = {"authorization": "right"}
            assert await informer.wait_for_sync(10)
            assert informer.last_error is None
            await informer.stop()
    finally:
        http.stop()


class _Reply:
    """An aiohttp-shaped reply: ``status``, ``headers``, ``read()``, ``content.readline()``."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.headers: dict[str, str] = {}
        self._body = body
        self._lines = body.splitlines(keepends=True)
        self.content = self

    async def read(self) -> bytes:
        return self._body

    async def readline(self) -> bytes:
        return self._lines.pop(0) if self._lines else b""

    def release(self) -> None:
        pass


class _ScriptedPods:
    """A ``kubernetes.aio``-shaped pod API: each list returns one pod; each watch gets the
    next of ``watches`` (an empty stream once they run out). Records the requests."""

    def __init__(self, watches: list[_Reply]) -> None:
        self.requests: list[str] = []
        self.changed = asyncio.Event()
        self._watches = watches

    async def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        raise AssertionError("the informer reads the raw variant")

    async def list_pod_for_all_namespaces_without_preload_content(self, **kwargs: Any) -> Any:
        self.requests.append("watch" if kwargs.get("watch") else "list")
        self.changed.set()
        if kwargs.get("watch"):
            return self._watches.pop(0) if self._watches else _Reply(200, b"")
        listed = {"metadata": {"resourceVersion": "5"}, "items": [make_pod("p0")]}
        return _Reply(200, json.dumps(listed).encode())

    async def wait_for(self, count: int) -> None:
        while len(self.requests) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), WAIT)


@async_test
async def test_aio_informer_backs_off_after_a_watch_that_ended_early_with_nothing() -> None:
    """A watch the server ends at once, empty, is not renewed in a busy loop: the informer
    waits its backoff first, as the threaded one does."""
    api = _ScriptedPods([])
    informer = AioInformer(
        api.list_pod_for_all_namespaces, kind="Pod", backoff_initial=60.0, backoff_max=60.0
    )
    informer.start()
    try:
        await api.wait_for(2)
        for _ in range(50):  # every turn of the loop the informer could use for another watch
            await asyncio.sleep(0)
        assert api.requests == ["list", "watch"]
        assert informer.has_synced()
    finally:
        await informer.stop()


@async_test
async def test_aio_informer_lists_again_after_a_server_error_on_the_watch() -> None:
    """A 500 on the watch (a "PrevKv=nil" below a compaction repeats forever if resumed):
    the next request is a list, as client-go's reflector and the threaded informer do."""
    failure = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "PrevKv=nil"}
    api = _ScriptedPods([_Reply(500, json.dumps(failure).encode())])
    errors: list[BaseException] = []
    informer = AioInformer(
        api.list_pod_for_all_namespaces,
        kind="Pod",
        backoff_initial=0.001,
        backoff_max=0.001,
        on_error=errors.append,
    )
    informer.start()
    try:
        await api.wait_for(3)
        assert api.requests[:3] == ["list", "watch", "list"]
        assert [type(e).__name__ for e in errors] == ["ServerError"]
    finally:
        await informer.stop()


class _ShrinkingPods(_ScriptedPods):
    """:class:`_ScriptedPods` whose first list holds pods p0 and p1, and every later one p1
    only (p0 was deleted while the watch was expired)."""

    async def list_pod_for_all_namespaces_without_preload_content(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return await super().list_pod_for_all_namespaces_without_preload_content(**kwargs)
        self.requests.append("list")
        self.changed.set()
        names = ["p0", "p1"] if self.requests.count("list") == 1 else ["p1"]
        items = [make_pod(n, uid=f"u-{n}") for n in names]
        listed = {"metadata": {"resourceVersion": str(5 + len(self.requests))}, "items": items}
        return _Reply(200, json.dumps(listed).encode())


@async_test
async def test_aio_informer_relists_on_410_with_a_synthetic_delete_for_what_vanished() -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    api = _ShrinkingPods([_Reply(410, json.dumps(gone).encode())])
    deleted: list[str] = []
    informer = AioInformer(api.list_pod_for_all_namespaces, kind="Pod")
    informer.add_handler(on_delete=lambda obj: deleted.append(obj["metadata"]["name"]))
    informer.start()
    try:
        await until(lambda: deleted == ["p0"], WAIT, "the synthetic delete of p0")
        assert api.requests[:3] == ["list", "watch", "list"]
        assert [o["metadata"]["name"] for o in informer.cache.values()] == ["p1"]
        assert informer.last_error is None  # a 410 is a re-list, not a failure
    finally:
        await informer.stop()


@async_test
async def test_aio_informer_catches_up_through_a_replay_longer_than_the_queue_limit() -> None:
    """The informer's watch resumes from a resourceVersion with more events since it than the
    server's ``watch_queue_limit``: the replay is sent whole, so the informer catches up on the
    same list instead of resuming from that resourceVersion forever."""
    mem = InMemoryApiServer(watch_queue_limit=3)
    mem.create(make_pod("p0"))
    http = ApiServerHTTP(mem, watch_poll=0.02).start()
    try:
        async with aclient.ApiClient(aclient.Configuration(host=http.url)) as api:
            informer = AioInformer(
                aclient.CoreV1Api(api).list_pod_for_all_namespaces,
                kind="Pod",
                backoff_initial=0.01,
                backoff_max=0.02,
            )
            informer.start()
            try:
                assert await informer.wait_for_sync(WAIT)
                # the loop is ours until the next await: whether or not the informer's watch
                # is open yet, it resumes from the list's resourceVersion, 10 events behind
                mem.drop_watches()
                for i in range(1, 11):
                    mem.create(make_pod(f"p{i}"))
                await until(lambda: len(informer.cache) == 11, WAIT, "the 10 replayed adds")
                assert informer.relists == 1
            finally:
                await informer.stop()
    finally:
        http.stop()


@async_test
async def test_aio_informer_stop_lets_the_callers_own_cancellation_through() -> None:
    """A task cancelled while it waits in ``stop()`` is cancelled: ``stop()`` swallows only the
    informer's own cancellation."""
    api = _ShrinkingPods([])
    informer = AioInformer(api.list_pod_for_all_namespaces, kind="Pod")
    informer.start()
    after: list[str] = []

    async def shutdown() -> None:
        await informer.stop()
        after.append("went on")

    try:
        await informer.wait_for_sync(timeout=WAIT)
        stopping = asyncio.ensure_future(shutdown())
        await asyncio.sleep(0)  # now waiting in stop() for the informer's task
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        assert after == []
    finally:
        await informer.stop()


class _RecordingPods(_ScriptedPods):
    """:class:`_ScriptedPods` that keeps each request's keyword arguments."""

    def __init__(self, watches: list[_Reply]) -> None:
        super().__init__(watches)
        self.kwargs: list[dict[str, Any]] = []

    async def list_pod_for_all_namespaces_without_preload_content(self, **kwargs: Any) -> Any:
        self.kwargs.append(kwargs)
        return await super().list_pod_for_all_namespaces_without_preload_content(**kwargs)


@async_test
async def test_aio_informer_list_kwargs_go_to_every_list_and_watch() -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    api = _RecordingPods([_Reply(410, json.dumps(gone).encode())])  # a second list follows
    selectors = {"label_selector": "team=a", "field_selector": "spec.nodeName="}
    informer = AioInformer(api.list_pod_for_all_namespaces, kind="Pod", list_kwargs=selectors)
    informer.start()
    try:
        await api.wait_for(4)
    finally:
        await informer.stop()
    assert api.requests[:4] == ["list", "watch", "list", "watch"]
    for kwargs in api.kwargs:
        assert {k: kwargs.get(k) for k in selectors} == selectors


def test_aio_informer_bad_input_is_typed() -> None:
    with pytest.raises(InvalidInputError, match="list method"):
        AioInformer(lambda: None, kind="Pod")  # type: ignore[arg-type,return-value]
    api: Any = aclient.CoreV1Api(aclient.ApiClient(aclient.Configuration(host="http://x")))
    with pytest.raises(InvalidInputError, match="kind"):
        AioInformer(api.list_pod_for_all_namespaces, kind="pod")
    with pytest.raises(InvalidInputError, match="watch_timeout"):
        AioInformer(api.list_pod_for_all_namespaces, kind="Pod", watch_timeout=0)
    with pytest.raises(InvalidInputError, match="watch_timeout must be at most"):
        AioInformer(api.list_pod_for_all_namespaces, kind="Pod", watch_timeout=10**10)
    with pytest.raises(InvalidInputError, match="request_timeout must not be NaN"):
        AioInformer(api.list_pod_for_all_namespaces, kind="Pod", request_timeout=float("nan"))
    with pytest.raises(InvalidInputError, match="may not set"):
        AioInformer(api.list_pod_for_all_namespaces, kind="Pod", list_kwargs={"watch": True})
    with pytest.raises(InvalidInputError, match="on_add"):
        AioInformer(api.list_pod_for_all_namespaces, kind="Pod").attach(object())


def test_aio_informer_refuses_list_kwargs_it_cannot_send_and_a_start_outside_a_loop() -> None:
    """Each of these made every request fail (reported as "cannot connect"), so the informer
    never synced: refused when built instead. ``start()`` needs the running loop it runs on."""
    api: Any = aclient.CoreV1Api(aclient.ApiClient(aclient.Configuration(host="http://x")))
    for taken in ("_request_timeout", "allow_watch_bookmarks", "_preload_content"):
        with pytest.raises(InvalidInputError, match=f"may not set.*{taken}"):
            AioInformer(api.list_pod_for_all_namespaces, kind="Pod", list_kwargs={taken: 1})
    with pytest.raises(InvalidInputError, match="label_selectr"):
        AioInformer(
            api.list_pod_for_all_namespaces, kind="Pod", list_kwargs={"label_selectr": "a=b"}
        )
    crds: Any = aclient.CustomObjectsApi(aclient.ApiClient(aclient.Configuration(host="http://x")))
    plural = partial(crds.list_cluster_custom_object, "example.io", "v1", "quotaclaims")
    AioInformer(plural, kind="QuotaClaim", list_kwargs={"label_selector": "team=a"})
    informer = AioInformer(api.list_pod_for_all_namespaces, kind="Pod")
    with pytest.raises(NoEventLoopError, match=r"AioInformer\.start"):
        informer.start()

    async def started_on_a_loop() -> None:
        informer.start()  # the refused start() left nothing behind
        await informer.stop()

    asyncio.run(started_on_a_loop())


@async_test
async def test_a_stopped_aio_informer_wakes_its_sync_waiters_and_never_starts_again() -> None:
    """An informer whose apiserver is down: a ``wait_for_sync()`` without a timeout returns
    False once it is stopped (it used to wait for ever), and a stopped informer refuses to
    start, as the threaded one does, whether it ran or not."""
    async with aclient.ApiClient(aclient.Configuration(host="http://127.0.0.1:1")) as client:
        api: Any = aclient.CoreV1Api(client)
        informer = AioInformer(
            api.list_pod_for_all_namespaces, kind="Pod", backoff_initial=0.01, backoff_max=0.05
        ).start()
        waiter = asyncio.ensure_future(informer.wait_for_sync(None))
        await asyncio.sleep(0)  # let the waiter wait first (it must end False either way)
        await informer.stop()
        assert await asyncio.wait_for(waiter, 10) is False
        never_started = AioInformer(api.list_pod_for_all_namespaces, kind="Pod")
        await never_started.stop()
        for stopped in (informer, never_started):
            with pytest.raises(InvalidInputError, match="was stopped"):
                stopped.start()
            with pytest.raises(InvalidInputError, match="was stopped"):
                await stopped.run()  # run() directly, as a user's own task would


@async_test
async def test_an_aio_informer_runs_once_whether_started_or_run() -> None:
    """``run()`` beside ``start()`` (or a second ``run()``) is refused: two loops would feed
    the handlers every event twice."""
    informer = AioInformer(_ScriptedPods([]).list_pod_for_all_namespaces, kind="Pod").start()
    try:
        with pytest.raises(InvalidInputError, match="already started"):
            await informer.run()
    finally:
        await informer.stop()
    api = _ScriptedPods([])
    running = AioInformer(
        api.list_pod_for_all_namespaces, kind="Pod", backoff_initial=60.0, backoff_max=60.0
    )
    task = asyncio.ensure_future(running.run())
    try:
        assert await running.wait_for_sync(WAIT) is True
        with pytest.raises(InvalidInputError, match="already started"):
            await running.run()
        with pytest.raises(InvalidInputError, match="already started"):
            running.start()
    finally:
        await running.stop()
    assert task.cancelled()
    assert api.requests.count("list") == 1  # one loop ran


# ------------------------------------------------------------------ the README's kopf recipe


@async_test
async def test_a_kopf_handler_submits_through_the_dispatcher() -> None:
    """The recipe's handler, called as kopf calls it (a ``kopf.Body``), binds the pod."""
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, FAST) as dispatcher:

        async def on_pod_created(body: kopf.Body, **_: Any) -> None:
            await dispatcher.asubmit(PodBinding.for_pod(body, "n1"))

        await on_pod_created(
            body=kopf.Body(cast("kopf.RawBody", pod)), name="p1", namespace="default"
        )
    assert bound_node(server, "p1") == "n1"
