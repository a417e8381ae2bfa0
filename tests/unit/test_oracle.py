"""The final-state oracle (:mod:`kdispatch.testing.oracle`) on its own: which intents it counts
lost, when a final state has converged, and which pods it names bound more than once. Pure:
hand-made intents with settled futures against hand-made final objects."""

from __future__ import annotations

from typing import Any

from kdispatch.actors.model.errors import CallCancelled, CallFailed, Outcome
from kdispatch.testing.memory import make_claim, make_pod
from kdispatch.testing.oracle import ABSENT, Intent, actual, duplicate_bindings, score
from tests.factories import settled


def _pod(nnn: str | None = None) -> dict[str, Any]:
    """Pod u1 as the server holds it, nominated to ``nnn``."""
    return make_pod("p1", uid="u1", nominated_node_name=nnn)


NNN = ("nnn",)


def _intent(seq: int, value: str, outcome: Outcome | BaseException | None, **kw: Any) -> Intent:
    return Intent(seq, "u1", "pod_status_patch", 1, {NNN: value}, future=settled(outcome), **kw)


def test_oracle_counts_a_success_the_server_does_not_show() -> None:
    result = score([_intent(0, "n1", Outcome.SUCCESS)], {"u1": _pod()}, {"u1": _pod()})
    assert (result.lost_intents, result.converged) == (1, 0.0)


def test_oracle_accepts_what_the_server_shows() -> None:
    result = score(
        [_intent(0, "n1", Outcome.SUCCESS)],
        {"u1": _pod("n1")},
        {"u1": _pod()},
    )
    assert (result.lost_intents, result.converged) == (0, 1.0)


def test_oracle_lets_a_later_intent_or_a_deletion_supersede() -> None:
    later = [_intent(0, "n1", Outcome.SUCCESS), _intent(1, "n2", CallFailed("gave up"))]
    assert score(later, {"u1": _pod()}, {"u1": _pod()}).lost_intents == 0
    assert score(later, {"u1": _pod("n2")}, {"u1": _pod()}).converged == 1.0
    gone = score([_intent(0, "n1", Outcome.SUCCESS)], {"u1": None}, {"u1": _pod()})
    assert (gone.lost_intents, gone.live_objects_checked) == (0, 0)


def test_oracle_exempts_a_skip_under_a_more_relevant_open_call() -> None:
    skipped = _intent(0, "n1", Outcome.SKIPPED, under_higher=True)
    assert score([skipped], {"u1": _pod()}, {"u1": _pod()}).lost_intents == 0
    plain = _intent(0, "n1", Outcome.SKIPPED)
    assert score([plain], {"u1": _pod()}, {"u1": _pod()}).lost_intents == 1


def test_oracle_counts_a_landed_patch_lost_although_a_binding_came_later() -> None:
    binding = Intent(1, "u1", "pod_binding", 2, {("node",): "n1"}, future=settled(Outcome.SUCCESS))
    bound = make_pod("p1", uid="u1", node="n1")  # the patch's nomination is not there
    landed = [_intent(0, "n2", Outcome.SUCCESS), binding]
    assert (score(landed, {"u1": bound}, {"u1": _pod()}).lost_intents) == 1
    superseded = [_intent(0, "n2", Outcome.OVERWRITTEN), binding]  # the binding took its slot
    assert score(superseded, {"u1": bound}, {"u1": _pod()}).lost_intents == 0


def test_oracle_follows_an_overwritten_intent_to_the_call_that_carried_it() -> None:
    """Merged into a status patch that landed, an intent is not excused by a binding that came
    after: only an intent a more relevant call carried on is."""
    binding = Intent(2, "u1", "pod_binding", 2, {("node",): "n1"}, future=settled(Outcome.SUCCESS))
    cond = ("cond", "X", "status")
    carrier = Intent(1, "u1", "pod_status_patch", 1, {cond: "True"})
    carrier.future = settled(Outcome.SUCCESS)
    merged = _intent(0, "n2", None)
    merged.future.successor = carrier.future  # type: ignore[union-attr]
    merged.future.set_result(Outcome.OVERWRITTEN)  # type: ignore[union-attr]
    bound = make_pod("p1", uid="u1", node="n1")  # neither the nomination nor the condition
    found = score([merged, carrier, binding], {"u1": bound}, {"u1": _pod()})
    assert found.lost_intents == 2
    by_binding = _intent(0, "n2", None)  # the binding took its slot: excused
    by_binding.future.successor = binding.future  # type: ignore[union-attr]
    by_binding.future.set_result(Outcome.OVERWRITTEN)  # type: ignore[union-attr]
    assert score([by_binding, binding], {"u1": bound}, {"u1": _pod()}).lost_intents == 0


def test_oracle_counts_unresolved_futures_and_live_preempted_pods() -> None:
    result = score([_intent(0, "n1", None)], {"u1": _pod()}, {"u1": _pod()})
    assert (result.unresolved_futures, result.lost_intents) == (1, 1)
    preempt = Intent(0, "u1", "pod_preemption", 3, {}, future=settled(Outcome.SUCCESS))
    preempt.exclusive = True
    assert score([preempt], {"u1": _pod()}, {"u1": _pod()}).lost_intents == 1
    assert score([preempt], {"u1": None}, {"u1": _pod()}).lost_intents == 0


def test_oracle_an_overwritten_intent_shares_the_fate_of_its_merge() -> None:
    merged = [_intent(0, "n1", Outcome.OVERWRITTEN), _intent(1, "n2", CallFailed("x"))]
    # the later intent failed: the field may hold either the initial or a merged value
    assert score(merged, {"u1": _pod()}, {"u1": _pod()}).converged == 1.0
    alone = [_intent(0, "n1", Outcome.OVERWRITTEN)]
    assert score(alone, {"u1": _pod()}, {"u1": _pod()}).lost_intents == 1
    # merged into a call that was then cancelled (or failed), on another field: not promised
    other = Intent(1, "u1", "pod_status_patch", 1, {("cond", "X", "status"): "True"})
    other.future = settled(CallCancelled("cancelled by the caller"))
    rode = [_intent(0, "n1", Outcome.OVERWRITTEN), other]
    assert score(rode, {"u1": _pod()}, {"u1": _pod()}).lost_intents == 0
    other.future = settled(Outcome.SUCCESS)  # now both promised, and neither holds
    assert score(rode, {"u1": _pod()}, {"u1": _pod()}).lost_intents == 2
    assert ABSENT == "<absent>"


def test_a_promise_until_bound_ends_when_the_pod_is_bound() -> None:
    status = {("cond", "PodScheduled", "status"): "False", NNN: "n1"}
    patch = Intent(0, "u1", "pod_status_patch", 1, status, future=settled(Outcome.SUCCESS))
    patch.until_bound = True
    bound = make_pod("p1", uid="u1", node="n2")  # bound by someone else: PodScheduled replaced
    found = score([patch], {"u1": bound}, {"u1": _pod()})
    assert (found.lost_intents, found.converged) == (0, 1.0)
    unbound = score([patch], {"u1": _pod()}, {"u1": _pod()})  # not bound: the promise holds
    assert unbound.lost_intents == 1
    patch.until_bound = False
    assert score([patch], {"u1": bound}, {"u1": _pod()}).lost_intents == 1


def test_a_claims_device_is_its_first_allocated_pool_and_device() -> None:
    claim = make_claim("c1")
    assert actual(claim, ("device",)) == ABSENT
    claim["status"] = {"allocation": {"devices": {"results": [{"pool": "n1", "device": "gpu-0"}]}}}
    assert actual(claim, ("device",)) == ("n1", "gpu-0")
    promised = Intent(0, "c", "claim", 1, {("device",): ("n1", "gpu-1")})
    promised.future = settled(Outcome.SUCCESS)
    assert score([promised], {"c": claim}, {}).lost_intents == 1


def test_duplicate_bindings_from_each_witness() -> None:
    assert duplicate_bindings(["u1", "u2", "u1"]) == {"u1"}  # the server applied two
    assert duplicate_bindings(seen={"u1": ["n1"], "u2": ["n1", "n2"]}) == {"u2"}

    def binding(seq: int, uid: str, node: str, outcome: Any) -> Intent:
        i = Intent(seq, uid, "pod_binding", 2, {("node",): node}, binding_node=node)
        i.future = settled(outcome)
        return i

    two_nodes = [binding(0, "u1", "n1", Outcome.SUCCESS), binding(1, "u1", "n2", Outcome.SUCCESS)]
    assert duplicate_bindings(intents=two_nodes) == {"u1"}
    one_failed = [binding(0, "u1", "n1", Outcome.SUCCESS), binding(1, "u1", "n2", CallFailed("x"))]
    assert duplicate_bindings(intents=one_failed) == set()
    assert duplicate_bindings(["u1"], seen={"u1": ["n1", "n1"]}, intents=one_failed) == set()
