"""Feature gates and runtime config of a control plane: validated, and turned into the
components' flags.

* ``feature_gates``: gate name → on/off, e.g. ``{"GenericWorkload": True}``; becomes
  ``--feature-gates=GenericWorkload=true`` for kube-apiserver and for kube-scheduler (a gate
  the scheduler's code also reads, such as ``GenericWorkload`` for its gang scheduling, must be
  on in both).
* ``runtime_config``: API group/version (or ``api/all``, ``api/ga``, ``api/beta``,
  ``api/alpha``, or ``group/version/resource``) → on/off, e.g.
  ``{"scheduling.k8s.io/v1beta1": True}``; becomes
  ``--runtime-config=scheduling.k8s.io/v1beta1=true`` for kube-apiserver only (a beta API is
  served only when both its gate and its group/version are on).

Both keep the caller's order. A name the binary does not know is the binary's to refuse (its
log says so and start fails with :class:`ControlPlaneError`); what can never be a flag is
refused here with :class:`ControlPlaneOptionError`. The command line's spelling
(``GenericWorkload=true``) parses with :func:`parse_assignments`.

Pure module: no processes, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .errors import ControlPlaneOptionError

_GATE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_SEGMENT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_GROUP_VERSION = re.compile(
    rf"^(api/(all|ga|beta|alpha)|({_SEGMENT}(\.{_SEGMENT})*/)?v[0-9]+((alpha|beta)[0-9]+)?"
    rf"(/{_SEGMENT})?)$"
)

FeatureGates = Mapping[str, bool]
RuntimeConfig = Mapping[str, bool]


def _switch(value: object, what: str) -> bool:
    """A bool, or its spelling on a command line: ``true`` or ``false`` (any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ControlPlaneOptionError(f"{what} must be true or false, got {value!r}")


def _switches(
    value: object,
    *,
    option: str,
    keys: str,
    what: str,
    noun: str,
    pattern: re.Pattern[str],
    want: str,
) -> dict[str, bool]:
    """``value`` (key → bool, or ``"true"``/``"false"``) as a plain dict; None is empty. The
    ``option`` maps ``keys``: each must match ``pattern`` (else "invalid ``what`` ``noun``:
    want ``want``"). Raises :class:`ControlPlaneOptionError`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ControlPlaneOptionError(
            f"{option} must map {keys} to true/false, got {type(value).__name__}"
        )
    out: dict[str, bool] = {}
    for key, switch in value.items():
        if not isinstance(key, str) or not pattern.match(key):
            raise ControlPlaneOptionError(f"invalid {what} {noun} {key!r}: want {want}")
        out[key] = _switch(switch, f"{what} {key}")
    return out


def check_feature_gates(gates: object) -> dict[str, bool]:
    """``gates`` (name → bool, or ``"true"``/``"false"``) as a plain dict; None is empty.
    A name must be a gate's spelling (``GenericWorkload``: a capital, then letters and digits).
    Raises :class:`ControlPlaneOptionError`."""
    return _switches(
        gates,
        option="feature_gates",
        keys="gate names",
        what="feature gate",
        noun="name",
        pattern=_GATE,
        want="e.g. 'GenericWorkload'",
    )


def check_runtime_config(config: object) -> dict[str, bool]:
    """``config`` (group/version → bool, or ``"true"``/``"false"``) as a plain dict; None is
    empty. A key is ``group/version`` (``scheduling.k8s.io/v1beta1``; ``v1`` for the core
    group), ``group/version/resource``, or ``api/all``, ``api/ga``, ``api/beta``,
    ``api/alpha``. Raises :class:`ControlPlaneOptionError`."""
    return _switches(
        config,
        option="runtime_config",
        keys="API group/versions",
        what="runtime config",
        noun="key",
        pattern=_GROUP_VERSION,
        want="a group/version such as 'scheduling.k8s.io/v1beta1', "
        "or 'api/all', 'api/ga', 'api/beta', 'api/alpha'",
    )


def _joined(items: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in items.items())


def feature_gate_flags(gates: FeatureGates) -> tuple[str, ...]:
    """``("--feature-gates=A=true,B=false",)``, or nothing for no gates."""
    return (f"--feature-gates={_joined(gates)}",) if gates else ()


def runtime_config_flags(config: RuntimeConfig) -> tuple[str, ...]:
    """``("--runtime-config=g/v=true",)``, or nothing for an empty config."""
    return (f"--runtime-config={_joined(config)}",) if config else ()


def parse_assignments(items: Iterable[str], what: str) -> dict[str, str]:
    """``["A=true", "B=false,C=true"]`` (a repeatable command-line option, each a
    comma-separated list) → ``{"A": "true", "B": "false", "C": "true"}``; a later assignment
    of a name wins. Values are checked by :func:`check_feature_gates` /
    :func:`check_runtime_config`. Raises :class:`ControlPlaneOptionError` for an item without
    ``=``."""
    out: dict[str, str] = {}
    for item in items:
        for part in item.split(","):
            name, sep, value = part.strip().partition("=")
            if not sep or not name.strip():
                raise ControlPlaneOptionError(f"{what}: expected NAME=true|false, got {part!r}")
            out[name.strip()] = value.strip()
    return out
