"""Where the binaries are: ``KUBEBUILDER_ASSETS`` first, then the project's cache.

``KUBEBUILDER_ASSETS`` is controller-runtime envtest's convention: a folder holding
``kube-apiserver`` and ``etcd`` (and ``kube-scheduler`` when asked for). The cache is where
``python -m kdispatch.testing.envtest build`` puts them:
``$KDISPATCH_K8S_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/kdispatch/k8s-<version>``.
Stdlib only; runs on the caller's thread.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import BUILD_HINT, BinariesNotFound
from .modules import KUBERNETES

ASSETS_ENV = "KUBEBUILDER_ASSETS"
"""The variable naming a folder of binaries, looked in first (envtest's convention)."""
CACHE_ENV = "KDISPATCH_K8S_CACHE"
"""The variable that overrides :func:`cache_dir`."""


@dataclass(frozen=True)
class Binaries:
    """The executables a :class:`~kdispatch.testing.envtest.ControlPlane` runs."""

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path | None = None

    @property
    def dir(self) -> Path:
        """The folder they were found in (what ``KUBEBUILDER_ASSETS`` could be set to)."""
        return self.kube_apiserver.parent


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The project's cache folder for the pinned Kubernetes version (it may not exist)."""
    env = os.environ if env is None else env
    override = env.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kdispatch" / f"k8s-{KUBERNETES.version}"


def _names(scheduler: bool) -> tuple[str, ...]:
    return ("etcd", "kube-apiserver", "kube-scheduler") if scheduler else ("etcd", "kube-apiserver")


def _missing(folder: Path, names: tuple[str, ...]) -> list[str]:
    return [n for n in names if not os.access(folder / n, os.X_OK) or not (folder / n).is_file()]


def find_binaries(*, scheduler: bool = False, env: Mapping[str, str] | None = None) -> Binaries:
    """The first of ``$KUBEBUILDER_ASSETS`` and :func:`cache_dir` that holds every binary
    needed (``kube-scheduler`` too when ``scheduler``), or :class:`BinariesNotFound` naming
    what each place lacks and how to build them."""
    env = os.environ if env is None else env
    names = _names(scheduler)
    places: list[tuple[str, Path]] = []
    assets = env.get(ASSETS_ENV)
    if assets:
        places.append((f"${ASSETS_ENV}", Path(assets).expanduser()))
    places.append(("the cache", cache_dir(env)))
    looked: list[str] = []
    for label, folder in places:
        missing = _missing(folder, names)
        if not missing:
            return Binaries(
                etcd=folder / "etcd",
                kube_apiserver=folder / "kube-apiserver",
                kube_scheduler=folder / "kube-scheduler" if scheduler else None,
            )
        looked.append(f"{label} {folder} lacks {', '.join(missing)}")
    build = BUILD_HINT + (" --with-scheduler" if scheduler else "")
    raise BinariesNotFound(
        "no kube-apiserver/etcd binaries to run: "
        + "; ".join(looked)
        + f". Build them (Go >= 1.26, from the Go module proxy) with `{build}`, "
        + f"or point ${ASSETS_ENV} at a folder that holds them."
    )
