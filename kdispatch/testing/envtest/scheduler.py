"""kube-scheduler as a child process, talking to the control plane's apiserver as the
``system:kube-scheduler`` user (bound to its role by the apiserver's bootstrap RBAC policy).
Runs on the caller's thread."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from .processes import Process, free_port

SCHEDULER_USER = "system:kube-scheduler"


class KubeScheduler:
    """One kube-scheduler without leader election, serving ``/readyz`` on 127.0.0.1."""

    def __init__(
        self, binary: Path, folder: Path, kubeconfig: Path, extra_args: Sequence[str] = ()
    ) -> None:
        self.binary = binary
        self.folder = folder
        self.kubeconfig = kubeconfig
        self.extra_args = tuple(extra_args)
        self.process: Process | None = None

    def args(self, port: int) -> list[str]:
        """Its command line, serving on ``port``; ``extra_args`` last."""
        return [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.folder / 'scheduler-certs'}",
            "--leader-elect=false",
            "--v=1",
            *self.extra_args,  # last: a repeated flag's last value wins
        ]

    def start(self, timeout: float, *, port: int | None = None) -> None:
        """Start it serving on ``port`` (default a free one) and block until ``/readyz``
        answers 200, or :class:`ControlPlaneError`."""
        port = port or free_port()
        proc = self.process = Process(
            "kube-scheduler", self.args(port), self.folder / "kube-scheduler.log"
        )
        # its serving certificate is self-signed at start; /readyz needs no authentication
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def ready() -> bool:
            try:
                url = f"https://127.0.0.1:{port}/readyz"
                with urllib.request.urlopen(url, timeout=2, context=insecure) as resp:
                    return bool(resp.status == 200)
            except (OSError, urllib.error.HTTPError):
                return False

        proc.wait_ready(ready, timeout, "/readyz", interval=0.2)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
