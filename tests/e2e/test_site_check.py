"""The documentation site's check (tests/site_check.py): that it finds what it must, on small
pages shaped like mkdocstrings' output, and that the real site passes it.

CI runs the check on the site it builds (``.ci/run``, after ``mkdocs build --strict``); the
last test here builds the site itself when mkdocs is installed (``pip install -e '.[docs]'``)
and is skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from kdispatch import Dispatcher
from kdispatch.testing import Latency, make_pod
from tests.site_check import check_site, read, reference_problems, text_problems
from tests.subprocesses import run_command

LATENCY = "Latency(fixed: float = 0.0, per_op: Mapping[str, float] = dict(), jitter: float = 0.0)"


def _entry(path: str, kind: str, signature: str, children: str = "") -> str:
    short = path.rsplit(".", 1)[1]
    sig = f'<div class="doc-signature highlight"><pre><code>{signature}</code></pre></div>'
    return (
        f'<div class="doc doc-object doc-{kind}">'
        f'<h3 id="{path}" class="doc doc-heading"><span>{short}</span>'
        f'<a href="#{path}" class="headerlink" title="Permanent link">&para;</a></h3>'
        f'{sig if signature else ""}<div class="doc doc-contents"><p>About {short}.</p>'
        f'<div class="doc doc-children">{children}</div></div></div>'
    )


def _page(*entries: str) -> str:
    script = "<script>var x = 'kdispatch.actors.x';</script>"  # not shown: not checked
    return f"<html><body>{script}{''.join(entries)}</body></html>"


NAMES: dict[str, object] = {"kdispatch.testing.Latency": Latency, "kdispatch.make_pod": make_pod}


def _problems(html: str, names: dict[str, object] = NAMES) -> list[str]:
    return reference_problems(read(html), names)


def test_a_complete_reference_passes() -> None:
    html = _page(
        _entry("kdispatch.testing.Latency", "class", LATENCY),
        _entry("kdispatch.make_pod", "function", "make_pod(name: str) -&gt; dict"),
    )
    assert _problems(html) == []


def test_a_missing_entry_or_signature_is_found() -> None:
    html = _page(_entry("kdispatch.testing.Latency", "class", ""))
    assert _problems(html) == [
        "kdispatch.testing.Latency: no constructor signature",
        "kdispatch.make_pod: not in the reference",
    ]


def test_a_dataclass_field_without_type_or_default_is_found() -> None:
    signature = "Latency(fixed: float = 0.0, per_op = dict(), jitter: float)"
    html = _page(
        _entry("kdispatch.testing.Latency", "class", signature),
        _entry("kdispatch.make_pod", "function", "make_pod(name: str)"),
    )
    assert _problems(html) == [
        "kdispatch.testing.Latency: field per_op shown without its type",
        "kdispatch.testing.Latency: field jitter shown without its default",
    ]


def test_a_method_without_signature_and_a_private_type_are_found() -> None:
    method = _entry("kdispatch.Dispatcher.view", "function", "")
    private = _entry("kdispatch.Dispatcher.stats", "function", "stats(x: _Route) -&gt; dict")
    html = _page(_entry("kdispatch.Dispatcher", "class", "Dispatcher(backend)", method + private))
    assert _problems(html, {"kdispatch.Dispatcher": Dispatcher}) == [
        "kdispatch.Dispatcher.view: no signature",
        "kdispatch.Dispatcher.stats: its signature names the private _Route",
    ]


def test_an_internal_hook_in_the_reference_is_found() -> None:
    hook = _entry("kdispatch.Dispatcher.submit_step", "function", "submit_step(call)")
    html = _page(_entry("kdispatch.Dispatcher", "class", "Dispatcher(backend)", hook))
    assert _problems(html, {"kdispatch.Dispatcher": Dispatcher}) == [
        "kdispatch.Dispatcher.submit_step: an internal hook in the reference"
    ]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("see <code>kdispatch.actors.engine.holds</code>", "the internal module kdispatch.actors"),
        ("<span>kdispatch</span><span>.</span><span>adapters</span>", "the internal module"),
        ("from <code>kdispatch.testing.memory_faults</code>", "kdispatch.testing.memory_faults"),
        ('<span title="kdispatch.actors.model.calls.Unset">Unset</span>', "kdispatch.actors"),
        ("raises <code>_HttpError</code>", "the private type _HttpError"),
    ],
)
def test_a_page_naming_an_internal_is_found(text: str, named: str) -> None:
    problems = text_problems("page.html", read(_page(f"<p>{text}</p>")))
    assert len(problems) == 1 and named in problems[0], problems


def test_public_modules_and_script_text_pass() -> None:
    text = (
        "<p><code>kdispatch.testing.envtest</code>, <code>kdispatch.testing.waiting</code>, "
        "<code>kdispatch.testing</code>, <code>kdispatch.logs</code>, <code>_private()</code></p>"
    )
    assert text_problems("page.html", read(_page(text))) == []


def test_a_folder_that_is_no_site_is_a_problem(tmp_path: Path) -> None:
    assert check_site(tmp_path) == [f"{tmp_path / 'api/index.html'}: missing (is {tmp_path} a "
                                    "built site?)"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason="needs the docs extra (pip install .[docs])"
)
def test_the_built_site_passes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = run_command(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], env=env, timeout=280
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert check_site(site) == []
