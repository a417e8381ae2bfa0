"""The examples' command lines (``examples.real_cluster``, ``examples.apiserver``,
``examples.aio_controller``, and the bad values of ``examples.scheduler`` and
``examples.stress``): a bad value is one ``error:`` line and exit status 2, never a traceback,
and the line names the option the user typed, not the config field behind it; the kubeconfig
the apiserver writes is one the other examples read, whatever its token."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from examples import aio_controller, apiserver, real_cluster, stress
from examples.scheduler import cli as scheduler_cli
from kdispatch import KubernetesBackend
from tests.subprocesses import run_command

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "argv",
    [
        ["--qps", "0"],
        ["--burst", "0"],
        ["--workers", "0"],
        ["--duration", "-1"],
        ["--duration", "nan"],
    ],
)
def test_real_cluster_bad_values_are_an_error_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(apiserver.kubeconfig("http://127.0.0.1:1"))
    try:
        status = real_cluster.main(["--kubeconfig", str(path), *argv])
    except SystemExit as exit_:  # argparse's own check
        status = exit_.code  # type: ignore[assignment]
    assert status == 2
    assert "error: " in capsys.readouterr().err


def test_real_cluster_outside_a_cluster_is_an_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert real_cluster.main(["--in-cluster"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (apiserver.main, ["--nodes", "-1"]),
        (apiserver.main, ["--pods", "-1"]),
        (apiserver.main, ["--port", "70000"]),
        (apiserver.main, ["--latency-ms", "nan"]),
        (aio_controller.main, ["--demo", "--pods", "0"]),
        (aio_controller.main, ["--demo", "--nodes", "-1"]),
        (aio_controller.main, ["--url", "http://127.0.0.1:1", "--duration", "nan"]),
        (aio_controller.main, ["--url", "http://127.0.0.1:1", "--duration", "-1"]),
    ],
)
def test_bad_values_are_an_error_line(
    main: Callable[[list[str]], int], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "error: " in capsys.readouterr().err


def test_aio_controller_malformed_url_is_an_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert aio_controller.main(["--url", "notaurl"]) == 2
    assert capsys.readouterr().err.startswith("error: url must be an http(s) URL")


def test_apiserver_unwritable_kubeconfig_is_an_error_line(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "kubeconfig"
    argv = ["--nodes", "1", "--pods", "1", "--write-kubeconfig", str(missing)]
    done = run_command([sys.executable, "-m", "examples.apiserver", *argv], timeout=30)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr


@pytest.mark.parametrize("token", ["plain.token-123", "s3cr#t: x", "'quoted\" \\\\"])
def test_apiserver_kubeconfig_keeps_any_token(token: str, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(apiserver.kubeconfig("http://127.0.0.1:8080", token))
    with KubernetesBackend.from_kubeconfig(str(path)) as backend:
        configuration = backend.api_client.configuration
        assert configuration.host == "http://127.0.0.1:8080"
        assert configuration.api_key == {"BearerToken": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--nodes", "0"], "error: --nodes must be an int >= 1, got 0"),
        (
            ["--pod-initial-backoff-seconds", "0"],
            "error: --pod-initial-backoff-seconds must be > 0, got 0.0",
        ),
        (
            ["--pod-initial-backoff-seconds", "20"],
            "error: --pod-max-backoff-seconds (10.0) must be >= "
            "--pod-initial-backoff-seconds (20.0)",
        ),
        (
            ["--pod-max-in-unschedulable-pods-duration", "-1"],
            "error: --pod-max-in-unschedulable-pods-duration must be a number >= 0, got -1.0",
        ),
        (["--faults", "2"], "error: --faults is a rate between 0 and 1"),
        (
            ["--claim-share", "0.9"],
            "error: --claim-share must be between 0 and 0.5, got 0.9",
        ),
        (
            ["--pace-on", "pod_bindings"],  # the value is the user's: kept as typed
            "error: --pace-on must be one of ('pod_preemption', 'pod_binding', "
            "'pod_status_patch'), got 'pod_bindings'",
        ),
        (
            ["--leader-elect", "--lease-duration", "5"],
            "error: --lease-duration must be greater than --renew-deadline",
        ),
        (
            ["--dispatcher-process"],
            "error: --dispatcher-process needs the dispatcher and --kubeconfig (an embedded "
            "apiserver cannot be shared with the child process)",
        ),
    ],
)
def test_scheduler_bad_values_name_the_option_typed(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert scheduler_cli.main([*argv, "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line]
    assert captured.out == ""


def test_scheduler_name_no_event_can_carry_is_an_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused when the scheduler is built, after the dispatcher started: an error line, and
    that dispatcher stopped (the leak check)."""
    argv = ["--scheduler-name", "BAD_", "--pods", "4", "--nodes", "2", "--no-progress"]
    assert scheduler_cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: controller 'BAD_' is not a qualified name")
    assert captured.out == ""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--threads", "0"], "error: --threads must be an int >= 1, got 0"),
        (["--latency-ms", "-1"], "error: --latency-ms must be a number >= 0, got -1.0"),
    ],
)
def test_stress_bad_values_name_the_option_typed(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stress.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [line]
