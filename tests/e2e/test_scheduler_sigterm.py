"""A SIGTERM that lands while the main job is finishing (draining, verifying, writing its
report) must not cost the report: it is noted, and the run ends as it would have.

The child process runs ``python -m examples.scheduler``'s entry point with the API layer's
``close`` (the drain, the first step of finishing) wrapped to say ``finishing`` on stdout and
then wait for a line on stdin: the parent sends SIGTERM while the child is in that wait, then
the line. No sleeps: the pipe orders everything."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys

    from examples.scheduler.api import DispatchedApi
    from examples.scheduler.cli import main
    from examples.scheduler.ha import install_sigterm

    close = DispatchedApi.close

    def close_when_told(self, *, drain, timeout):
        print("finishing", flush=True)
        sys.stdin.readline()  # the parent sends SIGTERM, then this line
        return close(self, drain=drain, timeout=timeout)

    DispatchedApi.close = close_when_told
    install_sigterm()
    raise SystemExit(main(sys.argv[1:]))
    """
)


@pytest.mark.timeout(120)
def test_sigterm_while_finishing_still_writes_the_report(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = ["--nodes", "4", "--pods", "20", "--latency-ms", "0", "--no-progress"]
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args, "--json", str(report)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for line in proc.stdout:
            if line.strip() == "finishing":
                break
        else:
            pytest.fail(f"the run never finished: {proc.communicate()[1]}")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate("go\n", timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Terminated" not in err
    fig = json.loads(report.read_text())
    assert fig["stopped_by"] == "done" and fig["verdict_ok"]
    assert fig["sigterm_while_finishing"] is True
    assert "verdict: OK" in out
