"""Informers (``ClientListWatch`` + ``Informer``) against the real apiserver and the emulator.

Synchronisation is by a recorder whose handlers notify a Condition; tests wait for the events
they expect with a deadline, never by sleeping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from kdispatch.adapters.informer import ClientListWatch, Informer, ListWatch
from tests.realapi.cluster import Admin, RealCluster, Target
from tests.realapi.conftest import clear_namespace, create_namespace
from tests.realapi.objects import (
    allocation,
    new_claim,
    new_pod,
    remove_pod,
    uid_rv,
    watch_once,
)
from tests.recorders import RELISTED_WHILE_AWAY, GatedListWatch, running_informers
from tests.recorders import Recorder as BaseRecorder

pytestmark = pytest.mark.timeout(60)

WAIT = 20.0


class Recorder(BaseRecorder):
    """The shared recorder with the real server's deletion updates told apart."""

    def __init__(self) -> None:
        super().__init__(timeout=WAIT)

    def names(self) -> list[tuple[str, str]]:
        """``(event, name)`` without the updates that only mark a pod as being deleted:
        kube-apiserver writes every pod deletion as MODIFIED (``deletionTimestamp``) and then
        DELETED; the emulator only sends DELETED (docs/apiserver-differences.md)."""
        with self._cond:
            return [
                (e[0], e[1])
                for e, o in zip(self.events, self.objects, strict=True)
                if not (e[0] == "update" and o["metadata"].get("deletionTimestamp"))
            ]

    def terminating_updates(self) -> list[str]:
        with self._cond:
            return [
                e[1]
                for e, o in zip(self.events, self.objects, strict=True)
                if e[0] == "update" and o["metadata"].get("deletionTimestamp")
            ]


class Informers:
    """Informers over the test's namespace through an ``ApiClient`` of their own, each with a
    :class:`Recorder`; all are stopped when the test ends. Test thread."""

    def __init__(
        self, client: k8s.ApiClient, ns: str, start: Callable[..., tuple[Informer, Recorder]]
    ) -> None:
        self.client, self.ns, self._start = client, ns, start

    def source(self, kind: str) -> ClientListWatch:
        """A source of the namespace's objects of ``kind``."""
        return ClientListWatch(self.client, kind, self.ns, request_timeout=10.0)

    def synced(self, source: str | ListWatch, **kw: Any) -> tuple[Informer, Recorder]:
        """An informer (``kw``: its settings) on ``source`` (or on the namespace's objects of
        that kind), started and synced."""
        inf, rec = self._start(self.source(source) if isinstance(source, str) else source, **kw)
        assert inf.wait_for_sync(WAIT)
        return inf, rec


@pytest.fixture
def informers(target: Target, ns: str) -> Iterator[Informers]:
    client = target.api_client()
    try:
        with running_informers(
            Recorder, "conf", stop_timeout=10.0, backoff_initial=0.01, backoff_max=0.2
        ) as start:
            yield Informers(client, ns, start)
    finally:
        client.close()  # type: ignore[no-untyped-call]


def patch_nnn(admin: Admin, ns: str, name: str, node: str) -> dict[str, Any]:
    return admin.ok(
        "PATCH",
        admin.pod_path(ns, name) + "/status",
        {"status": {"nominatedNodeName": node}},
        content_type="application/strategic-merge-patch+json",
    )


def test_add_update_delete(target: Target, admin: Admin, ns: str, informers: Informers) -> None:
    a = new_pod(admin, ns, "a")
    inf, rec = informers.synced("Pod")
    assert rec.names() == [("add", "a")]
    assert rec.objects[0]["kind"] == "Pod" and rec.objects[0]["apiVersion"] == "v1"
    updated = patch_nnn(admin, ns, "a", "n1")
    b = new_pod(admin, ns, "b")
    remove_pod(admin, ns, "a")
    assert rec.wait(lambda ev: bool(ev) and ev[-1][0] == "delete")
    assert rec.names() == [("add", "a"), ("update", "a"), ("add", "b"), ("delete", "a")]
    assert rec.events[1][3] == updated["metadata"]["resourceVersion"]
    assert rec.objects[1]["status"]["nominatedNodeName"] == "n1"
    assert rec.events[-1][2] == a["metadata"]["uid"]
    assert rec.terminating_updates() == (["a"] if target.real else [])
    assert set(inf.cache) == {b["metadata"]["uid"]}


def test_claims_have_their_kind(admin: Admin, ns: str, informers: Informers) -> None:
    claim = new_claim(admin, ns, "c1")
    _, rec = informers.synced("ResourceClaim")
    assert rec.wait_count(1)
    obj = rec.objects[0]
    assert obj["kind"] == "ResourceClaim" and obj["apiVersion"] == "resource.k8s.io/v1"
    assert obj["metadata"]["uid"] == claim["metadata"]["uid"]


def test_recreated_pod_is_delete_then_add(admin: Admin, ns: str, informers: Informers) -> None:
    old = new_pod(admin, ns, "p")
    _, rec = informers.synced("Pod")
    remove_pod(admin, ns, "p")
    new = new_pod(admin, ns, "p")
    assert rec.wait(lambda ev: bool(ev) and ev[-1][0] == "add" and len(ev) >= 3)
    uids = [(e[0], e[2]) for e in rec.events]
    if uids[1][0] == "update":  # the real apiserver's "being deleted" write (see names())
        del uids[1]
    assert uids == [
        ("add", old["metadata"]["uid"]),
        ("delete", old["metadata"]["uid"]),
        ("add", new["metadata"]["uid"]),
    ]


def patch_claim(admin: Admin, ns: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    return admin.ok(
        "PATCH",
        admin.claim_path(ns, name) + "/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )


def delete_claim(admin: Admin, ns: str, name: str) -> None:
    admin.ok("DELETE", admin.claim_path(ns, name))


def test_gone_after_compaction_relists(
    target: Target, admin: Admin, ns: str, informers: Informers
) -> None:
    """The informer is kept away (its 1 s watch ends and the next one waits at a gate) while
    claims change and etcd is compacted; resuming from its old resourceVersion gets 410, and
    the re-list turns into synthetic deletes, updates and adds.

    ResourceClaims, because the real apiserver here serves their watches from etcd (no watch
    cache, see ``RealCluster``): with the watch cache, as for pods, a watch from a compacted
    but recent resourceVersion is answered from the cache instead (see
    ``test_cached_pod_watch_outlives_a_compaction``)."""
    a = new_claim(admin, ns, "a")
    new_claim(admin, ns, "b")
    new_claim(admin, ns, "c")
    new_claim(admin, ns, "d")
    gated = GatedListWatch(informers.source("ResourceClaim"), timeout=WAIT)
    inf, rec = informers.synced(gated, watch_timeout=1.0)
    assert rec.wait_count(4)
    gated.keep_away()  # the 1 s watch ended; the next one waits
    delete_claim(admin, ns, "a")
    delete_claim(admin, ns, "b")
    b2 = new_claim(admin, ns, "b")
    patch_claim(admin, ns, "c", {"allocation": allocation("n1")})
    new_claim(admin, ns, "e")
    target.compact()
    gated.gate.set()
    assert rec.wait_count(9)
    assert rec.names()[4:] == RELISTED_WHILE_AWAY
    assert rec.events[4][2] == a["metadata"]["uid"]
    assert rec.events[6][2] == b2["metadata"]["uid"]
    assert rec.objects[7]["status"]["allocation"]["devices"]["results"][0]["pool"] == "n1"
    assert inf.relists == 2  # the resumed watch got 410 Gone and the informer re-listed
    new_claim(admin, ns, "f")  # watching again after the re-list
    assert rec.wait(lambda ev: ev[-1][1] == "f")
    assert len(rec.events) == 10


def test_watch_from_a_compacted_resource_version_is_410_expired(
    target: Target, admin: Admin, ns: str
) -> None:
    """The raw reply: HTTP 200 and one ``ERROR`` event, ``Status{code: 410, reason: Expired}``."""
    claim = new_claim(admin, ns, "a")
    _, rv = uid_rv(claim)
    patch_claim(admin, ns, "a", {"allocation": allocation("n1")})
    new_claim(admin, ns, "b")  # the compaction revision is now above rv + 1
    target.compact()
    events = watch_once(admin, admin.claim_path(ns), rv)
    assert [e["type"] for e in events] == ["ERROR"], events
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"] == "The resourceVersion for the provided watch is too old."


@pytest.mark.realapi
def test_cached_pod_watch_outlives_a_compaction(real: RealCluster) -> None:
    """With the watch cache (the default, used for pods), a watch from a resourceVersion that
    etcd has compacted away is still served from the cache's window: the events come, no 410.
    The emulator has no watch cache and answers 410 (docs/apiserver-differences.md)."""
    with real.admin() as admin:
        ns = create_namespace(real, admin, "cached-watch")
        pod = new_pod(admin, ns, "a")
        patch_nnn(admin, ns, "a", "n1")
        real.compact()
        events = watch_once(admin, admin.pod_path(ns), pod["metadata"]["resourceVersion"])
        assert [e["type"] for e in events] == ["MODIFIED"]
        assert events[0]["object"]["status"]["nominatedNodeName"] == "n1"
        clear_namespace(admin, ns)


@pytest.mark.realapi
def test_watch_from_just_below_the_compaction_revision_is_a_500(real: RealCluster) -> None:
    """etcd still streams from its compaction revision, but without the previous state, and
    kube-apiserver answers with an ``ERROR`` event ``500 InternalError`` (not 410), every
    time the watch is retried."""
    with real.admin() as admin:
        ns = create_namespace(real, admin, "below-compaction")
        new_claim(admin, ns, "a")
        patched = patch_claim(admin, ns, "a", {"allocation": allocation("n1")})
        rev = int(patched["metadata"]["resourceVersion"])
        real.compact(rev)
        for _ in range(2):
            events = watch_once(admin, admin.claim_path(ns), str(rev - 1))
            assert [e["type"] for e in events] == ["ERROR"], events
            status = events[0]["object"]
            assert (status["code"], status["reason"]) == (500, "InternalError")
            assert "etcd event received with PrevKv=nil" in status["message"]
        clear_namespace(admin, ns)


def test_resume_just_below_the_compaction_revision_still_converges(
    request: pytest.FixtureRequest,
    target: Target,
    admin: Admin,
    ns: str,
    informers: Informers,
) -> None:
    """Resuming from resourceVersion R when etcd was compacted at exactly R + 1 (one change
    while the informer was away): etcd can still stream from R + 1 but no longer has the
    previous state, and kube-apiserver answers the watch with an ``ERROR`` event ``500
    InternalError: etcd event received with PrevKv=nil``, every time, instead of 410. An
    informer must still converge (client-go's reflector re-lists after any watch error)."""
    del request
    new_claim(admin, ns, "a")
    gated = GatedListWatch(informers.source("ResourceClaim"), timeout=WAIT)
    _, rec = informers.synced(gated, watch_timeout=1.0)
    gated.keep_away()
    patched = patch_claim(admin, ns, "a", {"allocation": allocation("n1")})
    rev = int(patched["metadata"]["resourceVersion"])
    target.compact(rev)
    # resume as if the last event the informer saw was the one just before the change (other
    # writes to etcd, such as lease renewals, could otherwise sit in between), in every watch
    # the informer opens from there: without that, a retry from the informer's own older
    # resourceVersion would meet a 410 and re-list whenever such a write happened
    gated.resume_from = str(rev - 1)
    gated.gate.set()
    assert rec.wait(lambda ev: ("update", "a") in [(e[0], e[1]) for e in ev])
