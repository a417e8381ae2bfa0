"""ProcessDispatcher's asyncio forms: ``asubmit`` and ``aview`` on the caller's loop.

Same semantics and typed errors as the in-process dispatcher's
(``tests/integration/test_aio.py``): the call is submitted when ``asubmit`` is called, bad input
raises there, outside a running loop it is :class:`NoEventLoopError` and nothing is submitted,
cancelling the awaiting side does not withdraw the call; ``aview`` raises ``TimeoutError`` after
its timeout and drops the late answer. The child runs against ``ApiServerHTTP``; requests are
held on the server (``HeldSleep``) and the child is frozen with SIGSTOP to make an answer late.
Every check reads the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kdispatch import Outcome
from kdispatch.actors.engine.aio import NoEventLoopError
from kdispatch.actors.facade.process import DispatcherProcessDied, ProcessDispatcher
from kdispatch.actors.model.config import DispatcherConfig, ExecutorConfig, RetryConfig
from kdispatch.actors.model.errors import (
    DispatcherClosed,
    InvalidCallError,
    InvalidInputError,
    InvalidObjectError,
    ObjectNotFound,
)
from kdispatch.actors.model.objects import Obj
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer, Latency, make_pod
from kdispatch.testing.waiting import until
from tests.aio import async_test
from tests.integration.test_process_dispatcher import WAIT, HeldSleep

pytestmark = pytest.mark.timeout(120)


@dataclass
class Env:
    server: InMemoryApiServer
    held: HeldSleep
    d: ProcessDispatcher

    def pod(self, name: str) -> Obj:
        return self.server.create(make_pod(name))

    def node_of(self, name: str) -> str | None:
        node = self.server.get("Pod", "default", name)["spec"].get("nodeName")
        return node if isinstance(node, str) else None


@pytest.fixture
def env() -> Iterator[Env]:
    """A started ProcessDispatcher (stopped off the loop, by the fixture) whose bindings and
    patches wait on the server's gate."""
    held = HeldSleep()
    server = InMemoryApiServer(
        latency=Latency(per_op={"bind": 1.0, "patch_status": 1.0}), sleep=held
    )
    with ApiServerHTTP(server) as http:
        factory = functools.partial(KubernetesBackend.for_url, http.url, workers=2)
        config = DispatcherConfig(executor=ExecutorConfig(workers=2), retry=RetryConfig(budget=5.0))
        d = ProcessDispatcher(factory, config).start()
        try:
            yield Env(server, held, d)
        finally:
            held.gate.set()
            pid = d.pid
            if pid is not None:
                resume(pid)
            d.stop(timeout=10.0)


def resume(pid: int) -> None:
    """Resume the child if a test left it stopped (SIGCONT to a gone process is fine)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


@async_test
async def test_asubmit_resolves_on_the_loop_and_the_pod_is_bound(env: Env) -> None:
    pods = [env.pod(f"p{i}") for i in range(5)]
    outcomes = await asyncio.gather(*(env.d.asubmit(PodBinding.for_pod(p, "node-1")) for p in pods))
    assert outcomes == [Outcome.SUCCESS] * 5
    assert [env.node_of(f"p{i}") for i in range(5)] == ["node-1"] * 5


@async_test
async def test_asubmit_never_blocks_the_loop_and_cancelling_the_await_keeps_the_call(
    env: Env,
) -> None:
    pod = env.pod("held")
    env.held.gate.clear()
    awaited = env.d.asubmit(PodBinding.for_pod(pod, "node-1"))
    ticks = 0

    def in_flight() -> bool:
        nonlocal ticks
        ticks += 1  # the loop keeps running while the request is held on the server
        return env.held.arrived >= 1

    await until(in_flight, WAIT, "the binding in flight")
    assert ticks > 1 and not awaited.done()
    awaited.cancel()  # the awaiting side gives up: the call stays with the dispatcher
    env.held.gate.set()
    await until(lambda: env.node_of("held") == "node-1", WAIT, "held bound to node-1")
    await until(
        lambda: env.d.outstanding == 0, WAIT, "no call outstanding"
    )  # its own future resolved, exactly once
    assert [r.name for r in env.server.request_log if r.op == "bind"] == ["held"]


@async_test
async def test_asubmit_raises_what_result_would(env: Env) -> None:
    ghost = make_pod("ghost", uid="uid-ghost")  # never created on the server
    with pytest.raises(ObjectNotFound) as err:
        await env.d.asubmit(PodBinding.for_pod(ghost, "node-1"))
    assert (err.value.uid, err.value.call_type) == ("uid-ghost", "pod_binding")


def test_asubmit_outside_a_loop_is_a_typed_error_and_submits_nothing(env: Env) -> None:
    pod = env.pod("p1")
    with pytest.raises(NoEventLoopError):
        env.d.asubmit(PodBinding.for_pod(pod, "node-1"))
    assert env.d.outstanding == 0
    assert env.d.submit(PodBinding.for_pod(env.pod("p2"), "node-1")).result(WAIT) is Outcome.SUCCESS
    assert env.d.stats()["sent"] == {"pod_binding": 1}  # only p2 reached the child
    assert env.node_of("p1") is None


@async_test
async def test_asubmit_and_aview_bad_input_raise_at_the_call(env: Env) -> None:
    with pytest.raises(InvalidCallError):
        env.d.asubmit("bind p1")  # type: ignore[arg-type]
    with pytest.raises(InvalidObjectError):
        env.d.aview("not a uid!").close()
    with pytest.raises(InvalidInputError):
        env.d.aview("uid-1", timeout=-1).close()
    with pytest.raises(InvalidInputError):
        env.d.aview("uid-1", timeout=math.nan).close()
    assert env.d.outstanding == 0


@async_test
async def test_aview_shows_the_pending_mutation_and_none_when_untracked(env: Env) -> None:
    pod = env.pod("viewed")
    uid = str(pod["metadata"]["uid"])
    env.d.on_add(pod)
    env.held.gate.clear()
    patch = env.d.asubmit(PodStatusPatch.for_pod(pod, nominated_node_name="node-7"))
    await until(
        lambda: env.held.arrived >= 1, WAIT, "a request held in flight"
    )  # in flight, not yet on the server
    seen = await env.d.aview(uid)
    assert seen is not None and seen["status"]["nominatedNodeName"] == "node-7"
    assert env.server.get("Pod", "default", "viewed")["status"].get("nominatedNodeName") is None
    assert await env.d.aview("untracked-uid") is None
    env.held.gate.set()
    assert await patch is Outcome.SUCCESS
    assert env.server.get("Pod", "default", "viewed")["status"]["nominatedNodeName"] == "node-7"


@async_test
async def test_aview_times_out_and_the_late_answer_is_dropped(env: Env) -> None:
    pod = env.pod("late")
    uid = str(pod["metadata"]["uid"])
    env.held.gate.clear()
    patch = env.d.asubmit(PodStatusPatch.for_pod(pod, nominated_node_name="node-3"))
    await until(
        lambda: env.held.arrived >= 1, WAIT, "a request held in flight"
    )  # tracked, its patch held in flight
    pid = env.d.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # the child cannot answer until it is resumed
    try:
        with pytest.raises(TimeoutError):
            await env.d.aview(uid, timeout=0.2)
    finally:
        os.kill(pid, signal.SIGCONT)
    seen = await env.d.aview(uid)  # the late answer went nowhere; this one is answered
    assert seen is not None and seen["status"]["nominatedNodeName"] == "node-3"
    env.held.gate.set()
    assert await patch is Outcome.SUCCESS


@async_test
async def test_a_dead_child_fails_the_awaits_typed(env: Env) -> None:
    pod = env.pod("doomed")
    env.held.gate.clear()
    awaited = env.d.asubmit(PodBinding.for_pod(pod, "node-1"))
    await until(lambda: env.held.arrived >= 1, WAIT, "a request held in flight")
    pid = env.d.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(DispatcherProcessDied):
        await awaited
    with pytest.raises(DispatcherProcessDied):
        env.d.asubmit(PodBinding.for_pod(env.pod("after"), "node-1"))
    with pytest.raises(DispatcherClosed):
        await env.d.aview(str(pod["metadata"]["uid"]))
