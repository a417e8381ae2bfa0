"""The stress run, reduced: ~1,000 concurrent object actors under churn and faults.

The run checks itself (futures resolved exactly once, final state equals the intents, no double
binding, no leaks); this test asserts those findings, and pins the state-check rule on its own
so it is known to catch a lost update.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest

from examples.stress import StressConfig, main, run_stress
from kdispatch.actors.engine import object_actor
from kdispatch.actors.engine.messages import settle
from kdispatch.actors.model.errors import CallConflict, CallFailed, InvalidInputError, Outcome
from kdispatch.testing.memory_objects import make_pod
from kdispatch.testing.oracle import Intent, score
from tests.factories import settled


@pytest.mark.timeout(60)
def test_stress_run_with_churn_and_faults_checks_clean() -> None:
    result = run_stress(
        StressConfig(objects=1000, seconds=2.0, threads=3, faults=0.05, latency_ms=0.5)
    )
    assert result.ok, result.problems
    assert result.peak_live_actors >= 1000  # every object had a live actor at once
    assert result.unresolved == 0 and result.resolved_more_than_once == 0
    assert result.state_mismatches == 0 and result.aspects_checked >= 1000
    assert result.double_bindings == 0
    assert (result.leaked_actors, result.leaked_pooled_actors, result.leaked_threads) == (0, 0, [])
    assert result.drained
    outcomes = result.outcomes
    for call_type in ("pod_status_patch", "pod_binding", "pod_preemption", "claim_status_patch"):
        assert outcomes.get(f"{call_type}:success", 0) > 0, call_type
    assert sum(v for k, v in outcomes.items() if k.endswith(":overwritten")) > 0  # merges
    assert sum(v for k, v in outcomes.items() if k.endswith(":cancelled")) > 0
    assert sum(result.faults_injected.values()) > 0
    assert result.external_updates > 0


def _intent(seq: int, outcome: Outcome | BaseException, value: str) -> Intent:
    return Intent(seq, "u", "pod_status_patch", 1, {NNN: value}, future=settled(outcome))


NNN = ("nnn",)


def test_state_check_catches_a_lost_update() -> None:
    """The run's state check (the oracle) on its own: a value only successful calls explain."""

    def mismatches(final: str, *steps: tuple[Outcome | BaseException, str]) -> int:
        intents = [_intent(i, o, v) for i, (o, v) in enumerate(steps)]
        pod = make_pod("p", uid="u", nominated_node_name=final)
        found = score(intents, {"u": pod}, {"u": make_pod("p", uid="u")})
        return found.lost_intents + found.live_objects_checked - found.live_objects_converged

    failed = CallFailed("gave up")
    assert mismatches("a", (Outcome.SUCCESS, "a"), (failed, "b")) == 0
    assert mismatches("initial", (Outcome.SUCCESS, "a"), (failed, "b")) > 0  # the lost update
    # merged into a later call that failed: either value may remain
    assert mismatches("a", (Outcome.SUCCESS, "a"), (Outcome.OVERWRITTEN, "b"), (failed, "c")) == 0
    assert mismatches("b", (Outcome.SUCCESS, "a"), (Outcome.OVERWRITTEN, "b"), (failed, "c")) == 0
    assert mismatches("b", (Outcome.OVERWRITTEN, "a"), (Outcome.SUCCESS, "b")) == 0
    assert mismatches("a", (Outcome.OVERWRITTEN, "a"), (Outcome.SUCCESS, "b")) > 0
    assert mismatches("a", (Outcome.SKIPPED, "a")) == 0
    assert mismatches("other", (Outcome.SKIPPED, "a")) > 0


def test_stress_cli_rejects_bad_options() -> None:
    assert main(["--objects", "0"]) == 2
    with pytest.raises(InvalidInputError):
        StressConfig(faults=1.5)


@pytest.mark.timeout(60)
def test_stress_json_to_a_missing_directory_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--objects", "1", "--json", str(tmp_path / "no" / "run.json")]) == 2
    assert capsys.readouterr().err.startswith("error: --json")


@pytest.mark.timeout(60)
def test_the_exactly_once_check_sees_a_second_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    """A future resolved twice: the Future refuses the second silently and runs its
    done-callbacks once; the run must still see it."""

    def settle_twice(future: Future[Outcome], outcome: Outcome | BaseException) -> bool:
        first = settle(future, outcome)
        settle(future, outcome)
        return first

    monkeypatch.setattr(object_actor, "settle", settle_twice)
    result = run_stress(StressConfig(objects=50, seconds=0.3, threads=1, faults=0.0))
    assert not result.ok and result.resolved_more_than_once > 0


@pytest.mark.timeout(60)
def test_the_double_binding_check_sees_a_refused_binding_said_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The in-memory apiserver never binds a bound pod; the dispatcher's word is what can be
    wrong: SUCCESS for bindings of one pod to two nodes."""

    def conflict_as_success(future: Future[Outcome], outcome: Outcome | BaseException) -> bool:
        return settle(future, Outcome.SUCCESS if isinstance(outcome, CallConflict) else outcome)

    monkeypatch.setattr(object_actor, "settle", conflict_as_success)
    result = run_stress(StressConfig(objects=200, seconds=1.0, threads=2, faults=0.0))
    assert result.double_bindings > 0 and not result.ok
