"""``KubernetesBackend.from_kubeconfig``: a kubeconfig that is missing, broken, or without the
context asked for raises ``InvalidConfigError`` naming the file and the context, never the
official client's ``ConfigException`` or a YAML error; the example scheduler's
``--kubeconfig`` says so and exits 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from kubernetes.config import ConfigException

from kdispatch import InvalidConfigError, KubernetesBackend
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, make_pod
from kdispatch.testing.envtest import write_kubeconfig

pytestmark = pytest.mark.timeout(30)


def test_a_good_kubeconfig_and_context_reach_the_cluster(tmp_path: Path) -> None:
    mem = InMemoryApiServer()
    mem.create(make_pod("p1"))
    with ApiServerHTTP(mem) as http:
        path = write_kubeconfig(tmp_path / "kc", http.url, "t0ken", name="local")
        with KubernetesBackend.from_kubeconfig(str(path), "local") as backend:
            assert backend.get("Pod", "default", "p1")["metadata"]["name"] == "p1"


def test_kubeconfig_set_after_import_is_the_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$KUBECONFIG`` as it is when the backend is built, not as the official client saw it
    when it was imported."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    mem = InMemoryApiServer()
    mem.create(make_pod("p1"))
    with ApiServerHTTP(mem, token="t0ken") as http:
        first = write_kubeconfig(tmp_path / "a" / "kc", http.url, "t0ken", name="a")
        other = write_kubeconfig(tmp_path / "b" / "kc", http.url, "t0ken", name="b")
        monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "none"), str(first)]))
        with KubernetesBackend.from_kubeconfig() as backend:
            assert backend.get("Pod", "default", "p1")["metadata"]["name"] == "p1"
        monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{other}")
        with KubernetesBackend.from_kubeconfig(context="b") as backend:
            assert backend.get("Pod", "default", "p1")["metadata"]["name"] == "p1"


@pytest.mark.parametrize("transport", ["lean", "client"])
def test_a_token_file_ending_with_a_newline_is_trimmed(tmp_path: Path, transport: str) -> None:
    """As client-go reads a ``tokenFile``: a file written by ``echo`` ends with a newline, which
    no HTTP header may carry; the token is read again before every request."""
    mem = InMemoryApiServer()
    mem.create(make_pod("p1"))
    with ApiServerHTTP(mem, token="t0ken") as http:
        path = write_kubeconfig(tmp_path / "kc", http.url, "unused", name="local")
        data = json.loads(path.read_text(encoding="utf-8"))
        (tmp_path / "token").write_text("t0ken\n", encoding="utf-8")
        data["users"][0]["user"] = {"tokenFile": str(tmp_path / "token")}
        path.write_text(json.dumps(data), encoding="utf-8")
        with KubernetesBackend.from_kubeconfig(str(path), transport=transport) as backend:  # type: ignore[arg-type]
            assert backend.get("Pod", "default", "p1")["metadata"]["name"] == "p1"
            assert backend.get("Pod", "default", "p1")["metadata"]["name"] == "p1"


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "kubeconfig"
    with pytest.raises(InvalidConfigError, match="no such file") as info:
        KubernetesBackend.from_kubeconfig(str(path))
    assert str(info.value).startswith(f"kubeconfig {path}")


def test_a_missing_file_from_the_environment_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "from-env"
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(InvalidConfigError, match="no such file") as info:
        KubernetesBackend.from_kubeconfig()
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("apiVersion: v1\nclusters: [\n  - {name: a\n", yaml.YAMLError),
        ("", ConfigException),
        ("- a\n- b\n", TypeError),
        ('{"apiVersion": "v1", "kind": "Config"}', ConfigException),
    ],
    ids=["broken-yaml", "empty", "a-list", "no-current-context"],
)
def test_a_broken_file_is_named(tmp_path: Path, text: str, cause: type[Exception]) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidConfigError) as info:
        KubernetesBackend.from_kubeconfig(str(path))
    assert str(info.value).startswith(f"kubeconfig {path}")
    assert isinstance(info.value.__cause__, cause)


def test_a_directory_is_no_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="no such file") as info:
        KubernetesBackend.from_kubeconfig(str(tmp_path))
    assert str(tmp_path) in str(info.value)


def test_an_unknown_context_is_named(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", "t0ken", name="real")
    with pytest.raises(InvalidConfigError) as info:
        KubernetesBackend.from_kubeconfig(str(path), "staging")
    assert str(info.value) == f"kubeconfig {path} (context 'staging'): no context 'staging' in it"
    assert isinstance(info.value.__cause__, ConfigException)


def test_a_context_naming_a_missing_cluster_is_named(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", "t0ken", name="real")
    data = json.loads(path.read_text(encoding="utf-8"))
    data["contexts"][0]["context"]["cluster"] = "gone"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InvalidConfigError) as info:
        KubernetesBackend.from_kubeconfig(str(path), "real")
    assert str(info.value).startswith(f"kubeconfig {path} (context 'real'): ")
    assert "gone" in str(info.value)


@pytest.mark.parametrize("bad", [5, ""])
def test_bad_arguments_are_refused(bad: object) -> None:
    with pytest.raises(InvalidConfigError):
        KubernetesBackend.from_kubeconfig(None, bad)  # type: ignore[arg-type]


def test_the_example_scheduler_says_which_kubeconfig_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from examples.scheduler.cli import main

    path = tmp_path / "missing"
    assert main(["--kubeconfig", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: kubeconfig {path}: no such file" in err
