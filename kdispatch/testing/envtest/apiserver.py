"""kube-apiserver as a child process on 127.0.0.1: TLS with the control plane's own CA,
static bearer tokens, RBAC, service-account tokens; and the plain HTTPS requests the control
plane makes before any client library is involved. Runs on the caller's thread."""

from __future__ import annotations

import json
import secrets
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from kdispatch.actors.model.errors import InvalidInputError

from .certs import Pki
from .processes import Process, free_port


@dataclass(frozen=True)
class User:
    """A static-token user: ``kube-apiserver --token-auth-file`` authenticates ``token`` as
    ``name`` in ``groups``."""

    name: str
    groups: tuple[str, ...] = ()
    token: str = ""

    @classmethod
    def new(cls, name: str, groups: Sequence[str] = ()) -> User:
        if not name or any(c in name for c in ',"\n'):
            raise InvalidInputError(
                f"a user name must be non-empty, without commas or quotes: {name!r}"
            )
        for g in groups:
            if not g or any(c in g for c in ',"\n'):
                raise InvalidInputError(
                    f"a group must be non-empty, without commas or quotes: {g!r}"
                )
        return cls(name, tuple(groups), f"envtest-{secrets.token_hex(16)}")


def write_token_file(path: Path, users: Sequence[User]) -> Path:
    """The CSV ``--token-auth-file`` reads: ``token,user,uid,"group1,group2"``."""
    lines = [f'{u.token},{u.name},{u.name}-uid,"{",".join(u.groups)}"' for u in users]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


@dataclass(eq=False)
class KubeAPIServer:
    """One kube-apiserver over ``etcd_url``, its files in ``folder``."""

    binary: Path
    folder: Path
    _: KW_ONLY
    pki: Pki
    token_file: Path
    admin_token: str
    extra_args: tuple[str, ...] = ()
    url: str = field(default="", init=False)
    process: Process | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._tls = ssl.create_default_context(cafile=str(self.pki.ca))

    def args(self, etcd_url: str, port: int) -> list[str]:
        return [
            str(self.binary),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={self.pki.cert}",
            f"--tls-private-key-file={self.pki.key}",
            f"--cert-dir={self.folder / 'apiserver-certs'}",
            f"--token-auth-file={self.token_file}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=1",
            *self.extra_args,  # last: a repeated flag's last value wins
        ]

    def start(self, etcd_url: str, timeout: float, *, port: int | None = None) -> None:
        """Start it on ``port`` (default a free one) and block until ``/readyz`` answers 200,
        or :class:`ControlPlaneError`."""
        port = port or free_port()
        self.url = f"https://127.0.0.1:{port}"
        proc = self.process = Process(
            "kube-apiserver", self.args(etcd_url, port), self.folder / "kube-apiserver.log"
        )
        proc.wait_ready(
            lambda: self.request("GET", "/readyz")[0] == 200, timeout, "/readyz", interval=0.2
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """``method path`` as the admin: the status (0 when unreachable) and the JSON body."""
        req = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {self.admin_token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
            method=method,
        )
        try:
            with urllib.request.urlopen(req, timeout=5, context=self._tls) as resp:
                status, raw = int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except OSError:
            return 0, {}
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {}
        return status, parsed if isinstance(parsed, dict) else {}
