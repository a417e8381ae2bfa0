"""Every ```` ```python ```` block of README.md and docs/*.md runs as written.

Snippets written for a cluster (``KubernetesBackend.from_kubeconfig()`` or ``.in_cluster()``)
run against the in-memory apiserver served over HTTP: both constructors are replaced, for the
test, by ``KubernetesBackend.for_url`` on a server holding a node (``node-1``) and a pending pod
for ``my-scheduler`` (``web-0``), and ``$KUBECONFIG`` names a kubeconfig for that server, which
the other clients (the official one's ``load_kube_config``, lightkube, kr8s) read. Blocks
whose first line is ``# requires: <what>`` are skipped with that reason;
test_few_snippets_need_more_than_the_test_run keeps them rare.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.config import kube_config
from loguru import logger

from kdispatch import DispatcherConfig, KubernetesBackend
from kdispatch.actors.model.config_load import env_variables
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, make_node, make_pod
from kdispatch.testing.envtest import write_kubeconfig
from tests.snippets import (
    PAGES,
    ROOT,
    Snippet,
    all_snippets,
    backends_reach,
    block,
    run,
    snippets,
)

pytestmark = pytest.mark.timeout(90)

SNIPPETS = all_snippets()


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[InMemoryApiServer]:
    """A stand-in for the kubeconfig's cluster, reached by ``from_kubeconfig``/``in_cluster``
    and through ``$KUBECONFIG``."""
    server = InMemoryApiServer()
    server.create(make_node("node-1", cpu_m=4000, mem_mi=8192))
    pod = make_pod("web-0")
    pod["spec"]["schedulerName"] = "my-scheduler"
    server.create(pod)
    with (
        ApiServerHTTP(server, watch_poll=0.02) as http,
        backends_reach(http.url, monkeypatch, "from_kubeconfig", "in_cluster"),
    ):
        kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", http.url, "docs"))
        monkeypatch.setenv("KUBECONFIG", kubeconfig)
        # the official client reads $KUBECONFIG once, when it is imported
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
        default = k8s.Configuration.get_default_copy()
        try:
            yield server
        finally:  # load_kube_config() makes its configuration the process-wide default
            k8s.Configuration.set_default(default)


def test_every_page_has_snippets_found() -> None:
    assert len(PAGES) >= 16, PAGES
    assert len(SNIPPETS) >= 20


def test_few_snippets_need_more_than_the_test_run() -> None:
    """Only the pages about a real control plane need one (the real-apiserver suite runs
    those snippets: tests/realapi/test_docs_envtest.py)."""
    needing = [s.name for s in SNIPPETS if s.requires is not None]
    assert len(needing) <= 4, needing
    assert {name.split(":")[0] for name in needing} <= {"docs/testing.md"}, needing
    assert {s.requires for s in SNIPPETS} <= {None, "envtest", "cluster"}


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.name for s in SNIPPETS])
def test_snippet_runs(snippet: Snippet, cluster: InMemoryApiServer) -> None:
    if snippet.requires is not None:
        pytest.skip(f"requires: {snippet.requires}")
    root, ours = logging.getLogger(), logging.getLogger("kdispatch")
    handlers, level = list(root.handlers), ours.level
    try:
        run(snippet)
    finally:  # a snippet may configure logging: leave the process as it was
        root.handlers[:] = handlers
        ours.setLevel(level)
        logger.disable("kdispatch")


def _default(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def test_configuration_page_documents_every_field() -> None:
    """Every field of the config tree has a row in its class's section, with its default and
    its environment variable."""
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    sections = {m.group(1): m.end() for m in re.finditer(r"^## `(\w+)`", page, re.M)}
    top = DispatcherConfig()
    trees: list[tuple[str, Any]] = [("", top)]
    trees += [
        (f.name, getattr(top, f.name)) for f in fields(top) if is_dataclass(getattr(top, f.name))
    ]
    for section, config in trees:
        start = sections[type(config).__name__]
        text = page[start : page.find("\n## ", start)]
        rows = {line.split("|")[1].strip(): line.split("|") for line in text.splitlines()
                if line.startswith("| `")}  # fmt: skip
        for f in fields(config):
            if is_dataclass(getattr(config, f.name)):
                continue
            row = rows[f"`{f.name}`"]
            assert row[2].strip() == f"`{_default(getattr(config, f.name))}`", f.name
            variable = "_".join(p for p in ("KDISPATCH", section.upper(), f.name.upper()) if p)
            assert row[3].strip() == f"`{variable}`", f.name
    named = set(re.findall(r"`(KDISPATCH_[A-Z_]+)`", page))
    assert named == set(env_variables(DispatcherConfig))  # what from_env reads, no more


def test_a_requires_line_names_what_a_snippet_needs() -> None:
    page = ROOT / "README.md"
    assert Snippet(page, 0, "# requires: envtest\nimport kdispatch\n").requires == "envtest"
    assert Snippet(page, 0, "#requires:cluster\n").requires == "cluster"
    assert Snippet(page, 0, "import kdispatch  # requires: cluster\n").requires is None


def test_snippets_use_only_the_public_face() -> None:
    """``kdispatch``, ``kdispatch.testing`` and its real control plane
    ``kdispatch.testing.envtest``; deeper modules are internals."""
    imports = re.compile(r"^\s*(?:from|import)\s+(kdispatch[\w.]*)", re.M)
    used = {(s.name, m) for s in SNIPPETS for m in imports.findall(s.code)}
    public = {"kdispatch", "kdispatch.testing", "kdispatch.testing.envtest"}
    assert used and {m for _, m in used} <= public, used


def test_the_events_read_back_runs_on_every_backend() -> None:
    """docs/events.md reads its Event back with ``server.list("Event").items``: the same line
    reads it through a ``KubernetesBackend`` (both backends' ``list`` return an ObjectList)."""
    snippet = block("docs/events.md", "# Events")
    [readback] = [line for line in snippet.code.splitlines() if ".list(" in line]
    memory = run(snippet)
    with (
        ApiServerHTTP(memory["server"]) as http,
        KubernetesBackend.for_url(http.url) as backend,
    ):
        real = run(Snippet(snippet.path, snippet.offset, readback), server=backend)
    assert real["event"]["metadata"]["uid"] == memory["event"]["metadata"]["uid"]
    assert real["event"]["series"] == memory["event"]["series"]
    assert real["event"]["series"]["count"] == 3


CLIENTS = snippets(ROOT / "docs" / "clients.md")


@pytest.mark.parametrize("snippet", CLIENTS, ids=[s.name for s in CLIENTS])
def test_each_client_on_the_clients_page_gets_the_pod_bound(
    snippet: Snippet, cluster: InMemoryApiServer
) -> None:
    """Every snippet of docs/clients.md reads the pending pod with its client and binds it."""
    run(snippet)
    pod = cluster.get_object("Pod", "default", "web-0")
    assert pod is not None and pod["spec"]["nodeName"] == "node-1"
    assert [r.name for r in cluster.request_log if r.op == "bind"] == ["web-0"]
