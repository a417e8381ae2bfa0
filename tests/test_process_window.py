"""SendWindow: the ProcessDispatcher's bound on calls in flight to its child, and the lanes by
relevance that the others wait in (the pure bookkeeping; the dispatcher's use of it is checked
against a child process in tests/test_process_dispatcher.py)."""

from __future__ import annotations

from kdispatch.adapters.process_window import SendWindow

EVENT, STATUS, BINDING, DELETION = 0, 1, 2, 3


def window(
    limit: int | None, best_effort_limit: int | None = None
) -> tuple[SendWindow, list[bytes]]:
    sent: list[bytes] = []
    return SendWindow(limit, sent.append, best_effort_limit), sent


def test_sends_at_once_while_there_is_room() -> None:
    w, sent = window(2)
    w.submit(0, "a", "pod_status_patch", STATUS, b"0")
    w.submit(1, "b", "pod_status_patch", STATUS, b"1")
    w.submit(2, "c", "pod_status_patch", STATUS, b"2")
    assert sent == [b"0", b"1"]
    assert (w.in_flight, w.waiting) == (2, 1)
    w.resolved(0)
    assert sent == [b"0", b"1", b"2"]
    assert (w.in_flight, w.waiting) == (2, 0)


def test_without_a_limit_nothing_waits() -> None:
    w, sent = window(None)
    for i in range(1000):
        w.submit(i, f"u{i}", "pod_status_patch", STATUS, str(i).encode())
    assert len(sent) == 1000 and w.waiting == 0


def test_higher_lanes_overtake_fifo_within_a_lane() -> None:
    w, sent = window(1)
    w.submit(0, "a", "pod_status_patch", STATUS, b"s0")
    w.submit(1, "b", "pod_status_patch", STATUS, b"s1")
    w.submit(2, "c", "pod_binding", BINDING, b"b2")
    w.submit(3, "d", "pod_status_patch", STATUS, b"s3")
    w.submit(4, "e", "pod_preemption", DELETION, b"d4")
    w.submit(5, "f", "pod_binding", BINDING, b"b5")
    for fid in (0, 4, 2, 5, 1):
        w.resolved(fid)
    assert sent == [b"s0", b"d4", b"b2", b"b5", b"s1", b"s3"]


def test_a_batch_of_results_frees_its_room_at_once() -> None:
    w, sent = window(2)
    for i in range(5):
        w.submit(i, f"u{i}", "pod_binding", BINDING, str(i).encode())
    w.resolved(0, 1, 99)  # 99: never sent (a query's id), ignored
    assert sent == [b"0", b"1", b"2", b"3"]
    assert (w.in_flight, w.waiting) == (2, 1)


def test_one_objects_calls_keep_their_order() -> None:
    w, sent = window(1)
    w.submit(0, "busy", "pod_status_patch", STATUS, b"busy")
    w.submit(1, "x", "pod_status_patch", STATUS, b"x-status")
    w.submit(2, "y", "pod_binding", BINDING, b"y-bind")
    w.submit(3, "x", "pod_binding", BINDING, b"x-bind")  # lifts x's status patch along
    w.submit(4, "x", "pod_status_patch", STATUS, b"x-status-2")  # joins x's lane
    for fid in (0, 2, 1, 3):
        w.resolved(fid)
    assert sent == [b"busy", b"y-bind", b"x-status", b"x-bind", b"x-status-2"]
    assert w.waiting == 0


def test_withdraw_takes_an_objects_waiting_calls_by_type() -> None:
    w, sent = window(1)
    w.submit(0, "busy", "pod_status_patch", STATUS, b"busy")
    w.submit(1, "x", "pod_status_patch", STATUS, b"x-status")
    w.submit(2, "x", "pod_binding", BINDING, b"x-bind")
    w.submit(3, "y", "pod_binding", BINDING, b"y-bind")
    assert w.withdraw("x", "pod_binding") == [(2, "pod_binding")]
    assert w.withdraw("x") == [(1, "pod_status_patch")]
    assert w.withdraw("x") == []
    w.resolved(0)
    w.resolved(3)
    assert sent == [b"busy", b"y-bind"]
    assert (w.in_flight, w.waiting) == (0, 0)


def test_withdraw_all_then_later_calls_still_flow() -> None:
    w, sent = window(1)
    w.submit(0, "a", "pod_binding", BINDING, b"a")
    w.submit(1, "b", "pod_binding", BINDING, b"b")
    assert w.withdraw_all() == [(1, "pod_binding")]
    w.resolved(0)
    w.submit(2, "c", "pod_binding", BINDING, b"c")
    assert sent == [b"a", b"c"]


def test_flush_sends_everything_and_close_sends_nothing_more() -> None:
    w, sent = window(1)
    for i, uid in enumerate("abc"):
        w.submit(i, uid, "pod_status_patch", STATUS, uid.encode())
    w.submit(3, "d", "pod_binding", BINDING, b"d")
    w.flush()
    assert sent == [b"a", b"d", b"b", b"c"]
    assert (w.in_flight, w.waiting) == (4, 0)
    w.submit(4, "e", "pod_status_patch", STATUS, b"e")
    assert w.close() == [(4, "pod_status_patch")]
    for fid in range(4):
        w.resolved(fid)
    w.submit(5, "f", "pod_status_patch", STATUS, b"f")
    assert sent == [b"a", b"d", b"b", b"c"]


def test_discard_forgets_a_call_either_way() -> None:
    w, sent = window(1)
    w.submit(0, "a", "pod_status_patch", STATUS, b"a")
    w.submit(1, "b", "pod_status_patch", STATUS, b"b")
    w.discard(1)  # waiting: never sent
    w.discard(0)  # in flight: its room is free again
    w.submit(2, "c", "pod_status_patch", STATUS, b"c")
    assert sent == [b"a", b"c"]
    assert (w.in_flight, w.waiting) == (1, 0)


def test_best_effort_calls_keep_to_their_own_room() -> None:
    w, sent = window(4, best_effort_limit=1)
    w.submit(0, "e0", "event_record", EVENT, b"e0")
    w.submit(1, "e1", "event_record", EVENT, b"e1")  # the Events' room is taken: waits
    w.submit(2, "a", "pod_binding", BINDING, b"a")  # the rest of the window is the others'
    w.submit(3, "b", "pod_binding", BINDING, b"b")
    w.submit(4, "c", "pod_binding", BINDING, b"c")
    assert sent == [b"e0", b"a", b"b", b"c"]
    assert (w.in_flight, w.waiting) == (4, 1)
    w.resolved(2)  # room in the window, none for an Event
    assert sent == [b"e0", b"a", b"b", b"c"]
    w.resolved(0)
    assert sent == [b"e0", b"a", b"b", b"c", b"e1"]
    w.discard(1)  # resolved by the parent: its room is free again
    w.submit(5, "e5", "event_record", EVENT, b"e5")
    assert sent[-1] == b"e5" and (w.in_flight, w.waiting) == (3, 0)


def test_flush_sends_best_effort_calls_beyond_their_room() -> None:
    w, sent = window(4, best_effort_limit=1)
    for i in range(3):
        w.submit(i, f"e{i}", "event_record", EVENT, f"e{i}".encode())
    w.flush()
    assert sent == [b"e0", b"e1", b"e2"]
    assert (w.in_flight, w.waiting) == (3, 0)
