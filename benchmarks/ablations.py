"""What each of kdispatch's per-call features costs in W2, by switching it off.

Used by :mod:`benchmarks.callgrind_overhead` for its ``kdispatch-no-<feature>`` W2 contenders:
a ``Dispatcher`` built like the ``kdispatch`` contender, in a process where one feature's
per-call work was replaced by nothing (or by the least that keeps every W2 call succeeding
with one request). The difference with ``kdispatch`` in the same round is what that feature
costs a call. These patch internal classes: a diagnostic for the lean core's budget, never a
way to run the library.

* ``metrics``: no metric update (requests, executions and their durations, outcomes, merges,
  the pending-calls gauge);
* ``charging``: a call's ``send()`` gets the backend itself, not the wrapper that passes every
  request through the send gate, takes its token and counts it;
* ``lanes``: every object is granted on the spot and sent inline, with no lane, token bucket
  or worker-slot accounting;
* ``backlog``: the per-lane count of unresolved calls (``wait_backlog``, the drain) is not
  kept.
"""

from __future__ import annotations

from typing import Any, Final

ABLATIONS: Final = ("metrics", "charging", "lanes", "backlog")
"""The features that can be switched off, in the order they are reported."""


def switch_off(features: set[str]) -> None:
    """Replace the per-call work of ``features`` in this process (before the dispatcher is
    built). Raises ValueError for an unknown feature. Main thread."""
    from kdispatch.actors.engine import executor, metrics, object_actor, sender
    from kdispatch.actors.facade import dispatcher, dispatcher_like

    unknown = features - set(ABLATIONS)
    if unknown:
        raise ValueError(f"unknown ablations {sorted(unknown)}; known: {ABLATIONS}")

    def nothing(*args: Any, **kwargs: Any) -> None:
        del args, kwargs

    if "metrics" in features:
        for name in ("request", "sent", "outcome", "merge"):
            setattr(metrics.Metrics, name, nothing)
        object_actor.ObjectActor._update_pending = nothing  # type: ignore[method-assign]
    if "charging" in features:

        class Uncharged:
            """The backend's own method, reported as the attempt's one request."""

            requests = 1
            first_verb = "patch"

            def __init__(self, backend: Any) -> None:
                self.patch_status = backend.patch_status

        made: dict[int, Uncharged] = {}

        def uncharged(executor: Any, backend: Any, call: Any) -> Uncharged:
            del executor, call
            found = made.get(id(backend))
            if found is None:
                found = made[id(backend)] = Uncharged(backend)
            return found

        sender.ChargedBackend = uncharged  # type: ignore[misc,assignment]
    if "lanes" in features:

        def job(self: Any, actor: Any, send: Any) -> Any:
            del actor
            return self.sender.send(send)[0]

        executor.Executor.ready = lambda self, uid, actor, relevance, not_before: True  # type: ignore[method-assign]
        executor.Executor.job = job  # type: ignore[method-assign]
    if "backlog" in features:
        dispatcher_like.Backlog.add = nothing  # type: ignore[method-assign]
        dispatcher.Dispatcher._on_resolved = nothing  # type: ignore[method-assign]
