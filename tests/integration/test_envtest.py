"""kdispatch.testing.envtest without binaries: where the binaries are looked up and in which
order, the error when there are none (from Python, the CLI and the pytest fixture), the build
stamp (with a stand-in ``go``), the components' command lines (feature gates, runtime config,
the flags the control plane keeps for itself), kubeconfigs and static-token users, and what a
launcher killed outright leaves behind (with stand-in components)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kdispatch.actors.model.errors import InvalidInputError, KdispatchError
from kdispatch.testing.envtest import (
    Binaries,
    BinariesNotFound,
    BuildError,
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptionError,
    EnvtestError,
    build_binaries,
    cache_dir,
    find_binaries,
    write_kubeconfig,
)
from kdispatch.testing.envtest.apiserver import KubeAPIServer, User
from kdispatch.testing.envtest.build import STAMP, read_stamp
from kdispatch.testing.envtest.certs import write_pki
from kdispatch.testing.envtest.flags import flag_values, parse_assignments, secure_port
from kdispatch.testing.envtest.modules import ETCD, KUBERNETES, PinnedModule
from kdispatch.testing.envtest.scheduler import KubeScheduler
from kdispatch.testing.waiting import wait_for
from tests.subprocesses import run_command

REPO = Path(__file__).resolve().parents[2]


def _exe(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = folder / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return folder


def _no_binaries_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "KUBEBUILDER_ASSETS": str(tmp_path / "assets"),
        "KDISPATCH_K8S_CACHE": str(tmp_path / "cache"),
    }


def _run_pytest(test_file: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``test_file`` in a child pytest with the envtest plugin and no binaries anywhere."""
    args = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(test_file)]
    if not _plugin_installed():
        args[3:3] = ["-p", "kdispatch.testing.envtest.pytest_plugin"]
    env = {**_no_binaries_env(tmp_path), "PYTHONPATH": str(REPO)}
    return run_command(args, cwd=tmp_path, env=env, timeout=120)


def _run_pytest_with_options(options: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """:func:`_run_pytest` on a test that needs a cluster and whose
    ``envtest_control_plane_options`` fixture returns ``options`` (a Python literal)."""
    test_file = tmp_path / "test_options.py"
    test_file.write_text(
        "import pytest\n\n"
        '@pytest.fixture(scope="session")\n'
        "def envtest_control_plane_options():\n"
        f"    return {options}\n\n"
        "def test_needs_a_cluster(envtest_control_plane):\n"
        '    raise AssertionError("must not run")\n'
    )
    return _run_pytest(test_file, tmp_path)


def _cli_start_without_binaries(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``python -m kdispatch.testing.envtest start *flags`` with no binaries anywhere."""
    args = [sys.executable, "-m", "kdispatch.testing.envtest", "start", *flags]
    return run_command(args, env=_no_binaries_env(tmp_path))


# --------------------------------------------------------------------------- lookup


def test_kubebuilder_assets_come_before_the_cache(tmp_path: Path) -> None:
    assets = _exe(tmp_path / "assets", "etcd", "kube-apiserver")
    cache = _exe(tmp_path / "cache", "etcd", "kube-apiserver")
    env = {"KUBEBUILDER_ASSETS": str(assets), "KDISPATCH_K8S_CACHE": str(cache)}
    found = find_binaries(env=env)
    assert (found.etcd, found.kube_apiserver, found.kube_scheduler) == (
        assets / "etcd",
        assets / "kube-apiserver",
        None,
    )
    assert found.dir == assets


def test_the_cache_serves_when_the_assets_lack_a_binary(tmp_path: Path) -> None:
    assets = _exe(tmp_path / "assets", "kube-apiserver")  # no etcd
    cache = _exe(tmp_path / "cache", "etcd", "kube-apiserver")
    env = {"KUBEBUILDER_ASSETS": str(assets), "KDISPATCH_K8S_CACHE": str(cache)}
    assert find_binaries(env=env).dir == cache


def test_the_scheduler_is_looked_up_only_when_asked_for(tmp_path: Path) -> None:
    assets = _exe(tmp_path / "assets", "etcd", "kube-apiserver")
    cache = _exe(tmp_path / "cache", "etcd", "kube-apiserver", "kube-scheduler")
    env = {"KUBEBUILDER_ASSETS": str(assets), "KDISPATCH_K8S_CACHE": str(cache)}
    assert find_binaries(env=env).dir == assets
    found = find_binaries(scheduler=True, env=env)
    assert found.kube_scheduler == cache / "kube-scheduler"


def test_a_file_that_is_not_executable_does_not_count(tmp_path: Path) -> None:
    cache = _exe(tmp_path / "cache", "kube-apiserver")
    (cache / "etcd").write_text("not executable")
    with pytest.raises(BinariesNotFound, match="lacks etcd"):
        find_binaries(env={"KDISPATCH_K8S_CACHE": str(cache)})


def test_no_binaries_anywhere_is_a_typed_error_naming_places_and_the_build(
    tmp_path: Path,
) -> None:
    assets = _exe(tmp_path / "assets", "etcd")
    env = {"KUBEBUILDER_ASSETS": str(assets), "KDISPATCH_K8S_CACHE": str(tmp_path / "cache")}
    with pytest.raises(BinariesNotFound) as caught:
        find_binaries(env=env)
    message = str(caught.value)
    assert f"$KUBEBUILDER_ASSETS {assets} lacks kube-apiserver" in message
    assert f"the cache {tmp_path / 'cache'} lacks etcd, kube-apiserver" in message
    assert "`python -m kdispatch.testing.envtest build`" in message
    assert isinstance(caught.value, EnvtestError)
    assert isinstance(caught.value, KdispatchError)
    with pytest.raises(BinariesNotFound, match="build --with-scheduler"):
        find_binaries(scheduler=True, env=env)


def test_cache_dir_follows_the_override_then_xdg_then_home() -> None:
    version = KUBERNETES.version
    assert version == "v1.37.2"
    assert cache_dir({"KDISPATCH_K8S_CACHE": "/x/y"}) == Path("/x/y")
    assert cache_dir({"XDG_CACHE_HOME": "/c"}) == Path(f"/c/kdispatch/k8s-{version}")
    assert cache_dir({}) == Path.home() / ".cache" / "kdispatch" / f"k8s-{version}"
    assert ETCD.version == "v3.7.3"


def test_control_plane_start_without_binaries_raises_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in _no_binaries_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    plane = ControlPlane(workdir=tmp_path / "work")
    with pytest.raises(BinariesNotFound):
        plane.start()
    assert plane.processes == []
    assert not (tmp_path / "work").exists()


def _silent_binaries(folder: Path) -> Binaries:
    """Stand-ins that start and never answer (each sleeps): a start can only time out."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("etcd", "kube-apiserver"):
        path = folder / name
        path.write_text("#!/bin/sh\nexec sleep 60\n")
        path.chmod(0o755)
    return Binaries(folder / "etcd", folder / "kube-apiserver")


def test_wait_for_names_the_timeout_it_was_given() -> None:
    with pytest.raises(TimeoutError, match=r"timed out after 0\.05 s waiting for nothing"):
        wait_for(lambda: None, 0.05, "nothing", interval=0.01)


def test_a_start_timeout_under_a_second_is_kept_and_reported(tmp_path: Path) -> None:
    plane = ControlPlane(_silent_binaries(tmp_path / "bin"), workdir=tmp_path / "work")
    with pytest.raises(ControlPlaneError, match=r"^not ready within 0\.5 s: timed out after"):
        plane.start(timeout=0.5)
    assert all(not p.running() for p in plane.processes)


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), "5", True])
def test_a_start_timeout_must_be_positive_seconds(timeout: object, tmp_path: Path) -> None:
    plane = ControlPlane(_silent_binaries(tmp_path / "bin"), workdir=tmp_path / "work")
    with pytest.raises(EnvtestError, match="timeout must be"):
        plane.start(timeout=timeout)  # type: ignore[arg-type]
    assert plane.processes == []


def test_an_outage_needs_a_started_control_plane_and_a_positive_timeout(tmp_path: Path) -> None:
    plane = ControlPlane(_silent_binaries(tmp_path / "bin"), workdir=tmp_path / "work")
    with pytest.raises(EnvtestError, match="not started"), plane.apiserver_down():
        pytest.fail("the body of an outage that cannot happen ran")
    with pytest.raises(EnvtestError, match="timeout must be"), plane.apiserver_down(timeout=0):
        pytest.fail("the body of an outage that cannot happen ran")
    assert plane.processes == []


def test_cli_start_reports_the_timeout_it_was_given(tmp_path: Path) -> None:
    binaries = _silent_binaries(tmp_path / "assets")
    args = [sys.executable, "-m", "kdispatch.testing.envtest", "start", "--timeout", "0.5"]
    done = run_command(args, env={**os.environ, "KUBEBUILDER_ASSETS": str(binaries.dir)})
    assert done.returncode == 1, done.stderr
    assert "envtest: not ready within 0.5 s" in done.stderr


def test_cli_start_without_binaries_exits_2_with_the_build_hint(tmp_path: Path) -> None:
    done = _cli_start_without_binaries(tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "python -m kdispatch.testing.envtest build" in done.stderr


def test_the_fixture_skips_with_the_build_hint_when_there_are_no_binaries(
    tmp_path: Path,
) -> None:
    test_file = tmp_path / "test_uses_envtest.py"
    test_file.write_text(
        textwrap.dedent(
            """
            def test_needs_a_cluster(envtest_control_plane):
                raise AssertionError("must be skipped")
            """
        )
    )
    done = _run_pytest(test_file, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert "python -m kdispatch.testing.envtest build" in done.stdout


def _test_extra_plugins() -> list[str]:
    """The pytest plugins (``pytest11`` entry points) of kdispatch and of every distribution
    its test extra brings, requirements of requirements included."""
    wanted = {"kdispatch"}
    todo = [Requirement(r) for r in metadata.requires("kdispatch") or []]
    todo = [r for r in todo if r.marker is None or r.marker.evaluate({"extra": "test"})]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in wanted:
            continue
        wanted.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not for this platform
        todo += [r for r in map(Requirement, requires) if r.marker is None or r.marker.evaluate()]
    return [
        ep.value
        for ep in metadata.entry_points(group="pytest11")
        if ep.dist is not None and canonicalize_name(ep.dist.name) in wanted
    ]


def test_a_project_of_its_own_sees_no_warning_from_what_the_test_extra_installs(
    tmp_path: Path,
) -> None:
    """A user's project with no pytest setup of its own, in an environment holding kdispatch
    and its test extra: the pytest plugins they install (kdispatch's envtest fixtures, those
    of the extra's tools) add no warning to its run. Only those plugins are loaded, whatever
    else this environment holds."""
    plugins = _test_extra_plugins()
    if not _plugin_installed():
        plugins.append("kdispatch.testing.envtest.pytest_plugin")
    (tmp_path / "test_theirs.py").write_text("def test_theirs():\n    assert True\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "default"]
    for plugin in plugins:
        args += ["-p", plugin]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = run_command(args, cwd=tmp_path, env=env, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "1 passed" in done.stdout and "warning" not in output.lower(), output


def test_the_plugin_loads_no_kubernetes_client_module() -> None:
    """pytest imports the plugin in every run: it must not pay for the official client."""
    code = (
        "import sys, kdispatch.testing.envtest.pytest_plugin\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('kubernetes', 'urllib3')))"
    )
    done = run_command([sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_lazy_names_resolve_once_and_unknown_ones_raise() -> None:
    import kdispatch
    import kdispatch.testing
    from kdispatch.adapters.kubernetes import KubernetesBackend
    from kdispatch.testing.listwatch import MemoryListWatch

    assert kdispatch.KubernetesBackend is KubernetesBackend
    assert "KubernetesBackend" in vars(kdispatch)
    assert kdispatch.testing.MemoryListWatch is MemoryListWatch
    with pytest.raises(AttributeError, match="NoSuchName"):
        _ = kdispatch.NoSuchName  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="NoSuchName"):
        _ = kdispatch.testing.NoSuchName  # type: ignore[attr-defined]


def _plugin_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "kdispatch_envtest" for ep in entry_points(group="pytest11"))


# --------------------------------------------------------------------------- build stamp

FAKE_GO = """#!/bin/sh
echo "$*" >> "$FAKE_GO_LOG"
case "$1" in
env) printf 'go1.26.99\\nlinux\\namd64\\n' ;;
build)
    while [ "$#" -gt 0 ]; do
        if [ "$1" = "-o" ]; then printf '#!/bin/sh\\n' > "$2"; chmod +x "$2"; fi
        shift
    done ;;
esac
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``go`` on PATH that answers ``go env`` and 'builds' by writing the ``-o`` file;
    every call is logged to the returned file."""
    bindir = tmp_path / "gobin"
    bindir.mkdir()
    (bindir / "go").write_text(FAKE_GO)
    (bindir / "go").chmod(0o755)
    log = tmp_path / "go.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_LOG", str(log))
    return log


def _builds(log: Path) -> list[str]:
    return [line.split()[-1] for line in log.read_text().splitlines() if line.startswith("build")]


def test_build_builds_what_is_missing_then_nothing(fake_go: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert build_binaries(cache=cache, echo=None) == cache
    assert _builds(fake_go) == ["go.etcd.io/etcd/server/v3", "k8s.io/kubernetes/cmd/kube-apiserver"]
    assert set(read_stamp(cache)) == {"etcd", "kube-apiserver"}
    assert find_binaries(env={"KDISPATCH_K8S_CACHE": str(cache)}).dir == cache

    build_binaries(cache=cache, echo=None)  # current: no build
    build_binaries(cache=cache, scheduler=True, echo=None)  # only the scheduler
    assert _builds(fake_go)[2:] == ["k8s.io/kubernetes/cmd/kube-scheduler"]
    stamp = read_stamp(cache)
    assert stamp["kube-scheduler"] == stamp["kube-apiserver"] != stamp["etcd"]


def test_a_changed_go_version_or_stamp_rebuilds(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    build_binaries(cache=cache, echo=None)
    stamp = json.loads((cache / STAMP).read_text())
    stamp["etcd"] = "0" * 64
    (cache / STAMP).write_text(json.dumps(stamp))
    build_binaries(cache=cache, echo=None)
    assert _builds(fake_go)[2:] == ["go.etcd.io/etcd/server/v3"]

    go = Path(fake_go.parent / "gobin" / "go")
    go.write_text(FAKE_GO.replace("go1.26.99", "go1.27.0"))
    build_binaries(cache=cache, echo=None)
    assert len(_builds(fake_go)) == 5  # both again


def test_a_failed_go_build_is_a_build_error_and_leaves_no_binary(
    fake_go: Path, tmp_path: Path
) -> None:
    go = fake_go.parent / "gobin" / "go"
    go.write_text(FAKE_GO.replace("build)", "build) echo 'missing go.sum entry'; exit 1 ;;\nx)"))
    cache = tmp_path / "cache"
    with pytest.raises(BuildError, match=r"missing go\.sum entry"):
        build_binaries(cache=cache, echo=None)
    assert not (cache / "etcd").exists()
    assert read_stamp(cache) == {}


def test_no_go_is_a_build_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildError, match="'go' not found"):
        build_binaries(cache=tmp_path / "cache", echo=None)


def test_the_module_digest_ignores_comments_only(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    mod, summ = tmp_path / "m" / "go.mod", tmp_path / "m" / "go.sum"
    mod.write_text("// a wrapper\nmodule x\n\nrequire a.b/c v1.0.0 // indirect\n")
    summ.write_text("a.b/c v1.0.0 h1:abc=\n")
    module = PinnedModule("m", "a.b/c", root=tmp_path)
    assert module.version == "v1.0.0"
    before = module.digest("go1.26.8\nlinux\namd64\n")
    mod.write_text("// reworded\nmodule x\nrequire a.b/c v1.0.0\n")
    assert module.digest("go1.26.8\nlinux\namd64\n") == before
    assert module.digest("go1.26.9\nlinux\namd64\n") != before
    summ.write_text("a.b/c v1.0.0 h1:abd=\n")
    assert module.digest("go1.26.8\nlinux\namd64\n") != before


# --------------------------------------------------------------------------- small parts


def test_the_kubeconfig_loads_in_the_official_client(tmp_path: Path) -> None:
    from kubernetes import client, config

    ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    path = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", "t0ken", ca_pem=ca)
    assert path.stat().st_mode & 0o777 == 0o600
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=cfg)  # type: ignore[no-untyped-call]
    assert cfg.host == "https://127.0.0.1:6443"
    assert "Bearer t0ken" in cfg.api_key.values()
    assert Path(str(cfg.ssl_ca_cert)).read_bytes() == ca


def test_users_get_their_own_tokens_and_bad_names_are_refused() -> None:
    plane = ControlPlane(users={"alice": ["devs", "ops"]})
    assert plane.token("alice") != plane.admin_token
    with pytest.raises(EnvtestError, match="no user 'bob'"):
        plane.token("bob")
    with pytest.raises(EnvtestError, match="control plane's own"):
        ControlPlane(users={"envtest-admin": []})
    with pytest.raises(InvalidInputError, match="group"):
        User.new("carol", ["a,b"])
    with pytest.raises(EnvtestError, match="not started"):
        _ = plane.url


# --------------------------------------------------------------------------- command lines

GATES = {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": False}
APIS = {"scheduling.k8s.io/v1beta1": True}


def _apiserver_args(plane: ControlPlane, folder: Path) -> list[str]:
    server = KubeAPIServer(
        Path("/bin/kube-apiserver"),
        folder,
        pki=write_pki(folder),
        token_file=folder / "tokens.csv",
        admin_token="t",
        extra_args=plane.apiserver_extra_args,
    )
    return server.args("http://127.0.0.1:2379", 6443)


def _scheduler_args(plane: ControlPlane, folder: Path) -> list[str]:
    scheduler = KubeScheduler(
        Path("/bin/kube-scheduler"), folder, folder / "kc", plane.scheduler_extra_args
    )
    return scheduler.args(10259)


def test_gates_reach_both_components_and_the_runtime_config_only_the_apiserver(
    tmp_path: Path,
) -> None:
    plane = ControlPlane(
        scheduler=True,
        feature_gates=GATES,
        runtime_config=APIS,
        apiserver_args=["--v=4"],
        scheduler_args=["--v=5"],
    )
    gates = "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=false"
    apis = "--runtime-config=scheduling.k8s.io/v1beta1=true"
    apiserver = _apiserver_args(plane, tmp_path)
    assert apiserver[0] == "/bin/kube-apiserver"
    assert apiserver[-3:] == [gates, apis, "--v=4"]  # the user's own flags last
    assert apiserver.count(gates) == 1 and apiserver.count(apis) == 1
    scheduler = _scheduler_args(plane, tmp_path)
    assert scheduler[0] == "/bin/kube-scheduler"
    assert scheduler[-2:] == [gates, "--v=5"]
    assert not [a for a in scheduler if a.startswith("--runtime-config")]


def test_without_gates_or_runtime_config_no_such_flag_is_passed(tmp_path: Path) -> None:
    plane = ControlPlane(scheduler=True)
    assert plane.feature_gates == {} and plane.runtime_config == {}
    for args in (_apiserver_args(plane, tmp_path), _scheduler_args(plane, tmp_path)):
        assert not [a for a in args if a.startswith(("--feature-gates", "--runtime-config"))]


def test_the_command_line_spelling_of_a_switch_is_accepted() -> None:
    plane = ControlPlane(
        feature_gates={"GenericWorkload": "True"},  # type: ignore[dict-item]
        runtime_config={"api/beta": "false", "v1": True},  # type: ignore[dict-item]
    )
    assert plane.feature_gates == {"GenericWorkload": True}
    assert plane.runtime_config == {"api/beta": False, "v1": True}
    assert plane.apiserver_extra_args == (
        "--feature-gates=GenericWorkload=true",
        "--runtime-config=api/beta=false,v1=true",
    )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"feature_gates": ["GenericWorkload"]}, "feature_gates must map gate names"),
        ({"feature_gates": {"genericWorkload": True}}, "invalid feature gate name"),
        ({"feature_gates": {"Generic=Workload": True}}, "invalid feature gate name"),
        ({"feature_gates": {"A,B": True}}, "invalid feature gate name"),
        ({"feature_gates": {"GenericWorkload": 1}}, "must be true or false"),
        ({"feature_gates": {"GenericWorkload": "yes"}}, "must be true or false"),
        ({"runtime_config": "scheduling.k8s.io/v1beta1=true"}, "runtime_config must map"),
        ({"runtime_config": {"scheduling.k8s.io": True}}, "invalid runtime config key"),
        ({"runtime_config": {"scheduling.k8s.io/v1beta1=true": True}}, "invalid runtime"),
        ({"runtime_config": {"Scheduling.k8s.io/v1": True}}, "invalid runtime config key"),
        ({"runtime_config": {"scheduling.k8s.io/v1beta1": None}}, "must be true or false"),
    ],
)
def test_malformed_gates_and_runtime_config_are_refused_before_anything_starts(
    options: dict[str, object], match: str, tmp_path: Path
) -> None:
    with pytest.raises(ControlPlaneOptionError, match=match) as caught:
        ControlPlane(workdir=tmp_path / "work", **options)  # type: ignore[arg-type]
    assert isinstance(caught.value, EnvtestError)
    assert isinstance(caught.value, InvalidInputError)
    assert not (tmp_path / "work").exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"users": {"bob": "ops"}}, "groups of user 'bob' must be a list of str"),
        ({"users": ["alice"]}, "users must map user names"),
        ({"users": {"alice": None}}, "groups of user 'alice'"),
        ({"users": {"alice": [1]}}, "groups of user 'alice'"),
        ({"users": {1: []}}, "a user name must be a str"),
        ({"users": {"a,b": []}}, "without commas"),
        ({"users": {"envtest-admin": []}}, "control plane's own"),
        ({"apiserver_args": "--v=4"}, "apiserver_args must be a list of str"),
        ({"etcd_args": "--log-level=debug"}, "etcd_args must be a list of str"),
        ({"scheduler_args": "--v=4"}, "scheduler_args must be a list of str"),
        ({"apiserver_args": ["--v", 4]}, "apiserver_args must be a list of str"),
        # the flags through which the control plane reaches what it started are its own
        (
            {"apiserver_args": ["--etcd-servers=http://127.0.0.1:1"]},
            "apiserver_args may not set --etcd-servers",
        ),
        ({"apiserver_args": ["--token-auth-file", "t.csv"]}, "may not set --token-auth-file"),
        ({"apiserver_args": ["--tls-cert-file=c.pem"]}, "may not set --tls-cert-file"),
        ({"apiserver_args": ["--tls-private-key-file=k.pem"]}, "may not set --tls-private-key"),
        (
            {"etcd_args": ["-listen-client-urls=http://127.0.0.1:1"]},
            "etcd_args may not set --listen-client-urls",
        ),
        ({"etcd_args": ["--advertise-client-urls", "http://x"]}, "--advertise-client-urls"),
        # a --secure-port is followed, so it must be one
        (
            {"apiserver_args": ["--secure-port=0"]},
            r"apiserver_args: --secure-port must be a port from 1 to 65535, got '0'",
        ),
        ({"apiserver_args": ["--secure-port", "65536"]}, "got '65536'"),
        ({"apiserver_args": ["--v=1", "--secure-port"]}, "got None"),
        ({"scheduler_args": ["--secure-port=https"]}, "scheduler_args: --secure-port must be"),
    ],
)
def test_malformed_users_and_flags_are_refused_before_anything_starts(
    options: dict[str, object], match: str, tmp_path: Path
) -> None:
    """One string where a list is expected would be split into characters: groups 'o', 'p',
    's' for ``{"bob": "ops"}``, flags '-', '-', 'v', ... for ``"--v=4"``."""
    with pytest.raises(ControlPlaneOptionError, match=match):
        ControlPlane(workdir=tmp_path / "work", **options)  # type: ignore[arg-type]
    assert not (tmp_path / "work").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["a-file", "a-file/sub"])
def test_a_workdir_that_cannot_be_made_is_a_typed_error_and_starts_nothing(
    where: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder\n")
    plane = ControlPlane(_silent_binaries(tmp_path / "bin"), workdir=tmp_path / where)
    with pytest.raises(EnvtestError, match="cannot start a control plane in"):
        plane.start(timeout=30)
    assert plane.processes == []
    args = [sys.executable, "-m", "kdispatch.testing.envtest", "start"]
    done = run_command(
        [*args, "--workdir", str(tmp_path / where)],
        env={**os.environ, "KUBEBUILDER_ASSETS": str(tmp_path / "bin")},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("envtest: cannot start a control plane in"), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(60)
def test_a_workdir_an_earlier_control_plane_used_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """Its certificates and tokens may serve a control plane still running: a start must not
    overwrite them (nor die on etcd-data with a raw FileExistsError)."""
    used = tmp_path / "work"
    (used / "etcd-data").mkdir(parents=True)
    for name in ("ca.crt", "tokens.csv"):
        (used / name).write_text("the earlier one's\n")
    plane = ControlPlane(_silent_binaries(tmp_path / "bin"), workdir=used)
    with pytest.raises(EnvtestError, match=r"holds an earlier control plane's ca\.crt"):
        plane.start(timeout=30)
    assert plane.processes == []
    assert {p.read_text() for p in used.iterdir() if p.is_file()} == {"the earlier one's\n"}
    args = [sys.executable, "-m", "kdispatch.testing.envtest", "start", "--workdir", str(used)]
    done = run_command(args, env={**os.environ, "KUBEBUILDER_ASSETS": str(tmp_path / "bin")})
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("envtest: the workdir"), done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timeout", ["0", "-1", "nan"])
def test_cli_start_refuses_a_timeout_that_is_not_positive_with_a_usage_error(
    timeout: str, tmp_path: Path
) -> None:
    binaries = _silent_binaries(tmp_path / "assets")
    args = [sys.executable, "-m", "kdispatch.testing.envtest", "start", "--timeout", timeout]
    done = run_command(args, env={**os.environ, "KUBEBUILDER_ASSETS": str(binaries.dir)})
    assert done.returncode == 2, done.stderr
    assert "usage:" in done.stderr and "--timeout must be" in done.stderr


def test_a_secure_port_among_the_extra_flags_is_the_port_the_control_plane_follows(
    tmp_path: Path,
) -> None:
    """Both spellings, the last one winning as in the binary; the component's command line
    then says that port once more, in the control plane's own flags (the user's stay last)."""
    plane = ControlPlane(
        scheduler=True,
        apiserver_args=["--secure-port=7001", "--v=2", "--secure-port", "7443"],
        scheduler_args=["--secure-port", "7259"],
    )
    assert secure_port(plane.apiserver_args, "apiserver_args") == 7443
    assert secure_port(plane.scheduler_args, "scheduler_args") == 7259
    assert secure_port(ControlPlane().apiserver_args, "apiserver_args") is None
    assert flag_values(["--a=1", "-a", "2", "--ab=3", "--a"], "--a") == ["1", "2", None]


def test_command_line_assignments_merge_and_a_later_one_wins() -> None:
    items = ["GenericWorkload=true,TopologyAwareWorkloadScheduling=true", " A = false "]
    assert parse_assignments([*items, "GenericWorkload=false"], "--feature-gates") == {
        "GenericWorkload": "false",
        "TopologyAwareWorkloadScheduling": "true",
        "A": "false",
    }
    with pytest.raises(ControlPlaneOptionError, match="expected NAME=true"):
        parse_assignments(["GenericWorkload"], "--feature-gates")
    with pytest.raises(ControlPlaneOptionError, match="expected NAME=true"):
        parse_assignments(["=true"], "--feature-gates")


@pytest.mark.parametrize(
    "flag",
    [
        ["--feature-gates", "GenericWorkload"],
        ["--feature-gates", "GenericWorkload=maybe"],
        ["--runtime-config", "scheduling.k8s.io=true"],
    ],
)
def test_cli_start_refuses_malformed_gates_with_a_usage_error_before_looking_for_binaries(
    flag: list[str], tmp_path: Path
) -> None:
    done = _cli_start_without_binaries(tmp_path, *flag)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "usage:" in done.stderr
    assert "envtest build" not in done.stderr  # refused before the binaries were looked up


@pytest.mark.parametrize(
    ("options", "returncode", "shown"),
    [
        pytest.param(
            '{"feature_gates": {"GenericWorkload": True}, "kubelet": True}',
            1,
            ["1 error", "ControlPlaneOptionError", "unknown: ['kubelet']"],
            id="invalid-options-are-refused-before-the-skip",
        ),
        pytest.param(
            '{"scheduler": True, "feature_gates": {"GenericWorkload": True}}',
            0,
            # the scheduler was asked for: the build hint says so
            ["1 skipped", "envtest build --with-scheduler"],
            id="valid-options-skip",
        ),
    ],
)
def test_the_fixture_checks_its_options_before_the_skip_for_missing_binaries(
    options: str, returncode: int, shown: list[str], tmp_path: Path
) -> None:
    done = _run_pytest_with_options(options, tmp_path)
    assert done.returncode == returncode, done.stdout + done.stderr
    assert all(text in done.stdout for text in shown), done.stdout


def test_the_serving_certificate_passes_strict_verification(tmp_path: Path) -> None:
    # Python 3.13 verifies with VERIFY_X509_STRICT by default: the key identifiers must be there
    pki = write_pki(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pki.cert, pki.key)
    client = ssl.create_default_context(cafile=str(pki.ca))
    client.verify_flags |= ssl.VERIFY_X509_STRICT
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with ThreadPoolExecutor(1) as pool:

            def accept() -> None:
                conn, _ = listener.accept()
                with conn, contextlib.suppress(ssl.SSLError):  # the client's refusal, if any
                    server.wrap_socket(conn, server_side=True).close()

            accepted = pool.submit(accept)
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                assert tls.version() is not None  # the handshake verified the chain
            accepted.result(timeout=10)


# --------------------------------------------------------------------------- a killed launcher


def _sleeping_binaries(folder: Path) -> Binaries:
    """etcd and kube-apiserver stand-ins that never answer: each is ``sleep``, named by its
    absolute path so that they run with any ``PATH``."""
    sleep = shutil.which("sleep")
    assert sleep is not None
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("etcd", "kube-apiserver"):
        path = folder / name
        path.write_text(f"#!/bin/sh\nexec {sleep} 300\n")
        path.chmod(0o755)
    return Binaries(folder / "etcd", folder / "kube-apiserver")


@pytest.fixture
def launcher_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a ``start`` with stand-in components, its temporary folders in
    ``tmp_path/tmp``, and a ``PATH`` with nothing on it (no ``setpriv`` either)."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "empty").mkdir()
    return {
        **os.environ,
        "KUBEBUILDER_ASSETS": str(_sleeping_binaries(tmp_path / "bin").dir),
        "TMPDIR": str(tmp_path / "tmp"),
        "PATH": str(tmp_path / "empty"),
    }


@pytest.fixture
def launchers(launcher_env: dict[str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Launchers the test starts (``start --timeout 100``, waiting on an etcd that never
    answers); at the end, each that still runs is killed, and so is every process of theirs
    that is left, whatever the test did."""
    started: list[subprocess.Popen[bytes]] = []
    seen: list[psutil.Process] = []
    yield started
    for proc in started:
        with contextlib.suppress(psutil.Error):
            seen += psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        proc.wait(30)
    for kid in seen:
        with contextlib.suppress(psutil.Error):
            kid.kill()


def _launch(env: dict[str, str], started: list[subprocess.Popen[bytes]]) -> psutil.Process:
    """Start a launcher; return its etcd (the stand-in) once it runs."""
    args = [sys.executable, "-m", "kdispatch.testing.envtest", "start", "--timeout", "100"]
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO
    )
    started.append(proc)

    def stand_in() -> psutil.Process | None:
        kids = psutil.Process(proc.pid).children()
        return next((k for k in kids if k.name() == "sleep"), None)

    found: psutil.Process = wait_for(stand_in, 60, "the launcher's etcd", interval=0.05)
    return found


def _folders(env: dict[str, str]) -> list[Path]:
    return sorted(Path(env["TMPDIR"]).glob("kdispatch-envtest-*"))


def _start_briefly(env: dict[str, str]) -> None:
    """A ``start`` that gives up after half a second (its etcd never answers)."""
    args = [sys.executable, "-m", "kdispatch.testing.envtest", "start", "--timeout", "0.5"]
    done = run_command(args, env=env)
    assert done.returncode == 1, done.stderr
    assert "envtest: not ready within 0.5 s" in done.stderr


@pytest.mark.timeout(120)
def test_a_killed_launcher_leaves_no_process_and_the_next_start_removes_its_folder(
    launcher_env: dict[str, str], launchers: list[subprocess.Popen[bytes]]
) -> None:
    """SIGKILL runs no cleanup: the kernel's parent-death signal takes the components down,
    without ``setpriv`` too, and the folder the launcher made is removed by the next start."""
    etcd = _launch(launcher_env, launchers)
    [folder] = _folders(launcher_env)
    launchers[0].send_signal(signal.SIGKILL)
    launchers[0].wait(30)
    _, alive = psutil.wait_procs([etcd], timeout=30)
    assert not alive, f"the killed launcher's etcd still runs: {alive}"
    assert _folders(launcher_env) == [folder]  # nothing removed it yet

    _start_briefly(launcher_env)
    assert _folders(launcher_env) == []


@pytest.mark.timeout(120)
def test_a_start_leaves_the_folders_of_running_control_planes_alone(
    launcher_env: dict[str, str], launchers: list[subprocess.Popen[bytes]]
) -> None:
    """A folder whose owner runs is kept, and so is one a start did not make (no owner's
    lock in it); the owner removes its own when it stops."""
    _launch(launcher_env, launchers)
    [running] = _folders(launcher_env)
    other = Path(launcher_env["TMPDIR"]) / "kdispatch-envtest-someone-elses"
    other.mkdir()

    _start_briefly(launcher_env)
    assert _folders(launcher_env) == sorted([running, other])
    launchers[0].send_signal(signal.SIGTERM)
    assert launchers[0].wait(30) == 0
    assert _folders(launcher_env) == [other]
