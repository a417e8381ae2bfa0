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

The extra flags (``apiserver_args``, ``etcd_args``, ``scheduler_args``) come after the control
plane's own, so a repeated flag's value is the user's. Where the control plane itself reaches a
component through a flag, it follows the user's value or refuses it (:func:`check_wiring`):
``--secure-port=N`` of kube-apiserver or kube-scheduler is the port the control plane waits on
and writes into kubeconfigs (:func:`secure_port`); the flags that point at the files, keys and
addresses it made (kube-apiserver's ``--etcd-servers``, ``--tls-cert-file``,
``--tls-private-key-file``, ``--token-auth-file``; etcd's ``--listen-client-urls``,
``--advertise-client-urls``) are refused with :class:`ControlPlaneOptionError`.

Pure module: no processes, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

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


WIRING: Mapping[str, tuple[str, ...]] = {
    "apiserver_args": (
        "--etcd-servers",
        "--tls-cert-file",
        "--tls-private-key-file",
        "--token-auth-file",
    ),
    "etcd_args": ("--listen-client-urls", "--advertise-client-urls"),
    "scheduler_args": (),
}
"""The flags of each option that the control plane sets to reach or trust a component and
cannot take from the user: the etcd it started, the certificate its clients trust, the tokens it
authenticates with, the URL it polls."""


def flag_values(args: Sequence[str], flag: str) -> list[str | None]:
    """The values ``args`` give ``flag`` (``--name``), in order: ``--name=V`` and ``--name V``,
    also spelled with one dash (etcd's flag package takes both); None for a ``--name`` that ends
    the list. Pure."""
    name = flag.lstrip("-")
    out: list[str | None] = []
    for i, arg in enumerate(args):
        head, sep, value = arg.partition("=")
        if head not in (f"-{name}", f"--{name}"):
            continue
        if sep:
            out.append(value)
        else:
            out.append(args[i + 1] if i + 1 < len(args) else None)
    return out


def check_wiring(args: Sequence[str], option: str) -> None:
    """Refuse, with :class:`ControlPlaneOptionError`, a flag of :data:`WIRING` in ``args``
    (the extra flags of ``option``), and a ``--secure-port`` that is not a port
    (:func:`secure_port`). Pure."""
    for flag in WIRING.get(option, ()):
        if flag_values(args, flag):
            raise ControlPlaneOptionError(
                f"{option} may not set {flag}: the control plane sets it to reach the"
                " component it starts"
            )
    if option != "etcd_args":
        secure_port(args, option)


def secure_port(args: Sequence[str], option: str) -> int | None:
    """The port the last ``--secure-port`` of ``args`` (the extra flags of ``option``) gives,
    or None when there is none. The binary takes the last one, and so does the control plane:
    it waits for that port and writes it into kubeconfigs. Raises
    :class:`ControlPlaneOptionError` for a value that is not a port from 1 to 65535 (0 would
    turn HTTPS off). Pure."""
    values = flag_values(args, "--secure-port")
    if not values:
        return None
    value = values[-1]
    port = int(value) if value is not None and re.fullmatch(r"[0-9]{1,5}", value) else 0
    if not 1 <= port <= 65535:
        raise ControlPlaneOptionError(
            f"{option}: --secure-port must be a port from 1 to 65535, got {value!r}"
        )
    return port
