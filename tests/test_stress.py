"""The stress run, reduced: ~1,000 concurrent object actors under churn and faults.

The run checks itself (futures resolved exactly once, final state equals the intents, no double
binding, no leaks); this test asserts those findings, and pins the state-check rule on its own
so it is known to catch a lost update.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from examples.stress import Intent, StressConfig, _allowed, main, run_stress
from kdispatch.actors.errors import CallFailed, InvalidInputError, Outcome


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


def _intent(seq: int, outcome: Outcome | BaseException) -> Intent:
    fut: Future[Outcome] = Future()
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
    return Intent(seq, "pod_status_patch", "u", {}, fut)


def test_state_rule_allows_only_what_successful_calls_explain() -> None:
    def allowed(*steps: tuple[Outcome | BaseException, Any]) -> list[Any]:
        return _allowed([(_intent(i, o), v) for i, (o, v) in enumerate(steps)], "initial")

    failed = CallFailed("gave up")
    assert allowed() == ["initial"]
    assert allowed((Outcome.SUCCESS, "a"), (failed, "b")) == ["a"]
    # merged into a later call that failed: either value may remain
    assert allowed((Outcome.SUCCESS, "a"), (Outcome.OVERWRITTEN, "b"), (failed, "c")) == ["a", "b"]
    assert allowed((Outcome.OVERWRITTEN, "a"), (Outcome.SUCCESS, "b")) == ["b"]
    assert allowed((Outcome.SKIPPED, "a")) == ["a", "initial"]
    assert allowed((failed, "a")) == ["initial"]


def test_stress_cli_rejects_bad_options() -> None:
    assert main(["--objects", "0"]) == 2
    with pytest.raises(InvalidInputError):
        StressConfig(faults=1.5)
