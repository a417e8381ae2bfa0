"""etcd as a child process on 127.0.0.1, and the two etcd requests tests need (current
revision, compaction) through its v3 HTTP gateway. Runs on the caller's thread."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .processes import Process, free_port


class Etcd:
    """One etcd member with throwaway data in ``folder``."""

    def __init__(self, binary: Path, folder: Path, extra_args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.folder = folder
        self.extra_args = tuple(extra_args)
        self.url = ""
        self.process: Process | None = None

    def start(self, timeout: float) -> None:
        """Start etcd and block until ``/health`` answers true, or :class:`ControlPlaneError`."""
        client, peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{client}"
        data = self.folder / "etcd-data"
        data.mkdir()
        args = [
            str(self.binary),
            "--name=envtest",
            f"--data-dir={data}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=envtest=http://127.0.0.1:{peer}",
            "--log-level=warn",
            "--unsafe-no-fsync",  # throwaway data
            *self.extra_args,
        ]
        proc = self.process = Process("etcd", args, self.folder / "etcd.log")

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    return bool(json.load(resp).get("health") == "true")
            except (OSError, ValueError):
                return False

        proc.wait_ready(healthy, timeout, "/health", interval=0.1)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def revision(self) -> int:
        """etcd's current revision."""
        reply = self._post("/v3/kv/range", {"key": base64.b64encode(b"/").decode(), "limit": 1})
        return int(reply["header"]["revision"])

    def compact(self, revision: int | None = None) -> None:
        """Compact to ``revision`` (default: the current one), physically, as
        ``etcdctl compaction --physical`` does: watches from older resourceVersions then get
        410 Gone from the apiserver where it serves them from etcd."""
        rev = self.revision() if revision is None else revision
        self._post("/v3/kv/compaction", {"revision": rev, "physical": True})

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            out: dict[str, Any] = json.load(resp)
        return out
