"""The final-state oracle: what every intent promised, and whether the server kept it.

The one checker of "is the final state right?" for the chaos benchmark, the stress run and the
tests. Record every submitted call with an :class:`IntentLog`, then :func:`score` it against the
server's final objects.

An *intent* is one call submitted to the dispatcher. It is reduced to the fields of the object it
sets (``strict``: the server must end up with exactly this value unless something later changed
the field) and the fields it may change as a side effect (``loose``: e.g. a binding replaces the
``PodScheduled`` condition). After the run, :func:`score` compares the server's final objects
with the intents and their futures:

* **lost intent** — a future that said ``SUCCESS``/``SKIPPED`` (or ``OVERWRITTEN``, when the call
  it was merged into did not fail or get cancelled) for an object that is still alive, while one
  of its strict fields does not hold the promised value and no later intent touched that field;
  or a preemption that said success while its pod is still alive; or
  a future that never resolved. Intents that the design lets a more relevant call supersede are
  exempt: one answered ``OVERWRITTEN`` whose intent a more relevant call carried on (a binding
  overwrites a pending status patch; the future's ``successor`` names the call, and without
  one, a more relevant intent after it is taken to have), and one answered ``SKIPPED`` while a
  more relevant intent of the object was still open. One answered ``SUCCESS`` landed, and is
  never exempt.
* **converged** — for each live object with intents, every touched field holds a value some
  intent may legitimately have left there: the value of the last intent that certainly applied,
  or of any later intent that may or may not have (failed, superseded, unresolved).

Field keys are tuples: ``("cond", type, key)`` for a pod condition's status/reason/message,
``("nnn",)``, ``("node",)``, ``("alloc",)``, ``("device",)`` (a claim's first allocated device
as ``(pool, device)``) and ``("reserved", consumer uid)``.

An intent recorded ``until_bound`` (a scheduler's status patch of a pod it could not place:
``PodScheduled=False``, a nomination) promises nothing once the server shows its pod bound: a
binding, by this scheduler or another, replaced the condition and ended the nomination.

**duplicate bindings** — :func:`duplicate_bindings` names the pods bound more than once, from
any of three witnesses: the bindings the server applied (its request log), the nodes an observer
saw each pod on (a watch or an informer), and intents whose future said ``SUCCESS`` for two
different nodes.

Pure rules: no clocks, no pykka. :func:`score` runs on the caller's thread;
:meth:`IntentLog.record` may be called from several threads (one thread per object keeps that
object's intents in submission order).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kdispatch.actors.model.errors import KdispatchError, Outcome
from kdispatch.actors.model.objects import get_path

Field = tuple[str, ...]

ABSENT = "<absent>"
"""The value of a field that is not set on the object."""

SUCCESSISH = frozenset({Outcome.SUCCESS, Outcome.SKIPPED, Outcome.OVERWRITTEN})


@dataclass(slots=True)
class Intent:
    """One submitted call and what it promised."""

    seq: int
    uid: str
    call_type: str
    relevance: int
    strict: dict[Field, Any]
    loose: dict[Field, Any] = field(default_factory=dict)
    future: Future[Outcome] | None = None
    rejected: str | None = None  # submit raised: the exception type name
    exclusive: bool = False  # a preemption: the object must be gone if it says success
    under_higher: bool = False  # a more relevant intent of the object was open at submit
    binding_node: str | None = None
    until_bound: bool = False  # promises nothing once the pod is bound (see the module docstring)

    def outcome(self) -> str:
        """``success``/``skipped``/``overwritten``, an exception type name, or ``unresolved``."""
        if self.rejected is not None:
            return f"rejected:{self.rejected}"
        fut = self.future
        if fut is None or not fut.done():
            return "unresolved"
        exc = fut.exception()
        if exc is not None:
            return type(exc).__name__
        return fut.result().value

    def successish(self) -> bool:
        """Whether the future promised the object is heading to the intended state."""
        fut = self.future
        return (
            fut is not None
            and fut.done()
            and fut.exception() is None
            and fut.result() in SUCCESSISH
        )


class IntentLog:
    """Intents in submission order, each stamped with whether a more relevant intent of its
    object was still open when it was submitted. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.intents: list[Intent] = []
        self._open_higher: dict[str, list[tuple[int, Future[Outcome]]]] = defaultdict(list)

    def record(
        self,
        uid: str,
        call_type: str,
        relevance: int,
        strict: dict[Field, Any],
        submit: Callable[[], Future[Outcome]],
        *,
        loose: dict[Field, Any] | None = None,
        exclusive: bool = False,
        node: str | None = None,
        until_bound: bool = False,
    ) -> Intent:
        """Submit one call with ``submit()`` and record what it promised: ``strict`` and
        ``loose`` fields, ``exclusive`` for a preemption, ``node`` for a binding,
        ``until_bound`` for a promise a binding ends. A submit that raises a kdispatch error is
        recorded as rejected; any other exception propagates."""
        with self._lock:
            opened = self._open_higher[uid]
            opened[:] = [(r, f) for r, f in opened if not f.done()]
            under_higher = any(r > relevance for r, _ in opened)
        intent = Intent(
            0,
            uid,
            call_type,
            relevance,
            strict,
            loose or {},
            exclusive=exclusive,
            under_higher=under_higher,
            binding_node=node,
            until_bound=until_bound,
        )
        try:
            intent.future = submit()
        except KdispatchError as exc:
            intent.rejected = type(exc).__name__
        with self._lock:
            intent.seq = len(self.intents)
            self.intents.append(intent)
            if intent.future is not None and relevance > 1:
                opened.append((relevance, intent.future))
        return intent


# --------------------------------------------------------------------------- field values


def condition_value(obj: Mapping[str, Any] | None, ctype: str, key: str) -> Any:
    """``key`` of the pod condition of type ``ctype`` (``ABSENT`` when missing)."""
    conds = get_path(obj, "status", "conditions")
    if isinstance(conds, list):
        for c in conds:
            if isinstance(c, Mapping) and c.get("type") == ctype:
                value = c.get(key)
                return ABSENT if value is None else value
    return ABSENT


def actual(obj: Mapping[str, Any] | None, f: Field) -> Any:
    """The value of field ``f`` on ``obj``."""
    head = f[0]
    if head == "cond":
        return condition_value(obj, f[1], f[2])
    if head == "nnn":
        return get_path(obj, "status", "nominatedNodeName") or ABSENT
    if head == "node":
        return get_path(obj, "spec", "nodeName") or ABSENT
    if head == "alloc":
        return get_path(obj, "status", "allocation") or ABSENT
    if head == "device":
        results = get_path(obj, "status", "allocation", "devices", "results")
        first = results[0] if isinstance(results, list) and results else None
        if isinstance(first, Mapping) and first.get("pool") and first.get("device"):
            return (first["pool"], first["device"])
        return ABSENT
    if head == "reserved":
        entries = get_path(obj, "status", "reservedFor")
        uids = {e.get("uid") for e in entries if isinstance(e, Mapping)} if entries else set()
        return f[1] in uids
    raise ValueError(f"unknown field {f!r}")


# --------------------------------------------------------------------------- scoring


@dataclass(slots=True)
class Score:
    """What :func:`score` found."""

    lost_intents: int = 0
    unresolved_futures: int = 0
    converged: float = 1.0
    live_objects_checked: int = 0
    live_objects_converged: int = 0
    fields_checked: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    lost_examples: list[str] = field(default_factory=list)
    unconverged_examples: list[str] = field(default_factory=list)


def _exemptions(items: list[Intent], later_max: list[int]) -> list[bool]:
    """Per intent (in submission order), whether the design lets it go unapplied although it
    said success (docs/behaviour.md): ``OVERWRITTEN`` by a more relevant call (a binding
    supersedes a pending status patch), or ``SKIPPED`` while a more relevant one was open. A
    call that said ``SUCCESS`` landed: a later call changes only the fields it touches.

    An ``OVERWRITTEN`` future that names its ``successor`` (the dispatcher's futures do) is followed
    along the calls that carried its intent: it is exempt only if one of them is a more
    relevant intent; merged into calls of its own type, it shares their fate instead. Where
    the chain leaves the log, or the future names no successor, a more relevant intent
    after it is taken to have superseded it."""
    relevance = {id(i.future): i.relevance for i in items if i.future is not None}
    out: list[bool] = []
    for k, i in enumerate(items):
        fut = i.future
        settled = fut is not None and fut.done() and fut.exception() is None
        outcome = fut.result() if settled else None  # type: ignore[union-attr]
        if outcome is Outcome.OVERWRITTEN:
            out.append(_superseded(fut, i.relevance, relevance, later_max[k]))
        else:
            out.append(i.under_higher and outcome is Outcome.SKIPPED)
    return out


def _superseded(fut: Any, own: int, relevance: Mapping[int, int], later_max_relevance: int) -> bool:
    """Whether an ``OVERWRITTEN`` future's intent was carried on by a more relevant call (see
    :func:`_exemptions`)."""
    successor = getattr(fut, "successor", None)
    seen = 0
    while successor is not None and seen < len(relevance):
        carrier = relevance.get(id(successor))
        if carrier is None:
            break  # not in the log: judge by what came after
        if carrier > own:
            return True
        if not (successor.done() and successor.exception() is None):
            return False
        if successor.result() is not Outcome.OVERWRITTEN:
            return False  # the call of its own type it was merged into decides its fate
        successor = getattr(successor, "successor", None)
        seen += 1
    return later_max_relevance > own


def score(
    intents: Iterable[Intent],
    final: Mapping[str, Mapping[str, Any] | None],
    initial: Mapping[str, Mapping[str, Any]],
    *,
    examples: int = 10,
) -> Score:
    """Score ``intents`` against the ``final`` server objects (uid → object, None when gone)
    and the ``initial`` ones (uid → object as created)."""
    out = Score()
    by_uid: dict[str, list[Intent]] = defaultdict(list)
    for i in intents:
        by_uid[i.uid].append(i)
        out.outcomes[i.outcome()] += 1
    checked = converged = 0
    for uid, submitted in by_uid.items():
        # a call refused at submit never reached the server: it neither promises nor allows
        items = sorted((i for i in submitted if i.rejected is None), key=lambda i: i.seq)
        obj = final.get(uid)
        live = obj is not None
        later_max = [0] * len(items)
        running = 0
        for k in range(len(items) - 1, -1, -1):
            later_max[k] = running
            running = max(running, items[k].relevance)
        last_touch: dict[Field, int] = {}
        for i in items:
            for f in (*i.strict, *i.loose):
                last_touch[f] = i.seq
        fates = _fates(items)
        exempt = _exemptions(items, later_max)
        for k, i in enumerate(items):
            if i.future is not None and not i.future.done():
                out.unresolved_futures += 1
                out.lost_intents += 1
                _note(out.lost_examples, examples, f"{uid}: {i.call_type} #{i.seq} unresolved")
                continue
            if not live or not fates[k]:
                continue
            if i.exclusive:
                out.lost_intents += 1
                _note(out.lost_examples, examples, f"{uid}: preemption said success, pod alive")
                continue
            if exempt[k] or _ended_by_binding(i, obj):
                continue
            for f, v in i.strict.items():
                if last_touch[f] == i.seq and actual(obj, f) != v:
                    out.lost_intents += 1
                    _note(
                        out.lost_examples,
                        examples,
                        f"{uid}: {i.call_type} #{i.seq} ({i.outcome()}) promised {f}={v!r}, "
                        f"server has {actual(obj, f)!r}",
                    )
                    break
        if live:
            checked += 1
            bad, fields = _unconverged(items, fates, exempt, obj, initial.get(uid))
            out.fields_checked += fields
            if bad is None:
                converged += 1
            else:
                _note(out.unconverged_examples, examples, f"{uid}: {bad}")
    out.live_objects_checked = checked
    out.live_objects_converged = converged
    out.converged = converged / checked if checked else 1.0
    return out


def _ended_by_binding(i: Intent, obj: Mapping[str, Any] | None) -> bool:
    """Whether ``i`` promised only until its pod is bound, and the pod is."""
    return i.until_bound and actual(obj, ("node",)) != ABSENT


def duplicate_bindings(
    applied: Iterable[str] = (),
    *,
    seen: Mapping[str, Iterable[str]] | None = None,
    intents: Iterable[Intent] = (),
) -> set[str]:
    """Pods bound more than once: keys that occur more than once in ``applied`` (one key per
    binding the server applied, from its request log), keys ``seen`` on more than one node (an
    observer's record: key → nodes), and uids of ``intents`` whose future said ``SUCCESS`` for
    two different ``binding_node`` values."""
    twice = {key for key, n in Counter(applied).items() if n > 1}
    twice.update(key for key, nodes in (seen or {}).items() if len(set(nodes)) > 1)
    promised: dict[str, set[str]] = defaultdict(set)
    for i in intents:
        fut = i.future
        if i.binding_node is None or fut is None or not fut.done() or fut.exception():
            continue
        if fut.result() is Outcome.SUCCESS:
            promised[i.uid].add(i.binding_node)
    twice.update(uid for uid, nodes in promised.items() if len(nodes) > 1)
    return twice


def _fates(items: list[Intent]) -> list[bool]:
    """Per intent (in submission order), whether it said success/skipped, or was overwritten
    (merged into a later call of its type) and the call it rode on, the next one of its type
    that was not overwritten itself, did. A caller's cancel or a failure of that call takes the
    merged intents with it."""
    fates = [False] * len(items)
    rides: dict[str, bool] = {}  # call type -> fate of the latest call not overwritten
    for k in range(len(items) - 1, -1, -1):
        i = items[k]
        if i.future is None:
            continue  # rejected at submit: nothing merged into it
        if i.successish() and i.future.result() is Outcome.OVERWRITTEN:
            fates[k] = rides.get(i.call_type, True)
        else:
            fates[k] = i.successish()
            rides[i.call_type] = fates[k]
    return fates


def _unconverged(
    items: list[Intent],
    fates: list[bool],
    exempt: list[bool],
    obj: Mapping[str, Any] | None,
    initial: Mapping[str, Any] | None,
) -> tuple[str | None, int]:
    """Why ``obj`` does not hold a value the intents allow (None when it does), and how many
    fields were checked."""
    allowed: dict[Field, set[Any]] = {}
    last_touch: dict[Field, int] = {}
    for i in items:
        for f in (*i.strict, *i.loose):
            last_touch[f] = i.seq
    for k, i in enumerate(items):
        if _ended_by_binding(i, obj):
            continue  # its fields were the binding's to change
        certain = fates[k] and not i.exclusive and not exempt[k]
        # an overwritten intent shares the fate of the call it was merged into: it decides a
        # field only when no later intent touched that field
        merged = certain and i.future is not None and i.future.result() is Outcome.OVERWRITTEN
        for f, v in i.strict.items():
            bucket = allowed.setdefault(f, {_freeze(actual(initial, f))})
            if certain and not (merged and last_touch[f] != i.seq):
                bucket.clear()
            bucket.add(_freeze(v))
        for f, v in i.loose.items():
            allowed.setdefault(f, {_freeze(actual(initial, f))}).add(_freeze(v))
    for f, values in allowed.items():
        have = _freeze(actual(obj, f))
        if have not in values:
            return f"{f} is {have!r}, allowed {sorted(map(repr, values))}", len(allowed)
    return None, len(allowed)


def _freeze(value: Any) -> Any:
    """A hashable form of a JSON value."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _note(bucket: list[str], limit: int, text: str) -> None:
    if len(bucket) < limit:
        bucket.append(text)
