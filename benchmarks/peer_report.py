"""The peer benchmark's summary: medians and ranges over rounds, same-round ratios against
kube-scheduler with ``SchedulerAsyncAPICalls`` on, a Markdown table per workload (plus the
requests by verb and resource) and one PNG per workload.

Benchmark-only code. Input: the dict :mod:`benchmarks.peer` writes to ``peer.json`` (``meta``
+ ``records``). Headless: matplotlib's Agg backend. Pure functions apart from the writers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks.peer_run import scheduler_request
from benchmarks.peer_schedulers import REFERENCE
from benchmarks.report import save_figure

Rec = dict[str, Any]
Getter = Callable[[Rec], float | None]
NONE = "\u2013"
COLORS = {
    "kube-async": "tab:blue",
    "kube-sync": "tab:gray",
    "example": "tab:green",
    "example-prekep": "tab:orange",
}


def _get(*path: str) -> Getter:
    def get(rec: Rec) -> float | None:
        value: Any = rec
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return float(value) if isinstance(value, int | float) else None

    return get


def _requests(rec: Rec) -> dict[str, int]:
    """The scheduler's requests of a record, by verb and resource."""
    return {k: v for k, v in rec["requests"].items() if scheduler_request(k)}


# (key, header, getter, format)
COLUMNS: list[tuple[str, str, Getter, str]] = [
    ("wall_s", "until settled s", _get("wall_s"), "{:.1f}"),
    ("first_bind_s", "first bind s", _get("first_bind_s"), "{:.2f}"),
    ("lat_p50", "bind latency p50 s", _get("bind_latency_s", "p50"), "{:.0f}"),
    ("lat_p99", "p99 s", _get("bind_latency_s", "p99"), "{:.0f}"),
    ("arr_p99", "bound p99 s after arrival", _get("bind_after_arrival_s", "p99"), "{:.1f}"),
    ("requests", "requests", lambda r: float(sum(_requests(r).values())), "{:.0f}"),
    ("events", "Event requests", _get("event_requests"), "{:.0f}"),
    ("events_all", "Events incl. after settled", _get("event_requests_with_drain"), "{:.0f}"),
    ("cpu_sched", "scheduler CPU ms/pod", _get("cpu_scheduler_ms_per_pod"), "{:.2f}"),
    ("cpu_cp", "apiserver+etcd CPU ms/pod", _get("cpu_control_plane_ms_per_pod"), "{:.2f}"),
]
RATIOS = ("wall_s", "requests", "cpu_sched", "cpu_cp")
# the gang table (records with "gang"): (key, header, getter, format)
GANG_COLUMNS: list[tuple[str, str, Getter, str]] = [
    ("fully_bound", "feasible gangs fully bound", _get("gang", "feasible_fully_bound"), "{:.0f}"),
    ("done_p50", "gang complete p50 s", _get("gang", "completion_s", "p50"), "{:.2f}"),
    ("done_p99", "p99 s", _get("gang", "completion_s", "p99"), "{:.2f}"),
    ("window_p50", "partial window p50 s", _get("gang", "partial_window_s", "p50"), "{:.2f}"),
    ("window_p99", "p99 s", _get("gang", "partial_window_s", "p99"), "{:.2f}"),
    ("bad_bound", "infeasible gangs' pods bound", _get("gang", "infeasible_pods_bound"), "{:.0f}"),
    ("with_cond", "PodGroups with condition", _get("gang", "podgroups_with_condition"), "{:.0f}"),
    ("cond_ok", "True (feasible)", _get("gang", "feasible_condition_true"), "{:.0f}"),
    ("cond_bad", "False (infeasible)", _get("gang", "infeasible_condition_false"), "{:.0f}"),
    ("regressed", "True then False", _get("gang", "condition_regressed"), "{:.0f}"),
    (
        "cond_p50",
        "condition (feasible) p50 s",
        _get("gang", "condition_s_feasible", "p50"),
        "{:.2f}",
    ),
    ("cond_p99", "p99 s", _get("gang", "condition_s_feasible", "p99"), "{:.2f}"),
    ("cond_bad_p99", "infeasible p99 s", _get("gang", "condition_s_infeasible", "p99"), "{:.2f}"),
]


def by_workload(results: dict[str, Any]) -> dict[str, dict[str, list[Rec]]]:
    """records → workload → contender → its records (in round order)."""
    out: dict[str, dict[str, list[Rec]]] = {}
    for rec in results["records"]:
        out.setdefault(rec["workload"], {}).setdefault(rec["contender"], []).append(rec)
    return out


def spread(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """Median, min and max of the values that are there, or None."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None
    return statistics.median(vals), min(vals), max(vals)


def same_round_ratio(recs: list[Rec], ref: list[Rec], get: Getter) -> float | None:
    """The median over rounds of ``get(rec) / get(reference)`` for runs of the same round."""
    refs = {r["round"]: get(r) for r in ref}
    ratios = []
    for rec in recs:
        mine, theirs = get(rec), refs.get(rec["round"])
        if mine is not None and theirs:
            ratios.append(mine / theirs)
    return statistics.median(ratios) if ratios else None


def _stats(recs: list[Rec], columns: list[tuple[str, str, Getter, str]]) -> dict[str, Any]:
    """column → {median, min, max} over the records, or None where no record has it."""
    out: dict[str, Any] = {}
    for key, _, get, _ in columns:
        s = spread([get(r) for r in recs])
        out[key] = None if s is None else dict(zip(("median", "min", "max"), s, strict=True))
    return out


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """workload → contender → column → {median, min, max}, plus ratios and counts."""
    out: dict[str, Any] = {}
    for wid, contenders in by_workload(results).items():
        ref = contenders.get(REFERENCE, [])
        rows: dict[str, Any] = {}
        for name, recs in contenders.items():
            row: dict[str, Any] = {
                "runs": len(recs),
                "done": sum(r["stopped_by"] == "done" for r in recs),
                "lost": sum(r["lost"] for r in recs),
                "duplicates": sum(r["duplicates"] for r in recs),
                "misplaced": sum(r["misplaced"] for r in recs),
            }
            row.update(_stats(recs, COLUMNS))
            if any("gang" in r for r in recs):
                row["gang"] = _stats(recs, GANG_COLUMNS)
                row["gangs"] = max(r["gang"]["gangs"] for r in recs if "gang" in r)
                row["gangs_feasible"] = max(
                    r["gang"]["gangs_feasible"] for r in recs if "gang" in r
                )
            row["ratio_vs_" + REFERENCE] = {
                key: same_round_ratio(recs, ref, get) for key, _, get, _ in COLUMNS if key in RATIOS
            }
            verbs: dict[str, list[float]] = {}
            for r in recs:
                for verb, count in _requests(r).items():
                    verbs.setdefault(verb, []).append(count)
            row["requests_by_verb"] = {
                v: statistics.median(c + [0] * (len(recs) - len(c))) for v, c in verbs.items()
            }
            drained: dict[str, list[float]] = {}
            for r in recs:
                for verb, count in r.get("drain_requests", {}).items():
                    if scheduler_request(verb):
                        drained.setdefault(verb, []).append(count)
            row["drain_by_verb"] = {
                v: statistics.median(c + [0] * (len(recs) - len(c))) for v, c in drained.items()
            }
            rows[name] = row
        out[wid] = rows
    return out


def _cell(stat: dict[str, float] | None, fmt: str, ranges: bool) -> str:
    if stat is None:
        return NONE
    text = fmt.format(stat["median"])
    if ranges and stat["min"] != stat["max"]:
        text += f" ({fmt.format(stat['min'])}\u2013{fmt.format(stat['max'])})"
    return text


def workload_markdown(wid: str, title: str, rows: dict[str, Any], labels: dict[str, str]) -> str:
    """The table of one workload: medians (ranges when rounds differ) and same-round ratios."""
    ranges = any(r["runs"] > 1 for r in rows.values())
    head = ["scheduler", "settled runs"] + [c[1] for c in COLUMNS]
    head += ["lost", "dup", f"vs {REFERENCE}: time / requests / CPU"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        cells = [labels.get(name, name), f"{row['done']}/{row['runs']}"]
        cells += [_cell(row[key], fmt, ranges) for key, _, _, fmt in COLUMNS]
        ratio = row["ratio_vs_" + REFERENCE]
        ratio_text = " / ".join(
            NONE if ratio.get(k) is None else f"{ratio[k]:.2f}"
            for k in ("wall_s", "requests", "cpu_sched")
        )
        cells += [str(row["lost"]), str(row["duplicates"]), ratio_text]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _gang_lines(rows, labels, ranges)
    verbs = sorted(
        {v for row in rows.values() for v in (*row["requests_by_verb"], *row["drain_by_verb"])}
    )
    lines += [
        "",
        "Requests by verb and resource, median per run, until settled (+ after settled, until"
        " the scheduler stopped: the example drains its Events; a long-running WATCH is"
        " counted when it ends):",
        "",
    ]
    names = list(rows)
    lines.append("| request | " + " | ".join(names) + " |")
    lines.append("|" + "---|" * (len(names) + 1))
    for verb in verbs:
        cells = []
        for n in names:
            text = f"{rows[n]['requests_by_verb'].get(verb, 0):.0f}"
            after = rows[n]["drain_by_verb"].get(verb, 0)
            cells.append(text + (f" (+{after:.0f})" if after else ""))
        lines.append(f"| `{verb}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _gang_lines(rows: dict[str, Any], labels: dict[str, str], ranges: bool) -> list[str]:
    """The gang table of a workload with gangs (nothing for one without)."""
    gang_rows = {n: r for n, r in rows.items() if "gang" in r}
    if not gang_rows:
        return []
    some = next(iter(gang_rows.values()))
    head = ["scheduler"] + [c[1] for c in GANG_COLUMNS]
    lines = [
        "",
        f"Gangs ({some['gangs']} PodGroups, {some['gangs_feasible']} feasible; times from the"
        " scheduler's start, from the pod and PodGroup watches; conditions as the server has"
        " them at the end):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for name, row in gang_rows.items():
        cells = [labels.get(name, name)]
        cells += [_cell(row["gang"][key], fmt, ranges) for key, _, _, fmt in GANG_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    summary = summarize(results)
    titles = {w["name"]: _title(w) for w in meta["workloads"]}
    labels = meta["contenders"]
    parts = [
        f"Kubernetes {meta['kubernetes']}, {meta['cpus']} CPUs, {meta['rounds']} round(s), "
        f"started {meta['started']}. Medians (min\u2013max over rounds); ratios are medians "
        f"of same-round ratios against {labels.get(REFERENCE, REFERENCE)}.",
        "",
    ]
    for wid, rows in summary.items():
        parts.append(workload_markdown(wid, titles.get(wid, wid), rows, labels))
    return "\n".join(parts)


def _title(w: dict[str, Any]) -> str:
    later = [f"{w['fit']} fitting pods"] if w["fit"] else []
    if w.get("gangs"):
        later.append(
            f"{w['gangs']} PodGroups of {w['gang_size']} pods ({w['infeasible_gangs']} infeasible)"
        )
    pods = " and ".join(later)
    if w["unfit"]:
        pods = f"{w['unfit']} unfit pods first, then {pods}"
    return f"{w['name']}: {w['nodes']} nodes, {pods}, QPS {w['qps']:g}/burst {w['burst']}"


def _bars(ax: Any, rows: dict[str, Any], key: str, title: str) -> None:
    """Medians with min-max error bars, one bar per scheduler."""
    names = list(rows)
    stats = [rows[n][key] or {} for n in names]
    meds = [st.get("median", math.nan) for st in stats]
    lo = [m - st.get("min", m) for st, m in zip(stats, meds, strict=True)]
    hi = [st.get("max", m) - m for st, m in zip(stats, meds, strict=True)]
    colors = [COLORS.get(n, "tab:purple") for n in names]
    ax.bar(range(len(names)), meds, color=colors, yerr=[lo, hi], capsize=4)
    ax.set_title(title)
    ax.set_xticks(list(range(len(names))), names, rotation=20)


def write_charts(results: dict[str, Any], out: Path) -> list[Path]:
    """One PNG per workload: time until settled, bind latency, requests, CPU per pod."""
    written = []
    for wid, rows in summarize(results).items():
        names = list(rows)
        x = range(len(names))
        colors = [COLORS.get(n, "tab:purple") for n in names]
        fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))

        _bars(axes[0], rows, "wall_s", "until settled (s)")
        width = 0.38
        for off, key, alpha in ((-width / 2, "lat_p50", 0.55), (width / 2, "lat_p99", 1.0)):
            vals = [(rows[n][key] or {}).get("median", math.nan) for n in names]
            axes[1].bar([i + off for i in x], vals, width, color=colors, alpha=alpha)
        axes[1].set_title("bind latency p50 (light) / p99 (s)")
        axes[1].set_xticks(list(x), names, rotation=20)
        _bars(axes[2], rows, "requests", "requests to the apiserver")
        sched = [(rows[n]["cpu_sched"] or {}).get("median", math.nan) for n in names]
        control = [(rows[n]["cpu_cp"] or {}).get("median", math.nan) for n in names]
        axes[3].bar(x, sched, color=colors)
        axes[3].bar(x, control, bottom=sched, color="lightgray")
        axes[3].set_title("CPU ms/pod: scheduler + apiserver & etcd (gray)")
        axes[3].set_xticks(list(x), names, rotation=20)
        written.append(save_figure(fig, wid, out / f"peer-{wid}.png", dpi=90))
    return written


def write_report(results: dict[str, Any], out: Path) -> list[Path]:
    """``peer.md`` and the charts; returns the paths written."""
    md = out / "peer.md"
    md.write_text(summary_markdown(results))
    return [md, *write_charts(results, out)]
