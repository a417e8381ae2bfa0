"""The lifecycle of one object's actor, the one automaton of the per-object rules.

:data:`LIFECYCLE` maps ``(life, input)`` to the next life (a pair it lacks keeps the life); one
state-triggered rule completes it: ``RETIRING`` with nothing in flight is ``RETIRED`` at once.
Whether calls wait or one is in flight is a view of the queue (:class:`State`). Pure.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["LIFECYCLE", "Input", "InvalidTransition", "Life", "State", "lifecycle_markdown"]


class InvalidTransition(RuntimeError):
    """An input the machine cannot take now (a ``done`` with nothing in flight): a bug in the
    shell or the executor."""


class Life(enum.Enum):
    """Whether the object lives."""

    LIVE = "live"
    RETIRING = "retiring"  # gone; the request in flight has yet to end
    RETIRED = "retired"  # gone for good; the actor leaves


class State(enum.Enum):
    """The coarse state of one object (:attr:`ObjectState.state`): not a machine of its own
    but a view of the life and the queue, for logs and tests."""

    IDLE = "idle"
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    IN_FLIGHT_PENDING = "in_flight_pending"
    RETIRING = "retiring"
    RETIRED = "retired"


class Input(enum.Enum):
    """The inputs that move the life (every other input keeps it)."""

    DONE = "done"
    GONE = "gone"  # a request found the object gone (404) or deleted it
    DELETED = "deleted"
    CLOSE = "close"


_LIVE, _RETIRING, _RETIRED = Life.LIVE, Life.RETIRING, Life.RETIRED

LIFECYCLE: Final[dict[tuple[Life, Input], Life]] = {
    (_LIVE, Input.DELETED): _RETIRING,  # informer delete (or a synthetic one)
    (_LIVE, Input.GONE): _RETIRING,  # 404, or a deletion of ours succeeded
    (_LIVE, Input.CLOSE): _RETIRED,  # dispatcher shutdown: everything resolves
    (_RETIRING, Input.DONE): _RETIRED,  # the last request ended
    (_RETIRING, Input.CLOSE): _RETIRED,
}
"""The event-triggered transitions (the module tells the state-triggered rule)."""


def lifecycle_markdown() -> str:
    """:data:`LIFECYCLE` as a Markdown table (docs/behaviour.md shows it; a test keeps the two
    in step): one row per input that moves the life, one column per life, the next life in
    each cell (blank: the input keeps the life)."""
    lives = list(Life)
    inputs = [i for i in Input if any((life, i) in LIFECYCLE for life in lives)]
    lines = [
        "| input \\ life | " + " | ".join(f"`{life.value}`" for life in lives) + " |",
        "|---" * (len(lives) + 1) + "|",
    ]
    for inp in inputs:
        cells = [LIFECYCLE.get((life, inp)) for life in lives]
        row = " | ".join("" if c is None else f"`{c.value}`" for c in cells)
        lines.append(f"| `{inp.value}` | {row} |")
    return "\n".join(lines) + "\n"
