"""Charts (one PNG per workload) and ``summary.md`` from the benchmark results.

Benchmark-only code. Input: the dict written to ``results.json`` (``meta`` + ``records``; see
:mod:`benchmarks.workloads.common`). Headless: matplotlib's Agg backend.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from benchmarks.workloads import WORKLOADS
from benchmarks.workloads.contenders import CONTENDERS, KDISPATCH

Results = dict[str, Any]
Rec = dict[str, Any]
COLORS = dict(zip(CONTENDERS, ("tab:green", "tab:red", "tab:blue", "tab:gray"), strict=True))
"""Each contender's colour in the charts, in :data:`CONTENDERS` order."""
BASELINES = [c for c in CONTENDERS if c != KDISPATCH]
X = "\u00d7"  # multiplication sign
NONE = "\u2013"  # en dash: no value


def _by_workload(results: Results) -> dict[str, dict[str, Rec]]:
    out: dict[str, dict[str, Rec]] = {}
    for rec in results["records"]:
        out.setdefault(rec["workload"], {})[rec["contender"]] = rec
    return out


def _fig(ncols: int = 1, width: float = 7.0) -> tuple[Figure, list[Axes]]:
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols if ncols > 1 else width, 4.2))
    return fig, list(axes) if ncols > 1 else [axes]


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and value is not None else math.nan


# --------------------------------------------------------------------------- charts


def _chart_w1(recs: dict[str, Rec], ax: list[Axes]) -> None:
    a = ax[0]
    for name, rec in recs.items():
        s = rec["series"]
        qs = [q * 100 for q in s["quantiles"]]
        a.plot(qs, s["submit_us_at_quantile"], color=COLORS.get(name), label=f"{name}")
        if "submit_only_us_at_quantile" in s:
            a.plot(
                qs,
                s["submit_only_us_at_quantile"],
                color=COLORS.get(name),
                linestyle="--",
                label=f"{name} (submit only)",
            )
    a.axhline(50, color="black", linewidth=0.8, linestyle=":", label="target 50 µs")
    a.set_yscale("log")
    a.set_xlabel("percentile")
    a.set_ylabel("submit latency (µs, log)")


def _bars(a: Axes, recs: dict[str, Rec], key: str, ylabel: str, fmt: str = "{:.3g}") -> None:
    names = list(recs)
    values = [_num(recs[n]["figures"].get(key)) for n in names]
    bars = a.bar(names, values, color=[COLORS.get(n, "tab:purple") for n in names])
    a.bar_label(bars, labels=[NONE if math.isnan(v) else fmt.format(v) for v in values])
    a.set_ylabel(ylabel)


def _chart_w2(recs: dict[str, Rec], ax: list[Axes]) -> None:
    _bars(ax[0], recs, "throughput_per_s", "calls resolved per second (median run)", "{:,.0f}")
    for i, rec in enumerate(recs.values()):
        runs = rec["series"].get("throughput_per_s", [])
        ax[0].scatter([i] * len(runs), runs, color="black", s=8, zorder=3)


def _chart_w3(recs: dict[str, Rec], ax: list[Axes]) -> None:
    _bars(ax[0], recs, "ratio_to_minimal", "requests sent ÷ minimal")
    ax[0].axhline(1.05, color="black", linewidth=0.8, linestyle=":", label="target 1.05")


def _chart_w4(recs: dict[str, Rec], ax: list[Axes]) -> None:
    waits, backlog, bound = ax
    for name, rec in recs.items():
        s, color = rec["series"], COLORS.get(name)
        unfinished = rec["figures"].get("binding_unfinished", 0)
        label = f"{name} ({unfinished:,} unfinished)" if unfinished else name
        waits.scatter(s["binding_decided_t_s"], s["binding_wait_ms"], s=3, color=color, label=label)
        backlog.plot(s["backlog_t_s"], s["backlog"], color=color, label=name)
        bound.plot(
            range(len(s["bound_per_second"])), s["bound_per_second"], color=color, label=name
        )
    if recs:
        params = next(iter(recs.values()))["params"]
        qps = params["qps"]
        waits.axhline(3000 / qps, color="black", linewidth=0.8, linestyle=":", label="3 tokens")
        bound.axhline(
            params["arrivals_per_s"],
            color="black",
            linewidth=0.8,
            linestyle=":",
            label="arrivals/s",
        )
        waits.set_title(
            f"each dot: one binding (QPS {qps:g}, burst {params['burst']}); "
            "unfinished = censored, plotted at the drain deadline",
            fontsize=7,
        )
    waits.set_yscale("log")
    waits.set_xlabel("when the scheduler decided the binding (s into the run)")
    waits.set_ylabel("binding wait: decision → bound (ms, log)")
    backlog.set_title("status patches submitted, not yet resolved", fontsize=7)
    backlog.set_xlabel("time (s into the run)")
    backlog.set_ylabel("status patches waiting")
    bound.set_title("bindings completed in each second of the window", fontsize=7)
    bound.set_xlabel("time (s into the run)")
    bound.set_ylabel("pods bound per second")


def _chart_w5(recs: dict[str, Rec], ax: list[Axes]) -> None:
    a = ax[0]
    for name, rec in recs.items():
        s = rec["series"]
        t = [i * s["bin_s"] for i in range(len(s["requests_per_s"]))]
        used = rec["figures"]["budget_used"]
        a.step(
            t,
            s["requests_per_s"],
            where="post",
            color=COLORS.get(name),
            label=f"{name} ({used:.1%})",
        )
    if recs:
        qps = next(iter(recs.values()))["params"]["qps"]
        a.axhline(qps, color="black", linewidth=0.8, linestyle=":", label=f"QPS {qps:g}")
    a.set_xlabel("time (s)")
    a.set_ylabel("requests per second")


def _chart_w6(recs: dict[str, Rec], ax: list[Axes]) -> None:
    mem, start = ax
    for name, rec in recs.items():
        s, color = rec["series"], COLORS.get(name)
        mem.plot(
            s["objects"], [b / 1024 for b in s["bytes_per_object"]], "o-", color=color, label=name
        )
        start.plot(s["objects"], s["start_us_per_object"], "o-", color=color, label=name)
    mem.axhline(3, color="black", linewidth=0.8, linestyle=":", label="target 3 KiB")
    for a in (mem, start):
        a.set_xscale("log")
        a.set_xlabel("tracked objects (log)")
    mem.set_ylabel("RSS per object (KiB)")
    start.set_ylabel("start cost per object (µs)")


@dataclass(frozen=True)
class _Chart:
    panels: int
    draw: Callable[[dict[str, Rec], list[Axes]], None]


CHARTS = {
    "W1": _Chart(1, _chart_w1),
    "W2": _Chart(1, _chart_w2),
    "W3": _Chart(1, _chart_w3),
    "W4": _Chart(3, _chart_w4),
    "W5": _Chart(1, _chart_w5),
    "W6": _Chart(2, _chart_w6),
}


def write_charts(results: Results, out: Path) -> list[Path]:
    """One PNG per workload present in ``results``; returns the paths written."""
    written = []
    for wid, recs in _by_workload(results).items():
        chart = CHARTS[wid]
        fig, axes = _fig(chart.panels, width=5.5 if chart.panels > 1 else 7.0)
        chart.draw(recs, axes)
        for a in axes:
            if a.get_legend_handles_labels()[0]:
                a.legend(fontsize=7)
            a.grid(True, alpha=0.3)
        title = f"{wid} — {WORKLOADS[wid].title} ({results['meta']['profile']})"
        written.append(save_figure(fig, title, out / f"{wid.lower()}.png", dpi=110))
    return written


def save_figure(fig: Figure, title: str, path: Path, dpi: int) -> Path:
    """Title ``fig``, lay it out, write it to ``path`` as PNG and close it; returns ``path``."""
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- summary.md


@dataclass(frozen=True)
class _Col:
    workload: str
    key: str
    label: str
    fmt: str


COLUMNS = (
    _Col("W1", "submit_p50_us", "p50 µs", "{:.1f}"),
    _Col("W1", "submit_p99_us", "p99 µs", "{:.1f}"),
    _Col("W1", "submit_only_p50_us", "submit-only p50 µs", "{:.1f}"),
    _Col("W1", "submit_only_p99_us", "submit-only p99 µs", "{:.1f}"),
    _Col("W1", "submit_max_us", "max µs", "{:,.0f}"),
    _Col("W1", "gc_full_max_ms", "longest full GC ms", "{:.1f}"),
    _Col("W1", "live_objects", "live objects", "{:.0f}"),
    _Col("W2", "throughput_per_s", "calls/s (median)", "{:.0f}"),
    _Col("W2", "throughput_min_per_s", "min", "{:.0f}"),
    _Col("W2", "throughput_max_per_s", "max", "{:.0f}"),
    _Col("W2", "cpu_per_call_us", "CPU µs/call", "{:.0f}"),
    _Col("W2", "requests", "requests", "{:.0f}"),
    _Col("W3", "calls_submitted", "calls", "{:.0f}"),
    _Col("W3", "requests", "requests", "{:.0f}"),
    _Col("W3", "minimal", "minimal", "{:.0f}"),
    _Col("W3", "ratio_to_minimal", "÷ minimal", "{:.3f}"),
    _Col("W4", "binding_wait_p50_ms", "bind wait p50 ms", "{:.1f}"),
    _Col("W4", "binding_wait_p99_ms", "bind wait p99 ms", "{:.1f}"),
    _Col("W4", "binding_unfinished", "unfinished (censored)", "{:.0f}"),
    _Col("W4", "bind_decisions", "bindings decided", "{:.0f}"),
    _Col("W4", "binding_wait_p99_token_intervals", "p99 ÷ token", "{:.1f}"),
    _Col("W4", "arrival_to_bound_p99_ms", "arrival→bound p99 ms", "{:.0f}"),
    _Col("W4", "bound_per_s", "bound/s", "{:.1f}"),
    _Col("W4", "status_backlog_max", "max backlog", "{:.0f}"),
    _Col("W4", "status_requests", "status requests", "{:.0f}"),
    _Col("W4", "undecided", "undecided", "{:.0f}"),
    _Col("W5", "requests", "requests", "{:.0f}"),
    _Col("W5", "budget", "budget", "{:.0f}"),
    _Col("W5", "budget_used", "used", "{:.1%}"),
    _Col("W6", "kib_per_object", "KiB/object", "{:.2f}"),
    _Col("W6", "start_us_per_object", "start µs/object", "{:.1f}"),
    _Col("W6", "live_objects", "live objects", "{:.0f}"),
)
"""The figures each workload's table shows, in order."""

KEY_FIGURES = {
    "W1": ("submit_p99_us", True),
    "W2": ("throughput_per_s", False),
    "W3": ("ratio_to_minimal", True),
    "W4": ("binding_wait_p99_ms", True),
    "W5": ("budget_used", False),
    "W6": ("bytes_per_object", True),
}
"""Per workload: the figure the ratio column compares, and whether lower is better."""


@dataclass(frozen=True)
class _Table:
    cols: tuple[_Col, ...]
    key: str  # the figure the ratio column compares
    lower_is_better: bool


TABLES = {
    wid: _Table(tuple(c for c in COLUMNS if c.workload == wid), key, lower_is_better)
    for wid, (key, lower_is_better) in KEY_FIGURES.items()
}


def _fmt(value: Any, fmt: str) -> str:
    v = _num(value)
    return NONE if math.isnan(v) else fmt.format(v)


def _advantage(table: _Table, mine: Rec | None, other: Rec) -> str:
    """How kdispatch compares with ``other`` on the table's key figure (k times better or worse)."""
    if mine is None:
        return NONE
    a, b = _num(mine["figures"].get(table.key)), _num(other["figures"].get(table.key))
    if math.isnan(a) or math.isnan(b) or a <= 0 or b <= 0:
        return NONE
    factor = b / a if table.lower_is_better else a / b
    return f"{X}{factor:.3g} {'better' if factor >= 1 else 'worse'}"


def _workload_table(wid: str, recs: dict[str, Rec]) -> list[str]:
    table = TABLES[wid]
    head = ["contender", *(c.label for c in table.cols), "kdispatch vs this"]
    lines = [f"### {wid} — {WORKLOADS[wid].title}", ""]
    params = next(iter(recs.values()))["params"] if recs else {}
    if "qps" in params:
        lines += [f"Client rate limit: QPS {params['qps']}, burst {params.get('burst', '-')}.", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    mine = recs.get(KDISPATCH)
    for name in CONTENDERS:
        rec = recs.get(name)
        if rec is None:
            continue
        cells = [f"**{name}**" if name == KDISPATCH else name]
        cells += [_fmt(rec["figures"].get(c.key), c.fmt) for c in table.cols]
        cells.append("—" if name == KDISPATCH else _advantage(table, mine, rec))
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


@dataclass(frozen=True)
class Target:
    """One target of the issue, judged on the results."""

    workload: str
    text: str
    measured: str
    passed: bool | None  # None: not measured


def _fig_of(by: dict[str, dict[str, Rec]], wid: str, who: str, key: str) -> float:
    rec = by.get(wid, {}).get(who)
    return math.nan if rec is None else _num(rec["figures"].get(key))


def targets(results: Results) -> list[Target]:
    """Every target of the issue with its measured value and pass/miss."""
    by = _by_workload(results)
    k = KDISPATCH
    w1 = _fig_of(by, "W1", k, "submit_only_p99_us")
    w1_adapter = _fig_of(by, "W1", k, "submit_p99_us")
    w2 = _fig_of(by, "W2", k, "throughput_per_s") / _fig_of(
        by, "W2", "upstream_fifo", "throughput_per_s"
    )
    w2_inline = _fig_of(by, "W2", k, "throughput_per_s") / _fig_of(
        by, "W2", "blocking", "throughput_per_s"
    )
    w2_cpu = _fig_of(by, "W2", k, "cpu_per_call_us")
    w3 = _fig_of(by, "W3", k, "ratio_to_minimal")
    w4_mine = _fig_of(by, "W4", k, "binding_wait_p99_ms")
    w4_ratio = _fig_of(by, "W4", "upstream_fifo", "binding_wait_p99_ms") / w4_mine
    w4_tokens = _fig_of(by, "W4", k, "binding_wait_p99_token_intervals")
    w4_censored = _fig_of(by, "W4", "upstream_fifo", "binding_unfinished")
    w4_ideal = _fig_of(by, "W4", k, "ideal_binding_wait_p99_ms")
    w5 = _fig_of(by, "W5", k, "budget_used")
    w6 = _fig_of(by, "W6", k, "kib_per_object")
    w4_unfinished = (
        f"upstream_fifo left {w4_censored:.0f} bindings unfinished, so its p99 and this "
        "ratio are lower bounds)"
        if w4_censored > 0
        else "every upstream_fifo binding finished)"
    )
    # workload, target, measured (as shown), value, comparison, bound
    rows: list[tuple[str, str, str, float, Callable[[float, float], bool], float]] = [
        (
            "W1",
            "submit p99 ≤ 50 µs",
            f"{w1:.1f} µs (`Dispatcher.submit`; {w1_adapter:.1f} µs building the call too)",
            w1,
            operator.le,
            50,
        ),
        ("W2", f"throughput ≥ 1.0 {X} upstream_fifo", f"{w2:.2f} {X}", w2, operator.ge, 1.0),
        (
            "W2",
            f"throughput ≥ 0.6 {X} blocking (inline calls)",
            f"{w2_inline:.2f} {X}",
            w2_inline,
            operator.ge,
            0.6,
        ),
        ("W2", "≤ 90 µs CPU per call (every thread)", f"{w2_cpu:.0f} µs", w2_cpu, operator.le, 90),
        ("W3", f"requests ≤ 1.05 {X} minimal", f"{w3:.3f} {X}", w3, operator.le, 1.05),
        (
            "W4",
            f"binding p99 ≥ 20 {X} better than upstream_fifo",
            f"{w4_ratio:.1f} {X} ({w4_mine:.1f} ms; {w4_unfinished}",
            w4_ratio,
            operator.ge,
            20,
        ),
        (
            "W4",
            "binding p99 ≤ 3 token intervals",
            f"{w4_tokens:.2f} token intervals (a perfect scheduler: {w4_ideal:.1f} ms)",
            w4_tokens,
            operator.le,
            3,
        ),
        ("W5", "QPS budget used ≥ 95 %", f"{w5:.1%}", w5, operator.ge, 0.95),
        ("W6", "≤ 3 KiB per idle object", f"{w6:.2f} KiB", w6, operator.le, 3),
    ]
    return [
        Target(wid, text, measured, None if math.isnan(value) else ok(value, bound))
        for wid, text, measured, value, ok, bound in rows
    ]


def _verdict(passed: bool | None) -> str:
    return {True: "pass", False: "**miss**", None: "not run"}[passed]


def summary_markdown(results: Results) -> str:
    """The text of ``summary.md``."""
    meta = results["meta"]
    by = _by_workload(results)
    lines = [
        "# kdispatch benchmarks",
        "",
        f"Profile `{meta['profile']}`, {meta['cpus']} CPUs, Python {meta['python']}, "
        f"load average {meta['loadavg_start']:.2f} before / {meta['loadavg_end']:.2f} after, "
        f"{meta['duration_s']:.0f} s in all. Every contender ran in one process, one after the "
        "other, on the same embedded in-memory apiserver, with the same rate limit and "
        f"{meta['workers']} request threads.",
        "",
        "## Targets",
        "",
        "| workload | target | measured | result |",
        "|---|---|---|---|",
    ]
    for t in targets(results):
        lines.append(f"| {t.workload} | {t.text} | {t.measured} | {_verdict(t.passed)} |")
    lines += ["", "## Results", "", "“kdispatch vs this”: how many times better (or worse)"]
    lines += ["kdispatch is than that contender on the workload's headline figure.", ""]
    for wid in WORKLOADS:
        if wid in by:
            lines += _workload_table(wid, by[wid])
            lines += [f"![{wid}]({wid.lower()}.png)", ""]
    lines += ["## Notes", ""]
    lines += [f"- {note}" for note in NOTES]
    return "\n".join(lines) + "\n"


NOTES = (
    "W1 times each `submit_*` of the common adapter (which builds the call from the pod) and, "
    "for contenders that accept prebuilt calls, the submission alone on alternate samples; the "
    "target is judged on the latter. The blocking contender's submit is the whole request.",
    "W4 binding wait runs from the bind decision (the binding's submission) to its completion. "
    "Bindings still outstanding after the drain period are censored: they count with the wait "
    "they had so far, so a non-zero `unfinished (censored)` makes that contender's percentiles "
    "lower bounds. Every unschedulable attempt repeats the same status message, as a real "
    "scheduler does; `status requests` counts the PATCH requests the apiserver saw. The blocking "
    "contender decides late (its scheduler thread waits for every request), which "
    "`arrival→bound` and `undecided` (arrivals its scheduler never reached) show. “A perfect "
    "scheduler” is the wait of ideal strict priority for the same arrivals: one token per "
    "interval, bindings first, plus the apiserver latency.",
    "Request counts (`requests`, `status requests`) are requests the apiserver saw, retries and "
    "failed requests included, never call attempts.",
    "W6 runs each size in a fresh interpreter and reads RSS after `gc.collect()`; contenders "
    "without per-object state show the allocator's noise floor.",
    "Each workload freezes its setup objects (pods, apiserver store) out of the garbage "
    "collector after setup, identically for every contender.",
    "The baselines live in `benchmarks/baselines/`; `upstream_fifo.py` documents which "
    "upstream behaviour each part models.",
)


def write_report(results: Results, out: Path) -> list[Path]:
    """Write every chart and ``summary.md`` into ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = write_charts(results, out)
    summary = out / "summary.md"
    summary.write_text(summary_markdown(results), encoding="utf-8")
    return [*written, summary]
