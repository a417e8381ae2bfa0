"""A small but real multi-threaded scheduler on kdispatch — the project's main job.

Informer callbacks feed a priority queue; N scheduling threads filter (cpu/memory, nodeSelector,
devices), score (least allocated) and reserve in an assume-cache; bindings, status patches,
preemptions and ResourceClaim writes go through the dispatcher (or, with ``--pre-kep``, status
patches and preemptions block the scheduling thread while binding threads bind, as kube-scheduler
did before KEP-5229; with ``--all-blocking``, every call blocks the calling thread).
Modules, one concept each:

``podinfo``/``resources``/``taints`` parsed pods, quantities and taints · ``podgroups``
PodGroups and their members (gangs) · ``queue`` the scheduling queue · ``cache`` the
assume-cache · ``nominator`` nominations via ``view()`` ·
``framework`` filter and score · ``preemption`` victims and the #134249 guard · ``claims`` DRA
allocation · ``api``/``prekep``/``direct`` the three API layers (``limiter``: the pre-KEP
client-side rate limit) · ``steps`` ordered operations (a call group or a gang, or
done-callbacks where the API layer has none) · ``cycle`` the scheduler itself, with its Events ·
``tracker``/``verify`` intents and the end-of-run check ·
``workload``/``runner``/``progress``/``report``/``cli`` the main job.
"""

import time

STARTED = time.monotonic()
"""When this package was first imported: the start of ``python -m examples.scheduler``, whose
report counts its wall time from here (``command_s``)."""

from examples.scheduler.cycle import Phase, Scheduler, SchedulerConfig  # noqa: E402
from examples.scheduler.runner import RunConfig, run  # noqa: E402

__all__ = ["Phase", "RunConfig", "Scheduler", "SchedulerConfig", "run"]
