"""The run's figures: computing them, the summary table, and the JSON file.

``figures()`` turns the raw material of a run (phase counts, API stats, tracker samples,
verification) into one flat-ish dict; :func:`summary_table` renders it for humans, ending with
a one-line verdict, and :func:`write_json` for tools. Only this scheduler's pods count (its
``spec.schedulerName``): ``pods_bound`` are the pods its own bindings placed, and ``pods_per_s``
is over its active window (``active_s``: from its first call to the last one resolved), not the
wall time. ``wall_s`` is the scheduling window (from the nodes known to the run's end), and
``command_s`` the command's real wall time: from its start (the imports, for ``python -m
examples.scheduler``) until every call and Event was drained (``drain_s`` of it after the run)
and the final state checked (keys include ``pods_bound``, ``pods_total``, ``pods_per_s``,
``calls_sent`` (call attempts), ``requests`` (requests the embedded apiserver saw),
``loop_submit_us`` (submit p50/p99/max on the scheduling threads), ``gc_pauses``,
``duplicate_bindings`` and ``lost_intents``). Pure functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-quantile (0..1, nearest rank) of ``values``, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


def _ms(values: Sequence[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        v = percentile(values, q)
        out[name] = None if v is None else round(v * 1000, 3)
    return out


def gang_latency_ms(values: Iterable[float]) -> dict[str, float | int | None]:
    """``gangs`` (how many) and ``p50``/``p99`` in milliseconds of gang completion times
    (seconds from a gang's cycle to its last member bound)."""
    samples = list(values)
    return {"gangs": len(samples), **_ms(samples)}


def _us(values: Sequence[float]) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {"samples": len(values)}
    for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        v = percentile(values, q)
        out[name] = None if v is None else round(v * 1e6, 1)
    return out


def outcome_totals(outcomes: Mapping[str, int]) -> dict[str, int]:
    """Sum ``type:outcome`` counters by outcome."""
    totals: dict[str, int] = {}
    for key, count in outcomes.items():
        outcome = key.rsplit(":", 1)[-1]
        totals[outcome] = totals.get(outcome, 0) + count
    return totals


def figures(
    *,
    mode: str,
    settings: Mapping[str, Any],
    counts: Mapping[str, int],
    pods_total: int,
    api_stats: Mapping[str, Any],
    submit_latencies: Sequence[float],
    loop_submit_latencies: Sequence[float],
    binding_latencies: Sequence[float],
    wall_s: float,
    verification: Mapping[str, Any],
    extra: Mapping[str, Any],
    active_s: float | None = None,
) -> dict[str, Any]:
    """All figures of one run as a JSON-ready dict. ``counts``: the scheduler's phase counts
    (``bound`` = bound by anyone, ``bound_by_us`` = by our bindings); ``active_s``: the
    scheduler's active window (default: ``wall_s``)."""
    sent: dict[str, int] = dict(sorted(api_stats["sent"].items()))
    totals = outcome_totals(api_stats["outcomes"])
    bound_any = counts.get("bound", 0)
    bound = counts.get("bound_by_us", bound_any)
    unschedulable = counts.get("unschedulable", 0)
    unsettled = pods_total - bound_any - unschedulable - counts.get("gone", 0)
    window = wall_s if active_s is None else active_s
    events_sent = sent.get("event_record", 0)
    events_dropped = api_stats.get("events_dropped", 0) + extra.get("events_spam_dropped", 0)
    duplicates = verification.get("duplicate_bindings", 0)
    lost = verification.get("lost_intents", 0)
    safe = duplicates == 0 and lost == 0
    # a run the deadline cut short with pods left unsettled did not do its work: not OK
    cut_short = extra.get("stopped_by") == "deadline" and unsettled > 0
    ok = safe and not cut_short
    word = "OK" if ok else "INCOMPLETE" if safe else "FAILED"
    verdict = (
        f"{word}: {bound:,} bound, {unschedulable:,} unschedulable, "
        f"{duplicates:,} duplicates, {lost:,} lost"
        + (f", {unsettled:,} unsettled" if unsettled else "")
        + (" (stopped at the deadline)" if cut_short else "")
    )
    return {
        "mode": mode,
        **settings,
        "pods_total": pods_total,
        "pods_bound": bound,
        "pods_bound_by_others": bound_any - bound,
        "pods_unschedulable": unschedulable,
        "pods_preempted": counts.get("preempted", 0),
        "pods_unsettled": unsettled,
        "events_sent": events_sent,
        "events_dropped": events_dropped,
        "calls_sent": sum(sent.values()),
        "calls_sent_by_type": sent,
        "calls_merged": totals.get("overwritten", 0),
        "calls_skipped": totals.get("skipped", 0),
        "calls_cancelled": totals.get("cancelled", 0),
        "calls_failed": sum(totals.get(k, 0) for k in ("failed", "conflict", "not_found", "error")),
        "calls_outcomes": dict(sorted(api_stats["outcomes"].items())),
        "retries": api_stats.get("retries", 0),
        "submit_latency_ms": _ms(submit_latencies),
        "loop_submit_us": _us(loop_submit_latencies),
        "binding_latency_ms": _ms(binding_latencies),
        "wall_s": round(wall_s, 3),
        "active_s": round(window, 3),
        "pods_per_s": round(bound / window, 1) if window > 0 else 0.0,
        **verification,
        **extra,
        "verdict": verdict,
        "verdict_ok": ok,
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if value < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def summary_table(fig: Mapping[str, Any]) -> str:
    """A two-column plain-text table of the headline figures."""
    sub, bind = fig["submit_latency_ms"], fig["binding_latency_ms"]
    loop = fig["loop_submit_us"]
    rows: list[tuple[str, Any]] = [
        ("mode", fig["mode"]),
        ("pods bound", f"{fig['pods_bound']:,} / {fig['pods_total']:,}"),
        ("pods unschedulable (PodScheduled=False)", fig["pods_unschedulable"]),
        ("pods preempted", fig["pods_preempted"]),
        ("pods unsettled", fig["pods_unsettled"]),
        ("API requests (apiserver's count)", fig.get("requests")),
        ("call attempts", fig["calls_sent"]),
    ]
    rows += [(f"  {ct}", n) for ct, n in fig["calls_sent_by_type"].items()]
    rows += [
        ("calls merged (overwritten)", fig["calls_merged"]),
        ("calls skipped (no-op / superseded)", fig["calls_skipped"]),
        ("calls cancelled", fig["calls_cancelled"]),
        ("calls failed", fig["calls_failed"]),
        ("retries", fig["retries"]),
        ("submit latency p50 / p99 (ms)", f"{_fmt(sub['p50'])} / {_fmt(sub['p99'])}"),
        (
            "scheduling-loop submit p50 / p99 / max (µs)",
            f"{_fmt(loop['p50'])} / {_fmt(loop['p99'])} / {_fmt(loop['max'])}",
        ),
        ("binding latency p50 / p99 (ms)", f"{_fmt(bind['p50'])} / {_fmt(bind['p99'])}"),
        ("Events sent / dropped", f"{fig['events_sent']:,} / {fig['events_dropped']:,}"),
        ("pods/s (over the active window)", fig["pods_per_s"]),
        ("active window / wall time (s)", f"{_fmt(fig['active_s'])} / {_fmt(fig['wall_s'])}"),
        ("drain of the calls and Events after the run (s)", fig.get("drain_s")),
        ("command wall time, start to drained (s)", fig.get("command_s")),
        ("duplicate bindings", fig["duplicate_bindings"]),
        ("lost intents", fig["lost_intents"]),
    ]
    gen2 = fig.get("gc_pauses", {}).get("gen2")
    if gen2 is not None:
        rows.append(("full GC pauses / longest (ms)", f"{gen2['collections']} / {gen2['max_ms']}"))
    if fig.get("qps_budget_used") is not None:
        rows.append(("QPS budget used while pending", f"{fig['qps_budget_used']:.1%}"))
    if fig.get("stopped_by"):
        rows.append(("stopped by", fig["stopped_by"]))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {_fmt(value)}" for name, value in rows]
    rule = "-" * max(len(line) for line in lines)
    return "\n".join([rule, *lines, rule, f"verdict: {fig['verdict']}"])


def write_json(path: str | Path, fig: Mapping[str, Any]) -> None:
    """Write the figures as pretty JSON."""
    Path(path).write_text(json.dumps(fig, indent=2, sort_keys=True) + "\n", encoding="utf-8")
