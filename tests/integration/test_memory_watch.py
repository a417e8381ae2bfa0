"""Watches of the in-memory apiserver (kdispatch.testing.memory_watch): history and replay, 410
Gone, copies, order across threads, slow and stopped consumers."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kdispatch import ConflictError, GoneError, InvalidInputError, InvalidRequestError
from kdispatch.testing import InMemoryApiServer, make_claim, make_pod
from kdispatch.testing.memory import WatchEvent
from tests.memory_server import drain, patch, rv, uid


def test_watch_none_sees_only_new_events(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    with server.watch("Pod") as w:
        server.create(make_pod("p2"))
        server.create(make_claim("c1"))  # other kind: not delivered
        events = drain(w)
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "p2")]
    assert w.ended and not w.dropped


def test_watch_from_rv_replays_history(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    start = server.resource_version
    patch(server, pod, {"phase": "Running"})
    server.create(make_pod("p2", namespace="other"))
    server.delete("Pod", "default", "p1", uid=uid(pod))
    with server.watch("Pod", resource_version=start) as w:
        events = drain(w)
        server.create(make_pod("p3"))
        live = w.next(timeout=1)
    assert [e.type for e in events] == ["MODIFIED", "ADDED", "DELETED"]
    assert [int(e.resource_version) for e in events] == [2, 3, 4]
    assert live is not None and live.object["metadata"]["name"] == "p3"
    with server.watch("Pod", resource_version=start, namespace="default") as w:
        assert [e.type for e in drain(w)] == ["MODIFIED", "DELETED", "ADDED"]


def test_watch_from_zero_lists_current_state(server: InMemoryApiServer) -> None:
    b = server.create(make_pod("b"))
    server.create(make_pod("a"))
    server.delete("Pod", "default", "b", uid=uid(b))
    with server.watch("Pod", resource_version="0") as w:
        events = drain(w)
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "a")]


def test_watch_gone_after_compact(server: InMemoryApiServer, pod: dict[str, Any]) -> None:
    old = server.resource_version
    patch(server, pod, {"phase": "Running"})
    server.compact()
    with pytest.raises(GoneError) as info:
        server.watch("Pod", resource_version=old)
    assert info.value.status == 410
    with server.watch("Pod", resource_version=server.resource_version) as w:
        patch(server, pod, {"phase": "Done"})
        assert [e.object["status"]["phase"] for e in drain(w)] == ["Done"]


def test_watch_gone_beyond_history() -> None:
    server = InMemoryApiServer(history=3)
    for i in range(5):
        server.create(make_pod(f"p{i}"))  # rv 1..5; history keeps 3, 4, 5
    with pytest.raises(GoneError):
        server.watch("Pod", resource_version="1")
    with server.watch("Pod", resource_version="2") as w:
        assert [e.resource_version for e in drain(w)] == ["3", "4", "5"]


def test_watch_rejects_bad_resource_version(server: InMemoryApiServer) -> None:
    with pytest.raises(InvalidRequestError):
        server.watch("Pod", resource_version="abc")


def test_drop_watches_ends_iteration(server: InMemoryApiServer) -> None:
    w1 = server.watch("Pod")
    w2 = server.watch("Node")
    server.create(make_pod("p1"))
    assert server.drop_watches() == 2
    assert w1.dropped and w2.dropped
    assert list(w1) == [], "queued events are lost with the connection"
    assert w1.next(timeout=0) is None
    server.create(make_pod("p2"))
    assert server.drop_watches() == 0
    w1.stop()  # idempotent after a drop


@pytest.mark.timeout(10)
def test_stop_wakes_blocked_consumer(server: InMemoryApiServer) -> None:
    w = server.watch("Pod")
    started = threading.Event()
    seen: list[WatchEvent] = []

    def consume() -> None:
        started.set()
        seen.extend(w)  # blocks until stopped

    t = threading.Thread(target=consume)
    t.start()
    started.wait()
    server.create(make_pod("p1"))
    w.stop()
    t.join(5)
    assert not t.is_alive()
    assert w.ended and not w.dropped


def test_slow_watcher_does_not_block_writers(server: InMemoryApiServer) -> None:
    with server.watch("Pod") as w:
        for i in range(500):
            server.create(make_pod(f"p{i}"))
        assert w.pending() == 500
        assert [int(e.resource_version) for e in drain(w)] == list(range(1, 501))


def test_watch_event_objects_are_copies(server: InMemoryApiServer) -> None:
    with server.watch("Pod") as w:
        server.create(make_pod("p1"))
        event = w.next(timeout=1)
    assert event is not None
    event.object["status"]["phase"] = "Mutated"
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None and stored["status"]["phase"] == "Pending"


@pytest.mark.timeout(20)
def test_watch_order_across_threads_and_no_lost_updates() -> None:
    server = InMemoryApiServer()
    writers, per_writer = 4, 50
    pods = [server.create(make_pod(f"p{i}")) for i in range(writers)]
    shared = server.create(make_pod("shared"))
    base = int(server.resource_version)
    watch = server.watch("Pod", resource_version=str(base))
    received: list[WatchEvent] = []
    total = writers * per_writer * 2

    def consume() -> None:
        for event in watch:
            received.append(event)
            if len(received) == total:
                return

    def write(i: int) -> None:
        own = pods[i]
        for n in range(per_writer):
            patch(server, own, {"observedGeneration": n + 1})
            while True:  # optimistic concurrency on the shared pod: get, patch with rv, retry
                cur = dict(server.get("Pod", "default", "shared"))
                count = cur["status"].get("observedGeneration", 0)
                try:
                    patch(server, cur, {"observedGeneration": count + 1}, resource_version=rv(cur))
                    break
                except ConflictError:
                    continue

    consumer = threading.Thread(target=consume)
    consumer.start()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    consumer.join(15)
    watch.stop()
    assert not consumer.is_alive()
    final = server.get_object("Pod", "default", "shared")
    assert final is not None and final["status"]["observedGeneration"] == writers * per_writer
    assert uid(final) == uid(shared)
    rvs = [int(e.resource_version) for e in received]
    assert rvs == list(range(base + 1, base + total + 1)), "strictly increasing, none lost"
    counts = [
        e.object["status"]["observedGeneration"]
        for e in received
        if e.object["metadata"]["name"] == "shared"
    ]
    assert counts == list(range(1, writers * per_writer + 1))
    assert server.counts()["patch_status"] == total


def test_watch_that_falls_behind_is_dropped() -> None:
    server = InMemoryApiServer(watch_queue_limit=3)
    with server.watch("Pod") as slow, server.watch("Pod") as fast:
        for i in range(5):
            server.create(make_pod(f"p{i}"))
            assert fast.next(timeout=0) is not None
        assert slow.dropped and not fast.dropped
        assert slow.next(timeout=0) is None
    for i in range(5):
        server.create(make_pod(f"q{i}"))
    with pytest.raises(InvalidInputError):
        InMemoryApiServer(watch_queue_limit=-1)
    assert server.drop_watches() == 0


@pytest.mark.timeout(10)
def test_a_replay_longer_than_the_queue_limit_is_delivered_whole() -> None:
    """Initial events (the replay since a resourceVersion, or the objects for "0") are not
    counted against ``watch_queue_limit``, as kube-apiserver sends them at the consumer's pace;
    live events queued behind the replay are, and overflow it as before."""
    server = InMemoryApiServer(watch_queue_limit=3)
    server.create(make_pod("p0"))
    start = server.resource_version
    for i in range(1, 10):
        server.create(make_pod(f"p{i}"))
    with (
        server.watch("Pod", resource_version=start) as resumed,
        server.watch("Pod", resource_version="0") as current,
    ):
        assert [e.object["metadata"]["name"] for e in drain(resumed)] == [
            f"p{i}" for i in range(1, 10)
        ]
        assert len(drain(current)) == 10 and not current.dropped
        for i in range(3):  # live events: up to the limit may queue
            server.create(make_pod(f"q{i}"))
        assert not resumed.dropped
        server.create(make_pod("q3"))
        assert resumed.dropped and current.dropped
    with server.watch("Pod", resource_version=start) as behind:  # 13 replayed, then live ones
        for i in range(3):
            server.create(make_pod(f"r{i}"))
        assert not behind.dropped and behind.pending() == 16
        server.create(make_pod("r3"))
        assert behind.dropped
