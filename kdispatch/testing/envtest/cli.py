"""The command line: ``python -m kdispatch.testing.envtest {build,start}``.

``build [--with-scheduler]``
    Build etcd and kube-apiserver (and kube-scheduler) from the Go module proxy into the cache
    unless current there; print the cache folder (usable as ``KUBEBUILDER_ASSETS``).
``start [--write-kubeconfig PATH] [--with-scheduler] [--workdir DIR] [--timeout S]
[--feature-gates NAME=true|false,...] [--runtime-config GROUP/VERSION=true|false,...]``
    Start a control plane, print the apiserver's URL on stdout once a first pod can be created,
    then run until SIGTERM, SIGINT or SIGHUP (or until a component exits), and stop everything
    it started. ``--feature-gates`` go to kube-apiserver and kube-scheduler,
    ``--runtime-config`` to kube-apiserver (both repeatable, comma-separated as the components
    take them; see :class:`~kdispatch.testing.envtest.ControlPlane`). Exit status: 0 after a
    signal, 1 when a component failed (or the workdir or kubeconfig cannot be written, or the
    workdir holds an earlier control plane's files), 2 when there are no binaries or the command
    line is wrong (a malformed gate or runtime config, or a timeout that is not > 0, included).

Runs on the main thread (it installs signal handlers).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from .binaries import find_binaries
from .build import build_binaries
from .control_plane import ControlPlane
from .errors import BinariesNotFound, ControlPlaneOptionError, EnvtestError
from .flags import check_feature_gates, check_runtime_config, parse_assignments

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Stop(BaseException):
    """Raised from a signal handler on the main thread to unwind into ``stop``."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kdispatch.testing.envtest",
        description="A real etcd + kube-apiserver for tests, built from the Go module proxy.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the binaries into the cache; print the folder")
    b.add_argument("--with-scheduler", action="store_true", help="also build kube-scheduler")
    b.add_argument("--quiet", action="store_true", help="do not echo Go's output")
    s = sub.add_parser("start", help="start a control plane until SIGTERM/SIGINT")
    s.add_argument("--write-kubeconfig", type=Path, metavar="PATH", help="admin kubeconfig")
    s.add_argument("--with-scheduler", action="store_true", help="also run kube-scheduler")
    s.add_argument("--workdir", type=Path, help="keep certificates, data and logs here")
    s.add_argument("--timeout", type=float, default=120.0, help="start timeout in seconds")
    s.add_argument(
        "--feature-gates",
        action="append",
        default=[],
        metavar="NAME=BOOL,...",
        help="feature gates of kube-apiserver and kube-scheduler, e.g. GenericWorkload=true",
    )
    s.add_argument(
        "--runtime-config",
        action="append",
        default=[],
        metavar="GROUP/VERSION=BOOL,...",
        help="APIs kube-apiserver serves, e.g. scheduling.k8s.io/v1beta1=true",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "start":
        if not args.timeout > 0:  # nan too
            parser.error(f"--timeout must be a number of seconds > 0, got {args.timeout}")
        try:
            args.gates = check_feature_gates(
                parse_assignments(args.feature_gates, "--feature-gates")
            )
            args.apis = check_runtime_config(
                parse_assignments(args.runtime_config, "--runtime-config")
            )
        except ControlPlaneOptionError as exc:
            parser.error(str(exc))  # exits 2 with the usage
    try:
        if args.command == "build":
            print(
                build_binaries(
                    scheduler=args.with_scheduler, echo=None if args.quiet else sys.stderr
                )
            )
            return 0
        return _start(args)
    except BinariesNotFound as exc:
        print(f"envtest: {exc}", file=sys.stderr)
        return 2
    except EnvtestError as exc:
        print(f"envtest: {exc}", file=sys.stderr)
        return 1


def _start(args: argparse.Namespace) -> int:
    binaries = find_binaries(scheduler=args.with_scheduler)  # before any process starts

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        for sig in STOP_SIGNALS:  # a second signal must not interrupt the stopping
            signal.signal(sig, _ignore)
        raise _Stop(signal.Signals(signum).name, 0)

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    plane = ControlPlane(
        binaries,
        workdir=args.workdir,
        scheduler=args.with_scheduler,
        feature_gates=args.gates,
        runtime_config=args.apis,
    )
    try:
        plane.start(timeout=args.timeout)
        kubeconfig = plane.kubeconfig_path
        if args.write_kubeconfig is not None:
            try:
                kubeconfig = plane.write_kubeconfig(args.write_kubeconfig)
            except OSError as exc:
                raise EnvtestError(
                    f"cannot write --write-kubeconfig {args.write_kubeconfig}: {exc}"
                ) from exc
        print(plane.url, flush=True)
        names = ", ".join(f"{p.name} (pid {p.pid})" for p in plane.processes)
        print(
            f"envtest: running {names}; KUBECONFIG={kubeconfig}; stop with SIGTERM or Ctrl-C",
            file=sys.stderr,
            flush=True,
        )
        _wait(plane)
    except _Stop as stop:
        print(f"envtest: {stop.reason}: stopping", file=sys.stderr, flush=True)
        return stop.status
    finally:
        plane.stop()
    return 0  # pragma: no cover - _wait only leaves by _Stop


def _wait(plane: ControlPlane) -> None:
    """Block until a signal: a stop signal, or SIGCHLD from a component that exited."""

    def on_child(_signum: int, _frame: FrameType | None) -> None:
        for proc in plane.processes:
            if not proc.running():
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                code = proc.popen.returncode
                raise _Stop(f"{proc.name} exited with {code}; its log ends:\n{proc.tail()}", 1)

    signal.signal(signal.SIGCHLD, on_child)
    try:
        on_child(signal.SIGCHLD, None)  # one may have exited before the handler was set
        while True:
            signal.pause()
    finally:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """A handler that does nothing (unlike SIG_IGN, not inherited by children)."""
