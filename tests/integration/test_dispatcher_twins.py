"""The two dispatchers keep the same promises (``DispatcherLike``): revoke, cancel and the
queries behave alike on a :class:`Dispatcher` and a :class:`ProcessDispatcher`, checked on the
server. The process dispatcher's child reaches the in-memory apiserver over HTTP."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from kdispatch import (
    Dispatcher,
    DispatcherClosed,
    DispatcherConfig,
    InvalidObjectError,
    KubernetesBackend,
    LeadershipLost,
    Outcome,
    PodBinding,
    ProcessDispatcher,
    RateLimitConfig,
    UnknownCallTypeError,
)
from kdispatch.actors.model.objects import Obj
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, make_pod
from tests.aio import async_test

WAIT = 30.0
"""Upper bound of any single wait."""

pytestmark = pytest.mark.timeout(120)


@dataclass
class Twin:
    server: InMemoryApiServer
    make: Callable[..., Dispatcher | ProcessDispatcher]

    def pod(self, name: str) -> Obj:
        return self.server.create(make_pod(name))

    def node_of(self, name: str) -> object:
        return self.server.get("Pod", "default", name)["spec"].get("nodeName")


@pytest.fixture(params=["inprocess", "process"])
def twin(request: pytest.FixtureRequest) -> Iterator[Twin]:
    """A way to build each kind of dispatcher (not started) against one in-memory server."""
    server = InMemoryApiServer()
    with ApiServerHTTP(server) as http:
        make: Callable[..., Dispatcher | ProcessDispatcher]
        if request.param == "inprocess":
            make = functools.partial(Dispatcher, server)
        else:
            make = functools.partial(
                ProcessDispatcher, functools.partial(KubernetesBackend.for_url, http.url)
            )
        yield Twin(server, make)


def test_revoked_before_start_the_intake_stays_shut(twin: Twin) -> None:
    pod = twin.pod("p1")
    d = twin.make()
    d.revoke(LeadershipLost("lease lost before start"))
    with d.start():
        with pytest.raises(LeadershipLost, match="lease lost before start"):
            d.submit(PodBinding.for_pod(pod, "node-1"))
        assert d.revoked is not None
    assert twin.node_of("p1") is None


def test_a_revoked_dispatcher_still_answers_queries(twin: Twin) -> None:
    pod = twin.pod("p1")
    uid = pod["metadata"]["uid"]
    with twin.make().start() as d:
        d.on_add(pod)
        assert d.submit(PodBinding.for_pod(pod, "node-1")).result(WAIT) is Outcome.SUCCESS
        d.revoke(LeadershipLost("lease lost"))
        assert d.stats()["sent"] == {"pod_binding": 1}
        assert d.tokens_taken == 1
        seen = d.view(uid, timeout=WAIT)  # its actor still tracks it
        assert seen is not None and seen["spec"]["nodeName"] == "node-1"
    assert twin.node_of("p1") == "node-1"


@async_test
async def test_a_revoked_dispatcher_still_answers_aview(twin: Twin) -> None:
    pod = twin.pod("p1")
    uid = pod["metadata"]["uid"]
    with twin.make().start() as d:
        d.on_add(pod)
        assert await d.asubmit(PodBinding.for_pod(pod, "node-1")) is Outcome.SUCCESS
        d.revoke(LeadershipLost("lease lost"))
        seen = await d.aview(uid, timeout=WAIT)  # its actor still tracks it
        assert seen is not None and seen["spec"]["nodeName"] == "node-1"


def test_cancel_with_nothing_running_does_nothing(twin: Twin) -> None:
    pod = twin.pod("p1")
    uid = pod["metadata"]["uid"]
    d = twin.make()

    def cancel_checks() -> None:
        assert d.cancel(uid) is None
        assert d.cancel(uid, "pod_binding") is None
        with pytest.raises(InvalidObjectError):
            d.cancel("")
        with pytest.raises(UnknownCallTypeError):
            d.cancel(uid, "no_such_call_type")

    cancel_checks()  # before start
    with d.start():
        d.revoke(LeadershipLost("lease lost"))
        cancel_checks()  # revoked: nothing left to withdraw
    cancel_checks()  # stopped
    assert twin.node_of("p1") is None


def test_a_second_stop_returns_the_first_ones_answer(twin: Twin) -> None:
    """A stop whose deadline left a call unsent returns False, and so does every later stop:
    that call did not finish, however settled the dispatcher is now."""
    first, second = twin.pod("p1"), twin.pod("p2")
    one_token = DispatcherConfig(rate_limit=RateLimitConfig(qps=0.001, burst=1))
    d = twin.make(one_token).start()
    assert d.submit(PodBinding.for_pod(first, "node-1")).result(WAIT) is Outcome.SUCCESS
    stuck = d.submit(PodBinding.for_pod(second, "node-1"))  # no token for 1,000 s
    assert d.stop(drain=True, timeout=0.2) is False
    with pytest.raises(DispatcherClosed):
        stuck.result(WAIT)
    assert d.stop() is False
    assert twin.node_of("p2") is None


@pytest.mark.parametrize(
    "empty", [(), [], set(), frozenset(), None, "iterator"], ids=lambda e: type(e).__name__
)
def test_an_empty_after_holds_nothing(twin: Twin, empty: object) -> None:
    """Any empty ``after`` (a collection, ``None`` or an exhausted iterator) names no
    prerequisite: the call is sent as if it had none."""
    pod = twin.pod("p1")
    after = iter(()) if empty == "iterator" else empty
    with twin.make().start() as d:
        future = d.submit(PodBinding.for_pod(pod, "node-1"), after=after)  # type: ignore[arg-type]
        assert future.result(WAIT) is Outcome.SUCCESS
    assert twin.node_of("p1") == "node-1"
