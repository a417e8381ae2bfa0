"""The pinned Go wrapper modules the binaries are built from, shipped as package data.

``modules/kube-apiserver`` pins ``k8s.io/kubernetes`` (kube-apiserver and kube-scheduler are
both built from it) and ``modules/etcd`` pins ``go.etcd.io/etcd/server/v3``. Their ``go.mod``
and ``go.sum`` are the one source of the versions. Stdlib only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

MODULES_DIR = Path(__file__).resolve().parent / "modules"


@dataclass(frozen=True)
class PinnedModule:
    """A wrapper module: its folder ``root/name`` and the module it pins."""

    name: str
    pins: str
    root: Path = MODULES_DIR

    @property
    def dir(self) -> Path:
        return self.root / self.name

    @property
    def version(self) -> str:
        """The version of :attr:`pins` required by the wrapper's ``go.mod``."""
        for line in (self.dir / "go.mod").read_text().splitlines():
            parts = line.split("//", 1)[0].split()
            if parts[:1] == ["require"]:  # the one-line form; a block's lines have no keyword
                parts = parts[1:]
            if len(parts) >= 2 and parts[0] == self.pins and parts[1].startswith("v"):
                return parts[1]
        raise LookupError(f"{self.dir / 'go.mod'} does not pin {self.pins}")

    def digest(self, go_env: str) -> str:
        """sha256 of what decides the build: ``go.mod`` without its comments, ``go.sum`` and
        ``go_env`` (the Go version, OS and architecture). Nothing else: editing a comment or
        this package's Python code never makes a built binary stale."""
        h = hashlib.sha256()
        for raw in (self.dir / "go.mod").read_text().splitlines():
            line = raw.split("//", 1)[0].strip()
            if line:
                h.update(line.encode() + b"\n")
        h.update(b"\0")
        h.update((self.dir / "go.sum").read_bytes())
        h.update(b"\0")
        h.update(go_env.encode())
        return h.hexdigest()


KUBERNETES = PinnedModule("kube-apiserver", "k8s.io/kubernetes")
ETCD = PinnedModule("etcd", "go.etcd.io/etcd/server/v3")


@dataclass(frozen=True)
class Component:
    """A binary: its file name, the module that pins it and the package ``go build`` builds."""

    name: str
    module: PinnedModule
    package: str
    kubernetes: bool  # gets the k8s version stamped in with -ldflags -X


ETCD_SERVER = Component("etcd", ETCD, "go.etcd.io/etcd/server/v3", kubernetes=False)
KUBE_APISERVER = Component(
    "kube-apiserver", KUBERNETES, "k8s.io/kubernetes/cmd/kube-apiserver", kubernetes=True
)
KUBE_SCHEDULER = Component(
    "kube-scheduler", KUBERNETES, "k8s.io/kubernetes/cmd/kube-scheduler", kubernetes=True
)
