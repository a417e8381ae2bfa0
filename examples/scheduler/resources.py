"""Resource quantities: parse Kubernetes quantities and sum a pod's requests.

CPU is counted in millicores and memory in bytes, both as ints, so fit checks are exact integer
arithmetic. Pure module: no threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from kdispatch.actors.errors import InvalidObjectError

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

GPU_RESOURCE: Final = "example.com/gpu"
"""Extended resource a node advertises for its devices (claims are allocated from them)."""


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity (``"100m"``, ``"1.5Gi"``, ``"2"``, ``"1e3"``, or a number) as a
    Decimal. Raises :class:`InvalidObjectError` for anything else."""
    if isinstance(value, bool):
        raise InvalidObjectError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str) or not value:
        raise InvalidObjectError(f"invalid quantity {value!r}")
    text = value.strip()
    try:
        for suffix, factor in _BINARY.items():
            if text.endswith(suffix):
                return Decimal(text[: -len(suffix)]) * factor
        if text[-1] in _DECIMAL and not text[-1].isdigit():
            return Decimal(text[:-1]) * _DECIMAL[text[-1]]
        return Decimal(text)
    except (InvalidOperation, IndexError):
        raise InvalidObjectError(f"invalid quantity {value!r}") from None


def cpu_millis(value: object) -> int:
    """A CPU quantity in millicores (rounded up, as the scheduler does)."""
    milli = parse_quantity(value) * 1000
    return int(milli.to_integral_value(rounding="ROUND_CEILING"))


def mem_bytes(value: object) -> int:
    """A memory quantity in bytes (rounded up)."""
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def _requests(container: object) -> Mapping[str, Any]:
    if not isinstance(container, Mapping):
        return {}
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    requests = resources.get("requests")
    return requests if isinstance(requests, Mapping) else {}


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """``(cpu millicores, memory bytes)`` a pod requests: the sum over its containers, or the
    largest init container if that is more (the scheduler's effective request)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return 0, 0
    cpu = mem = 0
    for container in spec.get("containers") or ():
        req = _requests(container)
        cpu += cpu_millis(req.get("cpu", 0))
        mem += mem_bytes(req.get("memory", 0))
    for container in spec.get("initContainers") or ():
        req = _requests(container)
        cpu = max(cpu, cpu_millis(req.get("cpu", 0)))
        mem = max(mem, mem_bytes(req.get("memory", 0)))
    return cpu, mem


def node_allocatable(node: Mapping[str, Any]) -> tuple[int, int, int]:
    """``(cpu millicores, memory bytes, devices)`` a node offers (``status.allocatable``, the
    devices from the :data:`GPU_RESOURCE` extended resource)."""
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(alloc, Mapping):
        return 0, 0, 0
    devices = int(parse_quantity(alloc.get(GPU_RESOURCE, 0)))
    return cpu_millis(alloc.get("cpu", 0)), mem_bytes(alloc.get("memory", 0)), devices
