"""The typed errors of :mod:`kdispatch.testing.envtest`.

Pure module: no processes, no I/O.
"""

from __future__ import annotations

from kdispatch.actors.model.errors import InvalidInputError, KdispatchError

BUILD_HINT = "python -m kdispatch.testing.envtest build"


class EnvtestError(KdispatchError):
    """Base class of the errors the real control plane raises."""


class BinariesNotFound(EnvtestError):
    """Neither ``KUBEBUILDER_ASSETS`` nor the project's cache holds the binaries. The message
    names every place looked in and the command that builds them."""


class BuildError(EnvtestError):
    """Building a binary from the Go module proxy failed, or ``go`` is missing."""


class ControlPlaneError(EnvtestError):
    """A component exited during start, or did not become ready in time. The message ends
    with the tail of its log."""


class ControlPlaneOptionError(EnvtestError, InvalidInputError):
    """A control plane option that can never make a flag: a feature gate or runtime config
    that is not a name mapped to true/false, ``users`` that are not names mapped to lists of
    groups, extra flags that are not a list of str or that set a flag through which the control
    plane reaches its components (``--etcd-servers``, ``--token-auth-file``, ...), a
    ``--secure-port`` that is not a port. Raised by the constructor (or the command line),
    before anything starts."""
