"""``python -m kdispatch.testing.envtest start`` and the ``envtest_control_plane`` fixture
against the real binaries: a first pod in ``default`` is admitted through the written
kubeconfig, and stopping the launcher (SIGTERM, or SIGKILL and the parent-death signal)
leaves no process behind. Feature gates and runtime config (from the command line, the
fixture's options and ``ControlPlane``) turn on PodGroups in kube-apiserver and gang
scheduling in kube-scheduler; the docs' example runs as written. A ``--secure-port`` among the
extra flags is where kube-apiserver and kube-scheduler serve, and what the control plane
follows."""

from __future__ import annotations

import os
import selectors
import signal
import ssl
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
from kubernetes import client, config

from kdispatch.testing.envtest import Binaries, ControlPlane, ControlPlaneError
from kdispatch.testing.envtest.processes import free_port
from kdispatch.testing.waiting import wait_for
from tests.snippets import block, run
from tests.subprocesses import run_command

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 120.0

pytestmark = [pytest.mark.realapi, pytest.mark.timeout(300), pytest.mark.usefixtures("binaries")]


def _pod(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def _create_ready_node(v1: Any, name: str) -> None:
    """A Ready node with room for 10 pods and no taint: with no node lifecycle controller,
    the not-ready taint that admission added is removed here."""
    resources = {"cpu": "4", "memory": "8Gi", "pods": "10"}
    v1.create_node(
        {
            "metadata": {"name": name},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    v1.patch_node(name, {"spec": {"taints": None}})


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The launcher's first stdout line (its URL), waiting on the pipe, not on a clock."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise TimeoutError(f"no URL from the launcher within {timeout:.0f} s")
    return proc.stdout.readline().strip()


Launch = Callable[..., tuple[subprocess.Popen[str], Path]]


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    """Starts the CLI (``start --write-kubeconfig ... --workdir ...`` plus the given flags) in
    its own session; each is killed (group) at the end whatever the test did."""
    started: list[subprocess.Popen[str]] = []

    def start(*flags: str) -> tuple[subprocess.Popen[str], Path]:
        run = tmp_path / f"run{len(started)}"
        run.mkdir()
        kubeconfig = run / "kubeconfig"
        cli = [sys.executable, "-m", "kdispatch.testing.envtest", "start", *flags]
        proc = subprocess.Popen(
            [*cli, "--write-kubeconfig", str(kubeconfig), "--workdir", str(run / "work")],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=(run / "launcher.err").open("w"),
            text=True,
            start_new_session=True,
        )
        started.append(proc)
        return proc, kubeconfig

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.fixture
def launcher(launch: Launch) -> tuple[subprocess.Popen[str], Path]:
    """The CLI started with ``--write-kubeconfig`` and nothing else."""
    return launch()


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


GATE = "--feature-gates=GenericWorkload=true"
PODGROUPS = ("scheduling.k8s.io", "v1beta1", "default", "podgroups")
"""Where PodGroups are served (``CustomObjectsApi`` reaches built-in resources too)."""


def _gang(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def _create_podgroup_through(kubeconfig: Path) -> int:
    """Creates PodGroup ``g1`` through ``kubeconfig``: the HTTP status (201, or 404 when the
    API is not served)."""
    api: Any = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        custom: Any = client.CustomObjectsApi(api)
        try:
            created = custom.create_namespaced_custom_object(*PODGROUPS, _gang("g1", 2))
        except client.ApiException as exc:
            return int(exc.status)
        assert created["metadata"]["uid"] and created["status"] == {}
        return 201
    finally:
        api.close()


def test_start_writes_a_kubeconfig_for_a_first_pod_and_sigterm_leaves_nothing(
    launcher: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, kubeconfig = launcher
    url = _read_line(proc, START_TIMEOUT)
    assert url.startswith("https://127.0.0.1:")
    _create_pod_through(kubeconfig, url)
    assert _create_podgroup_through(kubeconfig) == 404  # a beta API, off by default

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


def test_a_kubeconfig_that_cannot_be_written_is_an_error_that_leaves_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("not a folder\n")
    args = [sys.executable, "-m", "kdispatch.testing.envtest", "start"]
    args += ["--workdir", str(tmp_path / "work")]
    args += ["--write-kubeconfig", str(tmp_path / "a-file" / "kubeconfig")]
    done = run_command(args, cwd=REPO, timeout=START_TIMEOUT + 60)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines()[-1].startswith("envtest: cannot write --write-kubeconfig")
    assert "Traceback" not in done.stderr
    work = str(tmp_path / "work")
    assert not [p.pid for p in psutil.process_iter() if work in " ".join(_cmdline(p))]


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        line: list[str] = proc.cmdline()
    except psutil.Error:
        return []
    return line


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
    _passes_with_the_plugin(test_file)


def _passes_with_the_plugin(test_file: Path) -> None:
    """Run ``test_file`` (one test) in a child pytest with the envtest plugin: it passes."""
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)]
    if not _plugin_installed():
        args[3:3] = ["-p", "kdispatch.testing.envtest.pytest_plugin"]
    done = run_command(
        args, cwd=test_file.parent, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def _plugin_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "kdispatch_envtest" for ep in entry_points(group="pytest11"))


def test_with_the_scheduler_a_pod_gets_bound(scheduler_binaries: Binaries) -> None:
    with ControlPlane(scheduler_binaries, scheduler=True) as plane:
        assert [p.name for p in plane.processes] == ["etcd", "kube-apiserver", "kube-scheduler"]
        api: Any = plane.api_client()
        try:
            v1: Any = client.CoreV1Api(api)
            _create_ready_node(v1, "n1")
            v1.create_namespaced_pod("default", _pod("p"))
            began = time.monotonic()
            node = wait_for(
                lambda: v1.read_namespaced_pod("p", "default").spec.node_name, 60, "a binding"
            )
        finally:
            api.close()
    assert node == "n1", f"bound after {time.monotonic() - began:.1f} s"


def test_start_with_a_gate_and_runtime_config_serves_podgroups(launch: Launch) -> None:
    proc, kubeconfig = launch(
        "--feature-gates",
        "GenericWorkload=true",
        "--runtime-config",
        "scheduling.k8s.io/v1beta1=true",
    )
    _read_line(proc, START_TIMEOUT)
    assert _create_podgroup_through(kubeconfig) == 201
    [apiserver] = [k for k in _children(proc.pid) if k.name() == "kube-apiserver"]
    assert GATE in apiserver.cmdline()
    assert "--runtime-config=scheduling.k8s.io/v1beta1=true" in apiserver.cmdline()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_the_fixture_takes_gates_and_runtime_config_from_its_options(tmp_path: Path) -> None:
    test_file = tmp_path / "test_with_podgroups.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import pytest
            from kubernetes import client

            @pytest.fixture(scope="session")
            def envtest_control_plane_options():
                return {
                    "feature_gates": {"GenericWorkload": True},
                    "runtime_config": {"scheduling.k8s.io/v1beta1": True},
                }

            def test_a_podgroup(envtest_control_plane):
                api = envtest_control_plane.api_client()
                body = {
                    "metadata": {"name": "g1"},
                    "spec": {"schedulingPolicy": {"basic": {}}},
                }
                try:
                    client.CustomObjectsApi(api).create_namespaced_custom_object(
                        "scheduling.k8s.io", "v1beta1", "default", "podgroups", body
                    )
                finally:
                    api.close()
            """
        )
    )
    _passes_with_the_plugin(test_file)


def test_the_gate_reaches_kube_scheduler_which_then_schedules_a_gang(
    scheduler_binaries: Binaries,
) -> None:
    """With ``GenericWorkload`` on in both components, kube-scheduler's gang scheduling binds
    the members of a PodGroup and writes its ``PodGroupInitiallyScheduled=True``."""
    plane = ControlPlane(
        scheduler_binaries,
        scheduler=True,
        feature_gates={"GenericWorkload": True},
        runtime_config={"scheduling.k8s.io/v1beta1": True},
    )
    with plane:
        scheduler = [p for p in plane.processes if p.name == "kube-scheduler"]
        assert [psutil.Process(p.pid).cmdline().count(GATE) for p in scheduler] == [1]
        api: Any = plane.api_client()
        try:
            v1: Any = client.CoreV1Api(api)
            _create_ready_node(v1, "n1")
            custom: Any = client.CustomObjectsApi(api)
            custom.create_namespaced_custom_object(*PODGROUPS, _gang("g1", 2))
            for i in range(2):
                member = _pod(f"m{i}")
                member["spec"]["schedulingGroup"] = {"podGroupName": "g1"}  # type: ignore[index]
                v1.create_namespaced_pod("default", member)

            def placed() -> list[str] | None:
                pods = v1.list_namespaced_pod("default").items
                nodes = [p.spec.node_name for p in pods if p.metadata.name.startswith("m")]
                return nodes if len(nodes) == 2 and all(nodes) else None

            assert wait_for(placed, 60, "both gang members bound") == ["n1", "n1"]

            def initially_scheduled() -> dict[str, Any] | None:
                group = custom.get_namespaced_custom_object(*PODGROUPS, "g1")
                conds = (group.get("status") or {}).get("conditions") or []
                return next((c for c in conds if c["type"] == "PodGroupInitiallyScheduled"), None)

            written = wait_for(initially_scheduled, 60, "kube-scheduler's PodGroup condition")
            assert (written["status"], written["reason"]) == ("True", "Scheduled")
        finally:
            api.close()


def test_the_docs_example_with_a_beta_api_runs_as_written() -> None:
    snippet = block("docs/testing.md", "### Feature gates and beta APIs")
    assert snippet.requires == "envtest"
    scope = run(snippet)
    assert scope["stored"]["status"]["conditions"][0]["status"] == "True"


def test_a_gate_the_binary_does_not_know_fails_the_start_with_its_log() -> None:
    plane = ControlPlane(feature_gates={"NoSuchGateInKubernetes": True})
    with pytest.raises(ControlPlaneError, match="NoSuchGateInKubernetes"):
        plane.start(timeout=60)
    assert not [p for p in plane.processes if p.running()]


def test_a_secure_port_among_the_extra_flags_is_where_the_components_serve(
    scheduler_binaries: Binaries,
) -> None:
    """The user's ``--secure-port`` wins on the command line, and the control plane waits on
    that port, serves its URL and kubeconfig from it (a pod is created through it), and finds
    kube-scheduler ready there."""
    port, scheduler_port = free_port(), free_port()
    plane = ControlPlane(
        scheduler_binaries,
        scheduler=True,
        apiserver_args=["--secure-port", str(port)],
        scheduler_args=[f"--secure-port={scheduler_port}"],
    )
    with plane:
        assert plane.url == f"https://127.0.0.1:{port}"
        _create_pod_through(plane.kubeconfig_path, plane.url)
        insecure = ssl.create_default_context()  # kube-scheduler's certificate is self-signed
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        readyz = f"https://127.0.0.1:{scheduler_port}/readyz"
        with urllib.request.urlopen(readyz, timeout=10, context=insecure) as resp:
            assert resp.status == 200
