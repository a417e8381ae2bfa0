"""pytest plugin (entry point ``pytest11: kdispatch_envtest``): a real control plane fixture.

``envtest_control_plane``: one :class:`~kdispatch.testing.envtest.ControlPlane` for the whole
session, started on first use and stopped at the end; the test is skipped, saying how to build
them, when there are no binaries. ``envtest_kubeconfig``: the path of its admin kubeconfig.

pytest loads this module for every run in an environment where kdispatch is installed, so it
imports nothing but pytest here; the control plane is imported when a fixture is first used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .control_plane import ControlPlane


@pytest.fixture(scope="session")
def envtest_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A running etcd + kube-apiserver for the session (certificates, data and logs in a
    pytest temporary folder). Skips the test when no binaries are found."""
    from .binaries import find_binaries
    from .control_plane import ControlPlane
    from .errors import BinariesNotFound

    try:
        binaries = find_binaries()
    except BinariesNotFound as exc:
        pytest.skip(str(exc))
    with ControlPlane(binaries, workdir=tmp_path_factory.mktemp("envtest")) as plane:
        yield plane


@pytest.fixture(scope="session")
def envtest_kubeconfig(envtest_control_plane: ControlPlane) -> Path:
    """The admin kubeconfig of :func:`envtest_control_plane`."""
    return envtest_control_plane.kubeconfig_path
