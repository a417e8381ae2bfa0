"""Resource quantities: parse Kubernetes quantities and sum a pod's requests.

CPU is counted in millicores and memory in bytes, both as ints, so fit checks are exact integer
arithmetic. Pure module: no threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final

from kubernetes import utils as _k8s_utils

from kdispatch import InvalidObjectError

_PARSE: Callable[[object], object] = _k8s_utils.parse_quantity

GPU_RESOURCE: Final = "example.com/gpu"
"""Extended resource a node advertises for its devices (claims are allocated from them)."""


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity (``"100m"``, ``"1.5Gi"``, ``"2"``, ``"1e3"``, or a number) as a
    Decimal, parsed by the official client's ``kubernetes.utils.parse_quantity``. Raises
    :class:`InvalidObjectError` for anything else (booleans included, which the client would
    read as 1 and 0)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidObjectError(f"invalid quantity {value!r}")
    try:
        quantity: object = _PARSE(value)
    except (ValueError, ArithmeticError):
        raise InvalidObjectError(f"invalid quantity {value!r}") from None
    if not isinstance(quantity, Decimal):  # pragma: no cover - the client returns a Decimal
        raise InvalidObjectError(f"invalid quantity {value!r}")
    return quantity


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
