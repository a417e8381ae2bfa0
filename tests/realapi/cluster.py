"""The two apiservers the conformance suite runs against, behind one :class:`Target` interface.

* :class:`RealCluster`: the real ``etcd`` and ``kube-apiserver`` built by
  ``conformance/build.sh``, started as child processes on 127.0.0.1 (free ports, a temp dir,
  a CA and serving certificate made at start, service-account keys, a static token file with
  an admin in ``system:masters``, ``--authorization-mode=RBAC``).
* :class:`EmulatorTarget`: the in-memory apiserver served by ``ApiServerHTTP``.

Both are driven only over HTTP through the official client (:class:`Admin` for test setup,
``KubernetesBackend`` / ``ClientListWatch`` for kdispatch itself), so a test cannot tell them
apart except through behaviour — which is the point.

Process hygiene: every child runs in its own session (process group) with a parent-death
signal, is stopped with SIGTERM and then SIGKILL on its whole group, and an ``atexit`` hook
stops whatever is still running if the session ends abnormally.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from kdispatch.adapters.kubernetes import KubernetesBackend, prepare_configuration
from kdispatch.testing.httpserver import ApiServerHTTP
from kdispatch.testing.memory import InMemoryApiServer

REPO = Path(__file__).resolve().parents[2]
CONFORMANCE = REPO / "conformance"

T = TypeVar("T")


# --------------------------------------------------------------------------- polling


def wait_for(
    predicate: Callable[[], T | bool | None],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
) -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` passes
    (``TimeoutError`` naming ``what``). For state on the server that no event announces."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- binaries


def k8s_version() -> str:
    """The Kubernetes release pinned by ``conformance/kube-apiserver/go.mod``."""
    for line in (CONFORMANCE / "kube-apiserver" / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes" and parts[1].startswith("v"):
            return parts[1]
    raise RuntimeError("conformance/kube-apiserver/go.mod does not pin k8s.io/kubernetes")


def cache_dir() -> Path:
    """Where ``conformance/build.sh`` puts the binaries (same rule as the script)."""
    override = os.environ.get("KDISPATCH_K8S_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kdispatch" / f"k8s-{k8s_version()}"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path


def find_binaries() -> Binaries:
    """The cached binaries, or ``FileNotFoundError`` saying how to build them."""
    d = cache_dir()
    found = Binaries(d / "etcd", d / "kube-apiserver")
    for path in (found.etcd, found.kube_apiserver, d / "stamp"):
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: build the real apiserver first with conformance/build.sh"
            )
    return found


# --------------------------------------------------------------------------- certificates


def _write_pki(d: Path) -> dict[str, Path]:
    """A CA, a serving certificate for 127.0.0.1/localhost signed by it, and an EC key pair
    for service-account tokens. Returns the paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kdispatch-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    paths = {
        "ca": d / "ca.crt",
        "cert": d / "apiserver.crt",
        "key": d / "apiserver.key",
        "sa_key": d / "sa.key",
        "sa_pub": d / "sa.pub",
    }
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(pem_key(key))
    paths["sa_key"].write_bytes(pem_key(sa_key))
    paths["sa_pub"].write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for name in ("key", "sa_key"):
        paths[name].chmod(0o600)
    return paths


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _with_parent_death_signal(args: list[str]) -> list[str]:
    """``args`` run under ``setpriv --pdeathsig SIGTERM`` when util-linux has it: the child is
    told to stop if the test process dies without running its finalizers (the setting
    survives ``exec``). Without ``setpriv`` the ``atexit`` hook is the only fallback."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *args] if setpriv else args


class Process:
    """A child process in its own process group, its output in a log file."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                _with_parent_death_signal(args),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the group, then SIGKILL after ``timeout``; always reaps the child."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        # the group may hold grandchildren even when the leader is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5.0)


# --------------------------------------------------------------------------- targets


def _client_config(url: str, token: str | None, ca_cert: str | None) -> k8s.Configuration:
    cfg = k8s.Configuration(host=url)
    if token is not None:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    if ca_cert is not None:
        cfg.ssl_ca_cert = ca_cert
    return prepare_configuration(cfg, 8)


class Target:
    """What a test needs from an apiserver under test. Subclasses set the attributes."""

    name: str
    url: str
    admin_token: str
    ca_cert: str | None = None

    def backend(
        self, *, token: str | None = None, workers: int = 8, request_timeout: float = 10.0
    ) -> KubernetesBackend:
        """A ``KubernetesBackend`` (the admin's unless ``token``). The caller closes it."""
        return KubernetesBackend.for_url(
            self.url,
            token=token or self.admin_token,
            ca_cert=self.ca_cert,
            workers=workers,
            request_timeout=request_timeout,
        )

    def api_client(self, token: str | None = None) -> k8s.ApiClient:
        """An official ``ApiClient`` (the admin's unless ``token``). The caller closes it."""
        return k8s.ApiClient(_client_config(self.url, token or self.admin_token, self.ca_cert))

    def write_kubeconfig(self, path: Path, token: str | None = None) -> Path:
        cluster: dict[str, Any] = {"server": self.url}
        if self.ca_cert is not None:
            cluster["certificate-authority"] = self.ca_cert
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kd", "cluster": cluster}],
            "users": [{"name": "kd", "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": "kd", "context": {"cluster": "kd", "user": "kd"}}],
            "current-context": "kd",
        }
        path.write_text(json.dumps(config))  # JSON is YAML
        return path

    @property
    def real(self) -> bool:
        return self.name == "real"

    def compact(self, revision: int | None = None) -> None:
        """Forget the event history (up to ``revision`` where supported), so watches from an
        older resourceVersion get 410."""
        raise NotImplementedError


class EmulatorTarget(Target):
    """``ApiServerHTTP`` over a fresh :class:`InMemoryApiServer`."""

    name = "emulator"

    def __init__(self) -> None:
        self.admin_token = "emulator-admin-" + secrets.token_hex(8)
        self.mem = InMemoryApiServer(strict_claims=True)
        self.http = ApiServerHTTP(self.mem, token=self.admin_token, hang_seconds=5.0)
        self.http.start()
        self.url = self.http.url

    def compact(self, revision: int | None = None) -> None:
        self.mem.compact()  # always up to the current resourceVersion

    def close(self) -> None:
        self.http.stop()


class RealCluster(Target):
    """etcd + kube-apiserver as child processes. :meth:`start` blocks until ``/readyz``."""

    name = "real"

    def __init__(self, binaries: Binaries, workdir: Path) -> None:
        self.binaries = binaries
        self.dir = workdir
        self.admin_token = "kd-admin-" + secrets.token_hex(16)
        self.flood_token = "kd-flood-" + secrets.token_hex(16)
        self.processes: list[Process] = []
        self.etcd_url = ""
        self.url = ""
        self.startup_seconds = 0.0

    # ----------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 120.0) -> RealCluster:
        began = time.monotonic()
        atexit.register(self.stop)
        pki = _write_pki(self.dir)
        self.ca_cert = str(pki["ca"])
        tokens = self.dir / "tokens.csv"
        tokens.write_text(
            f'{self.admin_token},kd-admin,kd-admin-uid,"system:masters"\n'
            f"{self.flood_token},kd-flood,kd-flood-uid,kd-testers\n"
        )
        tokens.chmod(0o600)
        self._start_etcd(timeout)
        self._start_apiserver(pki, tokens, began + timeout)
        self.startup_seconds = time.monotonic() - began
        return self

    def _start_etcd(self, timeout: float) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        data = self.dir / "etcd-data"
        data.mkdir()
        etcd = Process(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=kd",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=kd=http://127.0.0.1:{peer}",
                "--log-level=warn",
                "--unsafe-no-fsync",  # throwaway test data
            ],
            self.dir / "etcd.log",
        )
        self.processes.append(etcd)

        def healthy() -> bool:
            self._check_alive(etcd)
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
                    return bool(json.load(resp).get("health") == "true")
            except (OSError, ValueError):
                return False

        wait_for(healthy, timeout, "etcd /health", interval=0.1)

    def _start_apiserver(self, pki: Mapping[str, Path], tokens: Path, deadline: float) -> None:
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        apiserver = Process(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={self.etcd_url}",
                "--etcd-compaction-interval=0",  # the tests compact explicitly
                # ResourceClaim watches are served from etcd, not the watch cache, so an etcd
                # compaction shows as 410 Gone on them; pods keep the default watch cache
                "--watch-cache-sizes=resourceclaims.resource.k8s.io#0",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={pki['cert']}",
                f"--tls-private-key-file={pki['key']}",
                f"--cert-dir={self.dir / 'certs'}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki['sa_pub']}",
                f"--service-account-signing-key-file={pki['sa_key']}",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
            ],
            self.dir / "kube-apiserver.log",
        )
        self.processes.append(apiserver)
        ctx = ssl.create_default_context(cafile=str(pki["ca"]))

        def ready() -> bool:
            self._check_alive(apiserver)
            req = urllib.request.Request(
                f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
            )
            try:
                with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                    return bool(resp.status == 200)
            except (OSError, urllib.error.HTTPError):
                return False

        wait_for(
            ready, max(1.0, deadline - time.monotonic()), "kube-apiserver /readyz", interval=0.2
        )

    @staticmethod
    def _check_alive(proc: Process) -> None:
        if not proc.running():
            raise RuntimeError(
                f"{proc.name} exited with {proc.popen.returncode}; its log ends:\n{proc.tail()}"
            )

    def stop(self) -> None:
        """Stop the apiserver, then etcd. Idempotent; also the ``atexit`` fallback."""
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    # ----------------------------------------------------------------- etcd

    def etcd_revision(self) -> int:
        return int(self._etcd("/v3/kv/range", {"key": _b64("/"), "limit": 1})["header"]["revision"])

    def compact(self, revision: int | None = None) -> None:
        """Compact etcd to ``revision`` (default: the current one) through its v3 HTTP gateway
        (what ``etcdctl compaction --physical`` does over gRPC)."""
        rev = self.etcd_revision() if revision is None else revision
        self._etcd("/v3/kv/compaction", {"revision": rev, "physical": True})

    def _etcd(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.etcd_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            out: dict[str, Any] = json.load(resp)
        return out


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


# --------------------------------------------------------------------------- admin requests


@dataclass
class Reply:
    """An HTTP reply: status code, decoded JSON body (``{}`` when none) and headers."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str]

    @property
    def reason(self) -> str | None:
        reason = self.body.get("reason")
        return reason if isinstance(reason, str) else None


class Admin:
    """Raw REST requests through the official client's ``call_api`` (auth, TLS, serialisation
    as kdispatch's own requests), answering :class:`Reply` for any status instead of raising."""

    def __init__(self, client: k8s.ApiClient) -> None:
        self.client = client

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Reply:
        client: Any = self.client
        method_, url, headers, data, _ = client.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = client.call_api(
                method_, url, header_params=headers, body=data, _request_timeout=timeout
            )
            raw, status, reply_headers = resp.read(), resp.status, resp.headers
        except ApiException as exc:
            raw, status, reply_headers = exc.body, exc.status, exc.headers or {}
        try:
            parsed = json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError):
            parsed = {"_raw": raw.decode(errors="replace") if isinstance(raw, bytes) else raw}
        return Reply(
            int(status), parsed if isinstance(parsed, dict) else {"_json": parsed}, reply_headers
        )

    def ok(self, method: str, path: str, body: object = None, **kw: Any) -> dict[str, Any]:
        """``request``, asserting a 2xx reply; returns the body."""
        reply = self.request(method, path, body, **kw)
        assert 200 <= reply.status < 300, f"{method} {path}: {reply.status} {reply.body}"
        return reply.body

    # ----------------------------------------------------------------- shortcuts

    def create(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        return self.ok("POST", path, dict(obj))

    def pod_path(self, namespace: str, name: str = "") -> str:
        base = f"/api/v1/namespaces/{namespace}/pods"
        return f"{base}/{name}" if name else base

    def claim_path(self, namespace: str, name: str = "") -> str:
        base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
        return f"{base}/{name}" if name else base

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.ok("GET", self.pod_path(namespace, name))

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.ok("GET", self.claim_path(namespace, name))

    def pod_exists(self, namespace: str, name: str) -> bool:
        reply = self.request("GET", self.pod_path(namespace, name))
        assert reply.status in (200, 404), reply
        return reply.status == 200


def iter_conditions(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict):
            yield c


def condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    """The condition of ``ctype`` in ``obj.status.conditions``, or None."""
    return next((c for c in iter_conditions(obj) if c.get("type") == ctype), None)
