"""Objects from the other Python clients, as their users hold them: a lightkube ``Pod`` model and
kr8s ``Pod`` objects, each read by its own client from the in-memory apiserver over HTTP, are
accepted wherever kdispatch takes an object (``as_object`` reads their JSON form: kr8s's
``.raw``, lightkube's ``to_dict()``). Checked on the server."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kr8s
import kr8s.asyncio
import kr8s.objects
import pytest
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Pod as LightkubePod

from kdispatch import (
    CallCancelled,
    Dispatcher,
    DispatcherConfig,
    InvalidObjectError,
    Outcome,
    PodBinding,
    RateLimitConfig,
    as_object,
)
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, make_pod
from kdispatch.testing.envtest import write_kubeconfig
from tests.subprocesses import run_command

pytestmark = pytest.mark.timeout(60)

TOKEN = "test-token"


@pytest.fixture
def server() -> InMemoryApiServer:
    server = InMemoryApiServer()
    for name in ("web-1", "web-2", "web-3"):
        server.create(make_pod(name))
    return server


@pytest.fixture
def kubeconfig(server: InMemoryApiServer, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for the server over HTTP (with a bearer token, as a cluster asks)."""
    with ApiServerHTTP(server, token=TOKEN) as http:
        yield write_kubeconfig(tmp_path / "kubeconfig", http.url, TOKEN)


def lightkube_pod(kubeconfig: Path, name: str) -> Any:
    """The pod as lightkube reads it: a ``lightkube.resources.core_v1.Pod`` model."""
    client = Client(KubeConfig.from_file(kubeconfig))
    try:
        return client.get(LightkubePod, name, namespace="default")
    finally:
        client.close()


def kr8s_pod(kubeconfig: Path, name: str) -> Any:
    """The pod as kr8s's asyncio API reads it: a ``kr8s.asyncio.objects.Pod``."""

    async def get() -> Any:
        api = await kr8s.asyncio.api(kubeconfig=str(kubeconfig))
        return await kr8s.asyncio.objects.Pod.get(name, namespace="default", api=api)

    return asyncio.run(get())


def kr8s_sync_pod(kubeconfig: Path, name: str) -> Any:
    """The same pod as a ``kr8s.objects.Pod`` (kr8s's synchronous objects)."""
    pod = kr8s_pod(kubeconfig, name)
    return kr8s.objects.Pod(pod.raw, api=pod.api)


READERS: dict[str, Callable[[Path, str], Any]] = {
    "lightkube": lightkube_pod,
    "kr8s": kr8s_pod,
    "kr8s-sync": kr8s_sync_pod,
}


@pytest.fixture(params=sorted(READERS))
def read(request: pytest.FixtureRequest, kubeconfig: Path) -> Callable[[str], Any]:
    reader = READERS[request.param]
    return lambda name: reader(kubeconfig, name)


def test_each_client_reads_its_own_type(read: Callable[[str], Any]) -> None:
    pod = read("web-1")
    assert not isinstance(pod, dict)
    assert type(pod).__module__.split(".")[0] in ("lightkube", "kr8s")


def test_their_json_form_is_the_servers(
    read: Callable[[str], Any], server: InMemoryApiServer
) -> None:
    stored = server.get_object("Pod", "default", "web-1")
    assert stored is not None
    plain = as_object(read("web-1"))
    assert type(plain) is dict and type(plain["metadata"]) is dict
    assert plain["metadata"]["uid"] == stored["metadata"]["uid"]
    assert plain["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert (plain["kind"], plain["apiVersion"]) == ("Pod", "v1")
    assert plain["spec"]["containers"] == stored["spec"]["containers"]


def test_their_json_form_is_a_copy(read: Callable[[str], Any]) -> None:
    """Handed over, an object is snapshotted: the client changing its own copy later changes
    nothing in kdispatch."""
    pod = read("web-1")
    plain = as_object(pod)
    if hasattr(pod, "raw"):  # kr8s
        pod.raw["metadata"]["labels"] = {"changed": "yes"}
    else:  # lightkube
        pod.metadata.labels = {"changed": "yes"}
    assert "labels" not in plain["metadata"]
    assert as_object(pod)["metadata"]["labels"] == {"changed": "yes"}


def test_a_pod_is_bound_through_pod_binding_for_pod(
    read: Callable[[str], Any], server: InMemoryApiServer
) -> None:
    pod = read("web-1")
    with Dispatcher(server) as dispatcher:
        future = dispatcher.submit(PodBinding.for_pod(pod, "node-1"))
        assert future.result(timeout=30) is Outcome.SUCCESS
    bound = server.get_object("Pod", "default", "web-1")
    assert bound is not None and bound["spec"]["nodeName"] == "node-1"
    sent = [(r.name, r.outcome) for r in server.request_log if r.op != "get"]  # reads: the client's
    assert sent == [("web-1", "ok")]


def test_informer_events_take_them(read: Callable[[str], Any], server: InMemoryApiServer) -> None:
    pod, other = read("web-1"), read("web-2")
    uid = as_object(pod)["metadata"]["uid"]
    one_token = DispatcherConfig(rate_limit=RateLimitConfig(qps=0.001, burst=1))
    with Dispatcher(server, one_token) as dispatcher:
        dispatcher.on_add(other)
        assert dispatcher.submit(PodBinding.for_pod(other, "node-1")).result(30) is Outcome.SUCCESS
        pending = dispatcher.submit(PodBinding.for_pod(pod, "node-2"))  # no token left: pending
        dispatcher.on_add(pod)
        dispatcher.on_update(pod)
        seen = dispatcher.view(uid)  # the observed pod, the pending binding applied
        assert seen is not None and seen["metadata"]["name"] == "web-1"
        assert seen["spec"]["nodeName"] == "node-2"
        dispatcher.on_delete(pod)  # cancels the pod's pending call
        with pytest.raises(CallCancelled):
            pending.result(timeout=30)
    assert [r.name for r in server.request_log if r.op == "bind"] == ["web-2"]


def test_preempt_deletes_them(read: Callable[[str], Any], server: InMemoryApiServer) -> None:
    with Dispatcher(server) as dispatcher:
        assert dispatcher.preempt(read("web-1")).result(timeout=30) is Outcome.SUCCESS
    assert server.get_object("Pod", "default", "web-1") is None


def test_a_group_takes_them_as_its_owner(
    read: Callable[[str], Any], server: InMemoryApiServer
) -> None:
    owner = read("web-1")
    with Dispatcher(server) as dispatcher:
        with dispatcher.group(owner=owner) as group:
            group.submit(PodBinding.for_pod(owner, "node-1"))
        assert group.future.result(timeout=30) == [Outcome.SUCCESS]
        assert group.owner.uid == as_object(owner)["metadata"]["uid"]
    bound = server.get_object("Pod", "default", "web-1")
    assert bound is not None and bound["spec"]["nodeName"] == "node-1"


class _Broken:
    def to_dict(self) -> dict[str, Any]:
        raise RuntimeError("no JSON here")


class _NotJson:
    raw = "a string"

    def to_dict(self) -> list[str]:
        return ["not", "a", "mapping"]


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (_Broken(), r"_Broken\.to_dict\(\) raised RuntimeError"),
        (_NotJson(), r"to_dict\(\) returned a list, not a mapping"),
        (object(), r"a \.raw mapping \(kr8s\) or a to_dict\(\) method \(lightkube\)"),
    ],
)
def test_a_foreign_object_without_json_is_a_typed_error(bad: object, match: str) -> None:
    with pytest.raises(InvalidObjectError, match=match):
        as_object(bad)


def test_no_client_is_imported_to_read_them() -> None:
    """``as_object`` recognises them by shape: the core imports neither library."""
    code = textwrap.dedent(
        """
        import sys, kdispatch
        class Obj:
            raw = {'kind': 'Pod', 'metadata': {'uid': 'u'}}
        assert kdispatch.as_object(Obj())['metadata'] == {'uid': 'u'}
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightkube', 'kr8s')))
        """
    )
    out = run_command([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
