"""Reduced chaos runs with the oracle, and a regression it found (the oracle's own rules are
checked in tests/unit/test_oracle.py).

The full run is ``python -m benchmarks.chaos --pods 10000 --fault-rate 0.2``; here 300 pods go
through the in-memory apiserver and 100 through the official client over HTTP, each with random
faults, server-side deletions, preemptions, informers whose watches keep being cut and compacted,
and the oracle's five figures asserted at their ideal values.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.chaos import IDEAL, ChaosConfig, ideal, run
from benchmarks.chaos_watch import BindingAuditor
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.errors import CallStale, Outcome
from kdispatch.actors.model.pod_calls import PodBinding, PodStatusPatch
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.configs import FAST

pytestmark = pytest.mark.timeout(60)


def _check(figures: dict[str, Any]) -> None:
    assert {k: figures[k] for k in IDEAL} == IDEAL, (
        figures["lost_examples"],
        figures["unconverged_examples"],
        figures["duplicate_examples"],
        figures["leaks"],
    )
    assert ideal(figures)
    assert figures["drained"] is True
    assert sum(figures["faults_injected"].values()) > 0
    assert figures["pods_deleted_on_server"] > 0
    outcomes = figures["outcomes"]
    assert outcomes.get("success", 0) > 0 and outcomes.get("CallCancelled", 0) > 0


def test_chaos_in_memory() -> None:
    figures = run(
        ChaosConfig(
            pods=300,
            fault_rate=0.2,
            seed=7,
            workers=8,
            watch_chaos_interval=0.05,
        )
    )
    _check(figures)
    assert figures["intents"] >= 1000


def test_chaos_over_http_with_the_real_client() -> None:
    figures = run(
        ChaosConfig(
            pods=100,
            fault_rate=0.2,
            http=True,
            seed=11,
            workers=8,
            request_timeout=0.3,
            watch_chaos_interval=0.1,
        )
    )
    _check(figures)
    assert figures["faults_injected"].get("conn_reset", 0) > 0
    assert figures["watch_drops"] > 0


# --------------------------------------------------------------------------- regressions


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def test_status_patch_after_a_binding_is_judged_against_the_bound_pod() -> None:
    """Found by the chaos run: after a successful binding (whose reply carries no object) the
    actor once kept the pre-binding pod and elided a repeated ``PodScheduled=False`` as a no-op.
    Judged against the bound pod, that patch is stale (kubernetes#139602): it never lands."""
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    with Dispatcher(server, FAST) as d:
        assert d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE])).result(10) is (
            Outcome.SUCCESS
        )
        assert d.submit(PodBinding.for_pod(pod, "n1")).result(10) is Outcome.SUCCESS
        view = d.view(pod["metadata"]["uid"])
        assert view is not None and view["spec"]["nodeName"] == "n1"
        with pytest.raises(CallStale):
            d.submit(PodStatusPatch.for_pod(pod, conditions=[UNSCHEDULABLE])).result(10)
    stored = server.get_object("Pod", "default", "p1")
    assert stored is not None
    [scheduled] = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert stored["spec"]["nodeName"] == "n1"
    assert scheduled["status"] == "True"


def test_binding_auditor_keeps_every_node_a_pod_had() -> None:
    server = InMemoryApiServer()
    pod = server.create(make_pod("p1"))
    auditor = BindingAuditor(server).start()
    try:
        server.bind("default", "p1", uid=pod["metadata"]["uid"], node="n1")
        auditor.catch_up()
        server.compact()
        server.drop_watches()
        moved = server.get_object("Pod", "default", "p1")
        assert moved is not None
        moved["spec"]["nodeName"] = "n2"  # what a buggy apiserver would let happen
        server.update(moved)
    finally:
        auditor.stop()
    assert auditor.nodes() == {pod["metadata"]["uid"]: {"n1", "n2"}}
