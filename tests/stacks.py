"""Starting a dispatcher with its informers for a test, and stopping them at its end."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.adapters.informer import Informer


def start_with_informers(
    dispatcher: Dispatcher,
    informers: Sequence[Informer],
    teardown: list[Callable[[], None]],
    sync_timeout: float,
) -> None:
    """Start ``dispatcher`` and ``informers`` (already attached to it) and wait until every
    informer synced; ``teardown`` gets the steps that stop the informers, then the dispatcher.
    Test thread."""

    def stop_informers() -> None:
        for inf in informers:
            assert inf.stop(timeout=10.0), f"informer {inf.name} did not stop"

    def stop_dispatcher() -> None:
        dispatcher.stop(timeout=10.0)

    teardown.append(stop_informers)
    teardown.append(stop_dispatcher)
    dispatcher.start()
    for inf in informers:
        inf.start()
    for inf in informers:
        assert inf.wait_for_sync(sync_timeout), f"informer {inf.name} never synced"


def run_teardown(steps: list[Callable[[], None]]) -> None:
    """Run ``steps`` last first; every step runs, even after a failing one, and the first
    failure is raised at the end. Test thread."""
    errors: list[BaseException] = []
    for step in reversed(steps):
        try:
            step()
        except BaseException as exc:  # collected: the other steps still run
            errors.append(exc)
    if errors:
        raise errors[0]
