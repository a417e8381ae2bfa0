"""Check a finished run: the apiserver's final state against the scheduler's intents.

* **duplicate bindings**: pods the apiserver bound more than once — bind requests its request
  log shows as applied (``ok``), or a pod the informer saw move from one node to another
  (:class:`BindingAudit`) — or that the scheduler saw bound successfully to two different nodes.
  (A request logged ``apply_then_fail`` is not counted: the log writes that name even when the
  apply itself was refused, e.g. the 409 of a retried binding.)
* **lost intents**: calls whose future never resolved, and calls whose future succeeded but
  whose effect the final state does not show. Per object and kind of intent only the last
  successful one is checked (later ones supersede earlier ones). A call that succeeded only by
  being merged into or skipped for another call (``overwritten``/``skipped``) is exempt when a
  later call on the same object failed or was closed at shutdown: its effect rode on that call.
  A PodGroup's ``PodGroupInitiallyScheduled`` intent is checked against the final PodGroups
  when they were listed.

Pure functions over snapshots, run once at the end on the caller thread.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from examples.scheduler.claims import allocated_device, reserved_uids
from examples.scheduler.podgroups import INITIALLY_SCHEDULED
from examples.scheduler.tracker import BIND, CLAIM, GROUP, PREEMPT, STATUS, Intent
from kdispatch import DispatcherClosed, Obj, Outcome, get_path, meta, pod_node_name
from kdispatch.testing import RequestRecord


class BindingAudit:
    """Pod informer handler recording every node each pod UID was seen bound to. Informer
    thread writes; read after the informer stopped."""

    def __init__(self) -> None:
        self.nodes: dict[str, set[str]] = defaultdict(set)

    def on_pod(self, obj: Obj) -> None:
        """Informer thread (add and update)."""
        node = pod_node_name(obj)
        if node is not None:
            self.nodes[str(meta(obj).get("uid"))].add(node)

    def on_delete(self, obj: Obj) -> None:
        """Informer thread. Nothing to record."""

    def rebound(self) -> set[str]:
        """UIDs seen on more than one node."""
        return {uid for uid, nodes in self.nodes.items() if len(nodes) > 1}


@dataclass(slots=True)
class Verification:
    """Result of :func:`verify`; ``problems`` lists the first few findings."""

    duplicate_bindings: int = 0
    lost_intents: int = 0
    unresolved: int = 0
    closed_at_stop: int = 0
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """Keep the first 20 findings."""
        if len(self.problems) < 20:
            self.problems.append(text)


def _outcome(intent: Intent) -> Outcome | BaseException | None:
    fut = intent.future
    if not fut.done():
        return None
    exc = fut.exception()
    return exc if exc is not None else fut.result()


def duplicate_bindings(
    intents: Iterable[Intent], log: Iterable[RequestRecord] | None, audit: BindingAudit | None
) -> set[str]:
    """UIDs of pods bound more than once (request log, informer audit) or to two nodes
    (successful intents)."""
    dup: set[str] = set()
    if log is not None:
        applied = Counter(r.uid for r in log if r.op == "bind" and r.outcome == "ok")
        dup.update(uid for uid, n in applied.items() if n > 1)
    if audit is not None:
        dup.update(audit.rebound())
    nodes: dict[str, set[str]] = defaultdict(set)
    for intent in intents:
        if intent.kind == BIND and _outcome(intent) is Outcome.SUCCESS:
            nodes[intent.uid].add(str(intent.expect["node"]))
    dup.update(uid for uid, ns in nodes.items() if len(ns) > 1)
    return dup


def _reflected(
    intent: Intent,
    pods: Mapping[str, Obj],
    claims: Mapping[str, Obj],
    groups: Mapping[str, Obj] | None,
) -> bool:
    """Whether the final state shows the effect of a successful intent."""
    expect = intent.expect
    if intent.kind == GROUP:
        group = None if groups is None else groups.get(intent.uid)
        if group is None:  # not listed (not served), or deleted since
            return True
        conds = get_path(group, "status", "conditions") or []
        found = next((c for c in conds if c.get("type") == INITIALLY_SCHEDULED), None)
        return found is not None and all(found.get(k) == v for k, v in expect.items())
    if intent.kind == PREEMPT:
        return intent.uid not in pods
    if intent.kind == CLAIM:
        claim = claims.get(intent.key)
        if claim is None or meta(claim).get("uid") != intent.uid:
            return True  # deleted since
        device = expect.get("device")
        if allocated_device(claim) != (tuple(device) if device else None):
            return False
        reserved = reserved_uids(claim)
        if "reserve" in expect and expect["reserve"] not in reserved:
            return False
        return not ("unreserve" in expect and expect["unreserve"] in reserved)
    pod = pods.get(intent.uid)
    if pod is None:
        return True  # preempted or deleted since
    if intent.kind == BIND:
        return bool(pod_node_name(pod) == expect["node"])
    if intent.kind == STATUS:
        if pod_node_name(pod) is not None:
            return True  # a later binding supersedes PodScheduled=False
        conds = get_path(pod, "status", "conditions") or []
        scheduled = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        if scheduled is None or scheduled.get("status") != "False":
            return False
        if scheduled.get("reason") != expect["reason"]:
            return False
        nominated = expect.get("nominated")
        return not nominated or bool(get_path(pod, "status", "nominatedNodeName") == nominated)
    return True


def verify(
    intents: list[Intent],
    pods: Mapping[str, Obj],
    claims: Mapping[str, Obj],
    log: Iterable[RequestRecord] | None,
    audit: BindingAudit | None = None,
    *,
    groups: Mapping[str, Obj] | None = None,
) -> Verification:
    """Check ``intents`` against the final ``pods`` (by uid), ``claims`` (by
    ``namespace/name``) and PodGroups (by uid; None when not served), the apiserver request
    ``log`` and the informer ``audit`` (either None when unavailable)."""
    out = Verification()
    dups = duplicate_bindings(intents, log, audit)
    out.duplicate_bindings = len(dups)
    for uid in sorted(dups)[:5]:
        out.note(f"pod {uid} bound more than once")
    last_ok: dict[tuple[str, str], Intent] = {}
    last_error: dict[str, int] = {}
    for intent in intents:
        result = _outcome(intent)
        if result is None:
            out.unresolved += 1
            out.note(f"{intent.kind} {intent.key}: future never resolved")
        elif isinstance(result, BaseException):
            if isinstance(result, DispatcherClosed):
                out.closed_at_stop += 1
            last_error[intent.uid] = intent.seq
        else:
            last_ok[(intent.kind, intent.uid)] = intent
    for intent in last_ok.values():
        result = _outcome(intent)
        if result is not Outcome.SUCCESS and last_error.get(intent.uid, -1) > intent.seq:
            continue
        out.checked += 1
        if not _reflected(intent, pods, claims, groups):
            out.lost_intents += 1
            out.note(f"{intent.kind} {intent.key} {dict(intent.expect)}: not in the final state")
    out.lost_intents += out.unresolved
    return out
