"""A backend is whatever has the protocol's methods, found as a call finds them: a wrapper
that delegates through ``__getattr__`` works for every call type, Events and evictions
included, on every supported Python (``isinstance`` against a protocol ignores
``__getattr__`` from Python 3.12 on). Checked on the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from prometheus_client import CollectorRegistry

from kdispatch import (
    ApiBackend,
    EventRecorder,
    Obj,
    ObjectRef,
    Outcome,
    PodBinding,
    PodEviction,
    default_call_types,
)
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.errors import InvalidInputError
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.configs import FAST
from tests.factories import InertCall

pytestmark = pytest.mark.timeout(60)


class Delegating:
    """Every attribute is the inner backend's: a user's logging or tracing proxy."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.used: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.used.append(name)
        return getattr(self.inner, name)


def test_a_delegating_backend_serves_bindings_events_and_evictions(
    server: InMemoryApiServer,
) -> None:
    a = server.create(make_pod("a"))
    b = server.create(make_pod("b"))
    proxy = Delegating(server)
    with Dispatcher(proxy, FAST) as d:
        assert d.submit(PodBinding.for_pod(a, "n1")).result(timeout=10) is Outcome.SUCCESS
        recorder = EventRecorder(d, controller="s")
        event = recorder.event(
            a, type="Normal", reason="Scheduled", action="Binding", note="bound to n1"
        )
        assert event is not None and event.result(timeout=10) is Outcome.SUCCESS
        assert d.submit(PodEviction.for_pod(b)).result(timeout=10) is Outcome.SUCCESS
    bound = server.get_object("Pod", "default", "a")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    assert server.get_object("Pod", "default", "b") is None
    [stored] = server.list("Event").items
    assert stored["note"] == "bound to n1"
    assert {"bind", "create", "evict"} <= set(proxy.used)


def test_a_backend_without_the_protocol_methods_is_refused_by_name() -> None:
    class Partial:
        def get(self, kind: str, namespace: str, name: str) -> Any: ...

        def bind(self, *args: Any, **kwargs: Any) -> None: ...

    with pytest.raises(InvalidInputError, match=r"Partial \(no patch_status, delete\)"):
        Dispatcher(Partial())  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class LabelCount(InertCall):
    """Lists the pods of its object's namespace through a method outside the protocol."""

    call_type: ClassVar[str] = "label_count"
    relevance: ClassVar[int] = 1

    def send(self, backend: ApiBackend, obj: Obj | None) -> Obj | None:
        assert not isinstance(backend, InMemoryApiServer)  # the charging wrapper around it
        pods = backend.list("Pod", self.ref.namespace)  # type: ignore[attr-defined]
        return {"count": len(pods.items)}


def test_a_call_reaches_any_method_of_the_backend_each_call_a_counted_request(
    server: InMemoryApiServer,
) -> None:
    pod = server.create(make_pod("a"))
    server.create(make_pod("b"))
    call_types = default_call_types()
    call_types.register(LabelCount)
    metrics = CollectorRegistry()
    with Dispatcher(server, FAST, call_types=call_types, metrics_registry=metrics) as d:
        call = LabelCount(ObjectRef.of(pod), basis=pod)
        assert d.submit(call).result(timeout=10) is Outcome.SUCCESS
    counted = {"call_type": "label_count", "verb": "list"}
    assert metrics.get_sample_value("kdispatch_requests_total", counted) == 1
