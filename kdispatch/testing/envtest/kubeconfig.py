"""Kubeconfig files for a server, a bearer token and a CA: what ``kubectl`` and the official
client's ``config.load_kube_config`` read. Stdlib only; runs on the caller's thread."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any


def kubeconfig(
    server: str, token: str, *, ca_pem: bytes | None = None, name: str = "envtest"
) -> dict[str, Any]:
    """A kubeconfig with one cluster, user and context, all called ``name``; the CA (if
    any) is embedded, so the file stands on its own."""
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def write_kubeconfig(
    path: Path, server: str, token: str, *, ca_pem: bytes | None = None, name: str = "envtest"
) -> Path:
    """Write :func:`kubeconfig` to ``path`` (mode 0600: it holds a token) and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(
            kubeconfig(server, token, ca_pem=ca_pem, name=name), out, indent=1
        )  # JSON is YAML
    tmp.replace(path)
    return path
