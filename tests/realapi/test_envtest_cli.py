"""``python -m kdispatch.testing.envtest start`` and the ``envtest_control_plane`` fixture
against the real binaries: a first pod in ``default`` is admitted through the written
kubeconfig, and stopping the launcher (SIGTERM, or SIGKILL and the parent-death signal)
leaves no process behind."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
from kubernetes import client, config

from kdispatch.testing.envtest import BinariesNotFound, ControlPlane, find_binaries, wait_for

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 120.0

pytestmark = [pytest.mark.realapi, pytest.mark.timeout(300)]


@pytest.fixture(scope="module", autouse=True)
def _binaries() -> None:
    try:
        find_binaries()
    except BinariesNotFound as exc:  # asked for with -m realapi: a failure, not a skip
        pytest.fail(str(exc), pytrace=False)


def _pod(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The launcher's first stdout line (its URL), waiting on the pipe, not on a clock."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise TimeoutError(f"no URL from the launcher within {timeout:.0f} s")
    return proc.stdout.readline().strip()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The CLI in its own session, started with ``--write-kubeconfig``; killed (group) at the
    end whatever the test did."""
    kubeconfig = tmp_path / "kubeconfig"
    cli = [sys.executable, "-m", "kdispatch.testing.envtest", "start"]
    proc = subprocess.Popen(
        [*cli, "--write-kubeconfig", str(kubeconfig), "--workdir", str(tmp_path / "work")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "launcher.err").open("w"),
        text=True,
        start_new_session=True,
    )
    try:
        yield proc, kubeconfig
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()


def _children(pid: int) -> list[psutil.Process]:
    kids: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
    return kids


def _create_pod_through(kubeconfig: Path, url: str) -> None:
    api: Any = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        assert api.configuration.host == url
        v1: Any = client.CoreV1Api(api)
        pod = v1.create_namespaced_pod("default", _pod("first"))
        assert pod.spec.service_account_name == "default"
        assert pod.metadata.uid
    finally:
        api.close()


def test_start_writes_a_kubeconfig_for_a_first_pod_and_sigterm_leaves_nothing(
    launcher: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, kubeconfig = launcher
    url = _read_line(proc, START_TIMEOUT)
    assert url.startswith("https://127.0.0.1:")
    _create_pod_through(kubeconfig, url)

    kids = _children(proc.pid)
    assert sorted(k.name() for k in kids) == ["etcd", "kube-apiserver"]
    groups = {k.pid for k in kids}
    for kid in kids:  # each in a session (and process group) of its own
        assert os.getpgid(kid.pid) == kid.pid and os.getsid(kid.pid) == kid.pid

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert not [k for k in kids if psutil.pid_exists(k.pid)]
    stragglers = [p.pid for p in psutil.process_iter() if _pgid(p.pid) in groups]
    assert not stragglers, stragglers


def test_a_killed_launcher_takes_its_children_down(
    launcher: tuple[subprocess.Popen[str], Path],
) -> None:
    """SIGKILL gives the launcher no chance to clean up: the parent-death signal does."""
    proc, _ = launcher
    _read_line(proc, START_TIMEOUT)
    kids = _children(proc.pid)
    assert len(kids) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    _, alive = psutil.wait_procs(kids, timeout=60)
    assert not alive, alive


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_the_fixture_gives_a_control_plane_a_pod_can_be_created_on(tmp_path: Path) -> None:
    test_file = tmp_path / "test_with_envtest.py"
    test_file.write_text(
        textwrap.dedent(
            """
            from kubernetes import client, config

            def test_first_pod(envtest_control_plane, envtest_kubeconfig):
                api = config.new_client_from_config(config_file=str(envtest_kubeconfig))
                spec = {"containers": [{"name": "c", "image": "x"}]}
                pod = {"metadata": {"name": "p"}, "spec": spec}
                try:
                    client.CoreV1Api(api).create_namespaced_pod("default", pod)
                finally:
                    api.close()
                assert envtest_control_plane.url == api.configuration.host
            """
        )
    )
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)]
    if not _plugin_installed():
        args[3:3] = ["-p", "kdispatch.testing.envtest.pytest_plugin"]
    done = subprocess.run(
        args,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def _plugin_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "kdispatch_envtest" for ep in entry_points(group="pytest11"))


def test_with_the_scheduler_a_pod_gets_bound() -> None:
    try:
        binaries = find_binaries(scheduler=True)
    except BinariesNotFound as exc:
        pytest.skip(f"kube-scheduler not built: {exc}")
    with ControlPlane(binaries, scheduler=True) as plane:
        assert [p.name for p in plane.processes] == ["etcd", "kube-apiserver", "kube-scheduler"]
        api: Any = plane.api_client()
        try:
            v1: Any = client.CoreV1Api(api)
            resources = {"cpu": "4", "memory": "8Gi", "pods": "10"}
            v1.create_node(
                {
                    "metadata": {"name": "n1"},
                    "status": {
                        "capacity": resources,
                        "allocatable": resources,
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
            # no node lifecycle controller: remove the not-ready taint admission added
            v1.patch_node("n1", {"spec": {"taints": None}})
            v1.create_namespaced_pod("default", _pod("p"))
            began = time.monotonic()
            node = wait_for(
                lambda: v1.read_namespaced_pod("p", "default").spec.node_name, 60, "a binding"
            )
        finally:
            api.close()
    assert node == "n1", f"bound after {time.monotonic() - began:.1f} s"
