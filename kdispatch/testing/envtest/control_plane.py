"""A real Kubernetes control plane for tests: etcd + a secure kube-apiserver (+ optionally
kube-scheduler) on 127.0.0.1, ready for a first pod.

``with ControlPlane() as cp: client = cp.api_client()``. Start makes a folder (unless given
one), a CA and serving certificate, service-account keys and a static token for an admin in
``system:masters``; starts etcd, then kube-apiserver with ``--authorization-mode=RBAC``; waits
for ``/readyz``; and does what the controller-manager would do before a first pod can be
created: it waits for the ``default`` namespace and creates its ``default`` ServiceAccount.
There is no controller-manager and no kubelet: pods stay Pending unless something binds them,
and a namespace you create gets its ``default`` ServiceAccount from :meth:`create_namespace`.

Process hygiene: every child runs in its own session with a parent-death signal (sent when the
*thread* that started it exits: start and stop from a thread that outlives the control plane,
such as the main thread), stop sends SIGTERM and then SIGKILL to each child's group, and an
``atexit`` hook stops whatever is still running if the interpreter exits first. A process killed
outright (SIGKILL) runs no cleanup: its children get SIGKILL from the kernel, and the temporary
folder it made is removed by the next start on the machine (a lock the owner holds tells a
folder whose owner is gone).
"""

from __future__ import annotations

import atexit
import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from kdispatch.actors.model.errors import InvalidInputError
from kdispatch.testing.waiting import wait_for

from .apiserver import KubeAPIServer, User, write_token_file
from .binaries import Binaries, find_binaries
from .certs import write_pki
from .errors import ControlPlaneError, ControlPlaneOptionError, EnvtestError
from .etcd import Etcd
from .flags import (
    check_feature_gates,
    check_runtime_config,
    check_wiring,
    feature_gate_flags,
    runtime_config_flags,
    secure_port,
)
from .kubeconfig import write_kubeconfig
from .processes import Process, seconds
from .scheduler import SCHEDULER_USER, KubeScheduler
from .tempdirs import OwnedDir, remove_stale_dirs

_T = TypeVar("_T")

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

ADMIN_USER = "envtest-admin"
"""The static-token user in ``system:masters`` that every control plane has."""

OWN_FILES = (
    "ca.crt",
    "apiserver.crt",
    "apiserver.key",
    "sa.key",
    "sa.pub",
    "tokens.csv",
    "etcd-data",
    "kubeconfig",
)
"""What a start writes in its folder: a ``workdir`` that holds any of them is refused."""


class ControlPlane:
    """etcd + kube-apiserver (+ kube-scheduler when ``scheduler``) as child processes.

    ``binaries``: default :func:`find_binaries` (``KUBEBUILDER_ASSETS``, then the cache).
    ``workdir``: where certificates, data and logs go; default a temporary folder, removed at
    :meth:`stop` (or, when the process was killed before a stop could run, by a later start).
    ``users``: extra static-token users, name → groups (their tokens: :meth:`token`).
    ``feature_gates``: gate name → bool (``{"GenericWorkload": True}``), passed to
    kube-apiserver and, with ``scheduler``, to kube-scheduler as ``--feature-gates``.
    ``runtime_config``: API group/version → bool (``{"scheduling.k8s.io/v1beta1": True}``),
    passed to kube-apiserver as ``--runtime-config`` (a beta API such as PodGroups needs both).
    Malformed ones raise :class:`ControlPlaneOptionError` here, before anything starts.
    ``apiserver_args`` / ``etcd_args`` / ``scheduler_args``: extra flags, appended after those
    (a repeated flag's last value wins; repeated ``--feature-gates`` merge). A
    ``--secure-port=N`` among ``apiserver_args`` puts kube-apiserver on port N, and :attr:`url`,
    the kubeconfigs and the wait for ``/readyz`` follow it (likewise kube-scheduler's among
    ``scheduler_args``); the flags through which the control plane reaches its components
    (kube-apiserver's ``--etcd-servers``, ``--tls-cert-file``, ``--tls-private-key-file``,
    ``--token-auth-file``; etcd's ``--listen-client-urls``, ``--advertise-client-urls``) are
    its own. Malformed ``users`` (groups given as one string included) or flags (one string
    instead of a list, one of those flags, or a ``--secure-port`` that is not a port from 1 to
    65535 included) raise :class:`ControlPlaneOptionError` here too. A ``workdir`` that holds an
    earlier control plane's files is refused by :meth:`start` with :class:`EnvtestError`,
    before anything is written.

    Not thread-safe: start and stop it from one thread.
    """

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        workdir: Path | None = None,
        scheduler: bool = False,
        users: Mapping[str, Sequence[str]] | None = None,
        apiserver_args: Sequence[str] = (),
        etcd_args: Sequence[str] = (),
        scheduler_args: Sequence[str] = (),
        feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Mapping[str, bool] | None = None,
    ) -> None:
        self.feature_gates = check_feature_gates(feature_gates)
        self.runtime_config = check_runtime_config(runtime_config)
        self._binaries = binaries
        self._workdir = workdir
        self._own_dir: OwnedDir | None = None
        self.scheduler = scheduler
        admin = User.new(ADMIN_USER, ["system:masters"])
        self._users: dict[str, User] = {ADMIN_USER: admin, **_check_users(users)}
        if scheduler:
            self._users[SCHEDULER_USER] = User.new(SCHEDULER_USER)
        self.apiserver_args = _check_flags(apiserver_args, "apiserver_args")
        self.etcd_args = _check_flags(etcd_args, "etcd_args")
        self.scheduler_args = _check_flags(scheduler_args, "scheduler_args")
        self.etcd: Etcd | None = None
        self.apiserver: KubeAPIServer | None = None
        self.kube_scheduler: KubeScheduler | None = None
        self._ca_file: Path | None = None
        self._kubeconfig: Path | None = None
        self.startup_seconds = 0.0
        self._started = False

    @property
    def apiserver_extra_args(self) -> tuple[str, ...]:
        """The flags kube-apiserver gets after its own: ``--feature-gates``,
        ``--runtime-config``, then ``apiserver_args``."""
        return (
            *feature_gate_flags(self.feature_gates),
            *runtime_config_flags(self.runtime_config),
            *self.apiserver_args,
        )

    @property
    def scheduler_extra_args(self) -> tuple[str, ...]:
        """The flags kube-scheduler gets after its own: ``--feature-gates``, then
        ``scheduler_args``."""
        return (*feature_gate_flags(self.feature_gates), *self.scheduler_args)

    # ----------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 120.0) -> ControlPlane:
        """Start everything and block until a first pod can be created in ``default``.
        :class:`BinariesNotFound` when there is nothing to run, :class:`ControlPlaneError` when
        a component exits or is not ready within ``timeout`` seconds (everything started so far
        is stopped again). Returns ``self``."""
        if self._started:
            raise EnvtestError("this control plane was started already")
        _check_timeout(timeout)
        began = time.monotonic()
        deadline = began + timeout
        binaries = self._binaries or find_binaries(scheduler=self.scheduler)
        if self.scheduler and binaries.kube_scheduler is None:
            raise EnvtestError("scheduler=True needs Binaries with kube_scheduler")
        self._started = True
        atexit.register(self.stop)
        try:
            folder = self._folder()
            pki = write_pki(folder)
            self._ca_file = pki.ca
            tokens = write_token_file(folder / "tokens.csv", list(self._users.values()))
            self.etcd = Etcd(binaries.etcd, folder, self.etcd_args)
            self.etcd.start(_left(deadline))
            self.apiserver = KubeAPIServer(
                binaries.kube_apiserver,
                folder,
                pki=pki,
                token_file=tokens,
                admin_token=self.admin_token,
                extra_args=self.apiserver_extra_args,
            )
            port = secure_port(self.apiserver_args, "apiserver_args")
            self.apiserver.start(self.etcd.url, _left(deadline), port=port)
            self._prepare_default_namespace(deadline)
            self._kubeconfig = self.write_kubeconfig(folder / "kubeconfig")
            if self.scheduler:
                assert binaries.kube_scheduler is not None
                kubeconfig = self.write_kubeconfig(folder / "scheduler.kubeconfig", SCHEDULER_USER)
                self.kube_scheduler = KubeScheduler(
                    binaries.kube_scheduler, folder, kubeconfig, self.scheduler_extra_args
                )
                self.kube_scheduler.start(
                    _left(deadline), port=secure_port(self.scheduler_args, "scheduler_args")
                )
        except ControlPlaneError as exc:
            self.stop()
            if time.monotonic() < deadline:
                raise
            raise ControlPlaneError(f"not ready within {seconds(timeout)} s: {exc}") from None
        except OSError as exc:  # the folder cannot be made or written, or a binary not run
            self.stop()
            raise EnvtestError(f"cannot start a control plane in {self._workdir}: {exc}") from exc
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop the scheduler, the apiserver, then etcd (SIGTERM, then SIGKILL to each group);
        remove the temporary folder if this control plane made it. Idempotent; also the
        ``atexit`` fallback."""
        for component in (self.kube_scheduler, self.apiserver, self.etcd):
            if component is not None:
                component.stop()
        if self._own_dir is not None:
            self._own_dir.remove()
            self._own_dir = None
        atexit.unregister(self.stop)

    @contextlib.contextmanager
    def apiserver_down(self, timeout: float = 60.0) -> Iterator[None]:
        """An outage of kube-apiserver for the body of a ``with``: it is killed on entry
        (SIGKILL, as a crash: open connections drop, new ones are refused) and started again
        on exit, at the same URL, blocking until ``/readyz`` answers (at most ``timeout``
        seconds, else :class:`ControlPlaneError`). etcd, its data and kube-scheduler keep
        running; clients need nothing new (same URL, CA and tokens). The caller's thread,
        which must outlive the control plane, as for :meth:`start`: the restarted
        kube-apiserver gets the parent-death signal when the thread that leaves the ``with``
        exits."""
        _check_timeout(timeout)
        apiserver = _started(self.apiserver if self._started else None)
        etcd = _started(self.etcd)
        if apiserver.process is None or not apiserver.process.running():
            raise EnvtestError("kube-apiserver is not running")
        port = urlsplit(apiserver.url).port
        apiserver.process.kill()
        try:
            yield
        finally:
            apiserver.start(etcd.url, timeout, port=port)

    def __enter__(self) -> ControlPlane:
        return self if self._started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _folder(self) -> Path:
        remove_stale_dirs()  # those of control planes whose process died without a stop
        if self._workdir is None:
            self._own_dir = OwnedDir()
            self._workdir = self._own_dir.path
        self._workdir.mkdir(parents=True, exist_ok=True)
        used = [name for name in OWN_FILES if (self._workdir / name).exists()]
        if used:  # its certificates and tokens may serve a control plane still running
            raise EnvtestError(
                f"the workdir {self._workdir} holds an earlier control plane's"
                f" {', '.join(used)}: give a new or empty folder"
            )
        return self._workdir

    def _prepare_default_namespace(self, deadline: float) -> None:
        """What the controller-manager would have done before a first pod: the apiserver
        makes the ``default`` namespace itself, shortly after ``/readyz``; the ``default``
        ServiceAccount in it is the ServiceAccount admission plugin's precondition."""
        api = self._api()
        try:
            wait_for(
                lambda: api.request("GET", "/api/v1/namespaces/default")[0] == 200,
                _left(deadline),
                "the apiserver to create the default namespace",
                interval=0.1,
            )
        except TimeoutError as exc:
            raise ControlPlaneError(str(exc)) from None
        self.create_namespace("default")

    # ----------------------------------------------------------------- access

    @property
    def url(self) -> str:
        """The apiserver's ``https://127.0.0.1:<port>``."""
        return self._api().url

    @property
    def admin_token(self) -> str:
        """A bearer token of a user in ``system:masters``."""
        return self._users[ADMIN_USER].token

    def token(self, user: str) -> str:
        """The bearer token of ``user`` (one of ``users``, or the admin)."""
        try:
            return self._users[user].token
        except KeyError:
            raise EnvtestError(f"no user {user!r}; known: {sorted(self._users)}") from None

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM) that signed the apiserver's serving certificate."""
        return _started(self._ca_file)

    @property
    def kubeconfig_path(self) -> Path:
        """A kubeconfig for the admin, in the control plane's folder."""
        return _started(self._kubeconfig)

    @property
    def workdir(self) -> Path:
        """The folder with certificates, etcd's data and each component's log."""
        return _started(self._workdir)

    @property
    def processes(self) -> list[Process]:
        """The children started (running or not), in start order."""
        parts = (self.etcd, self.apiserver, self.kube_scheduler)
        return [p.process for p in parts if p is not None and p.process is not None]

    def write_kubeconfig(self, path: Path, user: str = ADMIN_USER) -> Path:
        """Write a self-contained kubeconfig (CA embedded) for ``user`` to ``path``."""
        return write_kubeconfig(path, self.url, self.token(user), ca_pem=self.ca_file.read_bytes())

    def api_client(self, token: str | None = None) -> ApiClient:
        """An official ``kubernetes.client.ApiClient`` as the admin (or the holder of
        ``token``), verifying TLS with :attr:`ca_file`. The caller closes it."""
        from kubernetes import client as k8s

        from kdispatch.adapters.transport import prepare_configuration

        cfg = k8s.Configuration(host=self.url)
        cfg.api_key = {"authorization": token or self.admin_token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        cfg.ssl_ca_cert = str(self.ca_file)
        return k8s.ApiClient(prepare_configuration(cfg, 8))

    def create_namespace(self, name: str) -> None:
        """Create namespace ``name`` with its ``default`` ServiceAccount (what the
        controller-manager does for every namespace), both if missing."""
        api = self._api()
        for path, body in (
            ("/api/v1/namespaces", {"metadata": {"name": name}}),
            (f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}}),
        ):
            status, reply = api.request("POST", path, body)
            if status not in (201, 409):
                raise ControlPlaneError(f"POST {path}: {status} {reply.get('message', reply)}")

    def _api(self) -> KubeAPIServer:
        return _started(self.apiserver if self.apiserver and self.apiserver.url else None)


def _check_users(users: object) -> dict[str, User]:
    """``users`` (name → a list of groups; None is none) as :class:`User` s with fresh
    tokens, or :class:`ControlPlaneOptionError`."""
    if users is None:
        return {}
    if not isinstance(users, Mapping):
        raise ControlPlaneOptionError(
            f"users must map user names to lists of groups, got {type(users).__name__}"
        )
    out: dict[str, User] = {}
    for name, groups in users.items():
        if not isinstance(name, str):
            raise ControlPlaneOptionError(f"a user name must be a str, got {name!r}")
        if name in (ADMIN_USER, SCHEDULER_USER):
            raise ControlPlaneOptionError(f"the user name {name!r} is the control plane's own")
        if isinstance(groups, str | bytes) or not isinstance(groups, Iterable):
            raise ControlPlaneOptionError(
                f"the groups of user {name!r} must be a list of str, got {groups!r}"
            )
        listed = list(groups)
        if not all(isinstance(g, str) for g in listed):
            raise ControlPlaneOptionError(
                f"the groups of user {name!r} must be a list of str, got {listed!r}"
            )
        try:
            out[name] = User.new(name, listed)
        except InvalidInputError as exc:
            raise ControlPlaneOptionError(str(exc)) from None
    return out


def _check_flags(flags: object, option: str) -> tuple[str, ...]:
    """``flags`` (a list of command-line arguments) as a tuple, or
    :class:`ControlPlaneOptionError`: one string would be split into characters, and a flag the
    control plane reaches the component through is its own (:func:`~.flags.check_wiring`)."""
    if isinstance(flags, str | bytes) or not isinstance(flags, Iterable):
        raise ControlPlaneOptionError(f"{option} must be a list of str, got {flags!r}")
    out = tuple(flags)
    if not all(isinstance(f, str) for f in out):
        raise ControlPlaneOptionError(f"{option} must be a list of str, got {list(out)!r}")
    check_wiring(out, option)
    return out


def _check_timeout(timeout: object) -> None:
    """Raise :class:`EnvtestError` unless ``timeout`` is a number of seconds > 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise EnvtestError(f"timeout must be a number of seconds > 0, got {timeout!r}")


def _left(deadline: float) -> float:
    """The seconds left before ``deadline`` (none once it passed: a wait then looks once)."""
    return max(0.0, deadline - time.monotonic())


def _started(value: _T | None) -> _T:
    """``value``, which exists once the control plane started."""
    if value is None:
        raise EnvtestError("the control plane is not started")
    return value
