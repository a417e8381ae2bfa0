"""Informer: list+watch over the in-memory apiserver, directly and through HTTP + the client.

Synchronisation is by a recorder whose handlers notify a Condition; tests wait for the events
they expect with a timeout, never by sleeping.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from kubernetes import client as k8s

from kdispatch.actors.model.errors import (
    ApiConnectionError,
    ForbiddenError,
    GoneError,
    InformerSyncTimeout,
    InvalidInputError,
    ServerError,
)
from kdispatch.adapters.informer import (
    ClientListWatch,
    Informer,
    ListWatch,
    WatchEvent,
    WatchStream,
)
from kdispatch.adapters.kubernetes import prepare_configuration
from kdispatch.testing import MemoryListWatch
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, make_claim, make_node, make_pod
from kdispatch.testing.waiting import wait_for
from tests.backends import nominate
from tests.factories import pod
from tests.memory_server import SwitchableStore, drain
from tests.rawhttp import HungListServer, SilentWatchServer
from tests.recorders import RELISTED_WHILE_AWAY, GatedListWatch, Recorder, running_informers

pytestmark = pytest.mark.timeout(30)

WAIT = 10.0


@pytest.fixture
def http_server(server: InMemoryApiServer) -> Iterator[ApiServerHTTP]:
    with ApiServerHTTP(server, hang_seconds=5.0, watch_poll=0.05) as srv:
        yield srv


@pytest.fixture
def api_client(http_server: ApiServerHTTP) -> Iterator[k8s.ApiClient]:
    cfg = prepare_configuration(k8s.Configuration(host=http_server.url), 4)
    client = k8s.ApiClient(cfg)
    yield client
    client.close()  # type: ignore[no-untyped-call]


@pytest.fixture(params=["memory", "http"])
def source(request: pytest.FixtureRequest, server: InMemoryApiServer) -> Callable[..., ListWatch]:
    """A factory of ListWatch sources over ``server``: direct, or through HTTP and the client."""
    if request.param == "memory":
        return lambda kind, namespace=None: MemoryListWatch(server, kind, namespace)
    client = request.getfixturevalue("api_client")
    return lambda kind, namespace=None: ClientListWatch(
        client, kind, namespace, request_timeout=5.0
    )


@pytest.fixture
def run() -> Iterator[Callable[..., tuple[Informer, Recorder]]]:
    """Start informers with a recorder attached; stop them all at the end."""
    with running_informers(Recorder, "test", stop_timeout=5.0) as start:
        yield start


@pytest.fixture
def synced(
    source: Callable[..., ListWatch], run: Callable[..., tuple[Informer, Recorder]]
) -> Callable[..., tuple[Informer, Recorder]]:
    """Start an informer on ``source(kind, namespace)`` with a recorder and wait for its
    first sync; returns both."""

    def start(kind: str, namespace: str | None = None) -> tuple[Informer, Recorder]:
        inf, rec = run(source(kind, namespace))
        assert inf.wait_for_sync(WAIT)
        return inf, rec

    return start


# --------------------------------------------------------------------------- basics


def test_add_update_delete(
    server: InMemoryApiServer, synced: Callable[..., tuple[Informer, Recorder]]
) -> None:
    a = server.create(make_pod("a"))
    inf, rec = synced("Pod")
    assert inf.has_synced()
    assert rec.names() == [("add", "a")]
    assert rec.objects[0]["kind"] == "Pod" and rec.objects[0]["apiVersion"] == "v1"
    b = server.create(make_pod("b", "other"))
    nominate(server, "a", "n1", uid=a["metadata"]["uid"])
    server.delete("Pod", "other", "b", uid=b["metadata"]["uid"])
    assert rec.wait_count(4)
    assert rec.names() == [("add", "a"), ("add", "b"), ("update", "a"), ("delete", "b")]
    assert rec.objects[2]["status"]["nominatedNodeName"] == "n1"
    assert all(o["kind"] == "Pod" for o in rec.objects)
    assert set(inf.cache) == {a["metadata"]["uid"]}
    assert inf.cache[a["metadata"]["uid"]]["status"]["nominatedNodeName"] == "n1"
    assert inf.snapshot() == dict(inf.cache)
    assert inf.resource_version == server.resource_version
    assert inf.relists == 1


def test_cache_is_a_read_only_view_and_snapshot_a_copy(
    server: InMemoryApiServer, synced: Callable[..., tuple[Informer, Recorder]]
) -> None:
    a = server.create(make_pod("a"))
    inf, rec = synced("Pod")
    uid = a["metadata"]["uid"]
    before = inf.snapshot()
    with pytest.raises(TypeError):
        inf.cache[uid] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        del inf.cache[uid]  # type: ignore[attr-defined]
    b = server.create(make_pod("b"))
    assert rec.wait_count(2)
    assert set(inf.cache) == {uid, b["metadata"]["uid"]}  # the view follows the informer
    assert set(before) == {uid}  # the copy does not
    before.clear()
    assert len(inf.cache) == 2


def test_namespaced_source(
    server: InMemoryApiServer, synced: Callable[..., tuple[Informer, Recorder]]
) -> None:
    server.create(make_pod("a", "ns1"))
    server.create(make_pod("b", "ns2"))
    _, rec = synced("Pod", "ns1")
    server.create(make_pod("c", "ns2"))
    server.create(make_pod("d", "ns1"))
    assert rec.wait_count(2)
    assert rec.names() == [("add", "a"), ("add", "d")]


def test_nodes_and_claims_have_their_kind(
    server: InMemoryApiServer, synced: Callable[..., tuple[Informer, Recorder]]
) -> None:
    server.create(make_node("n1", 1000, 1024))
    server.create(make_claim("c1"))
    _, node_rec = synced("Node")
    _, claim_rec = synced("ResourceClaim")
    server.create(make_claim("c2"))
    assert claim_rec.wait_count(2)
    assert [(o["kind"], o["apiVersion"]) for o in node_rec.objects] == [("Node", "v1")]
    assert [(o["kind"], o["apiVersion"]) for o in claim_rec.objects] == [
        ("ResourceClaim", "resource.k8s.io/v1")
    ] * 2


def test_recreated_pod_is_delete_then_add(
    server: InMemoryApiServer, synced: Callable[..., tuple[Informer, Recorder]]
) -> None:
    old = server.create(make_pod("a"))
    inf, rec = synced("Pod")
    server.delete("Pod", "default", "a", uid=old["metadata"]["uid"])
    new = server.create(make_pod("a"))
    assert rec.wait_count(3)
    assert [(e[0], e[2]) for e in rec.events] == [
        ("add", old["metadata"]["uid"]),
        ("delete", old["metadata"]["uid"]),
        ("add", new["metadata"]["uid"]),
    ]
    assert set(inf.cache) == {new["metadata"]["uid"]}


# --------------------------------------------------------------------------- resumption


def test_dropped_watches_resume_without_loss_or_duplicates(
    server: InMemoryApiServer, synced: Callable[..., tuple[Informer, Recorder]]
) -> None:
    # Start from a non-zero resourceVersion: an empty store lists at "0", and a watch from "0"
    # means "any version" (the current state as synthetic adds), as on the real apiserver.
    server.create(make_node("n0", 1000, 1024))
    inf, rec = synced("Pod")
    expected: list[tuple[str, str]] = []
    for round_ in range(4):
        for i in range(5):
            name = f"p{round_}-{i}"
            pod = server.create(make_pod(name))
            nominate(server, name, "n1", uid=pod["metadata"]["uid"])
            expected += [("add", name), ("update", name)]
        # once the round's first event arrived the watch is live: cut it while the rest of the
        # round may still be queued (those events are lost with the connection)
        assert rec.wait_name(f"p{round_}-0")
        assert server.drop_watches() == 1
    server.create(make_pod("last"))
    expected.append(("add", "last"))
    assert rec.wait_name("last")
    assert rec.names() == expected
    assert inf.relists == 1
    assert inf.watches >= 5


@pytest.mark.parametrize("via", ["memory", "http"])
def test_a_resumed_watch_whose_replay_exceeds_the_queue_limit_catches_up(via: str) -> None:
    """The informer falls behind by more events than ``watch_queue_limit``: its resumed watch
    gets the whole replay (kube-apiserver sends initial events at the consumer's pace) and it
    catches up without a re-list, instead of resuming from the same resourceVersion forever."""
    server = InMemoryApiServer(watch_queue_limit=3)
    server.create(make_node("n0", 1000, 1024))  # list at a non-zero resourceVersion
    with contextlib.ExitStack() as stack:
        source: ListWatch = MemoryListWatch(server, "Pod")
        if via == "http":
            http = stack.enter_context(ApiServerHTTP(server, watch_poll=0.05))
            cfg = prepare_configuration(k8s.Configuration(host=http.url), 4)
            api = stack.enter_context(k8s.ApiClient(cfg))
            source = ClientListWatch(api, "Pod", request_timeout=5.0)
        gated = GatedListWatch(source, timeout=WAIT)
        inf, rec = Informer(gated, name="replay"), Recorder()
        inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
        inf.start()
        try:
            assert inf.wait_for_sync(WAIT)
            assert gated.keep_away(server.drop_watches) == 1
            for i in range(10):
                server.create(make_pod(f"p{i}"))
            gated.gate.set()
            assert rec.wait_count(10), f"stuck at rv {inf.resource_version}, {inf.watches} watches"
            assert rec.names() == [("add", f"p{i}") for i in range(10)]
            assert inf.relists == 1
        finally:
            gated.gate.set()
            assert inf.stop(timeout=5.0)


def test_gone_relists_with_synthetic_deletes_updates_and_adds(
    server: InMemoryApiServer, source: Callable[..., ListWatch], run: Callable[..., Any]
) -> None:
    a = server.create(make_pod("a"))
    b = server.create(make_pod("b"))
    c = server.create(make_pod("c"))
    server.create(make_pod("d"))
    gated = GatedListWatch(source("Pod"), timeout=WAIT)
    inf, rec = run(gated)
    assert inf.wait_for_sync(WAIT)
    assert rec.wait_count(4)
    # disconnect the informer and keep it away while the world changes and history is lost
    assert gated.keep_away(server.drop_watches) == 1
    server.delete("Pod", "default", "a", uid=a["metadata"]["uid"])
    server.delete("Pod", "default", "b", uid=b["metadata"]["uid"])
    b2 = server.create(make_pod("b"))
    nominate(server, "c", "n1", uid=c["metadata"]["uid"])
    server.create(make_pod("e"))
    server.compact()
    gated.gate.set()
    assert rec.wait_count(9)
    assert rec.names()[4:] == RELISTED_WHILE_AWAY
    assert rec.events[6][2] == b2["metadata"]["uid"]
    assert rec.objects[7]["status"]["nominatedNodeName"] == "n1"
    assert inf.relists == 2
    server.create(make_pod("f"))  # watching again after the re-list
    assert rec.wait(lambda ev: ev[-1][1] == "f")
    assert len(rec.events) == 10


def test_an_internal_error_on_the_watch_relists_and_delivers_synthetic_deletes(
    server: InMemoryApiServer,
) -> None:
    """A server's internal error on the watch (a 500 over HTTP) re-lists, as a 410 does, and
    delivers a synthetic delete for what vanished meanwhile, carrying the last state the
    informer knew; the error reaches ``on_error``, and the informer watches again."""
    a = server.create(make_pod("a"))
    server.create(make_pod("b"))
    store = SwitchableStore(server)
    errors: list[BaseException] = []
    with (
        ApiServerHTTP(server, stores={"Pod": store}, watch_poll=0.05) as http,
        k8s.ApiClient(prepare_configuration(k8s.Configuration(host=http.url), 2)) as api,
    ):
        gated = GatedListWatch(ClientListWatch(api, "Pod", request_timeout=5.0), timeout=WAIT)
        rec = Recorder()
        inf = Informer(gated, name="internal-error", on_error=errors.append, backoff_initial=0.01)
        inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
        inf.start()
        try:
            assert inf.wait_for_sync(WAIT)
            assert gated.keep_away(server.drop_watches) == 1
            server.remove("Pod", "default", "a")  # gone while the informer is away
            store.failing_watches = 1  # the resumed watch meets a 500
            gated.gate.set()
            assert rec.wait(lambda ev: ("delete", "a") in [(e[0], e[1]) for e in ev])
            wait_for(lambda: inf.relists == 2, WAIT, "a re-list after the 500")
            delete = next(e for e in rec.events if e[0] == "delete")
            assert delete[3] == a["metadata"]["resourceVersion"]  # the last known state
            assert any(isinstance(e, ServerError) for e in errors)
            server.create(make_pod("c"))  # watching again
            assert rec.wait_name("c")
            assert set(inf.cache) == {p["metadata"]["uid"] for p in server.list("Pod").items}
        finally:
            gated.gate.set()
            assert inf.stop(timeout=5.0)


# --------------------------------------------------------------------------- robustness


def test_handler_errors_are_contained(server: InMemoryApiServer, run: Callable[..., Any]) -> None:
    seen: list[str] = []

    def bad_add(obj: dict[str, Any]) -> None:
        seen.append(obj["metadata"]["name"])
        raise RuntimeError("handler bug")

    server.create(make_pod("a"))
    lw = MemoryListWatch(server, "Pod")
    rec = Recorder()
    inf = Informer(lw, name="faulty")
    inf.add_handler(on_add=bad_add)
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        server.create(make_pod("b"))
        assert rec.wait_count(2)
        assert seen == ["a", "b"]
    finally:
        assert inf.stop()


def test_handlers_and_the_error_hook_run_on_the_informers_thread(
    server: InMemoryApiServer,
) -> None:
    """Handlers run on the informer's thread, and so does ``on_error``."""
    server.create(make_pod("a"))
    failures = [ServerError("list failed once")]
    inner = MemoryListWatch(server, "Pod")

    class FlakyOnce:
        kind = "Pod"

        def list(self) -> Any:
            if failures:
                raise failures.pop()
            return inner.list()

        def watch(self, resource_version: str, timeout_seconds: float) -> WatchStream:
            return inner.watch(resource_version, timeout_seconds)

    threads: dict[str, str] = {}

    def on_error(_exc: BaseException) -> None:
        threads.setdefault("on_error", threading.current_thread().name)

    def on_add(_obj: dict[str, Any]) -> None:
        threads.setdefault("on_add", threading.current_thread().name)

    inf = Informer(FlakyOnce(), name="where", backoff_initial=0.01, on_error=on_error)
    inf.add_handler(on_add=on_add)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
    finally:
        assert inf.stop(timeout=5.0)
    assert threads == {"on_error": "informer-where", "on_add": "informer-where"}


def test_attach_feeds_a_dispatcher(server: InMemoryApiServer) -> None:
    class Facade:
        def __init__(self) -> None:
            self.calls: list[tuple[str, str]] = []
            self.done = threading.Event()

        def on_add(self, obj: dict[str, Any]) -> None:
            self.calls.append(("add", obj["metadata"]["name"]))

        def on_update(self, obj: dict[str, Any]) -> None:
            self.calls.append(("update", obj["metadata"]["name"]))

        def on_delete(self, obj: dict[str, Any]) -> None:
            self.calls.append(("delete", obj["metadata"]["name"]))
            self.done.set()

    facade = Facade()
    inf = Informer(MemoryListWatch(server, "Pod"), name="attached")
    inf.attach(facade)
    inf.start()
    try:
        pod = server.create(make_pod("a"))
        nominate(server, "a", "n", uid=pod["metadata"]["uid"])
        server.delete("Pod", "default", "a", uid=pod["metadata"]["uid"])
        assert facade.done.wait(WAIT)
        assert facade.calls == [("add", "a"), ("update", "a"), ("delete", "a")]
    finally:
        assert inf.stop()


def test_resync_replays_the_cache(server: InMemoryApiServer, run: Callable[..., Any]) -> None:
    server.create(make_pod("a"))
    _, rec = run(MemoryListWatch(server, "Pod"), resync=0.1)
    assert rec.wait(lambda ev: [e[0] for e in ev[:3]] == ["add", "update", "update"])
    assert {e[1] for e in rec.events} == {"a"}
    assert len({e[3] for e in rec.events}) == 1  # replays of the same state


class ScriptedListWatch:
    """A source playing scripted lists and watch streams (items are events, exceptions)."""

    kind = "Pod"

    def __init__(self, lists: list[Any], streams: list[list[Any]]) -> None:
        self.lists = lists
        self.streams = streams
        self.list_calls = 0
        self.lists_when_exhausted = 0  # list_calls when the streams ran out (the informer
        # keeps retrying after that, so list_calls itself goes on growing)
        self.watch_rvs: list[str] = []
        self.exhausted = threading.Event()

    def list(self) -> tuple[list[dict[str, Any]], str]:
        self.list_calls += 1
        item = self.lists.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    def watch(self, resource_version: str, timeout_seconds: float) -> WatchStream:
        self.watch_rvs.append(resource_version)
        if not self.streams:
            if not self.exhausted.is_set():
                self.lists_when_exhausted = self.list_calls
            self.exhausted.set()
            raise ServerError("no more scripted streams")
        return _Scripted(self.streams.pop(0))


class _Scripted:
    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[WatchEvent]:
        for item in self.items:
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        pass


def test_bookmarks_duplicates_and_errors(run: Callable[..., Any]) -> None:
    lw = ScriptedListWatch(
        lists=[ServerError("list failed once"), ([pod("a", "u-a", 5)], "5")],
        streams=[
            [
                WatchEvent("MODIFIED", pod("a", "u-a", 5)),  # not newer than the list: dropped
                WatchEvent("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "9"}}),
                ApiConnectionError("cut"),
            ],
            [
                WatchEvent("MODIFIED", pod("a", "u-a", 10)),
                WatchEvent("DELETED", pod("zz", "u-unknown", 11)),  # never seen: ignored
                WatchEvent("ADDED", pod("b", "u-b", 12)),
                WatchEvent("MODIFIED", pod("b", "u-b", 11)),  # stale: dropped
            ],
        ],
    )
    inf, rec = run(lw, backoff_initial=0.001, backoff_max=0.002)
    assert lw.exhausted.wait(WAIT)
    assert rec.names() == [("add", "a"), ("update", "a"), ("add", "b")]
    assert lw.lists_when_exhausted == 2
    assert lw.watch_rvs[:3] == ["5", "9", "12"]  # resumed from the bookmark, then the last event
    assert inf.has_synced()


def test_gone_from_watch_call_relists(run: Callable[..., Any]) -> None:
    lw = ScriptedListWatch(
        lists=[([pod("a", "u-a", 5)], "5"), ([pod("b", "u-b", 8)], "8")],
        streams=[[GoneError("too old")]],
    )
    inf, rec = run(lw, backoff_initial=0.001, backoff_max=0.002)
    assert lw.exhausted.wait(WAIT)
    assert rec.names() == [("add", "a"), ("delete", "a"), ("add", "b")]
    assert lw.watch_rvs[:2] == ["5", "8"]
    assert inf.relists == 2


def test_stop_interrupts_backoff_and_not_synced_without_a_list() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = prepare_configuration(k8s.Configuration(host=f"http://127.0.0.1:{port}"), 1)
    client = k8s.ApiClient(cfg)
    real = ClientListWatch(client, "Pod", request_timeout=1.0)
    failed = threading.Event()

    class Observed:
        kind = "Pod"

        def list(self) -> Any:
            try:
                return real.list()
            finally:
                failed.set()

        def watch(self, rv: str, timeout: float) -> WatchStream:
            raise AssertionError("never listed, so never watches")

    inf = Informer(Observed(), name="unreachable", backoff_initial=60.0, backoff_max=60.0)
    inf.start()
    try:
        assert failed.wait(WAIT)  # the list failed (connection refused); now in a 60 s backoff
        with pytest.raises(InformerSyncTimeout, match=r"did not sync within 0\.01 s"):
            inf.wait_for_sync(0.01)
        assert not inf.has_synced()
    finally:
        assert inf.stop(timeout=5.0)
        client.close()  # type: ignore[no-untyped-call]


def test_an_object_created_between_two_list_pages_reaches_the_cache(
    server: InMemoryApiServer,
    api_client: k8s.ApiClient,
    run: Callable[..., tuple[Informer, Recorder]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pod ``a`` is created after the first page of the informer's paged list was served and
    sorts before its continue key: it is in no page (they are a snapshot), and the watch,
    started from the list's resourceVersion, delivers its ADDED."""
    for name in ("b", "c", "d"):
        server.create(make_pod(name))
    list_pods = server.list
    pages: list[str] = []

    def list_and_create_between_pages(kind: str, *args: Any, **kwargs: Any) -> Any:
        page = list_pods(kind, *args, **kwargs)
        if kind == "Pod" and kwargs.get("limit"):
            pages.append(page.resource_version)
            if len(pages) == 1:
                server.create(make_pod("a"))
        return page

    monkeypatch.setattr(server, "list", list_and_create_between_pages)
    inf, rec = run(ClientListWatch(api_client, "Pod", page_size=2, request_timeout=5.0))
    assert inf.wait_for_sync(WAIT)
    assert pages == ["3", "3"]  # the second page reports the first one's resourceVersion
    assert rec.wait_name("a")
    assert rec.names() == [("add", "b"), ("add", "c"), ("add", "d"), ("add", "a")]
    stored = {p["metadata"]["uid"] for p in list_pods("Pod").items}
    assert set(inf.cache) == stored


def test_a_paged_list_is_watched_from_its_first_pages_resource_version(
    server: InMemoryApiServer, api_client: k8s.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose later pages are not a snapshot (they report a newer resourceVersion):
    the list's resourceVersion is the first page's, as client-go's pager takes it, so a watch
    from it replays the pod created between the pages."""
    for name in ("b", "c", "d"):
        server.create(make_pod(name))
    list_pods = server.list

    def later_pages_see_now(kind: str, *args: Any, **kwargs: Any) -> Any:
        page = list_pods(kind, *args, **kwargs)
        if not kwargs.get("continue_token"):
            server.create(make_pod("a"))  # after the first page, before the second
            return page
        now = list_pods(kind, *args, **{**kwargs, "continue_token": None, "limit": None})
        return page._replace(resource_version=now.resource_version)

    monkeypatch.setattr(server, "list", later_pages_see_now)
    items, rv = ClientListWatch(api_client, "Pod", page_size=2, request_timeout=5.0).list()
    assert [i["metadata"]["name"] for i in items] == ["b", "c", "d"]
    assert rv == "3"
    w = server.watch("Pod", resource_version=rv)
    try:
        assert [(e.type, e.object["metadata"]["name"]) for e in drain(w)] == [("ADDED", "a")]
    finally:
        w.stop()


def test_stop_on_the_informers_own_thread_ends_the_loop_after_the_hook(
    server: InMemoryApiServer,
) -> None:
    """An ``on_error`` hook that gives up calls ``stop()`` on the informer's thread: it
    returns False without joining itself, and the loop ends once the hook returned (no list
    is tried again)."""
    lists: list[int] = []

    class Refused(MemoryListWatch):
        def list(self) -> tuple[list[dict[str, Any]], str]:
            lists.append(1)
            raise ForbiddenError("pods is forbidden")

    stopped: Future[bool] = Future()

    def give_up(error: BaseException) -> None:
        try:
            stopped.set_result(inf.stop(timeout=1.0))
        except BaseException as exc:
            stopped.set_exception(exc)

    inf = Informer(Refused(server, "Pod"), name="gives-up", on_error=give_up, backoff_initial=0.01)
    inf.start()
    try:
        assert stopped.result(timeout=WAIT) is False
    finally:
        assert inf.stop(timeout=5.0)  # the loop has ended
    assert len(lists) == 1
    assert not inf.has_synced()


def test_a_handler_that_stops_the_informer_mid_list_is_called_no_more(
    server: InMemoryApiServer,
) -> None:
    """A handler gives up at the first of five listed pods: the rest of the list used to be
    delivered after its stop()."""
    for i in range(5):
        server.create(make_pod(f"p{i}"))
    seen: list[str] = []
    stopped: Future[bool] = Future()

    def on_add(obj: dict[str, Any]) -> None:
        seen.append(obj["metadata"]["name"])
        if not stopped.done():
            stopped.set_result(inf.stop(timeout=1.0))

    inf = Informer(MemoryListWatch(server, "Pod"), name="gives-up")
    inf.add_handler(on_add=on_add)
    inf.start()
    try:
        assert stopped.result(timeout=WAIT) is False  # it cannot join its own thread
    finally:
        assert inf.stop(timeout=5.0)
    assert seen == ["p0"]
    assert len(inf.cache) == 5  # the cache still holds the list; only the handlers stop


def test_stop_cuts_a_quiet_http_watch(
    api_client: k8s.ApiClient, http_server: ApiServerHTTP
) -> None:
    inf = Informer(ClientListWatch(api_client, "Pod"), name="quiet", watch_timeout=600.0)
    inf.start()
    assert inf.wait_for_sync(WAIT)
    assert http_server.wait_connections(1, timeout=WAIT)
    assert inf.stop(timeout=5.0)
    assert http_server.wait_connections(0, timeout=WAIT)


def test_stop_during_a_hung_list_returns_false_and_no_handler_hears_the_late_reply() -> None:
    """A list waiting for its reply cannot be cut: ``stop(timeout)`` returns False meanwhile,
    and the reply that comes after ``stop()`` reaches no handler and no cache."""
    heard: list[Any] = []
    with HungListServer() as srv, k8s.ApiClient(k8s.Configuration(host=srv.url)) as api:
        inf = Informer(ClientListWatch(api, "Pod", request_timeout=20.0), name="hung-list")
        inf.add_handler(heard.append, lambda _old, new: heard.append(new), heard.append)
        inf.start()
        assert srv.listing.wait(WAIT)
        assert inf.stop(timeout=0.2) is False  # the list still waits for its reply
        srv.release.set()  # the reply comes after stop()
        assert srv.answered.wait(WAIT)
        assert inf.stop(timeout=WAIT)
    assert heard == []
    assert not inf.has_synced() and len(inf.cache) == 0


def test_a_hung_list_that_fails_after_stop_reaches_no_hook() -> None:
    """A hung list ends within the list-watch's ``request_timeout``, and the thread with it;
    ``stop(timeout)`` returns False meanwhile, and nothing hears of that request: its timeout,
    which comes after ``stop()``, reaches neither ``on_error`` nor ``last_error``."""
    heard: list[tuple[bool, BaseException]] = []  # (after stop() was called, the error)
    stopping = threading.Event()
    with HungListServer() as srv, k8s.ApiClient(k8s.Configuration(host=srv.url)) as api:
        inf = Informer(
            ClientListWatch(api, "Pod", request_timeout=2.0),
            name="hung-list",
            on_error=lambda exc: heard.append((stopping.is_set(), exc)),
        )
        inf.start()
        assert srv.listing.wait(WAIT)
        stopping.set()
        assert inf.stop(timeout=0) is False  # the list still waits for its reply
        assert inf.stop(timeout=20)  # it timed out (2 s), and the thread ended with it
        last_error = inf.last_error
    assert [exc for after_stop, exc in heard if after_stop] == []
    assert heard or last_error is None  # nothing before stop() either: nothing at all
    assert not inf.has_synced()


def test_watch_timeout_renews_the_watch_without_a_relist_or_an_error(
    server: InMemoryApiServer, api_client: k8s.ApiClient
) -> None:
    """``watch_timeout``: the longest single watch request before it is renewed; a watch that
    ran its course is renewed from where it was, with no re-list and no error."""
    server.create(make_pod("a"))
    errors: list[BaseException] = []
    rec = Recorder()
    inf = Informer(ClientListWatch(api_client, "Pod", request_timeout=5.0), name="renew",
                   watch_timeout=1.0, on_error=errors.append)  # fmt: skip
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        wait_for(lambda: inf.watches >= 3, WAIT, "two renewals")
        server.create(make_pod("b"))
        assert rec.wait_name("b")
        assert rec.names() == [("add", "a"), ("add", "b")]
        assert inf.relists == 1 and errors == [] and inf.last_error is None
    finally:
        assert inf.stop(timeout=5.0)


def test_bad_arguments(server: InMemoryApiServer) -> None:
    lw = MemoryListWatch(server, "Pod")
    with pytest.raises(InvalidInputError):
        MemoryListWatch(server, "Widget")  # not in the kind table
    with pytest.raises(InvalidInputError):
        Informer(lw, name="")
    with pytest.raises(InvalidInputError):
        Informer(lw, name="x", backoff_initial=0)
    with pytest.raises(InvalidInputError):
        Informer(lw, name="x", backoff_initial=2.0, backoff_max=1.0)
    with pytest.raises(InvalidInputError):
        Informer(lw, name="x", resync=-1)
    inf = Informer(lw, name="x").start()
    try:
        with pytest.raises(InvalidInputError):
            inf.add_handler(on_add=lambda obj: None)
        with pytest.raises(InvalidInputError):
            inf.start()
    finally:
        assert inf.stop()


def test_stop_and_wait_for_sync_refuse_a_bad_timeout_before_anything_stops(
    server: InMemoryApiServer,
) -> None:
    """``stop``/``wait_for_sync``: a timeout that is not a number >= 0 (or None) raises
    ``InvalidInputError`` before anything stops: the informer goes on delivering."""
    rec = Recorder()
    inf = Informer(MemoryListWatch(server, "Pod"), name="bad-timeouts")
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    inf.start()
    try:
        assert inf.wait_for_sync(WAIT)
        for bad in (-1, math.nan, "1"):
            with pytest.raises(InvalidInputError):
                inf.stop(timeout=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError):
                inf.wait_for_sync(timeout=bad)  # type: ignore[arg-type]
        server.create(make_pod("after"))
        assert rec.wait_name("after")
    finally:
        assert inf.stop(timeout=5.0)


@pytest.mark.parametrize(
    "setting",
    [
        {"watch_timeout": math.inf},
        {"watch_timeout": math.nan},
        {"watch_timeout": 10**400},
        {"watch_timeout": 2e9},
        {"backoff_max": math.inf},
        {"resync": math.inf},
    ],
)
def test_a_setting_every_watch_or_wait_would_fail_on_is_refused_when_built(
    server: InMemoryApiServer, setting: dict[str, Any]
) -> None:
    """watch_timeout=inf used to be accepted, then every watch failed on the informer thread
    with OverflowError (int(inf) for the request, a lock wait of inf)."""
    with pytest.raises(InvalidInputError, match=next(iter(setting))):
        Informer(MemoryListWatch(server, "Pod"), name="x", **setting)
    assert not server.request_log


def test_a_kind_table_that_is_not_one_is_refused_when_built() -> None:
    """ClientListWatch(kinds=5) raised AttributeError ('int' has no 'lookup')."""
    with (
        k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:1")) as client,
        pytest.raises(InvalidInputError, match="kinds must be a KindTable"),
    ):
        ClientListWatch(client, "Pod", kinds=5)  # type: ignore[arg-type]


def test_a_handler_that_is_not_callable_is_refused_when_added(server: InMemoryApiServer) -> None:
    """As AioInformer does: a non-callable handler used to be taken and fail on the informer
    thread for every event; attach(None) raised AttributeError."""
    server.create(make_pod("a"))
    inf = Informer(MemoryListWatch(server, "Pod"), name="x")
    with pytest.raises(InvalidInputError, match="handlers must be callable"):
        inf.add_handler(on_add="not callable")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="on_add"):
        inf.attach(None)
    with pytest.raises(InvalidInputError, match="on_delete"):
        inf.attach(type("NoDelete", (), {"on_add": print, "on_update": print})())
    added: list[Any] = []
    inf.add_handler(on_add=added.append)  # the refused ones left nothing behind
    try:
        assert inf.start().wait_for_sync(timeout=10)
        assert [p["metadata"]["name"] for p in added] == ["a"]
    finally:
        assert inf.stop()


def test_a_source_without_list_or_watch_is_refused_when_built(server: InMemoryApiServer) -> None:
    """It used to be taken, then every attempt failed with AttributeError on the informer
    thread and wait_for_sync only timed out."""
    partial: list[dict[str, Any]] = [
        {},
        {"list": lambda self: ([], "1")},
        {"watch": lambda self, rv, t: None},
    ]
    for methods in partial:
        source = type("Partial", (), {"kind": "Pod", **methods})()
        with pytest.raises(InvalidInputError, match="must be a ListWatch"):
            Informer(source, name="x")
    assert not server.request_log


def test_memory_list_watch_refuses_a_bad_kind_table_or_selector_when_built(
    server: InMemoryApiServer,
) -> None:
    """As ClientListWatch does: kinds={} raised AttributeError, label_selector=5 failed every
    list on the informer thread."""
    bad_arguments: list[dict[str, Any]] = [
        {"kinds": {"Pod": 1}},
        {"kinds": 5},
        {"label_selector": 5},
        {"label_selector": ""},
    ]
    for bad in bad_arguments:
        with pytest.raises(InvalidInputError, match=next(iter(bad))):
            MemoryListWatch(server, "Pod", **bad)
    assert not server.request_log


def test_a_stopped_informer_refuses_to_start_again(server: InMemoryApiServer) -> None:
    """start() after stop() used to return as if started while its thread ended at once: the
    informer never listed and nothing said so."""
    server.create(make_pod("a"))
    never_started = Informer(MemoryListWatch(server, "Pod"), name="x")
    assert never_started.stop()
    with pytest.raises(InvalidInputError, match="was stopped"):
        never_started.start()
    assert not never_started.has_synced()
    ran = Informer(MemoryListWatch(server, "Pod"), name="y").start()
    assert ran.wait_for_sync(timeout=WAIT)
    assert ran.stop()
    with pytest.raises(InvalidInputError, match="already started"):
        ran.start()


def test_wait_for_sync_returns_false_once_stopped_before_it_synced() -> None:
    """A waiter with no timeout on an informer that never lists (the apiserver is down) is
    woken by stop(): False, as client-go's WaitForCacheSync; it used to block for ever."""

    class Down:
        kind = "Pod"

        def list(self) -> Any:
            raise ApiConnectionError("connection refused")

        def watch(self, resource_version: str, timeout_seconds: float) -> Any:
            raise AssertionError("never listed, never watched")

    informer = Informer(Down(), name="down", backoff_initial=0.01, backoff_max=0.05).start()
    waited: Future[bool] = Future()
    waiter = threading.Thread(
        target=lambda: waited.set_result(informer.wait_for_sync(None)), daemon=True
    )
    waiter.start()
    assert informer.stop(timeout=WAIT)
    assert waited.result(timeout=WAIT) is False
    waiter.join(WAIT)
    assert informer.wait_for_sync(0) is False  # and at once, afterwards


def test_repeated_gone_keeps_relisting(run: Callable[..., Any]) -> None:
    lists = [([pod("a", "u-a", rv)], str(rv)) for rv in (5, 6, 7, 8)]
    lw = ScriptedListWatch(lists=list(lists), streams=[[GoneError("too old")]] * 3)
    inf, rec = run(lw, backoff_initial=0.001, backoff_max=0.002)
    assert lw.exhausted.wait(WAIT)
    assert lw.lists_when_exhausted == 4
    assert lw.watch_rvs[:4] == ["5", "6", "7", "8"]
    assert rec.names() == [("add", "a"), ("update", "a"), ("update", "a"), ("update", "a")]
    assert inf.relists == 4


@pytest.mark.timeout(60)
def test_a_watch_whose_reply_never_begins_ends_within_the_request_timeout() -> None:
    """A hung apiserver takes the watch and never answers. ``stop()`` cannot cut a request
    that waits for its reply, but that wait is the request timeout (1 s here), not the watch
    timeout on top of it (301 s): the informer's thread ends within it."""
    with (
        SilentWatchServer() as srv,
        k8s.ApiClient(k8s.Configuration(host=srv.url)) as client,
    ):
        inf = Informer(ClientListWatch(client, "Pod", request_timeout=1.0), name="hung-watch")
        inf.start()
        assert inf.wait_for_sync(10)
        assert srv.watching.wait(10)
        assert inf.stop(timeout=20)


@pytest.mark.timeout(60)
def test_a_watch_silent_after_its_head_fails_after_its_timeout_plus_the_request_timeout() -> None:
    """After a watch reply's head, each wait for an event is bounded by ``timeout_seconds``
    plus the request timeout: an informer whose watch goes silent past its ``timeoutSeconds``
    (1 s here) hears of it, from ``on_error``, no sooner than 1 s + 1 s after the head."""
    failed: Future[tuple[float, BaseException]] = Future()

    def on_error(exc: BaseException) -> None:
        if not failed.done():
            failed.set_result((time.monotonic(), exc))

    with (
        SilentWatchServer(head=True) as srv,
        k8s.ApiClient(k8s.Configuration(host=srv.url)) as client,
    ):
        inf = Informer(ClientListWatch(client, "Pod", request_timeout=1.0), name="silent",
                       watch_timeout=1.0, on_error=on_error)  # fmt: skip
        inf.start()
        try:
            assert inf.wait_for_sync(WAIT)
            when, error = failed.result(timeout=30)
        finally:
            assert inf.stop(timeout=WAIT)
    assert when - srv.heads[0] >= 1.5, when - srv.heads[0]  # not the request timeout alone
    assert "watch Pod" in str(error)
