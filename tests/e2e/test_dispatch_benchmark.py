"""Smoke run of the dispatcher benchmark at a tenth of its size: shape, not speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import dispatch


@pytest.mark.timeout(120)
def test_quick_run_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "dispatch.json"
    dispatch.main(["--quick", "--json", str(out)])
    data = json.loads(out.read_text())
    for key in (
        "submit_p50_us",
        "submit_p99_us",
        "submit_p99_us_gc_tuned",
        "submit_p50_us_live_groups",
        "submit_p99_us_group_steps",
        "blocking_call_p50_us",
        "e2e_calls_per_s",
        "churn_calls_sent",
        "churn_minimal_calls",
        "churn_sync_calls",
    ):
        assert isinstance(data[key], int | float), key
    for mode in ("live_groups", "group_steps"):  # median, min, max of the rounds' ratios
        ratio = data[f"{mode}_over_none_p99"]
        assert len(ratio) == 3 and ratio[1] <= ratio[0] <= ratio[2], (mode, ratio)
    assert data["e2e_ok"] == 2000  # every binding of the run succeeded
    assert data["churn_minimal_calls"] == 100 and data["churn_sync_calls"] == 550
    assert data["churn_calls_sent"] <= data["churn_minimal_calls"]
