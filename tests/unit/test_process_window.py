"""SendWindow: the ProcessDispatcher's bound on calls in flight to its child, and the lanes by
relevance that the others wait in (the pure bookkeeping; the dispatcher's use of it is checked
against a child process in tests/integration/test_process_dispatcher.py)."""

from __future__ import annotations

from kdispatch.actors.facade.process_window import SendWindow

EVENT, STATUS, BINDING, DELETION = 0, 1, 2, 3
TYPES = {
    "event": ("event_record", EVENT),
    "status": ("pod_status_patch", STATUS),
    "binding": ("pod_binding", BINDING),
    "preemption": ("pod_preemption", DELETION),
}
"""Short name -> call type and its lane (relevance)."""


def window(limit: int | None, best_effort_limit: int | None = None) -> tuple[SendWindow, list[int]]:
    """A window and the ids of the calls it sent, in order."""
    sent: list[int] = []
    return SendWindow(limit, lambda data: sent.append(int(data)), best_effort_limit), sent


def submit(w: SendWindow, calls: str, first: int = 0) -> None:
    """Submit ``calls``, words ``uid:type`` (a short name of :data:`TYPES`), in their lanes, with
    the ids ``first``, ``first + 1``, ...; a call's payload is its id."""
    for fid, word in enumerate(calls.split(), first):
        uid, short = word.split(":")
        call_type, lane = TYPES[short]
        w.submit(fid, uid, call_type, lane, str(fid).encode())


def test_sends_at_once_while_there_is_room() -> None:
    w, sent = window(2)
    submit(w, "a:status b:status c:status")
    assert sent == [0, 1]
    assert (w.in_flight, w.waiting) == (2, 1)
    w.resolved(0)
    assert sent == [0, 1, 2]
    assert (w.in_flight, w.waiting) == (2, 0)


def test_without_a_limit_nothing_waits() -> None:
    w, sent = window(None)
    submit(w, " ".join(f"u{i}:status" for i in range(1000)))
    assert len(sent) == 1000 and w.waiting == 0


def test_higher_lanes_overtake_fifo_within_a_lane() -> None:
    w, sent = window(1)
    submit(w, "a:status b:status c:binding d:status e:preemption f:binding")
    for fid in (0, 4, 2, 5, 1):
        w.resolved(fid)
    assert sent == [0, 4, 2, 5, 1, 3]


def test_a_batch_of_results_frees_its_room_at_once() -> None:
    w, sent = window(2)
    submit(w, "u0:binding u1:binding u2:binding u3:binding u4:binding")
    w.resolved(0, 1, 99)  # 99: never sent (a query's id), ignored
    assert sent == [0, 1, 2, 3]
    assert (w.in_flight, w.waiting) == (2, 1)


def test_one_objects_calls_keep_their_order() -> None:
    w, sent = window(1)
    # x's binding (3) lifts x's status patch (1) along; its next status patch (4) joins x's lane
    submit(w, "busy:status x:status y:binding x:binding x:status")
    for fid in (0, 2, 1, 3):
        w.resolved(fid)
    assert sent == [0, 2, 1, 3, 4]
    assert w.waiting == 0


def test_withdraw_takes_an_objects_waiting_calls_by_type() -> None:
    w, sent = window(1)
    submit(w, "busy:status x:status x:binding y:binding")
    assert w.withdraw("x", "pod_binding") == [(2, "pod_binding")]
    assert w.withdraw("x") == [(1, "pod_status_patch")]
    assert w.withdraw("x") == []
    w.resolved(0)
    w.resolved(3)
    assert sent == [0, 3]
    assert (w.in_flight, w.waiting) == (0, 0)


def test_withdraw_all_then_later_calls_still_flow() -> None:
    w, sent = window(1)
    submit(w, "a:binding b:binding")
    assert w.withdraw_all() == [(1, "pod_binding")]
    w.resolved(0)
    submit(w, "c:binding", first=2)
    assert sent == [0, 2]


def test_flush_sends_everything_and_close_sends_nothing_more() -> None:
    w, sent = window(1)
    submit(w, "a:status b:status c:status d:binding")
    w.flush()
    assert sent == [0, 3, 1, 2]
    assert (w.in_flight, w.waiting) == (4, 0)
    submit(w, "e:status", first=4)
    assert w.close() == [(4, "pod_status_patch")]
    for fid in range(4):
        w.resolved(fid)
    submit(w, "f:status", first=5)
    assert sent == [0, 3, 1, 2]


def test_discard_forgets_a_call_either_way() -> None:
    w, sent = window(1)
    submit(w, "a:status b:status")
    w.discard(1)  # waiting: never sent
    w.discard(0)  # in flight: its room is free again
    submit(w, "c:status", first=2)
    assert sent == [0, 2]
    assert (w.in_flight, w.waiting) == (1, 0)


def test_best_effort_calls_keep_to_their_own_room() -> None:
    w, sent = window(4, best_effort_limit=1)
    # the Events' room is taken: e1 (1) waits; the rest of the window is the others'
    submit(w, "e0:event e1:event a:binding b:binding c:binding")
    assert sent == [0, 2, 3, 4]
    assert (w.in_flight, w.waiting) == (4, 1)
    w.resolved(2)  # room in the window, none for an Event
    assert sent == [0, 2, 3, 4]
    w.resolved(0)
    assert sent == [0, 2, 3, 4, 1]
    w.discard(1)  # resolved by the parent: its room is free again
    submit(w, "e5:event", first=5)
    assert sent[-1] == 5 and (w.in_flight, w.waiting) == (3, 0)


def test_flush_sends_best_effort_calls_beyond_their_room() -> None:
    w, sent = window(4, best_effort_limit=1)
    submit(w, "e0:event e1:event e2:event")
    w.flush()
    assert sent == [0, 1, 2]
    assert (w.in_flight, w.waiting) == (3, 0)
