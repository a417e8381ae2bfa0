"""A real Kubernetes control plane for your tests, in the spirit of controller-runtime's envtest.

Build the binaries once (from the Go module proxy, Go >= 1.26), then start them::

    python -m kdispatch.testing.envtest build [--with-scheduler]
    python -m kdispatch.testing.envtest start --write-kubeconfig ./kubeconfig

or from Python: ``with ControlPlane() as cp: client = cp.api_client()``; or in pytest, the
session-scoped ``envtest_control_plane`` fixture (skips when there are no binaries).

* :class:`ControlPlane`: etcd + a secure kube-apiserver (+ kube-scheduler) on 127.0.0.1.
* :func:`find_binaries` / :class:`Binaries`: ``$KUBEBUILDER_ASSETS`` first, then
  :func:`cache_dir`.
* :func:`build_binaries`: builds what is missing into the cache.
* Errors: :class:`EnvtestError` and its :class:`BinariesNotFound`, :class:`BuildError`,
  :class:`ControlPlaneError`, :class:`ControlPlaneOptionError`.
* ``ControlPlane(feature_gates={"GenericWorkload": True},
  runtime_config={"scheduling.k8s.io/v1beta1": True})`` turns on a beta API (here PodGroups),
  and its gate in kube-scheduler too; ``start --feature-gates ... --runtime-config ...`` on the
  command line.

Importing this package starts nothing and imports only the standard library.
"""

from .binaries import ASSETS_ENV, CACHE_ENV, Binaries, cache_dir, find_binaries
from .build import build_binaries
from .control_plane import ADMIN_USER, ControlPlane
from .errors import (
    BinariesNotFound,
    BuildError,
    ControlPlaneError,
    ControlPlaneOptionError,
    EnvtestError,
)
from .kubeconfig import write_kubeconfig

__all__ = [
    "ADMIN_USER",
    "ASSETS_ENV",
    "CACHE_ENV",
    "Binaries",
    "BinariesNotFound",
    "BuildError",
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneOptionError",
    "EnvtestError",
    "build_binaries",
    "cache_dir",
    "find_binaries",
    "write_kubeconfig",
]
