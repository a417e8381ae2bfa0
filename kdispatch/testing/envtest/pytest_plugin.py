"""pytest plugin (entry point ``pytest11: kdispatch_envtest``): a real control plane fixture.

``envtest_control_plane``: one :class:`~kdispatch.testing.envtest.ControlPlane` for the whole
session, started on first use and stopped at the end; the test is skipped, saying how to build
them, when there are no binaries. ``envtest_kubeconfig``: the path of its admin kubeconfig.
``envtest_control_plane_options``: the keyword arguments the control plane is made with
(none by default); override it in a ``conftest.py`` to turn on a feature gate and a beta API,
add kube-scheduler, users or flags::

    @pytest.fixture(scope="session")
    def envtest_control_plane_options():
        return {
            "feature_gates": {"GenericWorkload": True},
            "runtime_config": {"scheduling.k8s.io/v1beta1": True},
        }

pytest loads this module for every run in an environment where kdispatch is installed, so it
imports nothing but pytest here; the control plane is imported when a fixture is first used.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .control_plane import ControlPlane

OPTIONS = frozenset(
    {
        "scheduler",
        "users",
        "apiserver_args",
        "etcd_args",
        "scheduler_args",
        "feature_gates",
        "runtime_config",
    }
)
"""The keyword arguments of :class:`~kdispatch.testing.envtest.ControlPlane` the options
fixture may give (the fixture chooses the binaries and the folder itself)."""


@pytest.fixture(scope="session")
def envtest_control_plane_options() -> Mapping[str, Any]:
    """Keyword arguments for the session's :class:`~kdispatch.testing.envtest.ControlPlane`
    (any of :data:`OPTIONS`); none by default. Override it (session scope) to change them."""
    return {}


@pytest.fixture(scope="session")
def envtest_control_plane(
    tmp_path_factory: pytest.TempPathFactory, envtest_control_plane_options: Mapping[str, Any]
) -> Iterator[ControlPlane]:
    """A running etcd + kube-apiserver for the session (certificates, data and logs in a
    pytest temporary folder), made with ``envtest_control_plane_options``. Skips the test when
    no binaries are found; options that are not :data:`OPTIONS`, or malformed ones, raise
    :class:`~kdispatch.testing.envtest.ControlPlaneOptionError` first."""
    from .binaries import find_binaries
    from .control_plane import ControlPlane
    from .errors import BinariesNotFound, ControlPlaneOptionError

    options = envtest_control_plane_options
    if not isinstance(options, Mapping) or set(options) - OPTIONS:
        unknown = sorted(map(str, set(options) - OPTIONS)) if isinstance(options, Mapping) else []
        raise ControlPlaneOptionError(
            f"envtest_control_plane_options must be a mapping with keys among {sorted(OPTIONS)}"
            + (f"; unknown: {unknown}" if unknown else f", got {options!r}")
        )
    plane = ControlPlane(workdir=tmp_path_factory.mktemp("envtest"), **options)  # validates
    try:
        find_binaries(scheduler=plane.scheduler)  # what start looks up
    except BinariesNotFound as exc:
        pytest.skip(str(exc))
    with plane:
        yield plane


@pytest.fixture(scope="session")
def envtest_kubeconfig(envtest_control_plane: ControlPlane) -> Path:
    """The admin kubeconfig of :func:`envtest_control_plane`."""
    return envtest_control_plane.kubeconfig_path
