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
    KubernetesBackend,
    LeadershipLost,
    PodBinding,
    ProcessDispatcher,
)
from kdispatch.actors.model.objects import Obj
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, make_pod

WAIT = 30.0
"""Upper bound of any single wait."""

pytestmark = pytest.mark.timeout(120)


@dataclass
class Twin:
    server: InMemoryApiServer
    make: Callable[[], Dispatcher | ProcessDispatcher]

    def pod(self, name: str) -> Obj:
        return self.server.create(make_pod(name))

    def node_of(self, name: str) -> object:
        return self.server.get("Pod", "default", name)["spec"].get("nodeName")


@pytest.fixture(params=["inprocess", "process"])
def twin(request: pytest.FixtureRequest) -> Iterator[Twin]:
    """A way to build each kind of dispatcher (not started) against one in-memory server."""
    server = InMemoryApiServer()
    with ApiServerHTTP(server) as http:
        make: Callable[[], Dispatcher | ProcessDispatcher]
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
