"""ProcessDispatcher: the dispatcher in a spawned child process, checked on the server.

The in-memory apiserver is served over HTTP (``ApiServerHTTP``) in the test process; the child
builds a ``KubernetesBackend`` for its URL. A server whose ``sleep`` waits on a gate holds
requests in flight (on the server, outside the child), so pending calls can be merged or the
child killed with requests outstanding. Synchronisation is by futures, Events and polling of
observable state with deadlines; never by sleeping.
"""

from __future__ import annotations

import enum
import functools
import gc
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

from kdispatch.actors.engine.messages import CallFuture
from kdispatch.actors.facade.process import MAX_IN_FLIGHT, DispatcherProcessDied, ProcessDispatcher
from kdispatch.actors.facade.process_child import dumps, encode, load_result, portable
from kdispatch.actors.model.call_types import default_call_types
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RegistryConfig,
    RetryConfig,
    RuntimeConfig,
)
from kdispatch.actors.model.errors import (
    ActorLimitExceeded,
    CallCancelled,
    CallFailed,
    CallStale,
    ConflictError,
    DispatcherClosed,
    InvalidCallError,
    InvalidConfigError,
    InvalidInputError,
    InvalidObjectError,
    LeadershipLost,
    ObjectNotFound,
    Outcome,
    TooManyRequestsError,
    UnknownCallTypeError,
)
from kdispatch.actors.model.objects import Obj, ObjectRef
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.actors.model.podgroup_calls import PodGroupStatusPatch
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, Latency, make_pod, make_podgroup
from kdispatch.testing.waiting import wait_for
from tests.backends import RefusingBackend
from tests.factories import UserBinding, cond

WAIT = 30.0
"""Upper bound of any single wait."""


class Gate:
    """Where held requests wait: open (the default) lets every one through; closed, only those
    :meth:`let_through` admitted, in their order of arrival. Each request takes a ticket as it
    reaches the gate (:meth:`ticket`), so a pass goes to the request it was meant for: one that
    arrives later cannot take it while a request admitted before it is still waking up."""

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond
        self._open = True
        self._tickets = 0  # requests that reached the gate, numbered from 0 in arrival order
        self._admitted = 0  # while closed, the tickets below this pass

    def set(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def clear(self) -> None:
        """Close; every request that reached the gate so far passes (it was let through)."""
        with self._cond:
            self._open = False
            self._admitted = self._tickets

    def let_through(self, n: int) -> None:
        """The ``n`` requests that have waited longest pass (requests still to come make up the
        rest when fewer wait); the gate stays closed."""
        with self._cond:
            self._admitted += n
            self._cond.notify_all()

    def ticket(self) -> int:
        """Caller holds the condition: the number of a request that reaches the gate."""
        self._tickets += 1
        return self._tickets - 1

    def admits(self, ticket: int) -> bool:
        """Caller holds the condition: whether the request holding ``ticket`` may go now."""
        return self._open or ticket < self._admitted


class HeldSleep:
    """The server's ``sleep``: requests with a latency wait at ``gate``; ``arrived`` counts
    them so a test can wait until N are in flight on the server."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.gate = Gate(self._cond)
        self.arrived = 0

    def __call__(self, _seconds: float) -> None:
        with self._cond:
            self.arrived += 1
            ticket = self.gate.ticket()
            self._cond.notify_all()
            assert self._cond.wait_for(lambda: self.gate.admits(ticket), WAIT), "gate never opened"

    def wait_arrived(self, n: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.arrived >= n, WAIT), self.arrived


@dataclass
class Cluster:
    server: InMemoryApiServer
    http: ApiServerHTTP
    held: HeldSleep

    def dispatcher(
        self, workers: int = 4, max_in_flight: int | None = MAX_IN_FLIGHT
    ) -> ProcessDispatcher:
        factory = functools.partial(KubernetesBackend.for_url, self.http.url, workers=workers)
        config = DispatcherConfig(
            executor=ExecutorConfig(workers=workers), retry=RetryConfig(budget=5.0)
        )
        return ProcessDispatcher(factory, config, max_in_flight=max_in_flight)

    def pod(self, name: str) -> Obj:
        return self.server.create(make_pod(name))

    def stored(self, name: str) -> Obj:
        return self.server.get("Pod", "default", name)

    def held_bindings(
        self, pods: list[Obj], arrived: int, **executor: int
    ) -> tuple[ProcessDispatcher, list[CallFuture]]:
        """A started dispatcher binding every pod in ``pods`` to node-1 while the server holds
        the requests; returns once ``arrived`` of them are in flight on the server."""
        self.held.gate.clear()
        d = self.dispatcher(**executor).start()
        futures = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
        self.held.wait_arrived(arrived)
        return d, futures


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """An apiserver whose patches and bindings wait on the gate (latency 1 s, via HeldSleep)."""
    held = HeldSleep()
    server = InMemoryApiServer(
        latency=Latency(per_op={"patch_status": 1.0, "bind": 1.0}), sleep=held
    )
    with ApiServerHTTP(server) as http:
        yield Cluster(server, http, held)
        held.gate.set()  # release anything still held so the server's threads end


def test_bindings_and_patches_land_on_the_server(cluster: Cluster) -> None:
    pods = [cluster.pod(f"p{i}") for i in range(40)]
    with cluster.dispatcher() as d:
        binds = [d.submit(PodBinding.for_pod(p, f"node-{i % 3}")) for i, p in enumerate(pods)]
        patch = d.submit(PodStatusPatch.for_pod(cluster.pod("waiting"), conditions=[cond()]))
        done, _ = wait([*binds, patch], timeout=WAIT)
        assert len(done) == 41
        assert {f.result() for f in binds} == {Outcome.SUCCESS}
        assert patch.result() is Outcome.SUCCESS
        stats = d.stats()
    for i in range(40):
        assert cluster.stored(f"p{i}")["spec"]["nodeName"] == f"node-{i % 3}"
    conditions = cluster.stored("waiting")["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [("PodScheduled", "False")]
    assert stats["sent"] == {"pod_binding": 40, "pod_status_patch": 1}
    assert stats["pid"] is not None and stats["pid"] != os.getpid()


def test_pending_patches_merge_in_the_child(cluster: Cluster) -> None:
    pod = cluster.pod("merge-me")
    cluster.held.gate.clear()
    with cluster.dispatcher() as d:
        d.on_add(pod)
        first = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond("First", "True", "A")]))
        cluster.held.wait_arrived(1)  # the first patch is in flight on the server
        second = d.submit(PodStatusPatch.for_pod(pod, conditions=[cond("Second", "True", "B")]))
        third = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="node-7"))
        assert second.result(WAIT) is Outcome.OVERWRITTEN  # merged into the third, pending
        seen = d.view(str(pod["metadata"]["uid"]))
        assert seen is not None and seen["status"]["nominatedNodeName"] == "node-7"
        cluster.held.gate.set()
        assert first.result(WAIT) is Outcome.SUCCESS
        assert third.result(WAIT) is Outcome.SUCCESS
    status = cluster.stored("merge-me")["status"]
    assert {c["type"] for c in status["conditions"]} == {"First", "Second"}
    assert status["nominatedNodeName"] == "node-7"
    patches = [r for r in cluster.server.request_log if r.op == "patch_status"]
    assert len(patches) == 2  # the first, then the second and third merged into one


def test_podgroup_conditions_cross_the_process_boundary(cluster: Cluster) -> None:
    """A PodGroup status patch (read-only conditions with an int observedGeneration) is sent
    by the child over HTTP; a regressing one comes back CallStale."""
    pg = cluster.server.create(make_podgroup("g", min_count=2, generation=2))
    with cluster.dispatcher() as d:
        placed = d.submit(PodGroupStatusPatch.initially_scheduled(pg, True))
        assert placed.result(WAIT) is Outcome.SUCCESS
        late = d.submit(PodGroupStatusPatch.initially_scheduled(pg, False))
        assert isinstance(late.exception(WAIT), CallStale)
    stored = cluster.server.get("PodGroup", "default", "g")["status"]["conditions"]
    assert [(c["type"], c["status"], c["observedGeneration"]) for c in stored] == [
        ("PodGroupInitiallyScheduled", "True", 2)
    ]


def test_typed_outcomes_cross_the_process_boundary(cluster: Cluster) -> None:
    ghost = make_pod("ghost", uid="uid-ghost")  # never created on the server
    deleted = cluster.pod("deleted")
    with cluster.dispatcher() as d:
        missing = d.submit(PodBinding.for_pod(ghost, "node-1"))
        d.on_delete(deleted)  # in pipe order: the child tombstones the UID first
        cancelled = d.submit(PodBinding.for_pod(deleted, "node-1"))
        with pytest.raises(ObjectNotFound) as not_found:
            missing.result(WAIT)
        with pytest.raises(CallCancelled) as gone:
            cancelled.result(WAIT)
    assert not_found.value.uid == "uid-ghost"
    assert not_found.value.call_type == "pod_binding"
    assert gone.value.uid == str(deleted["metadata"]["uid"])
    assert "nodeName" not in cluster.stored("deleted")["spec"]


def test_bad_input_raises_at_submit(cluster: Cluster) -> None:
    pod = cluster.pod("p")
    with pytest.raises(InvalidConfigError):
        ProcessDispatcher(lambda: None)  # type: ignore[arg-type, return-value]  # no pickle
    with cluster.dispatcher() as d:
        with pytest.raises(InvalidCallError):
            d.submit("bind p")  # type: ignore[arg-type]
        unpicklable = PodBinding(ObjectRef.of(pod), "node-1", basis={**pod, "x": threading.Lock()})
        with pytest.raises(InvalidCallError, match="does not pickle"):
            d.submit(unpicklable)
        with pytest.raises(UnknownCallTypeError):
            d.cancel(str(pod["metadata"]["uid"]), "no_such_type")
        assert d.outstanding == 0
        assert d.submit(PodBinding.for_pod(pod, "node-1")).result(WAIT) is Outcome.SUCCESS
    with pytest.raises(DispatcherClosed):
        d.submit(PodBinding.for_pod(pod, "node-2"))


def test_backend_factory_error_reaches_start() -> None:
    factory = functools.partial(KubernetesBackend.for_url, "ftp://nowhere")
    with pytest.raises(InvalidConfigError, match="http"):
        ProcessDispatcher(factory).start()


def _all_fail_with(futures: list[Any], error: type[BaseException]) -> None:
    """Every one of ``futures`` resolves within ``WAIT``, each failing with ``error``."""
    _done, pending = wait(futures, timeout=WAIT)
    assert not pending
    for f in futures:
        with pytest.raises(error):
            f.result()


def _kill_child_and_expect_died(d: ProcessDispatcher, futures: list[Any]) -> None:
    """SIGKILL the dispatcher's child; every one of ``futures`` then fails with
    :class:`DispatcherProcessDied` within ``WAIT``."""
    pid = d.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _all_fail_with(futures, DispatcherProcessDied)


def test_child_killed_fails_pending_futures_typed(cluster: Cluster) -> None:
    pods = [cluster.pod(f"k{i}") for i in range(6)]
    # four bindings in flight on the server, two queued
    d, futures = cluster.held_bindings(pods, 4)
    _kill_child_and_expect_died(d, futures)
    with pytest.raises(DispatcherProcessDied):
        d.submit(PodBinding.for_pod(pods[0], "node-2"))
    assert d.stop(timeout=5.0) is False
    cluster.held.gate.set()


def test_a_second_stop_after_the_child_died_returns_the_first_ones_answer(
    cluster: Cluster,
) -> None:
    """``stop()`` is idempotent: a later call returns the first one's answer. The child was
    killed with calls pending, so not every call finished: False, both times."""
    pods = [cluster.pod(f"k{i}") for i in range(3)]
    d, futures = cluster.held_bindings(pods, 1, workers=1)
    _kill_child_and_expect_died(d, futures)
    d.cancel(str(pods[0]["metadata"]["uid"]))  # the child is gone: nothing to withdraw
    assert d.stop(timeout=5.0) is False
    assert d.stop(timeout=5.0) is False
    cluster.held.gate.set()


def test_stop_drains_pending_calls(cluster: Cluster) -> None:
    pods = [cluster.pod(f"d{i}") for i in range(12)]
    d, futures = cluster.held_bindings(pods, 2, workers=2)
    result: list[bool] = []
    stopper = threading.Thread(target=lambda: result.append(d.stop(drain=True, timeout=WAIT)))
    stopper.start()
    cluster.held.gate.set()  # the held requests and the ten queued ones finish during stop
    stopper.join(WAIT + 15)
    assert result == [True]
    assert {f.result(0) for f in futures} == {Outcome.SUCCESS}
    assert all(cluster.stored(f"d{i}")["spec"]["nodeName"] == "node-1" for i in range(12))
    assert d.stats()["sent"] == {"pod_binding": 12}  # the child's last figures


@pytest.mark.slow
def test_stop_without_drain_closes_what_is_left(cluster: Cluster) -> None:
    pods = [cluster.pod(f"n{i}") for i in range(5)]
    d, futures = cluster.held_bindings(pods, 1, workers=1)
    stopper = threading.Thread(target=lambda: d.stop(drain=False, timeout=2.0))
    stopper.start()
    _all_fail_with(futures[1:], DispatcherClosed)  # queued behind the held one
    cluster.held.gate.set()
    stopper.join(WAIT)
    assert not stopper.is_alive()
    assert futures[0].done()  # in flight at stop: it finished or was closed, exactly once
    assert all("nodeName" not in cluster.stored(f"n{i}")["spec"] for i in range(1, 5))


def test_unpicklable_cause_becomes_a_typed_stand_in() -> None:
    failed = CallFailed("boom", uid="u1", call_type="pod_binding", cause=_Unpicklable("x", 1))
    out = portable(failed)
    restored = pickle.loads(pickle.dumps(out))
    assert isinstance(restored, CallFailed)
    assert (restored.uid, restored.call_type) == ("u1", "pod_binding")
    assert isinstance(restored.cause, CallFailed) and "_Unpicklable" in str(restored.cause)
    closed = portable(DispatcherProcessDied("gone"))
    assert isinstance(pickle.loads(pickle.dumps(closed)), DispatcherProcessDied)


class _Unpicklable(Exception):
    """An exception whose constructor pickle cannot call back (two required arguments)."""

    def __init__(self, a: str, b: int) -> None:
        super().__init__(f"{a}{b}")


@pytest.mark.parametrize(
    "error",
    [
        CallStale("pod was bound since", uid="u1", call_type="pod_status_patch"),
        CallFailed("gave up", uid="u2", call_type="pod_binding", cause=ConflictError("409")),
        CallFailed("throttled", uid="u3", cause=TooManyRequestsError("429", retry_after=2.5)),
        LeadershipLost("lease lost"),
        ActorLimitExceeded("cap"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_typed_errors_survive_the_pipe(error: Exception) -> None:
    crossed = pickle.loads(dumps(portable(error)))
    assert type(crossed) is type(error)
    assert str(crossed) == str(error)
    assert vars(crossed).keys() == vars(error).keys()
    if isinstance(error, CallFailed) and error.cause is not None:
        assert isinstance(crossed, CallFailed)
        assert type(crossed.cause) is type(error.cause)
        assert vars(crossed.cause) == vars(error.cause)  # status, retry_after


def test_revoke_fails_pending_calls_and_later_submits(cluster: Cluster) -> None:
    pods = [cluster.pod(f"r{i}") for i in range(4)]
    cluster.held.gate.clear()
    with cluster.dispatcher(workers=1) as d:
        futures = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
        cluster.held.wait_arrived(1)  # one in flight on the server, three queued in the child
        d.revoke(LeadershipLost("lease lost"))
        _all_fail_with(futures[1:], LeadershipLost)
        with pytest.raises(LeadershipLost):
            d.submit(PodBinding.for_pod(pods[0], "node-2"))
        cluster.held.gate.set()
        assert futures[0].result(WAIT) is Outcome.SUCCESS  # on the wire: it finishes
    assert all("nodeName" not in cluster.stored(f"r{i}")["spec"] for i in range(1, 4))


class _TwoArgumentsLost(LeadershipLost):
    """Pickles, but does not unpickle: its constructor takes two arguments."""

    def __init__(self, reason: str, since: float) -> None:
        super().__init__(f"{reason} since {since}")


def _unpicklable_lost() -> LeadershipLost:
    error = LeadershipLost("lease lost")
    error.hook = lambda: None  # type: ignore[attr-defined]  # does not pickle
    return error


@pytest.mark.parametrize(
    "error",
    [_TwoArgumentsLost("lease lost", 1.0), _unpicklable_lost()],
    ids=["does-not-unpickle", "does-not-pickle"],
)
def test_revoke_with_an_error_that_does_not_cross_still_revokes_the_child(
    cluster: Cluster, error: LeadershipLost
) -> None:
    pods = [cluster.pod(f"rx{i}") for i in range(4)]
    cluster.held.gate.clear()
    with cluster.dispatcher(workers=1) as d:
        futures = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
        cluster.held.wait_arrived(1)  # one in flight on the server, three queued in the child
        d.revoke(error)
        # answered once the child carried out the revoke sent before it (one pipe, one mailbox)
        d.view(pods[-1]["metadata"]["uid"], timeout=WAIT)
        cluster.held.gate.set()
        _all_fail_with(futures[1:], type(error))
        with pytest.raises(type(error)):
            d.submit(PodBinding.for_pod(pods[0], "node-2"))
        assert futures[0].result(WAIT) is Outcome.SUCCESS
    assert all("nodeName" not in cluster.stored(f"rx{i}")["spec"] for i in range(1, 4))


def test_child_side_submit_errors_arrive_on_the_future(cluster: Cluster) -> None:
    first, second = cluster.pod("cap-1"), cluster.pod("cap-2")
    factory = functools.partial(KubernetesBackend.for_url, cluster.http.url, workers=2)
    config = DispatcherConfig(registry=RegistryConfig(max_live=1))
    with ProcessDispatcher(factory, config) as d:
        cluster.held.gate.clear()
        held = d.submit(PodBinding.for_pod(first, "node-1"))
        cluster.held.wait_arrived(1)  # the first actor stays alive while its call is held
        refused = d.submit(PodBinding.for_pod(second, "node-1"))
        with pytest.raises(ActorLimitExceeded):
            refused.result(WAIT)
        cluster.held.gate.set()
        assert held.result(WAIT) is Outcome.SUCCESS
    assert "nodeName" not in cluster.stored("cap-2")["spec"]


def test_gc_settings_apply_in_the_callers_process_too(cluster: Cluster) -> None:
    factory = functools.partial(KubernetesBackend.for_url, cluster.http.url, workers=2)
    config = DispatcherConfig(runtime=RuntimeConfig(gc_freeze=True))
    before = gc.get_freeze_count()  # 0, or what the interpreter froze at start (3.12)
    with ProcessDispatcher(factory, config) as d:
        assert gc.get_freeze_count() > before  # frozen at start, like an in-process dispatcher
        pod = cluster.pod("frozen")
        assert d.submit(PodBinding.for_pod(pod, "node-1")).result(WAIT) is Outcome.SUCCESS
    assert gc.get_freeze_count() == 0  # stop gives the objects back to the collector
    assert cluster.stored("frozen")["spec"]["nodeName"] == "node-1"


def test_freeze_gc_freezes_the_callers_process_too_and_stop_unfreezes(cluster: Cluster) -> None:
    """``ProcessDispatcher.freeze_gc()``: ``Dispatcher.freeze_gc`` in both processes, with
    ``gc_freeze`` off; ``stop`` gives the objects back to the collector."""
    before = gc.get_freeze_count()  # 0, or what the interpreter froze at start (3.12)
    with cluster.dispatcher(workers=2) as d:
        assert gc.get_freeze_count() == before
        d.freeze_gc()
        assert gc.get_freeze_count() > before
        pod = cluster.pod("f0")
        assert d.submit(PodBinding.for_pod(pod, "node-1")).result(WAIT) is Outcome.SUCCESS
    assert gc.get_freeze_count() == 0
    assert cluster.stored("f0")["spec"]["nodeName"] == "node-1"


_ORPHAN_SCRIPT = """
import functools, sys
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.actors.facade.process import ProcessDispatcher
if __name__ == "__main__":
    d = ProcessDispatcher(functools.partial(KubernetesBackend.for_url, sys.argv[1])).start()
    print(d.pid, flush=True)
    sys.stdin.read()  # until the test kills this process
"""


@pytest.mark.slow
def test_child_exits_when_its_parent_is_killed(cluster: Cluster, tmp_path: Path) -> None:
    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN_SCRIPT)
    parent = subprocess.Popen(
        [sys.executable, str(script), cluster.http.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    child: psutil.Process | None = None
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        parent.kill()  # SIGKILL: no stop(), no atexit; the child sees its pipe close
        parent.wait(WAIT)
        wait_for(
            lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
            WAIT,
            "the orphaned dispatcher process to exit",
            interval=0.05,
        )
    finally:
        if child is not None and child.is_running():
            child.kill()  # only when the assertion above failed: leave nothing behind
        parent.kill()
        parent.wait(WAIT)
        assert parent.stdin is not None and parent.stdout is not None
        parent.stdin.close()
        parent.stdout.close()


def test_stats_have_the_keys_of_the_threaded_dispatcher(cluster: Cluster) -> None:
    from tests.integration.test_dispatcher import STATS_KEYS

    d = cluster.dispatcher()
    with d:
        assert set(d.stats()) == STATS_KEYS
    assert set(d.stats()) == STATS_KEYS  # the child's last figures
    with pytest.raises(InvalidInputError, match="stopped: create a new ProcessDispatcher"):
        d.start()


def test_stats_while_stopping_give_the_previous_answer(cluster: Cluster) -> None:
    """``stats()``: while stopping, the previous answer; after ``stop``, the child's last
    figures."""
    pods = [cluster.pod(f"s{i}") for i in range(2)]
    d = cluster.dispatcher(workers=2).start()
    seen = d.stats()
    cluster.held.gate.clear()
    futures = [d.submit(PodBinding.for_pod(p, "node-1")) for p in pods]
    cluster.held.wait_arrived(2)
    answer: list[bool] = []
    stopper = threading.Thread(target=lambda: answer.append(d.stop(timeout=WAIT)))
    stopper.start()
    try:
        wait_for(lambda: d._closed, WAIT, "stop() to begin")  # the child drains the two
        assert d.stats() == seen
    finally:
        cluster.held.gate.set()
        stopper.join(WAIT + 15)
    assert answer == [True]
    assert {f.result(0) for f in futures} == {Outcome.SUCCESS}
    assert d.stats()["sent"] == {"pod_binding": 2}


def test_stats_raise_died_when_the_child_died_before_any_figures(cluster: Cluster) -> None:
    """After the child died, ``stats()`` gives the last figures it brought across, or raises
    ``DispatcherProcessDied`` if there were none; so does ``view()``, and so after ``stop``."""
    pod = cluster.pod("x0")
    d, futures = cluster.held_bindings([pod], 1, workers=1)
    _kill_child_and_expect_died(d, futures)
    with pytest.raises(DispatcherProcessDied):
        d.stats()
    with pytest.raises(DispatcherProcessDied):
        d.view(str(pod["metadata"]["uid"]), timeout=WAIT)
    assert d.stop(timeout=5.0) is False
    with pytest.raises(DispatcherProcessDied):
        d.stats()
    cluster.held.gate.set()


# --------------------------------------------------------------------------- back-pressure


class Once:
    """Counts how often each future resolved (done callbacks)."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def track(self, futures: list[Any]) -> list[Any]:
        for f in futures:
            f.add_done_callback(self._done)
        return futures

    def _done(self, f: Any) -> None:
        self.counts[id(f)] = self.counts.get(id(f), 0) + 1

    def each_once(self, futures: list[Any]) -> bool:
        return all(self.counts.get(id(f)) == 1 for f in futures)


def _held_window(cluster: Cluster, d: ProcessDispatcher, names: list[str]) -> list[Any]:
    """Status patches for fresh pods ``names``; the first two are held on the server (window
    2, 2 workers), the rest wait in the parent."""
    pods = [cluster.pod(n) for n in names]
    cluster.held.gate.clear()
    futures = [d.submit(PodStatusPatch.for_pod(p, conditions=[cond()])) for p in pods]
    cluster.held.wait_arrived(2)
    assert (d.in_flight, d.waiting) == (2, len(names) - 2)
    return futures


def test_window_bounds_calls_in_the_child_and_bindings_overtake(cluster: Cluster) -> None:
    once = Once()
    with cluster.dispatcher(workers=2, max_in_flight=2) as d:
        patches = once.track(_held_window(cluster, d, [f"w{i}" for i in range(8)]))
        bind = once.track([d.submit(PodBinding.for_pod(cluster.pod("b"), "node-1"))])
        assert d.waiting == 7  # six patches and the binding wait here, not in the child
        # The two held patches end; the two calls that take their room are held in turn, so
        # nothing else can leave the parent before them (requests of two workers that run
        # at once may reach the server's log in either order).
        cluster.held.gate.let_through(2)
        cluster.held.wait_arrived(4)
        assert (d.in_flight, d.waiting) == (2, 5)
        # Those two end as well, and are in the log before anything leaves the parent after
        # them: the two calls that take their room in turn are held. (Opening the gate here
        # instead would race the binding's server thread against the patches sent after the
        # other one.)
        cluster.held.gate.let_through(2)
        cluster.held.wait_arrived(6)
        assert (d.in_flight, d.waiting) == (2, 3)
        cluster.held.gate.set()
        _done, pending = wait([*patches, *bind], timeout=WAIT)
        assert not pending
        assert {f.result() for f in [*patches, *bind]} == {Outcome.SUCCESS}
        assert (d.in_flight, d.waiting) == (0, 0)
    ops = [(r.op, r.name) for r in cluster.server.request_log if r.op in ("patch_status", "bind")]
    assert len(ops) == 9
    assert ops.index(("bind", "b")) in (2, 3)  # behind the two held patches, ahead of the rest
    assert once.each_once([*patches, *bind])


def test_backlog_counts_the_calls_waiting_in_the_caller(cluster: Cluster) -> None:
    """``backlog_at(call_type)`` counts the calls not yet resolved in the child or waiting in
    the caller, in that lane and the lanes above; a thread paced on the binding lane goes on
    once the binding waiting behind the full window resolved."""
    with cluster.dispatcher(workers=2, max_in_flight=2) as d:
        patches = _held_window(cluster, d, ["w0", "w1", "w2", "w3"])  # 2 in the child, 2 here
        bind = d.submit(PodBinding.for_pod(cluster.pod("b"), "node-1"))
        assert (d.in_flight, d.waiting) == (2, 3)
        assert d.backlog == d.backlog_at("pod_status_patch") == 5
        assert d.backlog_at("pod_binding") == 1  # the binding, waiting in the caller
        answer: Future[bool] = Future()
        waiter = threading.Thread(
            target=lambda: answer.set_result(d.wait_backlog(1, WAIT, call_type="pod_binding"))
        )
        waiter.start()
        try:
            assert not answer.done()
        finally:
            cluster.held.gate.set()
        assert answer.result(WAIT) is True
        waiter.join(WAIT)
        assert bind.result(WAIT) is Outcome.SUCCESS
        assert {f.result(WAIT) for f in patches} == {Outcome.SUCCESS}
        wait_for(lambda: d.backlog == 0, WAIT, "nothing unresolved")
    assert cluster.stored("b")["spec"]["nodeName"] == "node-1"


def test_window_keeps_one_objects_order(cluster: Cluster) -> None:
    with cluster.dispatcher(workers=2, max_in_flight=2) as d:
        patches = _held_window(cluster, d, ["o0", "o1", "x"])
        bind = d.submit(PodBinding.for_pod(cluster.stored("x"), "node-1"))
        cluster.held.gate.set()
        assert bind.result(WAIT) is Outcome.SUCCESS
        assert {f.result(WAIT) for f in patches} == {Outcome.SUCCESS}
    ops = [r.op for r in cluster.server.request_log if r.name == "x" and r.op != "get"]
    assert ops == ["patch_status", "bind"]  # the binding took x's patch along, ahead of it


def test_cancel_and_delete_resolve_waiting_calls_in_the_parent(cluster: Cluster) -> None:
    once = Once()
    with cluster.dispatcher(workers=2, max_in_flight=2) as d:
        futures = once.track(_held_window(cluster, d, ["c0", "c1", "c2", "c3", "c4"]))
        d.cancel(str(cluster.stored("c2")["metadata"]["uid"]))
        d.cancel(str(cluster.stored("c3")["metadata"]["uid"]), "pod_binding")  # other type
        d.on_delete(cluster.stored("c4"))
        for f, why in ((futures[2], "cancelled by caller"), (futures[4], "object deleted")):
            with pytest.raises(CallCancelled, match=why) as err:
                f.result(0)
            assert err.value.call_type == "pod_status_patch"
        assert d.waiting == 1
        cluster.held.gate.set()
        assert futures[3].result(WAIT) is Outcome.SUCCESS
        assert {f.result(WAIT) for f in futures[:2]} == {Outcome.SUCCESS}
    sent = {r.name for r in cluster.server.request_log if r.op == "patch_status"}
    assert sent == {"c0", "c1", "c3"}
    assert once.each_once(futures)


def test_a_deletion_waiting_in_the_parent_succeeds_when_its_object_is_deleted(
    cluster: Cluster,
) -> None:
    """A preemption waiting in the parent's window when its pod's deletion is seen has got its
    way: ``SUCCESS``, unsent, as in a dispatcher in the caller's process."""
    with cluster.dispatcher(workers=2, max_in_flight=2) as d:
        patches = _held_window(cluster, d, ["d0", "d1"])
        victim = cluster.pod("victim")
        preemption = d.preempt(victim)
        assert d.waiting == 1
        d.on_delete(victim)
        assert preemption.result(0) is Outcome.SUCCESS
        cluster.held.gate.set()
        assert {f.result(WAIT) for f in patches} == {Outcome.SUCCESS}
    assert [r.op for r in cluster.server.request_log if r.name == "victim"] == []


def test_view_does_not_show_a_call_still_waiting_in_the_parent(cluster: Cluster) -> None:
    with cluster.dispatcher(workers=2, max_in_flight=2) as d:
        bound = d.submit(PodBinding.for_pod(cluster.pod("late"), "node-1"))
        assert bound.result(WAIT) is Outcome.SUCCESS  # the child tracks it
        futures = _held_window(cluster, d, ["v0", "v1"])
        note = cond("DisruptionTarget", "True", "Waiting")
        waiting = d.submit(PodStatusPatch.for_pod(cluster.stored("late"), conditions=[note]))
        assert d.waiting == 1
        in_child = d.view(str(cluster.stored("v0")["metadata"]["uid"]), timeout=WAIT)
        assert in_child is not None and in_child["status"]["conditions"]  # in flight: shown
        seen = d.view(str(cluster.stored("late")["metadata"]["uid"]), timeout=WAIT)
        assert seen is not None and seen["spec"]["nodeName"] == "node-1"
        shown = {c["type"] for c in seen["status"]["conditions"]}
        assert "DisruptionTarget" not in shown  # waiting in the parent: not shown
        cluster.held.gate.set()
        assert {f.result(WAIT) for f in [*futures, waiting]} == {Outcome.SUCCESS}
    stored = {c["type"] for c in cluster.stored("late")["status"]["conditions"]}
    assert "DisruptionTarget" in stored


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_the_child_ignores_sigint(cluster: Cluster) -> None:
    """The caller decides when the child stops: a Ctrl-C (SIGINT to the process group) leaves
    it running, and it still binds what it is given."""
    pods = [cluster.pod(f"i{i}") for i in range(2)]
    d = cluster.dispatcher().start()
    try:
        pid = d.pid
        assert pid is not None
        status = Path(f"/proc/{pid}/status").read_text()
        ignored = int(
            next(ln for ln in status.splitlines() if ln.startswith("SigIgn:")).split()[1], 16
        )
        assert ignored & (1 << (signal.SIGINT - 1)), "SIGINT is not ignored in the child"
        os.kill(pid, signal.SIGINT)
        assert d.submit(PodBinding.for_pod(pods[0], "node-1")).result(WAIT) is Outcome.SUCCESS
        assert d.submit(PodBinding.for_pod(pods[1], "node-1")).result(WAIT) is Outcome.SUCCESS
    finally:
        assert d.stop(timeout=WAIT) is True
    assert [cluster.stored(p["metadata"]["name"])["spec"]["nodeName"] for p in pods] == [
        "node-1"
    ] * 2


def test_stop_resolves_waiting_calls(cluster: Cluster) -> None:
    once = Once()
    d = cluster.dispatcher(workers=2, max_in_flight=2).start()
    futures = once.track(_held_window(cluster, d, [f"s{i}" for i in range(6)]))
    stopper = threading.Thread(target=lambda: d.stop(drain=False, timeout=2.0))
    stopper.start()
    _all_fail_with(futures[2:], DispatcherClosed)  # waiting in the parent: closed at once
    cluster.held.gate.set()
    stopper.join(WAIT)
    assert not stopper.is_alive()
    assert all(f.done() for f in futures[:2])
    sent = {r.name for r in cluster.server.request_log if r.op == "patch_status"}
    assert sent <= {"s0", "s1"}
    assert once.each_once(futures)


def test_draining_stop_sends_the_waiting_calls(cluster: Cluster) -> None:
    d = cluster.dispatcher(workers=2, max_in_flight=2).start()
    futures = _held_window(cluster, d, [f"t{i}" for i in range(6)])
    result: list[bool] = []
    stopper = threading.Thread(target=lambda: result.append(d.stop(drain=True, timeout=WAIT)))
    stopper.start()
    cluster.held.gate.set()
    stopper.join(WAIT + 15)
    assert result == [True]
    assert {f.result(0) for f in futures} == {Outcome.SUCCESS}
    assert len([r for r in cluster.server.request_log if r.op == "patch_status"]) == 6


def test_revoke_resolves_waiting_calls(cluster: Cluster) -> None:
    once = Once()
    with cluster.dispatcher(workers=2, max_in_flight=2) as d:
        futures = once.track(_held_window(cluster, d, [f"v{i}" for i in range(5)]))
        d.revoke(LeadershipLost("lease lost"))
        for f in futures[2:]:
            with pytest.raises(LeadershipLost):
                f.result(0)  # resolved in the parent, at once
        assert d.waiting == 0
        cluster.held.gate.set()
        assert {f.result(WAIT) for f in futures[:2]} == {Outcome.SUCCESS}
    sent = {r.name for r in cluster.server.request_log if r.op == "patch_status"}
    assert sent == {"v0", "v1"}
    assert once.each_once(futures)


def test_child_death_resolves_waiting_calls(cluster: Cluster) -> None:
    once = Once()
    d = cluster.dispatcher(workers=2, max_in_flight=2).start()
    futures = once.track(_held_window(cluster, d, [f"k{i}" for i in range(5)]))
    seen = d.stats()
    _kill_child_and_expect_died(d, futures)
    assert (d.waiting, d.in_flight) == (0, 0)  # nothing will answer the calls it had
    assert d.stats() == seen  # the last figures brought across
    assert d.stop(timeout=5.0) is False
    cluster.held.gate.set()
    assert once.each_once(futures)


def test_child_killed_during_a_draining_stop_fails_the_calls_as_died(cluster: Cluster) -> None:
    pods = [cluster.pod(f"ks{i}") for i in range(4)]
    d, futures = cluster.held_bindings(pods, 2, workers=2)
    answer: list[bool] = []
    stopper = threading.Thread(target=lambda: answer.append(d.stop(timeout=WAIT)))
    stopper.start()
    wait_for(lambda: d._closed, WAIT, "stop() to begin")  # the child drains the held calls
    pid = d.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _all_fail_with(futures, DispatcherProcessDied)
    stopper.join(WAIT)
    assert answer == [False]
    cluster.held.gate.set()


def test_stop_kills_a_hung_child_after_its_deadline(cluster: Cluster) -> None:
    d = cluster.dispatcher(workers=2).start()
    pid = d.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # answers nothing, as a hung interpreter
    future = d.submit(PodBinding.for_pod(cluster.pod("hung"), "node-1"))
    assert d.stop(timeout=0.5) is False  # ends (the test's timeout bounds it) ...
    # ... with the hung child killed
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(DispatcherClosed):
        future.result(0)
    assert d.stop(timeout=0.5) is False  # idempotent: the first one's answer
    assert [r for r in cluster.server.request_log if r.op == "bind"] == []


def test_max_in_flight_is_checked() -> None:
    factory = functools.partial(KubernetesBackend.for_url, "http://127.0.0.1:1")
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(InvalidConfigError, match="max_in_flight"):
            ProcessDispatcher(factory, max_in_flight=bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- what crosses


def test_a_result_that_does_not_unpickle_fails_only_its_own_call(cluster: Cluster) -> None:
    """A binding whose error pickles but does not unpickle (two constructor arguments) fails
    with a CallFailed naming it; the results sent with it still reach their futures."""
    pods = [cluster.pod(f"refuse-{i}" if i % 10 == 5 else f"g{i}") for i in range(30)]
    factory = functools.partial(RefusingBackend, cluster.http.url, workers=4)
    config = DispatcherConfig(executor=ExecutorConfig(workers=4), retry=RetryConfig(budget=5.0))
    once = Once()
    cluster.held.gate.clear()
    with ProcessDispatcher(factory, config) as d:
        futures = once.track([d.submit(PodBinding.for_pod(p, "node-1")) for p in pods])
        cluster.held.wait_arrived(4)
        cluster.held.gate.set()  # the held bindings answer together, in the same batches
        _done, pending = wait(futures, timeout=WAIT)
        assert not pending
        assert (d.in_flight, d.backlog) == (0, 0)
    for pod, future in zip(pods, futures, strict=True):
        name = pod["metadata"]["name"]
        assert cluster.stored(name)["spec"]["nodeName"] == "node-1"  # every binding landed
        if name.startswith("refuse"):
            with pytest.raises(CallFailed) as err:
                future.result(0)
            assert err.value.uid == pod["metadata"]["uid"]
            assert isinstance(err.value.cause, CallFailed)
            assert "Unloadable: binding refused 42" in str(err.value.cause)
        else:
            assert future.result(0) is Outcome.SUCCESS
    assert once.each_once(futures)


def test_a_result_value_the_parent_cannot_load_fails_only_itself() -> None:
    """Each value crosses in a pickle of its own: one the parent cannot load (here: a class
    of a module it does not have) becomes a CallFailed naming why."""
    module = types.ModuleType("kdispatch_test_child_only")
    opaque = enum.Enum("opaque", {"X": 1}, module=module.__name__)
    module.opaque = opaque  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        data = dumps(opaque.X)
    finally:
        del sys.modules[module.__name__]
    ok, value = load_result(True, data)
    assert not ok and isinstance(value, CallFailed)
    assert "kdispatch_test_child_only" in str(value)
    assert load_result(True, Outcome.SUCCESS) == (True, Outcome.SUCCESS)
    assert load_result(True, dumps({"a": 1})) == (True, {"a": 1})


def test_a_call_the_child_cannot_unpickle_fails_alone(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that pickles here but does not load in the child (a class of a module only the
    parent has) fails with a CallFailed naming why; the calls sent in the same pipe write
    still land, and so do later ones."""
    module = types.ModuleType("kdispatch_test_parent_only")
    team = enum.StrEnum("team", {"A": "a"}, module=module.__name__)
    module.team = team  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    pods = [cluster.pod(f"u{i}") for i in range(30)]
    odd = pods[15]
    odd = {**odd, "metadata": {**odd["metadata"], "labels": {"team": team.A}}}
    once = Once()
    with cluster.dispatcher() as d:
        d.on_add(odd)  # nothing to answer: the child logs it and goes on
        calls = [PodBinding.for_pod(odd if i == 15 else p, "node-1") for i, p in enumerate(pods)]
        futures = once.track([d.submit(c) for c in calls])
        _done, pending = wait(futures, timeout=WAIT)
        assert not pending
        with pytest.raises(CallFailed, match=r"cannot unpickle.*kdispatch_test_parent_only"):
            futures[15].result(0)
        assert all(f.result(0) is Outcome.SUCCESS for i, f in enumerate(futures) if i != 15)
        late = d.submit(PodBinding.for_pod(cluster.pod("late"), "node-2"))
        assert late.result(WAIT) is Outcome.SUCCESS
        assert (d.in_flight, d.backlog) == (0, 0)
    for i in range(30):
        assert cluster.stored(f"u{i}")["spec"].get("nodeName") == (None if i == 15 else "node-1")
    assert cluster.stored("late")["spec"]["nodeName"] == "node-2"
    assert once.each_once(futures)


def test_each_message_is_framed_with_its_id() -> None:
    data = encode(("s", 7, "call"), 7) + encode(("c", "uid-1", None))
    size = int.from_bytes(data[:4], "little")
    assert int.from_bytes(data[4:12], "little", signed=True) == 7
    assert pickle.loads(data[12 : 12 + size]) == ("s", 7, "call")
    rest = data[12 + size :]
    assert int.from_bytes(rest[4:12], "little", signed=True) == -1
    assert pickle.loads(rest[12:]) == ("c", "uid-1", None)


def test_custom_call_types_cross_to_the_child(cluster: Cluster) -> None:
    """A registry with a user call type (importable in the child) is sent to the child, and
    the call lands on the server."""
    call_types = default_call_types()
    call_types.register(UserBinding)
    pod = cluster.pod("custom")
    factory = functools.partial(KubernetesBackend.for_url, cluster.http.url, workers=2)
    with ProcessDispatcher(factory, call_types=call_types) as d:
        future = d.submit(UserBinding(ObjectRef.of(pod), "node-3", basis=pod))
        assert future.result(WAIT) is Outcome.SUCCESS
        assert d.backlog_at("user_binding") == 0
        stats = d.stats()
    assert stats["sent"] == {"user_binding": 1}
    assert cluster.stored("custom")["spec"]["nodeName"] == "node-3"
    assert [r.op for r in cluster.server.request_log if r.name == "custom"].count("bind") == 1


# --------------------------------------------------------------------------- bad input


def test_start_timeout_and_max_in_flight_are_checked() -> None:
    factory = functools.partial(KubernetesBackend.for_url, "http://127.0.0.1:1")
    for bad in (0, -1, math.inf, math.nan, True, "5", None):
        with pytest.raises(InvalidConfigError, match="start_timeout"):
            ProcessDispatcher(factory, start_timeout=bad)  # type: ignore[arg-type]
    for bad in (0, -1, 1.5, True, "5"):
        with pytest.raises(InvalidConfigError, match="max_in_flight"):
            ProcessDispatcher(factory, max_in_flight=bad)  # type: ignore[arg-type]


def test_a_bad_timeout_changes_nothing_and_none_drains(cluster: Cluster) -> None:
    """stop() and view() refuse a bad timeout before anything changes: the dispatcher still
    serves and stops. stop(timeout=None) drains without a deadline."""
    pods = [cluster.pod(f"t{i}") for i in range(6)]
    d, futures = cluster.held_bindings(pods[:4], 2, workers=2)
    uid = str(pods[0]["metadata"]["uid"])
    for bad in (-1, math.inf, -math.inf, math.nan, "5", True):
        with pytest.raises(InvalidInputError, match="timeout"):
            d.stop(timeout=bad)  # type: ignore[arg-type]
    for bad in (0, -1, math.inf, math.nan, "5", True):
        with pytest.raises(InvalidInputError, match="timeout"):
            d.view(uid, timeout=bad)  # type: ignore[arg-type]
    seen = d.view(uid, timeout=None)  # no limit
    assert seen is not None and seen["spec"]["nodeName"] == "node-1"  # pending, applied
    futures.append(d.submit(PodBinding.for_pod(pods[4], "node-2")))  # still open
    result: list[bool] = []
    stopper = threading.Thread(target=lambda: result.append(d.stop(timeout=None)))
    stopper.start()
    cluster.held.gate.set()
    stopper.join(WAIT + 15)
    assert result == [True]
    assert {f.result(0) for f in futures} == {Outcome.SUCCESS}
    assert [cluster.stored(f"t{i}")["spec"].get("nodeName") for i in range(6)] == [
        *["node-1"] * 4,
        "node-2",
        None,
    ]
    with pytest.raises(DispatcherClosed):
        d.submit(PodBinding.for_pod(pods[5], "node-1"))


def test_an_object_that_does_not_pickle_is_refused_before_anything_changes(
    cluster: Cluster,
) -> None:
    """on_add, on_update and on_delete raise InvalidObjectError for an object that does not
    pickle, as submit raises for such a call; on_delete leaves the waiting calls alone."""
    with cluster.dispatcher(workers=2, max_in_flight=2) as d:
        futures = _held_window(cluster, d, ["x0", "x1", "x2"])
        stored = cluster.stored("x2")
        odd = {**stored, "metadata": {**stored["metadata"], "annotations": {"h": threading.Lock()}}}
        for observe in (d.on_add, d.on_update, d.on_delete):
            with pytest.raises(InvalidObjectError, match="does not pickle"):
                observe(odd)
        assert (d.in_flight, d.waiting) == (2, 1)  # x2's patch still waits in the parent
        cluster.held.gate.set()
        assert {f.result(WAIT) for f in futures} == {Outcome.SUCCESS}
    sent = {r.name for r in cluster.server.request_log if r.op == "patch_status"}
    assert sent == {"x0", "x1", "x2"}
