"""The peer benchmark (``benchmarks.peer``) at its smallest, against the real kube-apiserver:
one run of kube-scheduler and one of the example scheduler, 50 pods each, and the record's
counts checked against what the server has while the control plane still runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.peer_cluster import Api, condition, list_pods, request_delta, request_totals
from benchmarks.peer_run import Workload, run_one
from benchmarks.peer_schedulers import BY_NAME
from kdispatch.testing.envtest import Binaries, BinariesNotFound, find_binaries

pytestmark = [pytest.mark.realapi, pytest.mark.timeout(300)]

SMOKE = Workload("smoke", "smoke", nodes=5, fit=40, unfit=10, late=True)


@pytest.fixture(scope="module")
def binaries() -> Binaries:
    try:
        return find_binaries(scheduler=True)
    except BinariesNotFound as exc:
        pytest.skip(f"kube-scheduler's binary is absent: {exc}")


def check_against_server(api: Api, rec: dict[str, Any]) -> None:
    """The record's counts are the server's: bound and unschedulable pods, one binding per
    bound pod, and the counters only grew by what was read after the run."""
    pods = list_pods(api)
    fit = [p for p in pods if p["metadata"]["labels"]["peer-group"] == "fit"]
    unfit = [p for p in pods if p["metadata"]["labels"]["peer-group"] == "unfit"]
    assert (len(fit), len(unfit)) == (rec["pods_fit"], rec["pods_unfit"]) == (40, 10)
    bound = [p for p in fit if p["spec"].get("nodeName")]
    assert rec["bound"] == len(bound) == 40
    for pod in bound:
        cond = condition(pod, "PodScheduled")
        assert cond is not None and cond["status"] == "True"
    marked = [p for p in unfit if (condition(p, "PodScheduled") or {}).get("status") == "False"]
    assert rec["unschedulable_marked"] == len(marked) == 10
    assert not any(p["spec"].get("nodeName") for p in unfit)
    assert rec["lost"] == rec["misplaced"] == rec["duplicates"] == 0
    assert rec["requests"]["POST pods/binding"] == 40
    assert rec["requests"]["PATCH pods/status"] >= 10
    assert rec["requests_total"] == sum(rec["requests"].values())
    assert rec["stopped_by"] == "done"
    assert rec["cpu_scheduler_s"] > 0 and rec["cpu_control_plane_s"] > 0
    assert rec["first_bind_s"] is not None and rec["first_bind_s"] <= rec["wall_s"]
    # the bindings counted by the server since start: exactly the record's, or one per pod
    totals = request_delta({}, request_totals(api))
    server_bindings = sum(
        n
        for (verb, res, sub, code), n in totals.items()
        if (verb, res, sub) == ("POST", "pods", "binding") and code == "201"
    )
    assert server_bindings == 40


@pytest.mark.parametrize("contender", ["kube-async", "example"])
def test_peer_run_counts_match_the_server(
    contender: str, binaries: Binaries, tmp_path: Path
) -> None:
    checked: list[str] = []

    def on_end(api: Api, rec: dict[str, Any]) -> None:
        check_against_server(api, rec)
        checked.append(rec["contender"])

    rec = run_one(
        SMOKE, BY_NAME[contender], binaries, tmp_path / "run", deadline_s=120, on_end=on_end
    )
    assert checked == [contender]
    assert rec["watch_error"] == ""
    if contender == "example":
        assert rec["event_requests"] >= 0
    else:
        assert rec["event_requests"] > 0  # kube-scheduler records Scheduled/FailedScheduling
