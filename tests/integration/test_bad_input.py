"""The bad input catalogue: every kind of wrong input fails clearly and alone.

Synchronous cases raise a documented :mod:`actors.errors` type at the call site (call
constructors, ``submit``, ``cancel``, ``view``, informer callbacks, configuration, the
registry), and the dispatcher keeps serving other objects afterwards. Asynchronous cases (a
broken backend, a buggy call type) resolve the future with a typed error instead of hanging or
corrupting the object's state; an informer that delivers malformed objects skips them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from kubernetes import client as k8s

from kdispatch import (
    ActorLimitExceeded,
    BadResponseError,
    CallFailed,
    CallOutcomeError,
    CallTypeRegistrationError,
    CallTypeRegistry,
    ClaimStatusPatch,
    ClientListWatch,
    Dispatcher,
    DispatcherClosed,
    DispatcherConfig,
    ExecutorConfig,
    Informer,
    InvalidCallError,
    InvalidConfigError,
    InvalidInputError,
    InvalidObjectError,
    InvalidRequestError,
    KdispatchError,
    Obj,
    ObjectRef,
    Outcome,
    PodBinding,
    PodPreemption,
    PodStatusPatch,
    PreemptionOptions,
    RateLimitConfig,
    RegistryConfig,
    RetryConfig,
    RuntimeConfig,
    UnknownCallTypeError,
    WatchEvent,
    default_call_types,
)
from kdispatch.testing import InMemoryApiServer, MemoryListWatch, make_claim, make_pod
from tests.backends import GatedBackend, T
from tests.configs import fast
from tests.factories import user_call

pytestmark = pytest.mark.timeout(30)

FAST = fast(max_attempts=3)
COND = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


@dataclass
class Env:
    server: InMemoryApiServer
    d: Dispatcher
    pod: Obj
    other: Obj
    claim: Obj
    extra: list[Dispatcher] = field(default_factory=list)

    def dispatcher(self, config: DispatcherConfig = FAST) -> Dispatcher:
        """Another dispatcher on the same server, stopped after the test."""
        d = Dispatcher(self.server, config)
        self.extra.append(d)
        return d


@pytest.fixture
def env() -> Iterator[Env]:
    server = InMemoryApiServer()
    e = Env(
        server,
        Dispatcher(server, FAST).start(),
        server.create(make_pod("p1")),
        server.create(make_pod("p2")),
        server.create(make_claim("c1")),
    )
    try:
        yield e
    finally:
        for d in (e.d, *e.extra):
            d.stop(timeout=10)


def pod_with(**meta: Any) -> dict[str, Any]:
    """A pod whose metadata is exactly ``meta`` (None values are kept)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}, "status": {}}


GOOD_META = {"name": "p9", "namespace": "default", "uid": "uid-9"}


def bad_meta(**change: Any) -> dict[str, Any]:
    meta = {**GOOD_META, **change}
    return pod_with(**{k: v for k, v in meta.items() if v is not _DROP})


_DROP = object()


def cond(**change: Any) -> dict[str, Any]:
    return {k: v for k, v in {**COND, **change}.items() if v is not _DROP}


class Unregistered(PodStatusPatch):
    """A call class nobody registered (same shape as a status patch)."""

    __slots__ = ()
    call_type = "pod_teleport"


ZeroRelevance = user_call("zero", relevance=0)


def _register(cls: Any) -> None:
    CallTypeRegistry().register(cls)


def _start_twice(e: Env) -> None:
    e.d.start()


def _submit_after_stop(e: Env) -> None:
    d = e.dispatcher().start()
    d.stop(timeout=5)
    d.submit(PodBinding.for_pod(e.pod, "n1"))


def _over_the_actor_cap(e: Env) -> None:
    gated = GatedBackend(e.server)
    gated.gate.clear()
    d = Dispatcher(gated, DispatcherConfig(registry=RegistryConfig(max_live=1))).start()
    e.extra.append(d)
    try:
        d.submit(PodBinding.for_pod(e.pod, "n1"))
        d.submit(PodBinding.for_pod(e.other, "n1"))
    finally:
        gated.gate.set()


# (id, action, expected exception) — each action gets the Env and must raise
CASES: list[tuple[str, Callable[[Env], object], type[KdispatchError]]] = [
    # wrong types
    ("submit-a-string", lambda e: e.d.submit("bind p1"), InvalidCallError),  # type: ignore[arg-type]
    ("submit-none", lambda e: e.d.submit(None), InvalidCallError),  # type: ignore[arg-type]
    ("submit-a-dict", lambda e: e.d.submit({"call_type": "pod_binding"}), InvalidCallError),  # type: ignore[arg-type]
    ("object-is-a-list", lambda e: PodBinding.for_pod([e.pod], "n1"), InvalidObjectError),
    (
        "conditions-a-string",
        lambda e: PodStatusPatch.for_pod(e.pod, conditions="PodScheduled"),  # type: ignore[arg-type]
        InvalidCallError,
    ),
    (
        "conditions-none",
        lambda e: PodStatusPatch.for_pod(e.pod, conditions=None, nominated_node_name="n1"),  # type: ignore[arg-type]
        InvalidCallError,
    ),
    (
        "conditions-an-int",
        lambda e: PodStatusPatch.for_pod(e.pod, conditions=5),  # type: ignore[arg-type]
        InvalidCallError,
    ),
    (
        "conditions-one-mapping",
        lambda e: PodStatusPatch.for_pod(e.pod, conditions=COND),  # type: ignore[arg-type]
        InvalidCallError,
    ),
    (
        "grace-period-a-string",
        lambda e: PodPreemption.for_pod(e.pod, grace_period_seconds="30"),
        InvalidCallError,
    ),
    (
        "grace-period-negative",
        lambda e: e.d.preempt(e.pod, grace_period_seconds=-1),
        InvalidCallError,
    ),
    (
        "grace-period-bool",
        lambda e: e.d.preempt(e.pod, grace_period_seconds=True),
        InvalidCallError,
    ),
    # missing or malformed identity
    ("no-metadata", lambda e: PodBinding.for_pod({"kind": "Pod"}, "n1"), InvalidObjectError),
    (
        "metadata-a-string",
        lambda e: PodBinding.for_pod(pod_with_str_meta(), "n1"),
        InvalidObjectError,
    ),
    *[
        (name, lambda e, m=meta: PodBinding.for_pod(bad_meta(**m), "n1"), InvalidObjectError)
        for name, meta in {
            "uid-missing": {"uid": _DROP},
            "uid-empty": {"uid": ""},
            "uid-with-spaces": {"uid": "a b"},
            "uid-an-int": {"uid": 42},
            "uid-oversized": {"uid": "u" * 129},
            "name-missing": {"name": _DROP},
            "name-uppercase": {"name": "Pod1"},
            "name-underscore": {"name": "pod_1"},
            "name-non-ascii": {"name": "pöd"},
            "name-oversized": {"name": "p" * 254},
            "name-hostile": {"name": 'a","status":{"phase":"Hacked"}'},
            "namespace-uppercase": {"namespace": "Default"},
            "namespace-oversized": {"namespace": "n" * 64},
            "namespace-null": {"namespace": None},
        }.items()
    ],
    # calls for an object of the wrong kind
    ("binding-for-a-claim", lambda e: PodBinding.for_pod(e.claim, "n1"), InvalidObjectError),
    (
        "claim-patch-for-a-pod",
        lambda e: ClaimStatusPatch.for_claim(e.pod, deallocate=True),
        InvalidObjectError,
    ),
    (
        "ref-of-another-kind",
        lambda e: PodBinding(ObjectRef("ResourceClaim", "default", "c1", "u1"), "n1"),
        InvalidCallError,
    ),
    (
        "basis-of-another-object",
        lambda e: PodBinding(ObjectRef.of(e.pod), "n1", basis=e.other),
        InvalidCallError,
    ),
    # invalid node names
    ("node-empty", lambda e: PodBinding.for_pod(e.pod, ""), InvalidCallError),
    ("node-uppercase", lambda e: PodBinding.for_pod(e.pod, "Node-1"), InvalidCallError),
    ("node-non-ascii", lambda e: PodBinding.for_pod(e.pod, "nöde"), InvalidCallError),
    ("node-oversized", lambda e: PodBinding.for_pod(e.pod, "n" * 254), InvalidCallError),
    ("node-hostile", lambda e: PodBinding.for_pod(e.pod, 'n1","x":"y'), InvalidCallError),
    ("node-none", lambda e: PodBinding.for_pod(e.pod, None), InvalidCallError),
    (
        "nominated-node-invalid",
        lambda e: PodStatusPatch.for_pod(e.pod, nominated_node_name="Bad Node"),
        InvalidCallError,
    ),
    # conditions
    *[
        (
            f"condition-{name}",
            lambda e, c=bad: PodStatusPatch.for_pod(e.pod, conditions=[c]),
            InvalidCallError,
        )
        for name, bad in {
            "status-maybe": cond(status="Maybe"),
            "status-bool": cond(status=True),
            "status-lowercase": cond(status="true"),
            "type-missing": cond(type=_DROP),
            "type-empty": cond(type=""),
            "unknown-key": cond(lastTransitionTime="now"),
            "message-an-int": cond(message=3),
        }.items()
    ],
    (
        "condition-type-twice",
        lambda e: PodStatusPatch.for_pod(e.pod, conditions=[COND, COND]),
        InvalidCallError,
    ),
    ("status-patch-empty", lambda e: PodStatusPatch.for_pod(e.pod), InvalidCallError),
    (
        "preemption-condition-wrong-type",
        lambda e: PodPreemption(ObjectRef.of(e.pod), condition=COND),
        InvalidCallError,
    ),
    ("preemption-reason-empty", lambda e: e.d.preempt(e.pod, reason=""), InvalidCallError),
    (
        "preemption-unknown-option",
        lambda e: e.d.preempt(e.pod, grace=5),  # type: ignore[call-arg]
        InvalidCallError,
    ),
    (
        "group-preemption-unknown-option",
        lambda e: e.d.group(owner=e.pod).preempt(e.other, grace=5),  # type: ignore[call-arg]
        InvalidCallError,
    ),
    # claims
    (
        "allocate-and-deallocate",
        lambda e: ClaimStatusPatch.for_claim(e.claim, allocate={}, deallocate=True),
        InvalidCallError,
    ),
    (
        "consumer-without-uid",
        lambda e: ClaimStatusPatch.for_claim(e.claim, reserve=[{"resource": "pods", "name": "p"}]),
        InvalidCallError,
    ),
    (
        "allocation-with-a-set",
        lambda e: ClaimStatusPatch.for_claim(e.claim, allocate={"devices": {"results": {"d0"}}}),
        InvalidCallError,
    ),
    (
        "allocation-int-key",
        lambda e: ClaimStatusPatch.for_claim(e.claim, allocate={1: "x"}),
        InvalidCallError,
    ),
    (
        "unreserve-a-consumer-ref",
        lambda e: ClaimStatusPatch.for_claim(e.claim, unreserve=[{"resource": "pods", "uid": "u"}]),  # type: ignore[list-item]
        InvalidCallError,
    ),
    ("reserve-an-int", lambda e: ClaimStatusPatch.for_claim(e.claim, reserve=5), InvalidCallError),  # type: ignore[arg-type]
    ("claim-patch-asks-nothing", lambda e: ClaimStatusPatch.for_claim(e.claim), InvalidCallError),
    (
        "allocation-a-string",
        lambda e: ClaimStatusPatch.for_claim(e.claim, allocate="gpu"),
        InvalidCallError,
    ),
    # unknown call types and registrations
    (
        "unregistered-call-type",
        lambda e: e.d.submit(Unregistered.for_pod(e.pod, conditions=[COND])),
        UnknownCallTypeError,
    ),
    ("cancel-unknown-type", lambda e: e.d.cancel("uid-1", "pod_teleport"), UnknownCallTypeError),
    ("register-relevance-zero", lambda e: _register(ZeroRelevance), CallTypeRegistrationError),
    (
        "register-twice",
        lambda e: default_call_types().register(PodBinding),
        CallTypeRegistrationError,
    ),
    ("register-not-a-call", lambda e: _register(dict), CallTypeRegistrationError),
    # configuration
    ("qps-zero", lambda e: RateLimitConfig(qps=0), InvalidConfigError),
    ("qps-negative", lambda e: RateLimitConfig(qps=-5), InvalidConfigError),
    ("qps-nan", lambda e: RateLimitConfig(qps=math.nan), InvalidConfigError),
    ("qps-a-string", lambda e: RateLimitConfig(qps="50"), InvalidConfigError),  # type: ignore[arg-type]
    ("burst-zero", lambda e: RateLimitConfig(burst=0), InvalidConfigError),
    ("burst-negative", lambda e: RateLimitConfig(burst=-1), InvalidConfigError),
    ("burst-fractional", lambda e: RateLimitConfig(burst=1.5), InvalidConfigError),  # type: ignore[arg-type]
    ("qps-beyond-a-float", lambda e: RateLimitConfig(qps=10**400), InvalidConfigError),
    ("burst-beyond-a-float", lambda e: RateLimitConfig(burst=10**400), InvalidConfigError),
    ("budget-beyond-a-float", lambda e: RetryConfig(budget=10**400), InvalidConfigError),
    ("budget-infinite", lambda e: RetryConfig(budget=math.inf), InvalidConfigError),
    (
        "max-backoff-below-base",
        lambda e: RetryConfig(base_backoff=1, max_backoff=0.5),
        InvalidConfigError,
    ),
    ("workers-zero", lambda e: ExecutorConfig(workers=0), InvalidConfigError),
    ("lane-share-one", lambda e: ExecutorConfig(lane_min_share=1.0), InvalidConfigError),
    ("lane-share-nan", lambda e: ExecutorConfig(lane_min_share=math.nan), InvalidConfigError),
    ("inline-sends-an-int", lambda e: ExecutorConfig(inline_sends=1), InvalidConfigError),  # type: ignore[arg-type]
    ("max-attempts-zero", lambda e: RetryConfig(max_attempts=0), InvalidConfigError),
    ("backoff-negative", lambda e: RetryConfig(base_backoff=-1), InvalidConfigError),
    ("runtime-batch-zero", lambda e: RuntimeConfig(batch=0), InvalidConfigError),
    ("max-live-zero", lambda e: RegistryConfig(max_live=0), InvalidConfigError),
    ("config-a-dict", lambda e: Dispatcher(e.server, {"qps": 5}), InvalidInputError),  # type: ignore[arg-type]
    ("backend-not-a-backend", lambda e: Dispatcher(object()), InvalidInputError),  # type: ignore[arg-type]
    ("clock-not-callable", lambda e: Dispatcher(e.server, clock=5), InvalidInputError),  # type: ignore[arg-type]
    # lifecycle
    (
        "submit-before-start",
        lambda e: e.dispatcher().submit(PodBinding.for_pod(e.pod, "n1")),
        DispatcherClosed,
    ),
    ("submit-after-stop", _submit_after_stop, DispatcherClosed),
    ("start-twice", _start_twice, InvalidInputError),
    ("over-the-actor-cap", _over_the_actor_cap, ActorLimitExceeded),
    # identities at the facade and informer callbacks
    ("view-malformed-uid", lambda e: e.d.view("not a uid!"), InvalidObjectError),
    ("view-timeout-a-str", lambda e: e.d.view(e.pod["metadata"]["uid"], "1"), InvalidInputError),  # type: ignore[arg-type]
    ("view-timeout-nan", lambda e: e.d.view(e.pod["metadata"]["uid"], math.nan), InvalidInputError),
    ("cancel-int-uid", lambda e: e.d.cancel(42), InvalidObjectError),  # type: ignore[arg-type]
    ("on-add-without-metadata", lambda e: e.d.on_add({"kind": "Pod"}), InvalidObjectError),
    ("on-update-not-a-mapping", lambda e: e.d.on_update("pod"), InvalidObjectError),
    (
        "on-delete-without-metadata",
        lambda e: e.d.on_delete({"kind": "Pod", "metadata": None}),
        InvalidObjectError,
    ),
    (
        "on-update-kind-mismatch",
        lambda e: e.d.on_update(e.pod, kind="ResourceClaim"),
        InvalidObjectError,
    ),
    ("on-add-without-kind", lambda e: e.d.on_add(pod_without_kind()), InvalidObjectError),
    # informers and their list-watches
    ("sync-timeout-a-str", lambda e: informer(e).wait_for_sync("1"), InvalidInputError),  # type: ignore[arg-type]
    ("informer-stop-timeout-nan", lambda e: informer(e).stop(math.nan), InvalidInputError),
    (
        "list-watch-namespace-an-int",
        lambda e: MemoryListWatch(e.server, "Pod", 5),  # type: ignore[arg-type]
        InvalidInputError,
    ),
    (
        "list-watch-namespace-malformed",
        lambda e: ClientListWatch(k8s.ApiClient(), "Pod", "Not A Label"),
        InvalidInputError,
    ),
    (
        "list-watch-namespace-of-a-node",
        lambda e: MemoryListWatch(e.server, "Node", "default"),
        InvalidInputError,
    ),
]


def informer(env: Env) -> Informer:
    """An informer never started (nothing to stop after the test)."""
    return Informer(MemoryListWatch(env.server, "Pod"), name="bad-input")


def pod_with_str_meta() -> dict[str, Any]:
    return {"kind": "Pod", "metadata": "p1"}


def pod_without_kind() -> dict[str, Any]:
    return {"metadata": dict(GOOD_META)}


def test_the_catalogue_is_large_and_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)


@pytest.mark.parametrize(("action", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_a_typed_error_at_the_boundary(
    env: Env, action: Callable[[Env], object], expected: type[KdispatchError]
) -> None:
    with pytest.raises(expected) as info:
        action(env)
    assert (
        type(info.value).__module__ == "kdispatch.actors.model.errors"
    )  # a documented type, nothing ad hoc
    assert str(info.value)  # a message that says what is wrong
    # nothing else was hurt: the dispatcher still serves other objects
    assert env.d.submit(PodBinding.for_pod(env.other, "n1")).result(timeout=10) is Outcome.SUCCESS


def test_an_unknown_preemption_option_names_the_accepted_ones(env: Env) -> None:
    """Not the bare ``TypeError`` of ``PodPreemption.for_pod``: the options a preemption takes."""
    with pytest.raises(InvalidCallError) as info:
        env.d.preempt(env.pod, grace=5)  # type: ignore[call-arg]
    message = str(info.value)
    assert "'grace'" in message
    for option in PreemptionOptions.__annotations__:
        assert option in message
    assert [r for r in env.server.request_log if r.op == "delete"] == []


@pytest.mark.parametrize("method", ["view", "cancel"])
def test_an_object_where_a_uid_belongs_gets_a_short_message(env: Env, method: str) -> None:
    """``view(pod)``/``cancel(pod)``: the message names the mistake, it does not print the pod."""
    with pytest.raises(InvalidObjectError) as info:
        getattr(env.d, method)(env.pod)
    message = str(info.value)
    assert "got a dict" in message and "uid_of" in message
    assert len(message) < 120 and "registry.k8s.io" not in message


def test_a_long_uid_is_shortened_in_the_message(env: Env) -> None:
    with pytest.raises(InvalidObjectError) as info:
        env.d.view("x" * 5000)
    assert len(str(info.value)) < 120


# --------------------------------------------------------------------------- broken backends


class Broken(GatedBackend):
    """``patch_status`` runs on the server, then answers ``reply`` (or raises ``error``)."""

    def __init__(
        self, inner: InMemoryApiServer, *, reply: Any = None, error: Exception | None = None
    ):
        super().__init__(inner)
        self.reply = reply
        self.error = error
        self.broken = True

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        answer = super().around(op, request, send)
        if op != "patch_status" or not self.broken:
            return answer
        if self.error is not None:
            raise self.error
        return cast(T, self.reply)


@pytest.mark.parametrize(
    ("error", "expected_requests"),
    [
        (KeyError("status"), 1),
        (BadResponseError("reply is not JSON"), 1),
        (InvalidRequestError("forbidden", status=403), 1),
    ],
    ids=["non-api-exception", "bad-response", "forbidden"],
)
def test_backend_errors_fail_the_call_with_its_cause(
    error: Exception, expected_requests: int
) -> None:
    server = InMemoryApiServer()
    pod, other = server.create(make_pod("p1")), server.create(make_pod("p2"))
    broken = Broken(server, error=error)
    with Dispatcher(broken, FAST) as d:
        exc = d.submit(PodStatusPatch.for_pod(pod, conditions=[COND])).exception(timeout=10)
        assert isinstance(exc, CallFailed) and exc.cause is error
        broken.broken = False
        assert d.submit(PodBinding.for_pod(other, "n1")).result(timeout=10) is Outcome.SUCCESS
    assert [c for c in broken.calls if c == ("patch_status", "p1")] == [
        ("patch_status", "p1")
    ] * expected_requests


@pytest.mark.parametrize(
    "reply",
    [
        "garbage",
        42,
        {},
        {"kind": "Pod", "metadata": {"uid": "someone-else", "resourceVersion": "999999"}},
        None,
    ],
    ids=["a-string", "an-int", "no-metadata", "another-uid", "none"],
)
def test_garbage_reply_resolves_the_call_and_does_not_poison_the_object(reply: Any) -> None:
    """Regression: a non-mapping reply once left the future unresolved forever, and a reply
    without metadata or for another UID was adopted as the observed object."""
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    broken = Broken(server, reply=reply)
    d = Dispatcher(broken, FAST).start()
    try:
        first = d.submit(PodStatusPatch.for_pod(pod, conditions=[COND]))
        outcome = first.exception(timeout=2) or first.result(timeout=0)
        assert outcome is Outcome.SUCCESS or isinstance(outcome, CallOutcomeError)
        broken.broken = False
        view = d.view(pod["metadata"]["uid"])
        assert view is None or view["metadata"]["uid"] == pod["metadata"]["uid"]
        second = PodStatusPatch.for_pod(pod, conditions=[dict(COND, message="again")])
        assert d.submit(second).result(timeout=10) is Outcome.SUCCESS
    finally:
        d.stop(drain=False, timeout=5)


class GarbageRefetch(GatedBackend):
    """Answers 409 to the first patch and garbage to the read that follows it."""

    def __init__(self, inner: InMemoryApiServer) -> None:
        super().__init__(inner)
        self.garbage = True

    def around(self, op: str, request: dict[str, Any], send: Callable[[], T]) -> T:
        answer = super().around(op, request, send)
        return cast(T, "not an object") if op == "get" and self.garbage else answer


def test_garbage_refetch_after_a_conflict_does_not_condemn_the_object() -> None:
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    server.script("patch_status", "409", name="p1")
    backend = GarbageRefetch(server)
    with Dispatcher(backend, FAST) as d:
        first = d.submit(PodStatusPatch.for_pod(pod, conditions=[COND]))
        # the garbage read is not taken for a deletion: the conflict is retried (bounded)
        exc = first.exception(timeout=10)
        assert exc is None or isinstance(exc, CallOutcomeError)
        backend.garbage = False
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(timeout=10) is Outcome.SUCCESS


def test_a_reread_answered_with_garbage_is_retried_and_counted_as_such() -> None:
    """An unanswered patch leads to a re-read before the next attempt; a re-read answered
    with garbage is retried (until ``max_attempts``), each retry counted with reason
    ``bad_response``, not ``5xx``."""
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    server.script("patch_status", "timeout", name="p1")
    with Dispatcher(GarbageRefetch(server), FAST) as d:
        future = d.submit(PodStatusPatch.for_pod(pod, conditions=[COND]))
        assert isinstance(future.exception(timeout=10), CallFailed)
        retries = d.stats()["retries"]
    assert retries.get("pod_status_patch:bad_response", 0) >= 1
    assert "pod_status_patch:5xx" not in retries


# --------------------------------------------------------------------------- informers


class _Stream:
    def __init__(self, events: list[WatchEvent]) -> None:
        self._events = events
        self._stop = threading.Event()

    def __iter__(self) -> Iterator[WatchEvent]:
        yield from self._events
        self._stop.wait(30)

    def stop(self) -> None:
        self._stop.set()


class MalformedSource:
    """A list+watch source that mixes malformed objects in with good ones."""

    kind = "Pod"

    def __init__(self, listed: list[dict[str, Any]], events: list[WatchEvent]) -> None:
        self._listed = listed
        self._events = events

    def list(self) -> tuple[list[dict[str, Any]], str]:
        return [dict(o) for o in self._listed], "10"

    def watch(self, resource_version: str, timeout_seconds: float) -> _Stream:
        events, self._events = self._events, []
        return _Stream(events)


def test_informer_delivering_objects_without_metadata_skips_them(env: Env) -> None:
    good = dict(env.pod, metadata={**env.pod["metadata"], "resourceVersion": "20"})
    listed: list[dict[str, Any]] = [
        {"kind": "Pod"},  # no metadata
        {"kind": "Pod", "metadata": None},
        {"kind": "Pod", "metadata": {"name": "x"}},  # no uid
        pod_with(
            name="p9", namespace="default", uid="not a valid uid"
        ),  # the dispatcher rejects it
        dict(env.other),
    ]
    events = [
        WatchEvent("MODIFIED", {"kind": "Pod"}),
        WatchEvent("MODIFIED", {"kind": "Pod", "metadata": None}),
        WatchEvent("MODIFIED", good),
    ]
    seen: list[str] = []
    delivered = threading.Event()

    def record(obj: Obj) -> None:
        seen.append(obj["metadata"]["uid"])
        if obj["metadata"]["uid"] == good["metadata"]["uid"]:
            delivered.set()

    informer = Informer(MalformedSource(listed, events), name="malformed")
    informer.attach(env.d)
    informer.add_handler(record, lambda _old, new: record(new), record)
    informer.start()
    try:
        assert delivered.wait(timeout=10)
        assert informer.has_synced()
    finally:
        assert informer.stop(timeout=10)
    assert seen == ["not a valid uid", env.other["metadata"]["uid"], good["metadata"]["uid"]]
    # the dispatcher refused the invalid one quietly inside the informer and serves on
    assert env.d.submit(PodBinding.for_pod(env.pod, "n1")).result(timeout=10) is Outcome.SUCCESS


def test_informer_skips_an_event_whose_metadata_is_not_a_mapping(env: Env) -> None:
    good = dict(env.pod, metadata={**env.pod["metadata"], "resourceVersion": "20"})
    events = [
        WatchEvent("MODIFIED", {"kind": "Pod", "metadata": "garbage"}),
        WatchEvent("MODIFIED", good),
    ]
    delivered = threading.Event()
    informer = Informer(MalformedSource([], events), name="poisoned")
    informer.add_handler(lambda obj: delivered.set())
    informer.start()
    try:
        assert delivered.wait(timeout=2)
    finally:
        assert informer.stop(timeout=10)
