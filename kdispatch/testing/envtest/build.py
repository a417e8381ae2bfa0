"""Build the binaries from the Go module proxy into the cache, once.

Everything comes through ``go`` (``GOPROXY``), pinned by the wrapper modules in
:mod:`~kdispatch.testing.envtest.modules`; nothing from release download sites. A binary is
current when the cache's ``stamp.json`` records, for it, the digest of its module's files and
of the Go version (:meth:`PinnedModule.digest`); a second :func:`build` then takes well under a
second. One build at a time per cache folder: an exclusive ``flock`` on ``<cache>/.lock``.
Runs on the caller's thread and blocks for the build (10-20 minutes on 2 cores the first time).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from .binaries import cache_dir
from .errors import BuildError
from .modules import ETCD_SERVER, KUBE_APISERVER, KUBE_SCHEDULER, KUBERNETES, Component

STAMP = "stamp.json"


def components(*, scheduler: bool = False) -> tuple[Component, ...]:
    """What :func:`build` builds: etcd and kube-apiserver, and kube-scheduler if asked."""
    base = (ETCD_SERVER, KUBE_APISERVER)
    return (*base, KUBE_SCHEDULER) if scheduler else base


def go_binary() -> str:
    """The ``go`` on ``PATH``, or :class:`BuildError`."""
    go = shutil.which("go")
    if go is None:
        raise BuildError("'go' not found on PATH: Go >= 1.26 is needed to build the binaries")
    return go


def go_env(go: str) -> str:
    """``go env GOVERSION GOOS GOARCH``: the part of the stamp that is not the modules."""
    done = subprocess.run(
        [go, "env", "GOVERSION", "GOOS", "GOARCH"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BuildError(f"`go env` failed: {done.stderr.strip()}")
    return done.stdout


def read_stamp(cache: Path) -> dict[str, str]:
    """The digests recorded in ``<cache>/stamp.json`` (empty when absent or unreadable)."""
    try:
        data = json.loads((cache / STAMP).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def write_stamp(cache: Path, stamp: dict[str, str]) -> None:
    tmp = cache / (STAMP + ".tmp")
    tmp.write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
    tmp.replace(cache / STAMP)


def is_current(cache: Path, component: Component, env: str, stamp: dict[str, str]) -> bool:
    exe = cache / component.name
    return exe.is_file() and stamp.get(component.name) == component.module.digest(env)


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    with (cache / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _ldflags(component: Component) -> str:
    flags = ["-s", "-w"]
    if component.kubernetes:
        version = KUBERNETES.version
        major, minor = version.removeprefix("v").split(".")[:2]
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {pkg}.gitVersion={version}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
                f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
            ]
    return " ".join(flags)


def _go_build(go: str, component: Component, target: Path, echo: TextIO | None) -> None:
    """``go build`` ``component`` into ``target`` (via a temporary file, so a binary that
    exists is always whole). Go's output is copied to ``echo``."""
    tmp = target.with_name(target.name + ".tmp")
    args = [go, "build", "-mod=readonly", "-trimpath", "-ldflags", _ldflags(component)]
    args += ["-o", str(tmp), component.package]
    env = {**os.environ, "CGO_ENABLED": "0"}
    tail: collections.deque[str] = collections.deque(maxlen=30)
    with subprocess.Popen(
        args,
        cwd=component.module.dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line)
            if echo is not None:
                echo.write(line)
    if proc.returncode != 0:
        raise BuildError(
            f"go build {component.package} failed ({proc.returncode}):\n" + "".join(tail)
        )
    tmp.replace(target)


def build_binaries(
    *, scheduler: bool = False, cache: Path | None = None, echo: TextIO | None = sys.stderr
) -> Path:
    """Build what is not current in ``cache`` (default :func:`cache_dir`) and return the
    folder, which then holds ``etcd`` and ``kube-apiserver`` (and ``kube-scheduler`` when
    ``scheduler``). Progress and Go's output go to ``echo``. :class:`BuildError` on failure;
    binaries that were current stay untouched."""
    go = go_binary()
    cache = cache_dir() if cache is None else cache
    cache.mkdir(parents=True, exist_ok=True)
    env = go_env(go)
    with _locked(cache):
        stamp = read_stamp(cache)
        todo = [c for c in components(scheduler=scheduler) if not is_current(cache, c, env, stamp)]
        for component in todo:
            _say(echo, f"building {component.name} {component.module.version} into {cache}")
            began = time.monotonic()
            stamp.pop(component.name, None)
            write_stamp(cache, stamp)
            _go_build(go, component, cache / component.name, echo)
            stamp[component.name] = component.module.digest(env)
            write_stamp(cache, stamp)
            size = (cache / component.name).stat().st_size / 2**20
            _say(
                echo, f"{component.name} built in {time.monotonic() - began:.0f} s ({size:.0f} MiB)"
            )
    return cache


def _say(echo: TextIO | None, text: str) -> None:
    if echo is not None:
        echo.write(f"envtest: {text}\n")
        echo.flush()
