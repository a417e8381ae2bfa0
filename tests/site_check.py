"""The built documentation site, checked: a reference a user can program from.

* Every name in the ``__all__`` of ``kdispatch``, ``kdispatch.testing`` and
  ``kdispatch.testing.envtest`` (and the other public modules of :data:`PUBLIC`) has an entry in
  the API reference with a rendered signature: a function's parameters, a class's constructor
  (a dataclass's fields, each with its type and, where it has one, its default), a constant's
  value or type. A protocol, an abstract base or an enum is not built by calling it: its
  methods carry the signatures (every rendered function shows one).
* The internal hooks of :data:`HIDDEN` are not in the reference.
* No page names a private type (``_Route``; in a signature, any ``_name``) or an internal
  module (``kdispatch.actors...``, ``kdispatch.adapters...``, a module of ``kdispatch.testing``
  other than the public ones).

``python -m tests.site_check SITE`` checks a site built by ``mkdocs build`` (CI runs it after
``mkdocs build --strict``); it prints each problem and exits 1 when there is one.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

PUBLIC: dict[str, list[str] | None] = {
    "kdispatch": None,  # None: the module's __all__
    "kdispatch.logs": ["NAME", "to_stdlib"],
    "kdispatch.testing": None,
    "kdispatch.testing.waiting": None,
    "kdispatch.testing.envtest": None,
    "kdispatch.testing.envtest.pytest_plugin": ["envtest_control_plane", "envtest_kubeconfig"],
}
"""The public modules and the names the reference documents for each."""

HIDDEN = {
    "kdispatch.Dispatcher": [
        "submit_step",
        "refuse_step",
        "withdraw",
        "group_cancelled",
        "group_resolved",
    ],
    "kdispatch.CallGroup": ["cancel_for", "refusal"],
    "kdispatch.CallFuture": ["set_result", "set_exception"],
}
"""Internal hooks of public classes, left out of the reference (mkdocs.yml ``filters``)."""

REFERENCE = "api/index.html"

_INTERNAL_MODULE = re.compile(
    r"\bkdispatch\.(?:actors|adapters)\b"
    r"|\bkdispatch\.testing\.(?!envtest|waiting)[a-z_]+"
    r"|\bkdispatch\.testing\.envtest\.[a-z_]+"
)
_PRIVATE_TYPE = re.compile(r"(?<![\w.])_[A-Z]\w*")
_PRIVATE_NAME = re.compile(r"(?<![\w.'\"])_\w+")


@dataclass
class Heading:
    """A reference entry: its anchor, what it documents and its signature (``""``: none)."""

    id: str
    kind: str  # class, function, attribute, module, or "" for a page heading
    signature: str = ""


@dataclass
class Page:
    """What a reader sees on one page."""

    text: list[str] = field(default_factory=list)
    headings: list[Heading] = field(default_factory=list)


class _Reader(HTMLParser):
    """Collects the visible text (and tooltips), the headings and their signatures."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._kinds: list[str | None] = []  # per open <div>: the doc-object kind it opens
        self._skip = 0  # inside <script>/<style>
        self._signature: list[str] | None = None
        self._depth = 0  # open <div>s inside the signature block

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        classes = (attr.get("class") or "").split()
        if attr.get("title"):
            self.page.text.append(attr["title"] or "")
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "div":
            if self._signature is not None:
                self._depth += 1
            kinds = [c[4:] for c in classes if c.startswith("doc-") and c != "doc-object"]
            kind = kinds[0] if kinds else None
            self._kinds.append(kind if "doc-object" in classes else None)
            if "doc-signature" in classes and self._signature is None:
                self._signature, self._depth = [], 1
        elif re.fullmatch(r"h[1-6]", tag) and attr.get("id"):
            kind = next((k for k in reversed(self._kinds) if k), "")
            self.page.headings.append(Heading(attr["id"] or "", kind))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag == "div":
            if self._kinds:
                self._kinds.pop()
            if self._signature is not None:
                self._depth -= 1
                if self._depth == 0:
                    text = "".join(self._signature)
                    if self.page.headings and not self.page.headings[-1].signature:
                        self.page.headings[-1].signature = text
                    self._signature = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.page.text.append(data)
        if self._signature is not None:
            self._signature.append(data)


def read(html: str) -> Page:
    """The text, headings and signatures of one built page."""
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return reader.page


def public_names() -> dict[str, object]:
    """``module.name`` → object, for every name the reference must document."""
    names: dict[str, object] = {}
    for module_name, listed in PUBLIC.items():
        module = importlib.import_module(module_name)
        for name in listed if listed is not None else module.__all__:
            names[f"{module_name}.{name}"] = getattr(module, name)
    return names


def _built_by_calling(obj: type) -> bool:
    protocol = bool(getattr(obj, "_is_protocol", False))
    return not (protocol or inspect.isabstract(obj) or issubclass(obj, enum.Enum))


def _parameters(signature: str) -> dict[str, str]:
    """``name`` → its whole entry (``name: type = default``) of a rendered call signature."""
    start = signature.find("(") + 1
    end = len(signature)
    commas: list[int] = []  # where the top-level commas stand
    depth = 0
    for at, ch in enumerate(signature[start:], start):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                end = at  # the closing parenthesis
                break
            depth -= 1
        elif ch == "," and depth == 0:
            commas.append(at)
    bounds = zip([start - 1, *commas], [*commas, end], strict=True)
    entries = [signature[left + 1 : right] for left, right in bounds]
    found = {}
    for entry in (e.strip() for e in entries):
        match = re.match(r"\**(\w+)", entry)
        if match:
            found[match.group(1)] = entry
    return found


def _dataclass_problems(path: str, cls: type, signature: str) -> list[str]:
    problems = []
    params = _parameters(signature)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        entry = params.get(f.name, "")
        if ":" not in entry:
            problems.append(f"{path}: field {f.name} shown without its type")
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if has_default and "=" not in entry:
            problems.append(f"{path}: field {f.name} shown without its default")
    return problems


def reference_problems(page: Page, names: dict[str, object]) -> list[str]:
    """What the API reference page lacks or shows that it must not."""
    problems: list[str] = []
    by_id = {h.id: h for h in page.headings}
    for path, obj in names.items():
        heading = by_id.get(path)
        short = path.rsplit(".", 1)[1]
        if heading is None:
            problems.append(f"{path}: not in the reference")
        elif inspect.isclass(obj):
            if not _built_by_calling(obj):
                continue  # its methods carry the signatures (checked below)
            if f"{short}(" not in heading.signature:
                problems.append(f"{path}: no constructor signature")
            elif dataclasses.is_dataclass(obj):
                problems.extend(_dataclass_problems(path, obj, heading.signature))
        elif inspect.isroutine(obj):
            if f"{short}(" not in heading.signature:
                problems.append(f"{path}: no signature")
        elif short not in heading.signature:
            problems.append(f"{path}: no signature")
    for heading in page.headings:
        if heading.kind == "function" and "(" not in heading.signature:
            problems.append(f"{heading.id}: no signature")
        for name in _PRIVATE_NAME.findall(heading.signature):
            problems.append(f"{heading.id}: its signature names the private {name}")
    for owner, hooks in HIDDEN.items():
        problems += [f"{owner}.{hook}: an internal hook in the reference"
                     for hook in hooks if f"{owner}.{hook}" in by_id]  # fmt: skip
    return problems


def text_problems(where: str, page: Page) -> list[str]:
    """Private types and internal modules named in what a reader sees."""
    text = "".join(page.text)
    found = sorted(set(_INTERNAL_MODULE.findall(text)))
    problems = [f"{where}: names the internal module {m}" for m in found]
    problems += [f"{where}: names the private type {t}"
                 for t in sorted(set(_PRIVATE_TYPE.findall(text)))]  # fmt: skip
    return problems


def check_site(site: Path) -> list[str]:
    """Every problem of the site built into ``site``."""
    reference = site / REFERENCE
    if not reference.is_file():
        return [f"{reference}: missing (is {site} a built site?)"]
    problems = reference_problems(read(reference.read_text(encoding="utf-8")), public_names())
    for page in sorted(site.rglob("*.html")):
        where = str(page.relative_to(site))
        problems += text_problems(where, read(page.read_text(encoding="utf-8")))
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.site_check SITE", file=sys.stderr)
        return 2
    problems = check_site(Path(argv[0]))
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problems in the documentation site {argv[0]}", file=sys.stderr)
        return 1
    print(f"documentation site {argv[0]}: the reference is complete", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
