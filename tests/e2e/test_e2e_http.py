"""End to end over real HTTP: Dispatcher + KubernetesBackend + informers + the test apiserver.

The in-memory apiserver is served by ``ApiServerHTTP`` on 127.0.0.1; the dispatcher talks to it
through the official ``kubernetes`` client (``KubernetesBackend.for_url``) and is fed by two
informers (Pods and ResourceClaims, ``ClientListWatch`` on their own ``ApiClient``). Faults are
injected on the server (random 429/500/connection resets, scripted timeouts and lost replies),
so retries happen over real HTTP. The final state of the server must equal the callers' intents.

Synchronisation is by futures and Conditions only, never by sleeping.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.calls import UNSET, UnsetType
from kdispatch.actors.model.claim_calls import ClaimStatusPatch
from kdispatch.actors.model.config import (
    DispatcherConfig,
    ExecutorConfig,
    RateLimitConfig,
    RetryConfig,
)
from kdispatch.actors.model.errors import CallCancelled, Outcome
from kdispatch.actors.model.objects import Obj
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.adapters.informer import ClientListWatch, Informer
from kdispatch.adapters.kubernetes import KubernetesBackend
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import (
    FaultPlan,
    InMemoryApiServer,
    RequestRecord,
    make_claim,
    make_pod,
)
from tests.backends import GatedBackend
from tests.factories import cond
from tests.stacks import run_teardown, start_with_informers

WAIT = 60.0
"""Upper bound for any single wait; the runs take a few seconds."""

N_PODS = 1000
N_CLAIMS = 120
N_NODES = 25
PATCH_ROUNDS = 4

NAMESPACES = ("default", "batch")

# Pod groups by index (i % 20): what each pod is asked for, in submission order.
BIND = "bind"  # a binding
PATCH = "patch"  # PATCH_ROUNDS status patches (merged)
PATCH_BIND = "patch+bind"  # status patches, then a binding
BIND_PREEMPT = "bind+preempt"  # a binding, then a preemption
PATCH_PREEMPT = "patch+preempt"  # status patches, then a preemption
PREEMPT = "preempt"  # a preemption

_GROUP_BY_SLOT = (
    [BIND] * 12 + [PATCH] * 3 + [PATCH_BIND] * 2 + [BIND_PREEMPT, PATCH_PREEMPT, PREEMPT]
)

SUCCESS, SKIPPED, OVERWRITTEN = Outcome.SUCCESS, Outcome.SKIPPED, Outcome.OVERWRITTEN


def group_of(i: int) -> str:
    return _GROUP_BY_SLOT[i % len(_GROUP_BY_SLOT)]


def node_of(i: int) -> str:
    return f"node-{i % N_NODES}"


def patch_intent(i: int, r: int) -> tuple[str, str | UnsetType | None]:
    """Round ``r`` of pod ``i``: (PodScheduled=False message, nominatedNodeName intent).

    Round 0 nominates a node, round 2 clears it (pods of odd blocks of 20) or nominates
    another one (even blocks), rounds 1 and 3 leave it alone; every round changes the message.
    """
    message = f"0/{N_NODES} nodes are available: {r + 1} Insufficient cpu (pod {i}, round {r})"
    nnn: str | UnsetType | None = UNSET
    if r == 0:
        nnn = f"node-{i % 7}"
    elif r == 2:
        nnn = None if (i // 20) % 2 else f"node-{(i + 1) % 7}"
    return message, nnn


def allocation_of(j: int) -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {
                    "request": "device",
                    "driver": "gpu.example.com",
                    "pool": f"pool-{j % 4}",
                    "device": f"gpu-{j}",
                }
            ]
        }
    }


def consumer(pod: Obj) -> dict[str, str]:
    meta = pod["metadata"]
    return {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}


# --------------------------------------------------------------------------- fixtures


@dataclass
class Stack:
    """The server, the backend, the informers and the dispatcher of one test."""

    mem: InMemoryApiServer
    http: ApiServerHTTP
    backend: KubernetesBackend
    dispatcher: Dispatcher
    informers: list[Informer]


@pytest.fixture
def make_stack() -> Iterator[Callable[..., Stack]]:
    """Build a full stack; tear everything down in order (dispatcher, informers, clients,
    server) so the autouse leak check sees nothing left behind."""
    teardown: list[Callable[[], None]] = []

    def build(
        mem: InMemoryApiServer,
        *,
        config: DispatcherConfig,
        request_timeout: float,
        wrap: Callable[[KubernetesBackend], Any] = lambda b: b,
        kinds: tuple[str, ...] = ("Pod", "ResourceClaim"),
    ) -> Stack:
        http = ApiServerHTTP(mem, hang_seconds=10.0, watch_poll=0.05).start()
        teardown.append(http.stop)
        workers = config.executor.workers
        backend = KubernetesBackend.for_url(
            http.url, workers=workers, request_timeout=request_timeout
        )
        teardown.append(backend.close)
        # The informers' own client: watches hold pooled connections for minutes.
        informer_client = k8s.ApiClient(backend.api_client.configuration)
        teardown.append(informer_client.close)
        dispatcher = Dispatcher(wrap(backend), config)
        informers = []
        for kind in kinds:
            lw = ClientListWatch(informer_client, kind, request_timeout=5.0)
            inf = Informer(lw, name=f"e2e-{kind.lower()}", backoff_initial=0.01, backoff_max=0.5)
            inf.attach(dispatcher)
            informers.append(inf)

        start_with_informers(dispatcher, informers, teardown, WAIT)
        return Stack(mem, http, backend, dispatcher, informers)

    yield build
    run_teardown(teardown)


# --------------------------------------------------------------------------- bookkeeping

Resolved = Outcome | type[BaseException]
"""A resolved future: its :class:`Outcome`, or the type of the exception it raised."""


def outcome(fut: Future[Any]) -> Resolved:
    """How a resolved future resolved."""
    exc = fut.exception(timeout=0)
    if exc is not None:
        return type(exc)
    result = fut.result(timeout=0)
    assert isinstance(result, Outcome), result
    return result


@dataclass(frozen=True)
class Tracked:
    """One submitted call: ``what`` is ``<call>:<pod group>``, ``name`` its object's name."""

    what: str
    name: str
    future: Future[Any]

    @property
    def call(self) -> str:
        return self.what.partition(":")[0]

    @property
    def group(self) -> str:
        return self.what.partition(":")[2]


def replay_pod_events(mem: InMemoryApiServer, since: str) -> list[tuple[str, Obj]]:
    """Every Pod event after resourceVersion ``since``, from the server's history."""
    w = mem.watch("Pod", resource_version=since)
    try:
        events: list[tuple[str, Obj]] = []
        while (event := w.next(timeout=0)) is not None:
            events.append((event.type, event.object))
        return events
    finally:
        w.stop()


def requests_by_name(log: list[RequestRecord]) -> dict[tuple[str, str], list[str]]:
    """(op, object name) → outcomes of its requests, in order."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rec in log:
        out[(rec.op, rec.name)].append(rec.outcome)
    return out


class Workload:
    """1,000 pods and 120 claims on a faulty server, the calls submitted for them, and the
    intents the server must end up with. Runs on the test thread."""

    def __init__(self, mem: InMemoryApiServer) -> None:
        self.mem = mem
        self.pods = [
            mem.create(make_pod(f"p{i:04d}", NAMESPACES[i % len(NAMESPACES)], priority=i % 3))
            for i in range(N_PODS)
        ]
        self.claims = [mem.create(make_claim(f"c{j:03d}", "default")) for j in range(N_CLAIMS)]
        self.since = mem.resource_version  # the server history from here is the run
        self.groups = {i: group_of(i) for i in range(N_PODS)}
        self.by_group: dict[str, list[int]] = defaultdict(list)
        for i, g in self.groups.items():
            self.by_group[g].append(i)
        self.tracked: list[Tracked] = []
        self.resolutions: Counter[int] = Counter()
        self._lock = threading.Lock()
        self.rounds: dict[int, list[tuple[int, Future[Any]]]] = defaultdict(list)
        self.bindings: dict[int, Future[Any]] = {}
        # intents
        self.bound_to: dict[int, str] = {}
        self.last_patch: dict[int, tuple[str, str | UnsetType | None]] = {}
        self.preempted: set[int] = set()
        self.claim_intent: dict[int, tuple[dict[str, Any], list[dict[str, str]]]] = {}

    def name(self, i: int) -> str:
        return str(self.pods[i]["metadata"]["name"])

    def script_faults(self) -> int:
        """Scripted faults that hang until the client's read timeout (plain timeouts, and lost
        replies of requests the server did apply), and injected conflicts. Returns how many."""
        mem, bg = self.mem, self.by_group
        for i in bg[BIND][:3]:
            mem.script("bind", "apply_then_fail", name=self.name(i))
        for i in bg[BIND][3:5]:
            mem.script("bind", "timeout", name=self.name(i))
        for i in bg[PATCH][:2]:
            mem.script("patch_status", "apply_then_fail", name=self.name(i))
        for i in bg[PATCH][2:4]:  # a conflict: the dispatcher re-reads the pod and retries
            mem.script("patch_status", "409", name=self.name(i))
        for i in bg[PREEMPT][:2]:
            mem.script("delete", "apply_then_fail", name=self.name(i))
        mem.script("patch_status", "timeout", name=self.claims[0]["metadata"]["name"])
        mem.script("patch_status", "apply_then_fail", name=self.claims[1]["metadata"]["name"])
        return mem.pending_faults()

    # ----------------------------------------------------------------- submitting

    def _track(self, what: str, name: str, fut: Future[Any]) -> Future[Any]:
        key = len(self.tracked)
        self.tracked.append(Tracked(what, name, fut))

        def count(_f: Future[Any]) -> None:  # on the resolving thread
            with self._lock:
                self.resolutions[key] += 1

        fut.add_done_callback(count)
        return fut

    def submit_patch(self, d: Dispatcher, i: int, r: int) -> None:
        message, nnn = patch_intent(i, r)
        call = PodStatusPatch.for_pod(
            self.pods[i], conditions=[cond(message=message)], nominated_node_name=nnn
        )
        fut = self._track(f"patch{r}:{self.groups[i]}", self.name(i), d.submit(call))
        self.rounds[r].append((i, fut))

    def submit_binding(self, d: Dispatcher, i: int) -> None:
        call = PodBinding.for_pod(self.pods[i], node_of(i))
        fut = self._track(f"bind:{self.groups[i]}", self.name(i), d.submit(call))
        self.bindings[i] = fut

    def preempt(self, d: Dispatcher, i: int) -> None:
        fut = d.preempt(self.pods[i], preemptor="default/high-priority", grace_period_seconds=0)
        self._track(f"preempt:{self.groups[i]}", self.name(i), fut)
        self.preempted.add(i)

    def reserve(self, d: Dispatcher, j: int, r: int) -> None:
        who = consumer(self.pods[(j * 7 + r) % N_PODS])
        call = ClaimStatusPatch.for_claim(self.claims[j], reserve=[who])
        self._track(f"claim-reserve{r}:", self.claims[j]["metadata"]["name"], d.submit(call))
        self.claim_intent[j][1].append(who)

    def run(self, d: Dispatcher) -> None:
        """Submit everything, in rounds that interleave with the dispatcher's progress."""
        bg = self.by_group
        # Round 0: bindings, first status patches, claim allocations; half of the
        # bind+preempt pods are preempted at once (their bindings are most likely queued).
        for i in range(N_PODS):
            if self.groups[i] in (BIND, BIND_PREEMPT):
                self.submit_binding(d, i)
            elif self.groups[i] in (PATCH, PATCH_BIND, PATCH_PREEMPT):
                self.submit_patch(d, i, 0)
        for j, claim in enumerate(self.claims):
            call = ClaimStatusPatch.for_claim(claim, allocate=allocation_of(j))
            self._track("claim-allocate:", claim["metadata"]["name"], d.submit(call))
            self.claim_intent[j] = (allocation_of(j), [])
        for i in bg[BIND_PREEMPT][1::2]:
            self.preempt(d, i)

        # Later rounds: more status patches and claim reservations. Half of the patched pods
        # ("paired") get their rounds in back-to-back pairs (1 right behind 0, 3 right behind
        # 2), so the second merges into the still pending first: the final state shows that
        # the newer values won and the older call filled the gaps (round 3 leaves
        # nominatedNodeName to round 2). The other half ("paced") have their previous patch
        # let through before each round, so the next one is sent on its own against the newer
        # pod. The paired patch+preempt pods are preempted right behind their last patch. The
        # watches are cut once on the way: the informers resume mid-run.
        patched = [i for i in range(N_PODS) if self.groups[i] in (PATCH, PATCH_BIND, PATCH_PREEMPT)]
        paired, paced = patched[1::2], set(patched[::2])
        for i in paired:
            self.submit_patch(d, i, 1)
        for r in range(1, PATCH_ROUNDS):
            _done, late = wait([f for i, f in self.rounds[r - 1] if i in paced], timeout=WAIT)
            assert not late, f"round {r - 1}: {len(late)} patches never resolved"
            for i in sorted(paced):
                self.submit_patch(d, i, r)
            if r == 2:
                for i in paired:
                    self.submit_patch(d, i, 2)
                    self.submit_patch(d, i, 3)
                for i in paired:
                    if self.groups[i] == PATCH_PREEMPT:
                        self.preempt(d, i)
            for j in range(N_CLAIMS):
                if r == 1 or (r == 2 and j % 3 == 0):
                    self.reserve(d, j, r)
            if r == 1:
                self.mem.drop_watches()

        # Bindings after patches; the remaining preemptions (the even bind+preempt pods are
        # bound by now: victims that run somewhere).
        for i in bg[PATCH_BIND]:
            self.submit_binding(d, i)
        for i in bg[BIND_PREEMPT][::2]:
            assert self.bindings[i].result(timeout=WAIT) in (SUCCESS, SKIPPED)
            self.preempt(d, i)
        for i in bg[PATCH_PREEMPT] + bg[PREEMPT]:
            if i not in self.preempted:
                self.preempt(d, i)

        for i in bg[BIND] + bg[PATCH_BIND]:
            self.bound_to[i] = node_of(i)
        for i in bg[PATCH]:
            nnn: str | UnsetType | None = UNSET
            for r in range(PATCH_ROUNDS):
                step = patch_intent(i, r)[1]
                if step is not UNSET:
                    nnn = step
            self.last_patch[i] = (patch_intent(i, PATCH_ROUNDS - 1)[0], nnn)

    # ----------------------------------------------------------------- checking

    def unexpected_outcomes(self, retries: dict[str, int]) -> list[tuple[str, str, object]]:
        """Futures that resolved with an outcome their call does not allow, given the timeouts
        the executor retried (``retries``: ``Dispatcher.stats()["retries"]``)."""
        unexpected: list[tuple[str, str, object]] = []
        lost: Counter[str] = Counter()  # outcomes that need a lost reply first
        for t in self.tracked:
            got = outcome(t.future)
            allowed: set[Resolved]
            if t.call == "bind":
                allowed = {SUCCESS, SKIPPED}
                if got is SKIPPED:
                    # the attempt landed but its reply was lost (timeout); the informer showed
                    # the pod bound before the retry went out
                    lost["pod_binding"] += 1
                if t.group == BIND_PREEMPT:
                    allowed.add(CallCancelled)  # the preemption cancelled a pending binding
            elif t.call.startswith("patch"):
                allowed = {SUCCESS, OVERWRITTEN, SKIPPED}
                if t.group == PATCH_PREEMPT:
                    allowed.add(CallCancelled)
                if t.call == f"patch{PATCH_ROUNDS - 1}" and t.group == PATCH:
                    allowed.discard(OVERWRITTEN)  # nothing newer came after it
            elif t.call == "preempt":
                allowed = {SUCCESS, CallCancelled}
                if got is CallCancelled:
                    # the deletion landed but its reply was lost (timeout); the informer's
                    # delete event retired the object before the retry: the victim is gone
                    lost["pod_preemption"] += 1
            else:  # claims
                allowed = {SUCCESS, OVERWRITTEN, SKIPPED}
            if got not in allowed:
                unexpected.append((t.what, t.name, got))
        for call_type, n in lost.items():
            timeouts = retries.get(f"{call_type}:timeout", 0)
            if n > timeouts:
                unexpected.append((call_type, "outcomes of lost replies", (n, timeouts)))
        return unexpected

    def wrong_pods(self) -> list[tuple[str, str]]:
        """Pods whose stored state differs from the intents."""
        items: dict[str, Obj] = {}
        for ns in NAMESPACES:
            listed = self.mem.list("Pod", namespace=ns).items
            items.update({p["metadata"]["name"]: p for p in listed})
        wrong = []
        for i in range(N_PODS):
            name = self.name(i)
            stored = items.get(name)
            if i in self.preempted:
                if stored is not None:
                    wrong.append((name, "not deleted"))
                continue
            if stored is None:
                wrong.append((name, "missing"))
                continue
            node = stored["spec"].get("nodeName")
            conditions = {c["type"]: c for c in stored["status"].get("conditions", [])}
            scheduled = conditions.get("PodScheduled", {})
            if i in self.bound_to:
                if node != self.bound_to[i]:
                    wrong.append((name, f"bound to {node!r}, want {self.bound_to[i]!r}"))
                if scheduled.get("status") != "True":
                    wrong.append((name, "PodScheduled is not True after binding"))
            elif i in self.last_patch:
                message, nnn = self.last_patch[i]
                got = (scheduled.get("status"), scheduled.get("reason"), scheduled.get("message"))
                if got != ("False", "Unschedulable", message):
                    wrong.append((name, f"PodScheduled {got}, want message {message!r}"))
                got_nnn = stored["status"].get("nominatedNodeName")
                if got_nnn != nnn:
                    wrong.append((name, f"nominatedNodeName {got_nnn!r}, want {nnn!r}"))
                if node is not None:
                    wrong.append((name, f"unexpectedly bound to {node!r}"))
        return wrong

    def wrong_claims(self) -> list[tuple[str, str]]:
        """Claims whose stored allocation or reservations differ from the intents."""
        wrong = []
        for j, claim in enumerate(self.claims):
            name = claim["metadata"]["name"]
            stored = self.mem.get_object("ResourceClaim", "default", name)
            if stored is None:
                wrong.append((name, "missing"))
                continue
            alloc, consumers = self.claim_intent[j]
            if stored["status"].get("allocation") != alloc:
                wrong.append((name, f"allocation {stored['status'].get('allocation')!r}"))
            if stored["status"].get("reservedFor") != consumers:
                wrong.append((name, f"reservedFor {stored['status'].get('reservedFor')!r}"))
        return wrong

    def node_transitions(self) -> dict[str, list[str | None]]:
        """Pod name → every change of ``spec.nodeName`` in the server's history of the run."""
        transitions: dict[str, list[str | None]] = defaultdict(list)
        last_node: dict[str, str | None] = {}
        for event_type, obj in replay_pod_events(self.mem, self.since):
            name = obj["metadata"]["name"]
            node = obj["spec"].get("nodeName")
            if event_type != "DELETED" and node != last_node.get(name):
                transitions[name].append(node)
            last_node[name] = node
        return transitions


# --------------------------------------------------------------------------- the big run


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_thousand_pods_end_to_end_over_http(make_stack: Callable[..., Stack]) -> None:
    mem = InMemoryApiServer(
        faults=FaultPlan(
            rate=0.04, weights={"429": 2.0, "500": 2.0, "conn_reset": 1.0}, retry_after=0.02
        ),
        seed=7,
    )
    work = Workload(mem)
    scripted = work.script_faults()
    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1),
        retry=RetryConfig(max_attempts=8, base_backoff=0.002, max_backoff=0.05),
        executor=ExecutorConfig(workers=8),
    )
    d = make_stack(mem, config=config, request_timeout=1.0).dispatcher
    work.run(d)

    # ---- every future resolves, exactly once
    futures = [t.future for t in work.tracked]
    _done, not_done = wait(futures, timeout=WAIT)
    assert not not_done, f"{len(not_done)} futures never resolved"
    assert d.outstanding == 0
    stats = d.stats()
    assert sum(stats["outcomes"].values()) == len(futures)  # one resolution each, no more
    assert d.metrics.registry.get_sample_value("kdispatch_object_actor_failures_total") == 0
    assert d.stop(timeout=10.0) is True
    assert [work.resolutions[k] for k in range(len(futures))] == [1] * len(futures)

    # ---- with an outcome its call and history allow
    unexpected = work.unexpected_outcomes(stats["retries"])
    assert not unexpected, unexpected[:20]

    # ---- the server's final state equals the intents
    wrong = work.wrong_pods() + work.wrong_claims()
    assert not wrong, wrong[:20]

    # ---- no pod was bound twice, nor to two nodes (server history and request log)
    transitions = work.node_transitions()
    bg = work.by_group
    for i, node in work.bound_to.items():
        assert transitions[work.name(i)] == [node], (work.name(i), transitions[work.name(i)])
    for k, i in enumerate(bg[BIND_PREEMPT]):  # the even ones were bound before preemption
        assert transitions[work.name(i)] in (([node_of(i)],) if k % 2 == 0 else ([], [node_of(i)]))
    never_bound = bg[PATCH] + bg[PATCH_PREEMPT] + bg[PREEMPT]
    assert all(not transitions[work.name(i)] for i in never_bound)
    log = mem.request_log
    for (op, name), outcomes in requests_by_name(log).items():
        if op == "bind":
            assert outcomes.count("ok") + outcomes.count("apply_then_fail") <= 1, (name, outcomes)

    # ---- the faults really happened, and were retried over HTTP
    faults = mem.fault_counts()
    assert mem.pending_faults() == 0
    assert sum(faults.values()) >= scripted + 20, faults
    assert {"429", "500", "conn_reset", "timeout", "apply_then_fail", "409"} <= set(faults)
    retries = stats["retries"]
    for reason in ("429", "5xx", "timeout", "connection"):
        assert any(k.endswith(f":{reason}") for k in retries), (reason, retries)
    assert retries.get("pod_status_patch:conflict", 0) >= 2, retries  # re-read over HTTP
    assert mem.counts()["get"] >= 2

    # ---- merging happened: fewer status patches were sent than submitted for patched pods
    patch_only = {work.name(i) for i in bg[PATCH]}
    mine = [t for t in work.tracked if t.name in patch_only]
    assert sum(1 for t in mine if outcome(t.future) is OVERWRITTEN) > 0
    applied = sum(
        1
        for rec in log
        if rec.op == "patch_status"
        and rec.name in patch_only
        and rec.outcome in ("ok", "apply_then_fail")
    )
    assert applied < len(mine)


# --------------------------------------------------------------------------- informer wiring


@pytest.mark.timeout(60)
def test_informer_events_over_http_cancel_and_elide_pending_calls(
    make_stack: Callable[..., Stack],
) -> None:
    """One executor worker is held by another pod's request, so the calls below stay pending;
    the server changes under them and only the informer (watch over HTTP) tells the
    dispatcher."""
    mem = InMemoryApiServer()
    blocker = mem.create(make_pod("blocker"))
    victim = mem.create(make_pod("victim"))
    other = mem.create(make_pod("other"))
    held: list[GatedBackend] = []

    def wrap(backend: KubernetesBackend) -> GatedBackend:
        held.append(GatedBackend(backend, hold="blocker"))
        return held[0]

    config = DispatcherConfig(
        rate_limit=RateLimitConfig(qps=math.inf, burst=1), executor=ExecutorConfig(workers=1)
    )
    stack = make_stack(mem, config=config, request_timeout=5.0, wrap=wrap, kinds=("Pod",))
    d, gated = stack.dispatcher, held[0]
    try:
        first = d.submit(PodStatusPatch.for_pod(blocker, conditions=[cond(message="held")]))
        gated.wait_calls(1, timeout=WAIT)  # the only worker is now busy with it
        doomed = d.submit(
            PodStatusPatch.for_pod(
                victim, conditions=[cond(message="never sent")], nominated_node_name="node-1"
            )
        )
        moot = d.submit(PodStatusPatch.for_pod(other, nominated_node_name="node-2"))

        # The victim disappears on the server (its controller deleted it): the informer's
        # delete event cancels its pending patch.
        mem.remove("Pod", "default", "victim")
        exc = doomed.exception(timeout=WAIT)
        assert isinstance(exc, CallCancelled), exc
        assert exc.uid == victim["metadata"]["uid"]

        # Another client nominates the same node: the informer's update makes the pending
        # patch a no-op, and it is dropped unsent.
        updated = {**other, "status": {**other["status"], "nominatedNodeName": "node-2"}}
        mem.update(updated)
        assert moot.result(timeout=WAIT) is SKIPPED
        assert not first.done()  # all of this happened while the worker was still held
    finally:
        gated.gate.set()
    assert first.result(timeout=WAIT) is SUCCESS

    # The deleted pod's UID is tombstoned: a late call is cancelled without a request.
    late = d.submit(PodBinding.for_pod(victim, "node-1"))
    assert isinstance(late.exception(timeout=WAIT), CallCancelled)
    assert d.stop(timeout=10.0) is True

    # Only the blocker's patch was ever sent, through the client to the server.
    assert gated.calls == [("patch_status", "blocker")]
    assert [(r.op, r.name, r.outcome) for r in mem.request_log] == [
        ("patch_status", "blocker", "ok")
    ]
    assert mem.get_object("Pod", "default", "victim") is None
    stored = mem.get_object("Pod", "default", "other")
    assert stored is not None and stored["status"]["nominatedNodeName"] == "node-2"
    stored = mem.get_object("Pod", "default", "blocker")
    assert stored is not None
    assert stored["status"]["conditions"][0]["message"] == "held"
