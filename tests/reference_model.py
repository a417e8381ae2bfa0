"""A plain reference model of the calls of one Pod, for the stateful test of the per-object
state machine (:class:`~kdispatch.actors.model.object_state.ObjectState`).

The model knows what DESIGN §3 promises about one object, not how the actor is built. Every call
a caller submits becomes an :class:`Intent`; the model keeps two slots, ``pending`` and
``inflight``, and after every step it is told which futures resolved (and how) and checks that
against the rules below. Between steps, the open futures must be exactly those of the two slots
(at most one pending call and one call in flight per object).

**Submit** call C, with P pending and I in flight:

1. the object is gone → C ``cancelled`` (``success`` for a preemption: its object is gone,
   as intended);
2. C is exclusive (preemption): P ``overwritten`` (merged into C) if it is a preemption, else
   ``cancelled``; C becomes pending (behind a preemption in flight too: sent if that one
   fails);
3. P or I is exclusive → C ``cancelled``;
4. C is stale (a patch setting ``PodScheduled`` to anything but ``True`` on a bound pod) → C
   ``stale``, nothing else changes;
5. P or I supersedes C (a binding supersedes a status patch) → C ``skipped``;
6. P has C's type → P ``overwritten``, merged into C (newer fields win), which becomes pending;
7. otherwise C becomes pending and P (superseded by C) is ``overwritten``. With the built-in
   types, two calls of different types are never pending at once: a status patch behind a
   binding is skipped, anything behind a preemption cancelled.

**Grant**: the pending call moves to in flight, and the call sent (or re-read for: a *read*
step, one GET before an object-dependent call is sent again after an ambiguous failure) is
exactly the merge of the intents carried in it; nothing is sent or read after the actor learnt
that the object is gone.

**Done** of I: success → ``success``; not found → ``not_found`` and P ``cancelled`` (the object
is gone); permanent failure, or a retryable one at the last attempt → ``failed``; a retry or a
conflict after the actor learnt that the object is gone → ``cancelled``; otherwise a retry or a
conflict puts I back as pending: alone, merged into a pending call of its type (I
``overwritten``), or replaced by a superseding pending call (I ``overwritten``, ``cancelled``
if that is a preemption). A read step that ends (success or retry) puts I back the same way; a
failed read counts towards the attempts like a failed send (``max_attempts`` caps failed
requests). A binding whose 409 re-read shows the
pod bound to its node has landed: ``success``. **Informer delete** → P ``cancelled``, gone.
**Caller cancel** → P ``cancelled`` (if of the given type). Whenever the object disappears, a
tracked preemption resolves ``success`` instead: its object is gone, as intended.

**Unanswered** (a timeout): when the retries of I run out and one of its requests went
unanswered (or the last one, a read, did, once I was sent), I is not ``failed`` yet: it stays in
flight, *reading back*, and the next grant reads its object (a *verify* read). Nothing merges
with it or supersedes it meanwhile: calls submitted meanwhile are judged as behind any call in
flight. The verify read decides I: ``success`` if the object shows I applied, ``failed``
otherwise (or when the read fails; a preemption whose pod is not found: ``success``, gone);
then P is judged against the object read. While I waits for that grant, an informer delete or
a caller cancel (of its type, or all) resolves it as it does P.

**Choices left to the machine.** Whether a call is a *no-op*, whether a binding *fails fast*
and whether a patch is *stale* depend on the machine's view of the object, which the model does
not keep. The model accepts the machine's choice (C, or the merged C, resolves
``skipped``/``conflict``/``stale`` on submit; the pending call does on an informer update, a
grant, or when a done puts a call back; a retried call is ``skipped`` when a newer object shows
it applied) and checks it against the server: a call skipped as a no-op must already hold there,
and the call in flight must not set any of its fields to another value; a binding that failed
fast must target a pod bound to another node; a stale patch must set ``PodScheduled`` to
something else than ``True`` while the server's pod is bound (or gone).

**Final state.** An intent is *written* if its future resolved ``success``, or it was merged into
a newer call that is written. Written intents reach the server in submission order (a merge keeps
newer-wins), so once everything is drained each field holds the value of the last written intent
that sets it (its initial value otherwise). A binding merged into a newer one is replaced by it,
not written, nor is a stale call. A binding also sets ``PodScheduled=True`` without reason or
message, but only the first written binding actually binds (later ones find the pod already
bound to their node). The pod is gone iff someone deleted it or a preemption was written. A
call skipped as a no-op asserts a value; it writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kdispatch.actors.model.calls import UNSET, Call
from kdispatch.actors.model.errors import CallOutcomeError, DispatcherClosed, Outcome
from kdispatch.actors.model.objects import Obj, get_path, is_terminating, pod_node_name
from kdispatch.actors.model.pod_calls import (
    PodBinding,
    PodPreemption,
    PodStatusPatch,
    pod_conditions,
)

Fields = dict[str, Any]
"""Field values by name: ``"<condition type>.<status|reason|message>"``, ``"nnn"`` (nominated
node name), ``"nodeName"``; None means absent."""

PATCH = PodStatusPatch.call_type
BINDING = PodBinding.call_type
PREEMPTION = PodPreemption.call_type
CONDITION_TYPES = ("PodScheduled", "QueueGate", "DisruptionTarget", "Ready")
BOUND = {"PodScheduled.status": "True", "PodScheduled.reason": None, "PodScheduled.message": None}
"""What a binding does to the PodScheduled condition (it replaces the condition whole)."""


def _condition_fields(conditions: object) -> Fields:
    out: Fields = {}
    for cond in conditions if isinstance(conditions, list | tuple) else ():
        for key in ("status", "reason", "message"):
            if key in cond:
                out[f"{cond['type']}.{key}"] = cond[key]
    return out


def call_fields(call: Call) -> Fields:
    """The fields ``call`` sets (a binding: only its node; see :data:`BOUND`)."""
    if isinstance(call, PodStatusPatch):
        out = _condition_fields(call.conditions)
        if call.nominated_node_name is not UNSET:
            out["nnn"] = call.nominated_node_name or None
        return out
    if isinstance(call, PodBinding):
        return {"nodeName": call.node}
    if isinstance(call, PodPreemption):
        conditions = (call.condition,) if call.condition is not None else ()
        return {**_condition_fields(conditions), "grace": call.grace_period_seconds}
    raise TypeError(f"unexpected call {call!r}")


def pod_fields(pod: Obj) -> Fields:
    """The fields of a pod, every condition type of :data:`CONDITION_TYPES` included."""
    conds = pod_conditions(pod)
    out: Fields = {
        f"{ctype}.{key}": conds.get(ctype, {}).get(key)
        for ctype in CONDITION_TYPES
        for key in ("status", "reason", "message")
    }
    out["nnn"] = get_path(pod, "status", "nominatedNodeName") or None
    out["nodeName"] = pod_node_name(pod)
    return out


def differences(want: Mapping[str, Any], pod: Obj) -> dict[str, tuple[Any, Any]]:
    """``{field: (wanted, actual)}`` for every field of ``want`` that ``pod`` does not hold."""
    have = pod_fields(pod)
    return {k: (v, have.get(k)) for k, v in want.items() if have.get(k) != v}


def outcome_label(future: Future[Outcome]) -> str:
    """How a resolved future ended: ``success``, ``skipped``, ``overwritten``, ``cancelled``,
    ``conflict``, ``not_found``, ``failed`` or ``closed``."""
    exc = future.exception(timeout=0)
    if exc is None:
        return future.result(timeout=0).value
    if isinstance(exc, CallOutcomeError):
        return exc.result_label
    if isinstance(exc, DispatcherClosed):
        return "closed"
    return f"unexpected {exc!r}"


@dataclass(eq=False)
class Intent:
    """One submitted call, its future, and what became of it."""

    seq: int
    call: Call
    future: Future[Outcome]
    merged: Fields = field(init=False)  # own fields + those of the older calls merged into it
    carried_by: Intent | None = None  # the newer call it was merged into
    label: str | None = None  # its outcome, once resolved
    failures: int = 0  # retryable failures of its requests (sends and re-reads)
    sent: bool = False  # a request of it (or of an intent merged into it) went out
    unanswered: bool = False  # ... and went unanswered (it may have landed)

    def __post_init__(self) -> None:
        self.merged = call_fields(self.call)

    @property
    def call_type(self) -> str:
        return self.call.call_type

    def written(self) -> bool:
        """Whether this intent reached the server (itself, or merged into a newer call)."""
        intent = self
        while intent.carried_by is not None:
            intent = intent.carried_by
        return intent.label == "success"

    def __repr__(self) -> str:
        return f"#{self.seq} {self.call_type} {call_fields(self.call)}"


def _merge_into(older: Intent, newer: Intent) -> None:
    """``older`` was merged into ``newer``: status patches merge field by field (newer wins),
    other calls replace the older one."""
    older.carried_by = newer
    newer.failures = max(newer.failures, older.failures)
    newer.sent |= older.sent
    newer.unanswered |= older.unanswered
    if newer.call_type == PATCH:
        newer.merged = {**older.merged, **newer.merged}


def _gone_outcome(intent: Intent, otherwise: str) -> str:
    """The outcome of a tracked call when its object disappears: a preemption got its way."""
    return "success" if intent.call.exclusive else otherwise


class Model:
    """The reference model of one Pod's calls (see the module docstring). Test thread only."""

    def __init__(self, initial: Obj, max_attempts: int) -> None:
        self.initial = pod_fields(initial)
        self.max_attempts = max_attempts
        self.intents: list[Intent] = []
        self.pending: Intent | None = None
        self.inflight: Intent | None = None
        self.reading = False  # the in-flight intent waits for the grant of its verify read
        self.gone = False  # the actor learnt that the object is deleted
        self.deleted = False  # someone else deleted the object on the server
        self.kubelet: Fields = {}  # fields written by the kubelet (never by our calls)

    # ------------------------------------------------------------------ bookkeeping

    def new_intent(self, call: Call, future: Future[Outcome]) -> Intent:
        """Record a call about to be submitted."""
        intent = Intent(len(self.intents), call, future)
        self.intents.append(intent)
        return intent

    def newly_resolved(self) -> dict[Intent, str]:
        """Intents whose future resolved since the last step, with their outcome."""
        return {
            i: outcome_label(i.future) for i in self.intents if i.label is None and i.future.done()
        }

    def unresolved(self) -> set[Intent]:
        """The intents whose futures must still be open: the two slots."""
        return {i for i in (self.pending, self.inflight) if i is not None}

    def _settle(self, want: dict[Intent, str], got: dict[Intent, str], step: str) -> None:
        assert got == want, f"{step}: expected outcomes {want}, got {got}"
        for intent, label in got.items():
            intent.label = label

    def clobbered(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The fields the in-flight call will set to other values than ``fields``."""
        inflight = self.inflight.merged if self.inflight is not None else {}
        return {k: v for k, v in inflight.items() if k in fields and fields[k] != v}

    def _check_noop(self, intent: Intent, server: Obj | None) -> None:
        clobbered = self.clobbered(intent.merged)
        assert not clobbered, (
            f"{intent} skipped as a no-op, but {self.inflight} in flight will set {clobbered}"
        )
        if server is None:
            return
        if intent.call_type == PREEMPTION:
            assert is_terminating(server), f"{intent} skipped but the pod is not terminating"
            return
        want = {"nodeName": intent.merged["nodeName"]} if intent.call_type == BINDING else None
        diff = differences(want or intent.merged, server)
        assert not diff, f"{intent} skipped as a no-op, but the server has {diff} (want, have)"

    @staticmethod
    def _check_landed(intent: Intent, server: Obj | None) -> None:
        """``intent`` resolved ``success`` by its verify read: the server shows it."""
        if intent.call_type == PREEMPTION:
            assert server is None or is_terminating(server), f"{intent} landed, but {server}"
            return
        assert server is not None, f"{intent} landed, but the pod is gone"
        want = {"nodeName": intent.merged["nodeName"]} if intent.call_type == BINDING else None
        diff = differences(want or intent.merged, server)
        assert not diff, f"{intent} landed, but the server has {diff} (want, have)"

    @staticmethod
    def _check_failed_fast(intent: Intent, server: Obj | None) -> None:
        assert intent.call_type == BINDING, f"{intent} failed with a conflict"
        if server is None or is_terminating(server):
            return
        bound = pod_node_name(server)
        assert bound not in (None, intent.merged["nodeName"]), (
            f"{intent} failed fast, but the server pod is bound to {bound!r}"
        )

    @staticmethod
    def _check_stale(intent: Intent, server: Obj | None) -> None:
        assert intent.call_type == PATCH, f"{intent} resolved stale"
        status = intent.merged.get("PodScheduled.status")
        assert status not in (None, "True"), f"{intent} stale, but it sets PodScheduled={status}"
        if server is not None:
            assert pod_node_name(server) is not None, f"{intent} stale, but the pod is not bound"

    def _check_choice(self, intent: Intent, label: str, server: Obj | None) -> None:
        if label == "skipped":
            self._check_noop(intent, server)
        elif label == "conflict":
            self._check_failed_fast(intent, server)
        else:
            self._check_stale(intent, server)

    def _revisited(
        self, want: dict[Intent, str], got: dict[Intent, str], server: Obj | None
    ) -> None:
        """The object changed: the pending call may have become a no-op, failed fast or gone
        stale."""
        p = self.pending
        if p is not None and p not in want:
            label = got.get(p)
            if label in ("skipped", "conflict", "stale"):
                self._check_choice(p, label, server)
                want[p] = label
                self.pending = None

    # ------------------------------------------------------------------ steps

    def on_submit(self, c: Intent, got: dict[Intent, str], server: Obj | None) -> None:
        """``c`` was submitted; ``got`` is what resolved meanwhile."""
        p, i = self.pending, self.inflight
        tracked = [e for e in (p, i) if e is not None]
        want: dict[Intent, str] = {}
        if self.gone:
            want[c] = _gone_outcome(c, "cancelled")
        elif c.call.exclusive:
            if p is not None:
                if p.call_type == c.call_type:
                    want[p] = "overwritten"
                    _merge_into(p, c)
                else:
                    want[p] = "cancelled"
                self.pending = None
            self.pending = c
        elif any(e.call.exclusive for e in tracked):
            want[c] = "cancelled"
        elif got.get(c) == "stale":
            self._check_stale(c, server)
            want[c] = "stale"
        elif got.get(c) == "conflict":
            self._check_failed_fast(c, server)
            want[c] = "conflict"
        elif any(c.call_type in e.call.supersedes for e in tracked):
            want[c] = "skipped"
        elif p is not None and p.call_type == c.call_type:
            want[p] = "overwritten"
            _merge_into(p, c)
            self.pending = c
            if got.get(c) == "skipped":  # the merged call is a no-op
                self._check_noop(c, server)
                want[c] = "skipped"
                self.pending = None
        elif got.get(c) == "skipped":
            self._check_noop(c, server)
            want[c] = "skipped"
        else:
            if p is not None:
                assert p.call_type in c.call.supersedes, f"{p} and {c} pending at once"
                want[p] = "overwritten"  # superseded by c
            self.pending = c
        self._settle(want, got, f"submit {c}")

    def on_grant(
        self,
        sent: Call | None,
        got: dict[Intent, str],
        server: Obj | None,
        *,
        read: bool = False,
        verify: bool = False,
    ) -> None:
        """The executor granted a token; the actor sent ``sent`` (None: it refunded), a read
        with ``read``, the verify read of the call in flight with ``verify``."""
        p = self.pending
        want: dict[Intent, str] = {}
        if verify:
            assert not self.gone, f"{sent} read back after the object was deleted"
            i = self.inflight
            assert self.reading and i is not None, "a verify read with nothing reading back"
            assert sent is not None and call_fields(sent) == i.merged, (
                f"read back for {sent}, but the call reading back is {i}"
            )
            self.reading = False
        elif self.reading:
            raise AssertionError(f"{sent} granted while {self.inflight} waits to read back")
        elif sent is not None:
            assert not self.gone, f"{sent.describe()} sent after the object was deleted"
            assert self.inflight is None, "two calls in flight"
            assert p is not None, f"{sent.describe()} sent with nothing pending"
            assert call_fields(sent) == p.merged, (
                f"sent {call_fields(sent)}, but the merged intent is {p.merged}"
            )
            self.pending, self.inflight = None, p
            p.sent |= not read
        elif p is not None and self.inflight is None and not self.gone:
            label = got.get(p)  # a refund: the pending call became a no-op, fails fast or stale
            if label not in ("skipped", "conflict", "stale"):
                raise AssertionError(f"grant refunded, but {p} is pending (got {got})")
            self._check_choice(p, label, server)
            want[p] = label
            self.pending = None
        self._settle(want, got, "grant")

    def on_done(
        self,
        result: str,
        attempt: int,
        got: dict[Intent, str],
        server: Obj | None,
        *,
        read: bool = False,
        verify: bool = False,
        unanswered: bool = False,
    ) -> None:
        """The in-flight attempt (or, with ``read``, the re-read before it; with ``verify``
        too, its read-back) ended with ``result`` (a
        :class:`~kdispatch.actors.model.object_state.Result` value); ``unanswered``: it
        went unanswered (a timeout)."""
        i, p = self.inflight, self.pending
        assert i is not None and not self.reading
        self.inflight = None
        want: dict[Intent, str] = {}
        requeue = False
        del attempt  # the retry budget counts failed requests, re-reads included
        if result == "retry":
            i.failures += 1
            i.unanswered |= unanswered and not read
        out_of_retries = result == "retry" and i.failures >= self.max_attempts
        if verify and not self.gone:
            self._read_back(i, result, want, got, server)
        elif read and self.gone and result != "not_found":  # deleted while the read was out
            want[i] = _gone_outcome(i, "cancelled")
        elif read and out_of_retries:
            self._out_of_retries(i, want, unanswered=unanswered)
        elif read and result in ("success", "retry"):
            requeue = True
        elif result == "success":
            want[i] = "success"
            if i.call.exclusive:
                self._deleted(want)
        elif result == "not_found":
            want[i] = _gone_outcome(i, "not_found")
            if p is not None:
                want[p] = _gone_outcome(p, "cancelled")
            self.pending, self.gone = None, True
        elif self.gone and result in ("retry", "conflict"):  # deleted meanwhile: no retry
            label = got.get(i)
            want[i] = _gone_outcome(i, label if label in ("cancelled", "failed") else "cancelled")
        elif out_of_retries:
            self._out_of_retries(i, want, unanswered=unanswered)
        elif result == "failed":
            want[i] = "failed"
        elif result == "retry" and got.get(i) == "skipped":  # a newer object shows it applied
            self._check_noop(i, server)
            want[i] = "skipped"
        elif result == "conflict" and got.get(i) == "success":  # the 409 shows it landed
            assert i.call_type == BINDING and server is not None, f"{i} landed on a 409"
            assert pod_node_name(server) == i.merged["nodeName"], f"{i} landed, but {server}"
            want[i] = "success"
            self._revisited(want, got, server)  # the pod read after the 409 judges the pending
        else:
            requeue = True
        if requeue:
            self._put_back(i, want, got, server)
        what = "read" if read else "done"
        self._settle(want, got, f"{what} {result} of {i}")

    def _put_back(
        self, i: Intent, want: dict[Intent, str], got: dict[Intent, str], server: Obj | None
    ) -> None:
        """``i`` goes back as the pending call: alone, merged into a pending call of its type,
        or replaced by a superseding (or exclusive) pending call; then the pending call is
        judged."""
        p = self.pending
        if p is None:
            self.pending = i  # retried as the pending call
        elif p.call_type == i.call_type:
            want[i] = "overwritten"
            _merge_into(i, p)
        else:
            want[i] = "cancelled" if p.call.exclusive else "overwritten"
        self._revisited(want, got, server)

    def _out_of_retries(self, i: Intent, want: dict[Intent, str], *, unanswered: bool) -> None:
        """The retries of ``i`` in flight ran out: ``failed``, unless one of its requests went
        unanswered (or the last one did: ``unanswered``) once it was sent; then it stays in
        flight to read its object back."""
        if i.sent and (i.unanswered or unanswered):
            self.inflight, self.reading = i, True
        else:
            want[i] = "failed"

    def _read_back(
        self,
        i: Intent,
        result: str,
        want: dict[Intent, str],
        got: dict[Intent, str],
        server: Obj | None,
    ) -> None:
        """The verify read of ``i`` ended with ``result`` (the object not known to be gone): it
        decides ``i``; then the object read judges the pending call."""
        if result == "not_found" and i.call.exclusive:
            want[i] = "success"  # gone, as intended
            self._deleted(want)
            return
        if result == "success" and got.get(i) == "success":
            self._check_landed(i, server)
            want[i] = "success"
            if i.call.exclusive:
                self._deleted(want)
        else:
            want[i] = "failed"
        self._revisited(want, got, server)

    def _deleted(self, want: dict[Intent, str]) -> None:
        """A deletion landed: the object is gone, and a deletion waiting behind it got its
        way."""
        if self.pending is not None:
            want[self.pending] = _gone_outcome(self.pending, "cancelled")
        self.pending, self.gone = None, True

    def on_observed(self, got: dict[Intent, str], server: Obj | None) -> None:
        """An informer update reached the actor."""
        want: dict[Intent, str] = {}
        self._revisited(want, got, server)
        self._settle(want, got, "informer update")

    def on_deleted(self, got: dict[Intent, str]) -> None:
        """An informer delete reached the actor (or the registry, when there is no actor)."""
        p = self.pending
        want = {p: _gone_outcome(p, "cancelled")} if p is not None else {}
        if self.reading:  # its read-back was not on the wire: withdrawn too
            assert self.inflight is not None
            want[self.inflight] = _gone_outcome(self.inflight, "cancelled")
            self.inflight, self.reading = None, False
        self.pending, self.gone = None, True
        self._settle(want, got, "informer delete")

    def on_cancel(self, call_type: str | None, got: dict[Intent, str]) -> None:
        """The caller withdrew the pending call (of ``call_type``, or any)."""
        p = self.pending
        want: dict[Intent, str] = {}
        if p is not None and call_type in (None, p.call_type):
            want[p] = "cancelled"
            self.pending = None
        i = self.inflight
        if self.reading and i is not None and call_type in (None, i.call_type):
            want[i] = "cancelled"  # its read-back was not on the wire
            self.inflight, self.reading = None, False
        self._settle(want, got, f"cancel {call_type}")

    # ------------------------------------------------------------------ expectations

    def expected_view(self) -> Fields:
        """What ``View`` must show on top of the observed pod: the in-flight, then the pending
        mutations (read-your-writes)."""
        out: Fields = {}
        for intent in (self.inflight, self.pending):
            if intent is None:
                continue
            if intent.call_type == BINDING:  # PodScheduled=True only if it actually binds
                out = {k: v for k, v in out.items() if not k.startswith("PodScheduled.")}
                out.update(intent.merged)
            else:
                out.update({k: v for k, v in intent.merged.items() if k != "grace"})
        return out

    def expected_pod(self) -> Fields | None:
        """The server's pod fields once everything is drained (None: the pod is gone)."""
        written = [i for i in self.intents if i.written()]
        if self.deleted or any(i.call_type == PREEMPTION for i in written):
            return None
        fields = dict(self.initial)
        for intent in written:
            own = call_fields(intent.call)
            if intent.call_type == BINDING:
                if intent.carried_by is not None:
                    continue  # replaced by the newer binding it was merged into
                assert fields["nodeName"] in (None, own["nodeName"]), (
                    f"{intent} succeeded, but the pod was bound to {fields['nodeName']!r}"
                )
                if fields["nodeName"] is None:
                    fields.update({**own, **BOUND})
            else:
                fields.update(own)
        fields.update(self.kubelet)
        return fields
