"""The in-memory apiserver called directly (what most tests run against) answers as it does
behind :class:`ApiServerHTTP` through either transport of :class:`KubernetesBackend`: the same
error type for the same request, the same state left on the server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kdispatch import (
    ApiError,
    BadResponseError,
    InvalidRequestError,
    KubernetesBackend,
    ServerError,
    TooManyRequestsError,
)
from kdispatch.actors.model.kinds import KindTable
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server(kinds: KindTable) -> InMemoryApiServer:
    return InMemoryApiServer(kinds=kinds)


@pytest.fixture(params=["memory", "lean", "client"])
def backend(
    request: pytest.FixtureRequest, server: InMemoryApiServer, kinds: KindTable
) -> Iterator[Any]:
    """The server itself, or a KubernetesBackend reaching it over HTTP with one transport."""
    if request.param == "memory":
        yield server
        return
    with (
        ApiServerHTTP(server, kinds=kinds) as http,
        KubernetesBackend.for_url(http.url, transport=request.param, kinds=kinds) as b,
    ):
        yield b


def test_a_crd_refuses_strategic_merge_patches(server: InMemoryApiServer, backend: Any) -> None:
    claim = server.create(
        {"apiVersion": "example.io/v1", "kind": "QuotaClaim",
         "metadata": {"name": "q1", "namespace": "default"},
         "spec": {"cpuM": 500}, "status": {"heldCpuM": 0}}
    )  # fmt: skip
    uid = claim["metadata"]["uid"]
    with pytest.raises(InvalidRequestError) as refused:
        backend.patch_status(
            "QuotaClaim", "default", "q1", {"status": {"heldCpuM": 100}},
            uid=uid, resource_version=None, patch_type="strategic",
        )  # fmt: skip
    assert refused.value.status == 415
    with pytest.raises(InvalidRequestError) as refused:
        backend.patch(
            "QuotaClaim", "default", "q1", {"spec": {"cpuM": 1}}, uid=uid, patch_type="strategic"
        )
    assert refused.value.status == 415
    stored = server.get("QuotaClaim", "default", "q1")
    assert (stored["spec"], stored["status"]) == ({"cpuM": 500}, {"heldCpuM": 0})
    out = backend.patch_status(
        "QuotaClaim", "default", "q1", {"status": {"heldCpuM": 100}},
        uid=uid, resource_version=None, patch_type="merge",
    )  # fmt: skip
    assert out["status"] == {"heldCpuM": 100}


_SCRIPTED = {
    "429": None,
    "500": None,
    "404": None,
    "409": None,
    "conn_reset": None,
    "a 503 asking for 0.25 s": lambda: ServerError("overloaded", status=503, retry_after=0.25),
    "a 429 asking for 0.5 s": lambda: TooManyRequestsError("slow down", retry_after=0.5),
    "a garbled reply": lambda: BadResponseError("garbled reply"),
    "a 422": lambda: InvalidRequestError("bad field", status=422),
}


@pytest.mark.parametrize("fault", list(_SCRIPTED))
def test_a_scripted_fault_reaches_the_caller_as_the_same_error(
    server: InMemoryApiServer, backend: Any, fault: str
) -> None:
    """A fault scripted on the server fails the request with the same error type (and the same
    Retry-After) whether the server is called directly or over HTTP, and nothing is applied."""
    pod = server.create(
        {"kind": "Pod", "metadata": {"name": "p1", "namespace": "default"}, "spec": {}}
    )
    make = _SCRIPTED[fault]
    server.script("patch_status", make() if make is not None else fault)
    with pytest.raises(ApiError) as failed:
        backend.patch_status(
            "Pod", "default", "p1", {"status": {"phase": "Running"}},
            uid=pod["metadata"]["uid"], resource_version=None,
        )  # fmt: skip
    with pytest.raises(ApiError) as direct:  # the same fault, raised by the server itself
        server.script("patch_status", make() if make is not None else fault)
        server.patch_status(
            "Pod", "default", "p1", {"status": {"phase": "Running"}},
            uid=pod["metadata"]["uid"], resource_version=None,
        )  # fmt: skip
    assert type(failed.value) is type(direct.value)
    assert failed.value.retryable == direct.value.retryable
    assert failed.value.retry_after == direct.value.retry_after
    assert server.get("Pod", "default", "p1").get("status", {}).get("phase") is None
