"""The kubernetes#135900 flood as a regression check, on the real kube-apiserver.

The example scheduler runs **at its defaults** (``python -m examples.scheduler`` with only the
connection flags and the workload's client limit), as a user would start it, against a fresh
real kube-apiserver + etcd: unfit pods exist first, and the fitting pods arrive once the
scheduler has marked the first unfit pod ``PodScheduled=False`` (``benchmarks.peer_run``).

What it guards, read from the server:

* the fitting pods are bound within 1.5 times the token floor after they arrive: the floor is
  ``(fitting - burst) / QPS``, the time the client-side token bucket alone needs for their
  bindings, so a binding held behind the status-patch backlog (in the rate limiter, in the
  executor's lanes or in the scheduler's own pacing) fails it;
* every bound pod has a ``Scheduled`` Event and every unfit pod a ``FailedScheduling`` Event
  (a series counts), with no more Event writes than one per pod (what kube-scheduler writes);
* nothing is lost and nothing is bound twice.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from benchmarks.peer_cluster import NAMESPACE, Api
from benchmarks.peer_run import Workload, run_one
from benchmarks.peer_schedulers import BY_NAME
from kdispatch.testing.envtest import Binaries
from tests.realapi.objects import assert_checks

pytestmark = [pytest.mark.realapi, pytest.mark.timeout(300)]

FLOOD = Workload(
    "flood-ci",
    "#135900 flood, scaled: 600 unfit pods first, then 600 fitting pods, QPS 50/burst 100",
    nodes=100,
    fit=600,
    unfit=600,
    late=True,
    qps=50.0,
    burst=100,
)
TOKEN_FLOOR_S = (FLOOD.fit - FLOOD.burst) / FLOOD.qps
"""Seconds the client-side token bucket alone needs for the fitting pods' bindings."""


def events_by_pod(api: Api) -> dict[str, set[str]]:
    """The reasons of the ``events.k8s.io/v1`` Events on the server, by regarding pod name."""
    reasons: dict[str, set[str]] = defaultdict(set)
    path = f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events?limit=500"
    token = ""
    while True:
        page = api.ok("GET", path + (f"&continue={token}" if token else ""))
        for event in page.get("items") or []:
            regarding = event.get("regarding") or {}
            if regarding.get("kind") == "Pod":
                reasons[regarding.get("name", "")].add(event.get("reason", ""))
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return reasons


def test_the_flood_at_the_defaults_binds_at_the_token_floor_with_events(
    binaries: Binaries, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def on_end(api: Api, rec: dict[str, Any]) -> None:
        seen["events"] = events_by_pod(api)

    rec = run_one(
        FLOOD, BY_NAME["example"], binaries, tmp_path / "run", deadline_s=180, on_end=on_end
    )
    events: dict[str, set[str]] = seen.get("events", {})
    fit = [f"fit-{i:05d}" for i in range(FLOOD.fit)]
    unfit = [f"unfit-{i:05d}" for i in range(FLOOD.unfit)]
    p99 = rec["bind_after_arrival_s"]["p99"]
    checks = {
        # the run settled: every fitting pod bound, every unfit pod marked
        "settled": rec["stopped_by"] == "done" and rec["watch_error"] == "",
        # nothing lost, nothing bound twice
        "nothing lost": rec["bound"] == FLOOD.fit
        and rec["unschedulable_marked"] == FLOOD.unfit
        and rec["lost"] == rec["misplaced"] == 0,
        "no duplicate": rec["duplicates"] == rec["binding_conflicts_409"] == 0,
        # bindings never wait behind the status patches
        f"p99 after arrival <= {1.5 * TOKEN_FLOOR_S:g} s": p99 is not None
        and p99 <= 1.5 * TOKEN_FLOOR_S,
        # a user finds the Events kube-scheduler would have written, with no more writes
        "Scheduled Events": all("Scheduled" in events.get(n, ()) for n in fit),
        "FailedScheduling Events": all("FailedScheduling" in events.get(n, ()) for n in unfit),
        "Event writes <= one per pod": rec["event_requests_with_drain"] <= FLOOD.fit + FLOOD.unfit,
    }
    figures = (
        f"stopped by {rec['stopped_by']}; bound {rec['bound']}/{FLOOD.fit}, marked "
        f"{rec['unschedulable_marked']}/{FLOOD.unfit}, lost {rec['lost']}, duplicates "
        f"{rec['duplicates']}; first bind {rec['first_bind_s']} s, p99 after arrival {p99} s "
        f"(floor {TOKEN_FLOOR_S:g} s); pods with Scheduled "
        f"{sum('Scheduled' in events.get(n, ()) for n in fit)}/{FLOOD.fit}, with "
        f"FailedScheduling {sum('FailedScheduling' in events.get(n, ()) for n in unfit)}/"
        f"{FLOOD.unfit}; Event writes {rec['event_requests_with_drain']}"
    )
    assert_checks(checks, figures)
