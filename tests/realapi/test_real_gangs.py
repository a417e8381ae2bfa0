"""Gang scheduling by the example scheduler on the real kube-apiserver (PodGroups,
``scheduling.k8s.io/v1beta1``, feature gate ``GenericWorkload``), scaled: 50 nodes, 20 gang
PodGroups of 5 pods (``minCount`` 5), 4 of them unplaceable as a whole (one member asks for more
cpu than any node has), and 300 single pods that fit nowhere, at QPS 50/burst 100.

Everything is created before the scheduler (``python -m examples.scheduler``'s ``run`` with
``--kubeconfig``) starts. Read from the server: a pod watch from before the start (every
binding it ever saw), kube-apiserver's audit log (every binding request and every PodGroup
status write, with its body), and the final objects. It checks that no pod of an unplaceable
gang is ever bound, that every other gang is bound whole, that every PodGroup has its
``PodGroupInitiallyScheduled`` condition and none was ever written back from True, and that no
binding is lost or made twice. The gang figures (completion time from the scheduler's start to
the gang's last member bound, and the partial window from its first member bound to its last,
as the pod watch saw them) are printed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.peer_cluster import (
    NAMESPACE,
    Api,
    condition,
    create_nodes,
    create_pods,
    list_pods,
    node_body,
    pod_body,
)
from benchmarks.peer_schedulers import EXAMPLE
from benchmarks.peer_stats import percentile
from benchmarks.peer_watch import PodWatch
from examples.scheduler.runner import RunConfig, run
from kdispatch.testing.envtest import Binaries, ControlPlane
from tests.realapi.objects import assert_checks

pytestmark = [pytest.mark.realapi, pytest.mark.timeout(240)]

NODES, GANGS, GANG_SIZE, INFEASIBLE, UNFIT = 50, 20, 5, 4, 300
QPS, BURST = 50.0, 100
PIS = "PodGroupInitiallyScheduled"
GROUPS = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NAMESPACE}/podgroups"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "resources": [{"group": "", "resources": ["pods/binding"]}]},
        {
            "level": "Request",
            "resources": [{"group": "scheduling.k8s.io", "resources": ["podgroups/status"]}],
        },
        {"level": "None"},
    ],
}


def _gang(i: int) -> str:
    return f"gang-{i:02d}"


def _create(api: Api) -> None:
    """Nodes, PodGroups, the gangs' pods and the unfit pods, all for the example."""
    create_nodes(api, [node_body(f"n{i:03d}", "4", "16Gi", 110) for i in range(NODES)])
    pods = []
    for i in range(GANGS):
        group = _gang(i)
        api.ok(
            "POST",
            GROUPS,
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": group},
                "spec": {"schedulingPolicy": {"gang": {"minCount": GANG_SIZE}}},
            },
        )
        for j in range(GANG_SIZE):
            cpu = "64" if i < INFEASIBLE and j == 0 else "100m"
            body = pod_body(f"{group}-{j}", EXAMPLE, cpu, "128Mi", group)
            body["spec"]["schedulingGroup"] = {"podGroupName": group}
            pods.append(body)
    pods += [pod_body(f"unfit-{i:03d}", EXAMPLE, "64", "1Gi", "unfit") for i in range(UNFIT)]
    create_pods(api, pods)


def _audit(path: Path) -> list[dict[str, Any]]:
    """The audit log's ResponseComplete events."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("stage") == "ResponseComplete"]


def _regressions(audit: list[dict[str, Any]]) -> list[str]:
    """PodGroups whose ``PodGroupInitiallyScheduled`` a successful status write took from True
    to anything else (in the order the server completed them)."""
    true: set[str] = set()
    regressed: list[str] = []
    for event in audit:
        ref = event.get("objectRef") or {}
        if ref.get("subresource") != "status" or event["responseStatus"]["code"] >= 300:
            continue
        conds = ((event.get("requestObject") or {}).get("status") or {}).get("conditions") or []
        for cond in conds:
            if cond.get("type") != PIS:
                continue
            if cond.get("status") == "True":
                true.add(ref["name"])
            elif ref["name"] in true:
                regressed.append(ref["name"])
    return regressed


def test_gangs_are_bound_whole_or_never_on_the_real_apiserver(
    binaries: Binaries, tmp_path: Path
) -> None:
    policy = tmp_path / "audit-policy.json"
    policy.write_text(json.dumps(AUDIT_POLICY))
    audit_log = tmp_path / "audit.log"
    cp = ControlPlane(
        binaries,
        workdir=tmp_path / "cp",
        feature_gates={"GenericWorkload": True},
        runtime_config={"scheduling.k8s.io/v1beta1": True},
        apiserver_args=(f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}"),
    )
    cp.start()
    watch: PodWatch | None = None
    try:
        cp.create_namespace(NAMESPACE)
        api = Api(cp.url, cp.admin_token, cp.ca_file)
        _create(api)
        listed = api.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1")
        watch = PodWatch(api, listed["metadata"]["resourceVersion"]).start()
        t0 = time.monotonic()
        fig = run(
            RunConfig(
                kubeconfig=str(cp.write_kubeconfig(tmp_path / "example.kubeconfig")),
                scheduler_name=EXAMPLE,
                qps=QPS,
                burst=BURST,
                max_seconds=120,
            ),
            stream=None,
        )
        run_s = time.monotonic() - t0
        pods = {p["metadata"]["name"]: p for p in list_pods(api)}
        groups = {g["metadata"]["name"]: g for g in api.ok("GET", GROUPS)["items"]}
        with watch.lock:
            seen = dict(watch.pods)
    finally:
        if watch is not None:
            watch.stop()
        cp.stop()
    audit = _audit(audit_log)

    feasible = [_gang(i) for i in range(INFEASIBLE, GANGS)]
    infeasible = [_gang(i) for i in range(INFEASIBLE)]
    members = {g: [f"{g}-{j}" for j in range(GANG_SIZE)] for g in feasible + infeasible}
    unplaceable = [p for g in infeasible for p in members[g]]
    binds = [e for e in audit if (e.get("objectRef") or {}).get("subresource") == "binding"]
    bind_codes: dict[str, list[int]] = {}
    for event in binds:
        bind_codes.setdefault(event["objectRef"]["name"], []).append(
            event["responseStatus"]["code"]
        )

    def shows(group: str, status: str, reason: str) -> bool:
        cond = condition(groups.get(group, {}), PIS)
        return cond is not None and (cond.get("status"), cond.get("reason")) == (status, reason)

    completion: list[float] = []
    window: list[float] = []
    for group in feasible:
        times = [seen[p].bound_at for p in members[group] if p in seen]
        if len(times) == GANG_SIZE and all(t is not None for t in times):
            stamps = [t for t in times if t is not None]
            completion.append(max(stamps) - t0)
            window.append(max(stamps) - min(stamps))
    never_bound = [p for p in unplaceable if seen.get(p) is None or not seen[p].node]
    checks = {
        "the run settled and verified": fig["stopped_by"] == "done" and fig["verdict_ok"],
        "the watch held": watch.error == "",
        # no member of an unplaceable gang is ever bound: not in the watch, not at the end,
        # not one binding request in the audit log
        "unplaceable gangs never bound": len(never_bound) == len(unplaceable)
        and not any(pods[p]["spec"].get("nodeName") for p in unplaceable)
        and not any(p in bind_codes for p in unplaceable),
        "unplaceable members marked": all(
            (c := condition(pods[p], "PodScheduled")) is not None and c["status"] == "False"
            for p in unplaceable
        ),
        "feasible gangs bound whole": all(
            pods[p]["spec"].get("nodeName") for g in feasible for p in members[g]
        )
        and len(completion) == len(feasible),
        "every PodGroup has its condition": all(shows(g, "True", "Scheduled") for g in feasible)
        and all(shows(g, "False", "Unschedulable") for g in infeasible),
        "no condition regressed": _regressions(audit) == [],
        # one successful binding per bound pod, none refused, none moved
        "no lost or duplicate binding": all(
            codes == [201]
            for g in feasible
            for codes in [bind_codes.get(p, []) for p in members[g]]
        )
        and len(binds) == len(feasible) * GANG_SIZE
        and sum(s.rebinds for s in seen.values()) == 0,
        "unfit singles marked": all(
            seen.get(f"unfit-{i:03d}") is not None
            and seen[f"unfit-{i:03d}"].unschedulable_at is not None
            for i in range(UNFIT)
        ),
    }

    def p(values: list[float], q: float) -> str:
        v = percentile(values, q)
        return "-" if v is None else f"{v:.3f}"

    figures = (
        f"run {run_s:.1f} s, stopped by {fig['stopped_by']}; gangs bound "
        f"{len(completion)}/{len(feasible)}, completion p50 {p(completion, 0.5)} s p99 "
        f"{p(completion, 0.99)} s, partial window p50 {p(window, 0.5)} s p99 "
        f"{p(window, 0.99)} s max {p(window, 1.0)} s; pods of unplaceable gangs bound "
        f"{len(unplaceable) - len(never_bound)}; binding requests {len(binds)}; "
        f"example: gangs {fig['gangs']}, lost {fig['lost_intents']}, duplicates "
        f"{fig['duplicate_bindings']}, calls {fig['calls_sent_by_type']}"
    )
    assert_checks(checks, figures)
