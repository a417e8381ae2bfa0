"""The README is the face a newcomer meets: short, its Quickstart the command CI runs, and its
programs doing what they say, checked on the server. Every snippet of the README and the docs
pages runs in tests/e2e/test_docs_snippets.py; here the ones whose effect a reader relies on are
run again and their results checked, and the kopf recipe's handlers are called as kopf calls
them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import cast

import kopf
import pytest

from kdispatch import Outcome
from kdispatch.testing import ApiServerHTTP, InMemoryApiServer, make_node, make_pod
from tests.snippets import ROOT, backends_reach, block, run

README = ROOT / "README.md"
QUICKSTART_TEST = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "
    ".venv/bin/python -m pytest -q -p no:cacheprovider"
)
QUICKSTART_MAIN_JOB = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "
    ".venv/bin/python -m examples.scheduler --nodes 500 --pods 5000"
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def http() -> Iterator[ApiServerHTTP]:
    with ApiServerHTTP(InMemoryApiServer(), watch_poll=0.02) as srv:
        yield srv


@pytest.fixture
def kubeconfig_points_at(
    http: ApiServerHTTP, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ApiServerHTTP]:
    """``KubernetesBackend.from_kubeconfig()`` reaches ``http`` (the kubeconfig's cluster)."""
    with backends_reach(http.url, monkeypatch, "from_kubeconfig"):
        yield http


def test_readme_is_short_and_its_quickstart_is_what_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 12_000
    assert f"\n{QUICKSTART_MAIN_JOB}\n" in text
    assert f"\n{QUICKSTART_TEST}\n" in text
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert QUICKSTART_TEST in ci  # the very line, not a variant


def test_readme_links_only_to_files_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    targets = {link.split("#")[0] for link in links if "://" not in link}
    assert targets and all((ROOT / t).exists() for t in targets), targets


def test_hello_world_binds_on_the_server(capsys: pytest.CaptureFixture[str]) -> None:
    scope = run(block("README.md", "## Hello world"))
    server: InMemoryApiServer = scope["apiserver"]
    stored = server.get_object("Pod", "default", "web-0")
    assert stored is not None and stored["spec"]["nodeName"] == "node-1"
    assert ("bind", "ok") in [(r.op, r.outcome) for r in server.request_log]
    assert "('bind', 'ok')" in capsys.readouterr().out


def test_real_cluster_program_binds_the_pods_of_its_scheduler(
    kubeconfig_points_at: ApiServerHTTP,
) -> None:
    server = kubeconfig_points_at.server
    server.create(make_node("node-1", cpu_m=4000, mem_mi=8192))
    mine = make_pod("web-0")
    mine["spec"]["schedulerName"] = "my-scheduler"
    server.create(mine)
    server.create(make_pod("other"))  # another scheduler's pod: not touched
    scope = run(block("README.md", "## Against a real cluster"))
    assert [f.result(timeout=0) for f in scope["futures"]] == [Outcome.SUCCESS]
    bound = server.get_object("Pod", "default", "web-0")
    assert bound is not None and bound["spec"]["nodeName"] == "node-1"
    other = server.get_object("Pod", "default", "other")
    assert other is not None and "nodeName" not in other["spec"]


def test_kopf_recipe(kubeconfig_points_at: ApiServerHTTP) -> None:
    """The recipe's handlers, called as kopf calls them, bind the pod through the dispatcher."""
    server = kubeconfig_points_at.server
    scope = run(block("docs/asyncio.md", "## A kopf recipe"))
    raw = make_pod("web-0")
    raw["spec"]["schedulerName"] = "my-scheduler"
    pod = server.create(raw)
    gone = server.create(make_pod("gone"))
    memo = kopf.Memo()

    async def operator() -> None:
        await scope["start_dispatcher"](memo=memo)
        body = kopf.Body(cast("kopf.RawBody", pod))
        await scope["on_pod"](event={"type": None, "object": pod}, body=body, memo=memo)
        gone_body = kopf.Body(cast("kopf.RawBody", gone))
        await scope["on_pod"](event={"type": "DELETED"}, body=gone_body, memo=memo)
        await scope["stop_dispatcher"](memo=memo)

    asyncio.run(operator())
    stored = server.get_object("Pod", "default", "web-0")
    assert stored is not None and stored["spec"]["nodeName"] == "node-1"
    assert memo.dispatcher.outstanding == 0


def test_custom_call_type_sends_one_merge_patch_over_http() -> None:
    scope = run(block("docs/call-types.md", "## Writing one"))
    server: InMemoryApiServer = scope["server"]
    patches = [r for r in server.request_log if r.op == "patch_status"]
    assert [(r.kind, r.outcome) for r in patches] == [("QuotaClaim", "ok")]


def test_eviction_is_refused_by_the_budget_on_the_server() -> None:
    scope = run(block("docs/call-types.md", "## Eviction"))
    server: InMemoryApiServer = scope["server"]
    assert {r.outcome for r in server.request_log if r.op == "evict"} == {"DisruptionBudget"}


def test_informer_errors_are_counted() -> None:
    scope = run(block("docs/informers.md", "## Errors are visible"))
    count = scope["registry"].get_sample_value(
        "kdispatch_informer_errors_total",
        {"informer": "deploys", "kind": "Deployment", "reason": "Unauthorized"},
    )
    assert count is not None and count >= 1
