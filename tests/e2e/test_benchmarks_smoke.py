"""Smoke test of the benchmarks: every workload on every contender at a tiny size, the output
files, and the semantics of the upstream model the headline comparison rests on.

Checks shapes and files, never the numbers (they depend on the machine).
"""

from __future__ import annotations

import io
import json
import math
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import _parse, run
from benchmarks.ablations import ABLATIONS, switch_off
from benchmarks.baselines import ClientRateLimiter, UpstreamFifoContender
from benchmarks.workloads import WORKLOADS
from benchmarks.workloads.common import unschedulable
from benchmarks.workloads.contenders import CONTENDERS
from kdispatch.actors.model.errors import Outcome
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.subprocesses import run_command

ROOT = Path(__file__).resolve().parents[2]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_tiny_run_writes_results_charts_and_summary(tmp_path: Path) -> None:
    results = run("tiny", tmp_path)

    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["meta"]["profile"] == "tiny"
    records = {(r["workload"], r["contender"]): r for r in on_disk["records"]}
    assert set(records) == {(w, c) for w in WORKLOADS for c in CONTENDERS}
    assert len(on_disk["records"]) == len(results["records"])
    for rec in on_disk["records"]:
        assert set(rec) == {"workload", "contender", "params", "figures", "series"}
        assert rec["figures"], rec["workload"]
        for key, value in rec["figures"].items():
            assert value is None or isinstance(value, int | float | dict), key
    for c in CONTENDERS:
        assert records[("W3", c)]["figures"]["pods_bound"] == records[("W3", c)]["params"]["pods"]
        assert records[("W2", c)]["figures"]["errors"] == 0
        assert records[("W4", c)]["figures"]["bind_decisions"] > 0
        assert "bytes_per_object" in records[("W6", c)]["figures"]
    assert "submit_only_p99_us" in records[("W1", "kdispatch")]["figures"]

    for wid in WORKLOADS:
        png = tmp_path / f"{wid.lower()}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC, png
    summary = (tmp_path / "summary.md").read_text()
    assert "## Targets" in summary
    for wid in WORKLOADS:
        assert f"### {wid}" in summary
        assert f"({wid.lower()}.png)" in summary
    assert summary.count("| pass |") + summary.count("| **miss** |") == 9  # every target judged


class _GatedBackend(InMemoryApiServer):
    """Holds every request until the test opens the gate; records the order requests arrive."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)
        self.order: list[tuple[str, str]] = []

    def patch_status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.order.append(("patch_status", kwargs["uid"]))
        self.entered.release()
        self.gate.wait()
        return super().patch_status(*args, **kwargs)

    def bind(self, namespace: str, name: str, *, uid: str | None, node: str) -> None:
        self.order.append(("bind", str(uid)))
        self.entered.release()
        self.gate.wait()
        super().bind(namespace, name, uid=uid, node=node)


@pytest.mark.timeout(10)
def test_upstream_model_merges_overwrites_skips_and_keeps_fifo() -> None:
    server = _GatedBackend()
    a = server.create(make_pod("a"))
    b = server.create(make_pod("b"))
    model = UpstreamFifoContender(server, qps=math.inf, burst=1, workers=1)
    try:
        first = model.submit_status(a, unschedulable("one"))
        assert server.entered.acquire(timeout=5)  # a's patch is in flight, the worker is busy
        queued_b = model.submit_status(b, unschedulable("b"))
        behind = model.submit_status(a, unschedulable("two"))
        merged = model.submit_status(a, unschedulable("three"))
        binding = model.submit_binding(a, "node-1")  # more relevant: replaces the waiting patch
        late_status = model.submit_status(a, unschedulable("four"))  # less relevant: skipped
        assert first.result(timeout=5) is Outcome.OVERWRITTEN  # same type merged on top of it
        assert behind.result(timeout=5) is Outcome.OVERWRITTEN
        assert merged.result(timeout=5) is Outcome.OVERWRITTEN
        assert late_status.result(timeout=5) is Outcome.SKIPPED
        server.gate.set()
        assert queued_b.result(timeout=5) is Outcome.SUCCESS
        assert binding.result(timeout=5) is Outcome.SUCCESS
    finally:
        server.gate.set()
        model.stop(drain=True, timeout=5)
    uid_a, uid_b = a["metadata"]["uid"], b["metadata"]["uid"]
    # FIFO, no priority: b (queued first) goes before a's binding, re-queued at the back.
    assert server.order == [("patch_status", uid_a), ("patch_status", uid_b), ("bind", uid_a)]


def test_client_rate_limiter_reserves_tokens_in_order() -> None:
    now = [0.0]
    limiter = ClientRateLimiter(qps=10, burst=2, clock=lambda: now[0])
    waits = [limiter.reserve() for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.0, 0.1, 0.2])
    now[0] = 1.0  # the debt is repaid and the bucket refills to its burst
    assert limiter.reserve() == 0.0
    assert limiter.taken == 5


def test_cli_rejects_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _parse(["--quick", "--out", str(tmp_path), "--workloads", "W9"])
    args = _parse(["--full", "--out", str(tmp_path), "--contenders", "kdispatch,blocking"])
    assert args.profile == "full"
    assert args.contenders == ["kdispatch", "blocking"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_transport_benchmark_writes_its_figures(tmp_path: Path) -> None:
    from benchmarks.transport import CONTENDERS
    from benchmarks.transport import main as transport_main

    out = tmp_path / "transport.json"
    transport_main(["--calls", "16", "--threads", "2", "--runs", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    assert set(data["summary"]) == {"sequential", "2_threads"}
    for mode in data["summary"].values():
        assert set(CONTENDERS) <= set(mode)
        for name in CONTENDERS:
            assert mode[name]["calls_per_s"]["median"] > 0
            assert mode[name]["cpu_us_per_call"]["median"] > 0
        assert mode["dispatcher_vs_models"]["calls_per_s"]["median"] > 0
    assert [run["sequential"]["lean"]["calls"] for run in data["runs"]] == [16]
    # the dispatcher made every call (one request each, every future Outcome.SUCCESS)
    assert [run["2_threads"]["dispatcher"]["calls"] for run in data["runs"]] == [16]


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_gc_pauses_measures_pending_actors_and_summarises_by_round() -> None:
    from benchmarks.gc_pauses import markdown, measure, summarise

    runs = []
    for i, variant in enumerate(("default", "gc_freeze", "default", "gc_freeze")):
        r = measure(200, variant)
        r["round"] = i // 2
        runs.append(r)
    for r in runs:
        assert r["live_actors"] == 200  # one actor per pod, each with its pending call
        assert r["fill"]["submits"] == r["steady"]["submits"] == 200
    summary = summarise(runs)
    freeze = summary["200"]["gc_freeze"]
    assert freeze["steady_max_submit_ms"]["min"] <= freeze["steady_max_submit_ms"]["max"]
    assert len(freeze["steady_max_submit_vs_default"]) == 3  # median, min, max of 2 rounds
    assert "| 200 | gc_freeze |" in markdown(summary)


@pytest.mark.timeout(30)
def test_gc_pauses_live_groups_variant_fills_through_groups_then_submits_plainly() -> None:
    from benchmarks.gc_pauses import PLAIN_STEADY, measure

    assert "gc_freeze_live_groups" in PLAIN_STEADY
    r = measure(200, "gc_freeze_live_groups")
    assert r["live_actors"] == 200
    assert r["fill"]["submits"] == r["steady"]["submits"] == 200


@pytest.mark.timeout(30)
def test_gc_pauses_collector_off_runs_without_collections_and_restores_the_collector() -> None:
    import gc

    from benchmarks.gc_pauses import measure

    assert gc.isenabled()
    r = measure(200, "collector_off")
    assert gc.isenabled()  # given back, even though the variant disabled it
    for phase in ("fill", "steady"):
        assert r[phase]["gen1_collections"] == r[phase]["gen2_collections"] == 0
    assert r["live_actors"] == 200


@pytest.mark.timeout(60)
def test_process_benchmark_probe_stops_on_sigterm_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    for _ in range(5):  # the handler once deadlocked on an Event's lock, now and then
        out.unlink(missing_ok=True)
        probe = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.process_executor", "--probe", str(out)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            assert probe.stdout is not None and probe.stdout.readline() == "ready\n"
            probe.send_signal(signal.SIGTERM)
            assert probe.wait(20) == 0
        finally:
            if probe.poll() is None:
                probe.kill()
                probe.wait(10)
            if probe.stdout is not None:
                probe.stdout.close()
        figures = json.loads(out.read_text())
        assert set(figures) == {"samples", "p50", "p99", "max"}
        assert isinstance(figures["samples"], int)


def test_scheduler_benchmark_ratios_are_taken_within_a_round() -> None:
    from benchmarks.scheduler import evaluate

    def fig(pps: float, **extra: Any) -> dict[str, Any]:
        return {"pods_per_s": pps, "duplicate_bindings": 0, "lost_intents": 0, **extra}

    def round_(fast: float, prekep: float) -> dict[str, dict[str, Any]]:
        loop = {"p50": 50.0, "p99": 900.0}
        return {
            "async_latency10": fig(fast, loop_submit_us=loop),
            "async_latency0": fig(fast),
            "prekep_latency10": fig(prekep),
            "allblocking_latency10": fig(fast / 10),
            "async_gcfreeze_latency10": fig(fast),
            "async_qps100": fig(1.0, qps_budget_used=0.99),
        }

    ratios, targets = evaluate([round_(100, 50), round_(300, 100), round_(200, 200)])
    assert ratios["async_vs_prekep_latency10"]["rounds"] == [2.0, 3.0, 1.0]
    assert ratios["async_vs_prekep_latency10"]["median"] == 2.0
    assert targets["async_vs_prekep_latency10"]["met"] is None  # reported, no target
    assert targets["async_vs_allblocking_latency10"]["met"] is True
    assert targets["loop_submit_p99_us"]["met"] is True
    assert targets["all_runs_clean"]["met"] is True


@pytest.mark.timeout(60)
def test_callgrind_overhead_clients_patch_the_server_and_the_driver_subtracts_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both measured clients really patch the pods (each checks its requests and the server's
    state itself), and the driver's per-call figure is the difference of two totals."""
    from benchmarks import callgrind_overhead as cg
    from kdispatch.testing.httpserver import ApiServerHTTP

    mem = cg.apiserver()
    with ApiServerHTTP(mem) as srv:
        for path in cg.PATHS:
            before = [mem.get("Pod", "default", f"c{k}") for k in range(cg.PODS)]
            out = cg.client(srv.url, path, 3)
            assert (out["calls"], out["requests"]) == (cg.WARMUP + 3, cg.WARMUP + 3)
            assert out["threads"][0] == "caller"
            if path == "dispatcher":
                assert {"actor pool", "executor workers"} <= set(out["threads"])
            after = [mem.get("Pod", "default", f"c{k}") for k in range(cg.PODS)]
            changed = [
                a["metadata"]["resourceVersion"] != b["metadata"]["resourceVersion"]
                for a, b in zip(after, before, strict=True)
            ]
            assert all(changed)  # WARMUP + 3 >= PODS: every pod was patched

    # startup (1e9) + per-call cost: direct 1,000, dispatcher 1,500 instructions
    per_call = {"direct": 1000, "dispatcher": 1500}

    class FakeServer:
        stdin = None
        stdout = io.StringIO("http://127.0.0.1:1\n")

        def wait(self, timeout: float) -> int:
            return 0

    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: FakeServer())

    def instructions(url: str, path: str, calls: int, workdir: Path) -> dict[str, int]:
        pool = 500 * calls if path == "dispatcher" else 0
        return {"total": 10**9 + per_call[path] * calls, "actor pool": pool}

    monkeypatch.setattr(cg, "_instructions", instructions)
    result = cg.run(calls=40, base=10, rounds=2)
    assert result["summary"]["direct"]["median"] == 1000
    assert result["summary"]["dispatcher"]["median"] == 1500
    assert result["summary"]["overhead"]["median"] == pytest.approx(0.5)
    assert result["summary"]["dispatcher_by_thread"]["actor pool"]["median"] == 500
    assert "+50.0%" in cg._table(result)
    match = cg._SUMMARY.search("events: Ir\nsummary: 1878827748\ntotals: 1878827748\n")
    assert match is not None and match.group(1) == "1878827748"


_ABLATION_PROBE = """
import json, sys
from benchmarks.ablations import switch_off
from kdispatch import Dispatcher, Outcome, PodStatusPatch
from kdispatch.actors.engine import sender
from kdispatch.testing import InMemoryApiServer, make_pod
switch_off(set(sys.argv[1:]))
server = InMemoryApiServer()
pod = server.create(make_pod("p", uid="u-p"))
d = Dispatcher(server).start()
outcome = d.submit(PodStatusPatch.for_pod(pod, nominated_node_name="n1")).result(10)
stats = d.stats()
print(json.dumps({
    "success": outcome is Outcome.SUCCESS,
    "on_server": server.get("Pod", "default", "p")["status"].get("nominatedNodeName"),
    "metrics": bool(stats["outcomes"]) and bool(stats["sent"]),
    "charging": sender.ChargedBackend(None, server, None).patch_status != server.patch_status,
    "lanes": d.tokens_taken == 1,
    "backlog": bool(d._backlog.lanes),
}))
d.stop()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("feature", ["", *ABLATIONS])
def test_each_ablation_switches_off_its_feature_only_and_calls_still_land(feature: str) -> None:
    """The W2 diagnostic contenders (``kdispatch-no-<feature>``): with one feature switched off
    (in a child process: it patches classes), a status patch still lands on the server, that
    feature's trace is gone and every other feature's is there."""
    proc = run_command([sys.executable, "-c", _ABLATION_PROBE, *([feature] if feature else [])])
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen.pop("success") is True and seen.pop("on_server") == "n1"
    assert seen == {name: name != feature for name in ABLATIONS}
    with pytest.raises(ValueError, match="unknown ablations"):
        switch_off({"everything"})


def test_process_executor_benchmark_ratios_are_taken_within_a_round() -> None:
    from benchmarks.process_executor import evaluate, markdown

    def fig(p50: float, p99: float, pps: float, lost: int = 0) -> dict[str, Any]:
        return {
            "loop_submit_us": {"p50": p50, "p99": p99, "max": p99 * 10},
            "pods_per_s": pps,
            "binding_latency_ms": {"p50": 10.0, "p99": 100.0},
            "duplicate_bindings": 0,
            "lost_intents": lost,
            "pods_unsettled": 0,
            "peak_rss_mib": {"scheduler": 100.0, "children": 0.0},
            "cpu_s": {"scheduler": 5.0, "children": 0.0},
        }

    rounds = [
        {"inprocess": fig(50, 20_000, 600), "process": fig(40, 5_000, 300)},
        {"inprocess": fig(50, 10_000, 500), "process": fig(40, 500, 500)},
        {"inprocess": fig(50, 40_000, 400), "process": fig(40, 800, 600, lost=1)},
    ]
    result = evaluate(rounds)
    assert result["ratios"]["pods_per_s"]["rounds"] == [0.5, 1.0, 1.5]
    assert result["ratios"]["loop_submit_p99"]["rounds"] == [0.25, 0.05, 0.02]
    assert result["variants"]["process"]["loop_submit_p99"]["median"] == 800
    assert result["targets"]["process_loop_submit_p99_us"]["met"] is True
    assert result["targets"]["all_runs_clean"]["met"] is False  # one lost intent
    assert "| pods/s | 500 (400-600) | 500 (300-600) | 1 (0.5-1.5) |" in markdown(result, rounds)
