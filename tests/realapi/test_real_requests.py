"""Requests a kdispatch user makes whose answers differ in the details: deletion of an object
that finalizers hold, ``generateName``, the eviction's preconditions, bookmarks and Events.

Every test runs against both targets (``target`` fixture); what each pins is a row of
docs/apiserver-differences.md.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from kdispatch.actors.model.errors import ConflictError, GoneError, InvalidRequestError
from tests.realapi.cluster import Admin, Reply, Target
from tests.realapi.objects import (
    claim_body,
    new_claim,
    new_pod,
    pod_body,
    remove_pod,
    uid_rv,
    watch_once,
)

pytestmark = pytest.mark.timeout(60)

HOLD = "kdispatch.test/hold"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def held_pod(admin: Admin, ns: str, name: str, **kw: Any) -> dict[str, Any]:
    """A pod created with the finalizer ``HOLD``."""
    body = pod_body(name, **kw)
    body["metadata"]["finalizers"] = [HOLD]
    return admin.create(admin.pod_path(ns), body)


def release(admin: Admin, path: str) -> dict[str, Any]:
    """Remove every finalizer of the object at ``path``; the reply's object."""
    return admin.ok("PATCH", path, {"metadata": {"finalizers": None}}, content_type=MERGE)


def deletion_marks(obj: dict[str, Any]) -> tuple[bool, object, object]:
    meta = obj["metadata"]
    return (
        bool(meta.get("deletionTimestamp")),
        meta.get("deletionGracePeriodSeconds"),
        meta.get("finalizers"),
    )


# --------------------------------------------------------------------------- finalizers


def test_a_finalizer_keeps_a_deleted_pod_until_it_is_removed(
    target: Target, admin: Admin, ns: str
) -> None:
    uid, rv = uid_rv(held_pod(admin, ns, "p1"))
    path = admin.pod_path(ns, "p1")
    marked = admin.ok("DELETE", path, {"gracePeriodSeconds": 0})
    assert deletion_marks(marked) == (True, 0, [HOLD])
    assert admin.get_pod(ns, "p1") == marked
    # a second deletion changes nothing
    assert admin.ok("DELETE", path, {"gracePeriodSeconds": 0}) == marked
    # a terminating pod cannot be bound ...
    with target.backend() as backend, pytest.raises(ConflictError) as info:
        backend.bind(ns, "p1", uid=uid, node="n1")
    assert str(info.value).endswith(
        'Operation cannot be fulfilled on pods/binding "p1": '
        "pod p1 is being deleted, cannot be assigned to a host"
    )
    # ... but its status can be patched, and the deletion preconditions are still checked
    waiting = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    patched = admin.ok(
        "PATCH", path + "/status", {"status": {"conditions": [waiting]}}, content_type=STRATEGIC
    )
    assert deletion_marks(patched) == (True, 0, [HOLD])
    reply = admin.request("DELETE", path, {"preconditions": {"uid": "0000-x"}})
    assert (reply.status, reply.reason) == (409, "Conflict")
    assert reply.body["message"].startswith('Operation cannot be fulfilled on Pod "p1": the UID')
    # no finalizer can be added now
    reply = admin.request(
        "PATCH",
        path,
        {"metadata": {"finalizers": [HOLD, "example.com/other"]}},
        content_type=MERGE,
    )
    assert (reply.status, reply.reason) == (422, "Invalid")
    assert reply.body["message"] == (
        'Pod "p1" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added '
        'if the object is being deleted, found new finalizers []string{"example.com/other"}'
    )
    # the last finalizer removed: gone; the reply is the object without it
    last = release(admin, path)
    assert deletion_marks(last) == (True, 0, None)
    assert not admin.pod_exists(ns, "p1")
    events = watch_once(admin, admin.pod_path(ns), rv)
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    # the DELETED event carries the last stored state, finalizer included
    assert [deletion_marks(e["object"]) for e in events] == [(True, 0, [HOLD])] * 3


def test_the_grace_period_of_a_held_deletion(admin: Admin, ns: str) -> None:
    """An unbound pod is marked with grace period 0 whatever the request says, a bound one
    with the request's or its own (30 s); a later deletion may shorten it. A ResourceClaim:
    0."""
    held_pod(admin, ns, "unbound")
    marked = admin.ok("DELETE", admin.pod_path(ns, "unbound"), {"gracePeriodSeconds": 20})
    assert deletion_marks(marked) == (True, 0, [HOLD])
    release(admin, admin.pod_path(ns, "unbound"))
    assert not admin.pod_exists(ns, "unbound")

    held_pod(admin, ns, "bound", node="n1")
    path = admin.pod_path(ns, "bound")
    assert deletion_marks(admin.ok("DELETE", path, {})) == (True, 30, [HOLD])
    assert deletion_marks(admin.ok("DELETE", path, {"gracePeriodSeconds": 40})) == (
        True,
        30,
        [HOLD],
    )
    assert deletion_marks(admin.ok("DELETE", path, {"gracePeriodSeconds": 0})) == (True, 0, [HOLD])
    release(admin, path)
    assert not admin.pod_exists(ns, "bound")

    body = claim_body("c1")
    body["metadata"]["finalizers"] = [HOLD]
    admin.create(admin.claim_path(ns), body)
    marked = admin.ok("DELETE", admin.claim_path(ns, "c1"), {})
    assert deletion_marks(marked) == (True, 0, [HOLD])
    release(admin, admin.claim_path(ns, "c1"))
    assert admin.request("GET", admin.claim_path(ns, "c1")).status == 404


def test_eviction_of_a_held_pod_marks_it(target: Target, admin: Admin, ns: str) -> None:
    uid, _ = uid_rv(held_pod(admin, ns, "p1"))
    with target.backend() as backend:
        backend.evict(ns, "p1", uid=uid)
        assert deletion_marks(admin.get_pod(ns, "p1")) == (True, 0, [HOLD])
        backend.evict(ns, "p1", uid=uid)  # being deleted already: accepted, nothing changes
    release(admin, admin.pod_path(ns, "p1"))
    assert not admin.pod_exists(ns, "p1")


# --------------------------------------------------------------------------- creation


def test_create_with_generate_name(admin: Admin, ns: str) -> None:
    body = pod_body("unused")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "web-"
    first, second = admin.create(admin.pod_path(ns), body), admin.create(admin.pod_path(ns), body)
    names = [first["metadata"]["name"], second["metadata"]["name"]]
    assert all(re.fullmatch(r"web-[bcdfghjklmnpqrstvwxz2456789]{5}", n) for n in names), names
    assert names[0] != names[1] and first["metadata"]["generateName"] == "web-"
    assert uid_rv(admin.get_pod(ns, names[0])) == uid_rv(first)
    del body["metadata"]["generateName"]
    reply = admin.request("POST", admin.pod_path(ns), body)
    assert (reply.status, reply.reason) == (422, "Invalid")
    assert reply.body["message"] == (
        'Pod "" is invalid: metadata.name: Required value: name or generateName is required'
    )
    admin.create(admin.pod_path(ns), pod_body("a"))
    reply = admin.request("POST", admin.pod_path(ns), pod_body("a"))
    assert (reply.status, reply.reason, reply.body["message"]) == (
        409,
        "AlreadyExists",
        'pods "a" already exists',
    )
    assert reply.body["details"] == {"name": "a", "kind": "pods"}


# --------------------------------------------------------------------------- eviction


def evict(admin: Admin, ns: str, name: str, **preconditions: str) -> Reply:
    """POST a policy/v1 Eviction of ``name`` with ``preconditions`` in its deleteOptions."""
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
        "deleteOptions": {"preconditions": preconditions},
    }
    return admin.request("POST", admin.pod_path(ns, name) + "/eviction", body)


def test_eviction_preconditions_fail_as_a_deletion_does(admin: Admin, ns: str) -> None:
    uid, rv = uid_rv(new_pod(admin, ns, "p1"))
    reply = evict(admin, ns, "p1", uid="0000-x")
    assert (reply.status, reply.reason) == (409, "Conflict")
    assert reply.body["message"] == (
        'Operation cannot be fulfilled on Pod "p1": the UID in the precondition (0000-x) does '
        f"not match the UID in record ({uid}). The object might have been deleted and then "
        "recreated"
    )
    assert reply.body["details"] == {"name": "p1", "kind": "Pod"}
    reply = evict(admin, ns, "p1", resourceVersion="99999999")
    assert (reply.status, reply.reason) == (409, "Conflict")
    assert reply.body["message"] == (
        'Operation cannot be fulfilled on Pod "p1": the ResourceVersion in the precondition '
        f"(99999999) does not match the ResourceVersion in record ({rv}). The object might "
        "have been modified"
    )
    assert admin.pod_exists(ns, "p1")
    reply = evict(admin, ns, "nope")
    assert (reply.status, reply.reason, reply.body["message"]) == (
        404,
        "NotFound",
        'pods "nope" not found',
    )
    assert evict(admin, ns, "p1", uid=uid).status == 201
    assert not admin.pod_exists(ns, "p1")


# --------------------------------------------------------------------------- watch


def test_initial_watch_events_end_with_a_bookmark_when_asked(admin: Admin, ns: str) -> None:
    """A watch without a resourceVersion, or from ``0``, starts with the current objects as
    ``ADDED``; with ``allowWatchBookmarks=true`` a ``BOOKMARK`` annotated
    ``k8s.io/initial-events-end`` follows them, also when there are none."""
    _, rv = uid_rv(new_pod(admin, ns, "a"))
    path = admin.pod_path(ns)
    for since in ("", "0"):
        events = watch_once(admin, path, since, allowWatchBookmarks="true")
        assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"], events
        mark = events[1]["object"]
        assert (mark["kind"], mark["apiVersion"]) == ("Pod", "v1")
        assert mark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        assert int(mark["metadata"]["resourceVersion"]) >= int(rv)
        assert [e["type"] for e in watch_once(admin, path, since)] == ["ADDED"]
    empty = watch_once(admin, admin.claim_path(ns), "0", allowWatchBookmarks="true")
    assert [(e["type"], e["object"]["kind"]) for e in empty] == [("BOOKMARK", "ResourceClaim")]


# --------------------------------------------------------------------------- events


def event_body(ns: str, name: str, **fields: Any) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as kdispatch's recorder writes it, with ``fields`` replaced
    (None: left out)."""
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/scheduler",
        "reportingInstance": "scheduler-host1",
        "action": "Binding",
        "reason": "Scheduled",
        "type": "Normal",
        "note": "bound to n1",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "p1"},
    }
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize(
    ("fields", "code", "message"),
    [
        ({"action": None}, 422, 'Event "e1" is invalid: action: Required value'),
        ({"reason": None}, 422, 'Event "e1" is invalid: reason: Required value'),
        ({"eventTime": None}, 422, 'Event "e1" is invalid: eventTime: Required value'),
        (
            {"reportingInstance": None},
            422,
            'Event "e1" is invalid: reportingInstance: Required value',
        ),
        (
            {"type": "Bogus"},
            422,
            'Event "e1" is invalid: type: Invalid value: "": has invalid value: Bogus',
        ),
        (
            {"reportingController": None, "action": None},
            422,
            'Event "e1" is invalid: [reportingController: Required value, '
            'reportingController: Invalid value: "": name part must be non-empty, '
            'reportingController: Invalid value: "": name part must consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character "
            "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), action: Required value]",
        ),
        (
            {"eventTime": "2026-01-01T00:00:00Z"},
            400,
            'Event in version "v1" cannot be handled as a Event: parsing time '
            '"2026-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" '
            'as ".000000"',
        ),
    ],
)
def test_an_event_the_server_refuses(
    admin: Admin, ns: str, fields: dict[str, Any], code: int, message: str
) -> None:
    path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
    reply = admin.request("POST", path, event_body(ns, "e1", **fields))
    assert (reply.status, reply.reason) == (code, "Invalid" if code == 422 else "BadRequest")
    assert reply.body["message"] == message
    assert admin.request("GET", f"{path}/e1").status == 404


def test_an_event_series_patch_and_what_it_may_not_change(admin: Admin, ns: str) -> None:
    path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
    admin.create(path, event_body(ns, "e1"))
    series = {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}
    out = admin.ok("PATCH", f"{path}/e1", {"series": series}, content_type=STRATEGIC)
    assert out["series"] == series
    for patch, message in [
        (
            {"series": {"count": 1}},
            'Event "e1" is invalid: series.count: Invalid value: "": should be at least 2',
        ),
        (
            {"note": "changed"},
            'Event "e1" is invalid: message: Invalid value: "changed": field is immutable',
        ),
        (
            {"reason": "Other"},
            'Event "e1" is invalid: reason: Invalid value: "Other": field is immutable',
        ),
    ]:
        reply = admin.request("PATCH", f"{path}/e1", patch, content_type=STRATEGIC)
        assert (reply.status, reply.reason, reply.body["message"]) == (422, "Invalid", message)
    assert admin.ok("GET", f"{path}/e1")["series"] == series


# --------------------------------------------------------------------------- lists


def test_a_continued_list_takes_no_resource_version(target: Target, admin: Admin, ns: str) -> None:
    for name in ("a", "b", "c"):
        new_pod(admin, ns, name)
    with target.backend() as backend:
        first = backend.list("Pod", ns, limit=2)
        assert [p["metadata"]["name"] for p in first.items] == ["a", "b"]
        assert first.continue_token
        with pytest.raises(InvalidRequestError) as info:
            backend.list(
                "Pod",
                ns,
                limit=2,
                continue_token=first.continue_token,
                resource_version=first.resource_version,
            )
        assert str(info.value).endswith(
            "HTTP 400 BadRequest: specifying resource version is not allowed when using continue"
        )
        rest = backend.list("Pod", ns, limit=2, continue_token=first.continue_token)
        assert [p["metadata"]["name"] for p in rest.items] == ["c"]
        assert rest.continue_token is None


def test_later_pages_of_a_list_are_a_snapshot_of_the_first(
    target: Target, admin: Admin, ns: str
) -> None:
    """Whatever changes between two pages, the next one shows the objects as they were when
    the first was served, and reports the first page's resourceVersion."""
    for name in ("b", "c", "d", "f"):
        new_pod(admin, ns, name)
    with target.backend() as backend:
        first = backend.list("Pod", ns, limit=2)
        assert [p["metadata"]["name"] for p in first.items] == ["b", "c"]
        d = admin.get_pod(ns, "d")
        new_pod(admin, ns, "a")  # sorts before the continue key
        new_pod(admin, ns, "e")
        admin.ok("PATCH", admin.pod_path(ns, "d"), {"metadata": {"labels": {"x": "y"}}},
                 content_type=MERGE)  # fmt: skip
        remove_pod(admin, ns, "f")
        rest = backend.list("Pod", ns, limit=2, continue_token=first.continue_token)
        assert [p["metadata"]["name"] for p in rest.items] == ["d", "f"]
        assert rest.items[0]["metadata"]["resourceVersion"] == d["metadata"]["resourceVersion"]
        assert rest.resource_version == first.resource_version
        assert rest.continue_token is None


def test_a_continue_token_older_than_a_compaction_is_expired(
    target: Target, admin: Admin, ns: str
) -> None:
    """ResourceClaims are listed from etcd on both targets (no watch cache, cluster.py): a
    continue token whose resourceVersion was compacted away is 410 Expired."""
    for name in ("c1", "c2"):
        new_claim(admin, ns, name)
    with target.backend() as backend:
        first = backend.list("ResourceClaim", ns, limit=1)
        assert first.continue_token
        new_claim(admin, ns, "c3")
        target.compact()
        with pytest.raises(GoneError) as info:
            backend.list("ResourceClaim", ns, limit=1, continue_token=first.continue_token)
        assert info.value.status == 410 and info.value.reason == "Expired"
        assert "The provided continue parameter is too old to display a consistent list" in str(
            info.value
        )
