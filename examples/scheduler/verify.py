"""Check a finished run: the apiserver's final state against the scheduler's intents, judged by
:mod:`kdispatch.testing.oracle` (the one oracle of the stress run and the chaos benchmark).

Each recorded :class:`~examples.scheduler.tracker.Intent` becomes the oracle's intent: the
fields its call promised (a binding: the node; a status patch: ``PodScheduled=False`` with its
reason and the nomination, promised only until the pod is bound; a claim write: the allocated
device and each reservation), its relevance (the call type's), whether a more relevant call of
the same object was still open when it was submitted, and its future. A PodGroup status write
promises its ``PodGroupInitiallyScheduled`` status and reason, checked against the final
PodGroups when they were listed.

* **duplicate bindings** (:func:`kdispatch.testing.oracle.duplicate_bindings`): pods the
  apiserver bound more than once — bind requests its request log shows as applied (``ok``),
  or a pod the informer saw move from one node to another (:class:`BindingAudit`) — or that the
  scheduler saw bound successfully to two different nodes. (A request logged
  ``apply_then_fail`` is not counted: the log writes that name even when the apply itself was
  refused, e.g. the 409 of a retried binding.)
* **lost intents** (:func:`kdispatch.testing.oracle.score`): calls whose future never
  resolved, and calls whose future said success while the final state does not show what they
  promised and no later call of the object changed that field (a preemption: its pod still
  exists). A call merged into a later one shares that call's fate; one a more relevant call
  superseded (answered ``OVERWRITTEN`` before it, or ``SKIPPED`` while it was open) is exempt.

Pure functions over snapshots, run once at the end on the caller thread.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from examples.scheduler.podgroups import INITIALLY_SCHEDULED
from examples.scheduler.tracker import BIND, CLAIM, GROUP, PREEMPT, STATUS, Intent
from kdispatch import (
    ClaimStatusPatch,
    DispatcherClosed,
    Obj,
    PodBinding,
    PodGroupStatusPatch,
    PodPreemption,
    PodStatusPatch,
    meta,
    pod_node_name,
)
from kdispatch.testing import RequestRecord
from kdispatch.testing.oracle import ABSENT, Field, duplicate_bindings, score
from kdispatch.testing.oracle import Intent as Promise


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


RELEVANCE = {
    BIND: PodBinding.relevance,
    STATUS: PodStatusPatch.relevance,
    PREEMPT: PodPreemption.relevance,
    CLAIM: ClaimStatusPatch.relevance,
    GROUP: PodGroupStatusPatch.relevance,
}
"""The relevance of each kind of intent: its call type's."""

SCHEDULED = "PodScheduled"


def _promised(intent: Intent) -> dict[Field, Any]:
    """The oracle's fields ``intent`` promised (see the module docstring)."""
    expect = intent.expect
    if intent.kind == BIND:
        return {("node",): expect["node"]}
    if intent.kind == STATUS:
        fields: dict[Field, Any] = {
            ("cond", SCHEDULED, "status"): "False",
            ("cond", SCHEDULED, "reason"): expect["reason"],
        }
        if expect.get("nominated"):
            fields[("nnn",)] = expect["nominated"]
        return fields
    if intent.kind == GROUP:
        return {
            ("cond", INITIALLY_SCHEDULED, "status"): expect["status"],
            ("cond", INITIALLY_SCHEDULED, "reason"): expect["reason"],
        }
    if intent.kind == CLAIM:
        fields = {}
        if "device" in expect:
            device = expect["device"]
            fields[("device",)] = tuple(device) if device else ABSENT
        if "reserve" in expect:
            fields[("reserved", expect["reserve"])] = True
        if "unreserve" in expect:
            fields[("reserved", expect["unreserve"])] = False
        return fields
    return {}  # a preemption promises its pod's absence (exclusive)


def promises(intents: Iterable[Intent]) -> list[Promise]:
    """The oracle's intents of the scheduler's ``intents`` (see the module docstring). A more
    relevant call was open at submit when it was submitted earlier and resolved later."""
    out: list[Promise] = []
    earlier: dict[str, list[Intent]] = defaultdict(list)
    for intent in sorted(intents, key=lambda i: i.seq):
        relevance = RELEVANCE[intent.kind]
        under_higher = any(
            RELEVANCE[e.kind] > relevance and (e.resolved is None or e.resolved > intent.submitted)
            for e in earlier[intent.uid]
        )
        earlier[intent.uid].append(intent)
        out.append(
            Promise(
                intent.seq,
                intent.uid,
                intent.kind,
                relevance,
                _promised(intent),
                future=intent.future,
                exclusive=intent.kind == PREEMPT,
                under_higher=under_higher,
                binding_node=str(intent.expect["node"]) if intent.kind == BIND else None,
                until_bound=intent.kind == STATUS,
            )
        )
    return out


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
    judged = promises(intents)
    applied = [r.uid for r in log or () if r.op == "bind" and r.outcome == "ok"]
    dups = duplicate_bindings(applied, seen=audit.nodes if audit else None, intents=judged)
    out.duplicate_bindings = len(dups)
    for uid in sorted(dups)[:5]:
        out.note(f"pod {uid} bound more than once")
    final: dict[str, Obj | None] = {uid: pods.get(uid) for uid in {i.uid for i in intents}}
    final.update({str(meta(c).get("uid")): c for c in claims.values()})
    final.update(groups or {})
    found = score(judged, final, initial={}, examples=15)
    out.lost_intents = found.lost_intents
    out.unresolved = found.unresolved_futures
    out.checked = sum(1 for p in judged if p.future is not None and p.future.done())
    out.closed_at_stop = sum(
        1 for i in intents if i.future.done() and isinstance(i.future.exception(), DispatcherClosed)
    )
    for text in found.lost_examples:
        out.note(text)
    return out
