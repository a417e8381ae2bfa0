"""Failover and restart of the main job as separate processes (``benchmarks/failover.py``).

The apiserver is its own process; scheduler replicas are processes talking to it over HTTP.
Every check reads the apiserver's audit (writes in the order applied, with the writer's
``User-Agent``; lease writes). Synchronisation polls that observable state with deadlines.
Lease values are short (2 s / 1.5 s / 0.25 s). How long a takeover takes is a benchmark
figure (``python -m benchmarks.failover``), not checked here: a test checks that it happens
and what the server holds after it, never a wall-clock time.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

from benchmarks.failover import Scenario, run_failover, run_restart

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Every process a test started is gone when it ends."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    leaked = [p for p in me.children(recursive=True) if p.pid not in before and p.is_running()]
    leaked = [p for p in leaked if p.status() != psutil.STATUS_ZOMBIE]
    assert not leaked, f"leaked processes: {[p.cmdline() for p in leaked]}"


def _common_checks(r: dict[str, Any]) -> None:
    assert r["pods_bound"] == r["pods"], "every intent converges: every pod ends bound"
    assert r["duplicate_bindings"] == 0, "every pod is bound exactly once"
    assert r["bind_conflicts"] == 0
    assert r["old_writes_after_new_first_write"] == 0
    # the new leader rebuilt from list+watch: it never tried to bind a pod bound before
    assert r["binding_attempts_on_pods_bound_before"] == 0
    assert r["bound_by_old"] > 0 and r["rescheduled_by_new"] > 0
    assert r["bound_by_old"] + r["rescheduled_by_new"] == r["pods"]


@pytest.mark.parametrize("dispatcher_process", [False, True], ids=["in-process", "child"])
def test_sigkill_of_the_leader_mid_run(tmp_path: Path, dispatcher_process: bool) -> None:
    scenario = Scenario(dispatcher_process=dispatcher_process)
    r = run_failover(scenario, tmp_path, signal.SIGKILL)
    _common_checks(r)
    # a killed replica's dispatcher process and multiprocessing's resource tracker (orphaned,
    # so no leak check sees them) exit by themselves
    assert (r["old_leader_descendants"] > 0) == dispatcher_process
    assert r["old_leader_descendants_gone"]
    assert r["new_leader"] not in ("", r["old_leader"])
    assert r["takeover_s"] is not None
    assert r["exit_codes"][r["old_leader"]] == -signal.SIGKILL
    assert r["replicas_finished"]
    others = [code for i, code in r["exit_codes"].items() if i != r["old_leader"]]
    assert others == [0] * (scenario.replicas - 1), r["exit_codes"]
    new_fig = r["figures"][r["new_leader"]]
    assert new_fig["duplicate_bindings"] == 0 and new_fig["lost_intents"] == 0


@pytest.mark.parametrize("dispatcher_process", [False, True], ids=["in-process", "child"])
def test_sigterm_hands_over_gracefully(tmp_path: Path, dispatcher_process: bool) -> None:
    scenario = Scenario(dispatcher_process=dispatcher_process)
    r = run_failover(scenario, tmp_path, signal.SIGTERM)
    _common_checks(r)
    assert r["old_leader_descendants_gone"]
    assert r["released"], "the old leader released the lease"
    assert r["exit_codes"][r["old_leader"]] == 0, "a graceful stop verifies clean"
    assert r["old_writes_after_signal"] > 0, "it had pending calls and drained them"
    assert r["takeover_s"] is not None
    assert all(code == 0 for code in r["exit_codes"].values()), r["exit_codes"]


def test_restart_without_ha_converges_without_duplicates(tmp_path: Path) -> None:
    r = run_restart(Scenario(), tmp_path)
    _common_checks(r)
    assert r["second_exit_code"] == 0
    fig = r["second_figures"]
    assert fig["duplicate_bindings"] == 0 and fig["lost_intents"] == 0
