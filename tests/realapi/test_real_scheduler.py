"""The main job (``examples.scheduler``) in ``--kubeconfig`` mode against both targets: it
schedules the pending pods that name it, allocates and reserves a DRA claim, and leaves other
schedulers' pods alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examples.scheduler.resources import GPU_RESOURCE
from examples.scheduler.runner import RunConfig, run
from tests.e2e.test_scheduler_example import check_clean
from tests.realapi.cluster import Admin, Target, condition
from tests.realapi.conftest import create_node, node_body
from tests.realapi.objects import new_claim, new_pod

pytestmark = pytest.mark.timeout(120)

N_PODS = 30


def schedule_namespace(
    target: Target, admin: Admin, ns: str, kubeconfig: Path, scheduler: str
) -> dict[str, Any]:
    """Create nodes, a claim and pods for ``scheduler`` in ``ns``, run the main job against
    the cluster, and check what the server ends with. Returns the run's figures."""
    nodes = [f"{ns}-n{i}" for i in range(4)]
    try:
        for i, name in enumerate(nodes):
            body = node_body(name, cpu_m=4000, mem_mi=16_384)
            if i == 0:
                body["status"]["allocatable"][GPU_RESOURCE] = "2"
                body["status"]["capacity"][GPU_RESOURCE] = "2"
            create_node(admin, body, real=target.real)
        new_claim(admin, ns, "gpu-c")
        for i in range(N_PODS):
            new_pod(
                admin,
                ns,
                f"p{i}",
                cpu="200m",
                scheduler=scheduler,
                claims=("gpu-c",) if i == 0 else (),
            )
        new_pod(admin, ns, "not-ours", cpu="100m")  # default-scheduler: left alone
        fig = run(
            RunConfig(
                kubeconfig=str(kubeconfig), scheduler_name=scheduler, workers=4, max_seconds=60
            ),
            stream=None,
        )
        check_clean(fig)
        assert (fig["pods_total"], fig["pods_bound"]) == (N_PODS, N_PODS)
        for i in range(N_PODS):
            pod = admin.get_pod(ns, f"p{i}")
            assert pod["spec"]["nodeName"] in nodes
            sched = condition(pod, "PodScheduled")
            assert sched is not None and sched["status"] == "True", sched
        assert admin.get_pod(ns, "not-ours")["spec"].get("nodeName") is None
        claim = admin.get_claim(ns, "gpu-c")
        p0 = admin.get_pod(ns, "p0")
        assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == nodes[0]
        assert p0["spec"]["nodeName"] == nodes[0]
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [p0["metadata"]["uid"]]
        return fig
    finally:
        for name in nodes:
            reply = admin.request("DELETE", f"/api/v1/nodes/{name}")
            assert reply.status in (200, 404), reply


def test_main_job_with_kubeconfig(target: Target, admin: Admin, ns: str, kubeconfig: Path) -> None:
    schedule_namespace(target, admin, ns, kubeconfig, f"kd-{ns}"[:63])
