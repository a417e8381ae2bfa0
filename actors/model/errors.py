"""Typed errors and call outcomes: input errors raised at the API boundary
(``InvalidInputError``), call outcomes (``Outcome``, ``CallOutcomeError``) and backend errors
(``ApiError``), which the executor classifies into retries, rebases and failures. Pure module.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, TypedDict, TypeVar, Unpack

if TYPE_CHECKING:  # objects.py imports this module: the type only, never at run time
    from .objects import ObjectRef

_E = TypeVar("_E", bound=BaseException)


class KdispatchError(Exception):
    """Base class of every error this library raises."""


# --------------------------------------------------------------------------- input errors


class InvalidInputError(KdispatchError, ValueError):
    """Bad input rejected at the API boundary (wrong type, malformed name, bad config, ...)."""


class InvalidObjectError(InvalidInputError):
    """An object (Pod, ResourceClaim, ...) lacks metadata or has malformed identity fields."""


class InvalidCallError(InvalidInputError):
    """A call was built with invalid arguments, or submitted for an object of the wrong kind."""


class UnknownCallTypeError(InvalidInputError):
    """A call type that was never registered."""


class CallTypeRegistrationError(InvalidInputError):
    """A call type registration was rejected (duplicate type, missing or clashing relevance)."""


class InvalidConfigError(InvalidInputError):
    """A configuration value is out of range."""


class DispatcherClosed(KdispatchError):
    """The dispatcher is stopped (or stopping): raised by ``submit`` after ``stop``, and the outcome
    of every call still pending when ``stop`` reached its deadline."""


class LeadershipLost(DispatcherClosed):
    """This replica lost (or could not renew) its leader lease: intake stopped and every call
    not yet sent resolves with this. Nothing is sent after the renew deadline; a request already
    on the wire when the lease was lost cannot be recalled (Kubernetes has no fencing tokens)."""


class ActorLimitExceeded(KdispatchError):
    """Spawning one more object actor would exceed the registry's ``max_live`` cap."""


# --------------------------------------------------------------------------- call outcomes


class Outcome(enum.Enum):
    """The successful outcomes of a call; ``future.result()`` returns one of them.

    Like upstream, waiting callers treat ``SKIPPED`` and ``OVERWRITTEN`` as success: the object
    ends up in (or moves towards) the intended state without this exact request being sent.
    """

    SUCCESS = "success"
    SKIPPED = "skipped"  # no-op against the newest object, or less relevant than a tracked call
    OVERWRITTEN = "overwritten"  # merged into / replaced by a newer pending call


class CallOutcomeError(KdispatchError):
    """A call did not (and will not) reach the server; ``future.result()`` raises it.

    ``ref`` (an :class:`~kdispatch.ObjectRef`, when the raiser knows it) names
    the object: ``str(error)`` then starts with its kind, namespace/name and UID, e.g.
    ``Pod default/web-0 (4f1c...): object deleted``. ``uid`` defaults to ``ref.uid``.
    ``cause``: the underlying exception, where there is one (also set as ``__cause__``).
    """

    result_label = "error"

    def __init__(
        self,
        message: str,
        *,
        uid: str = "",
        call_type: str = "",
        cause: BaseException | None = None,
        ref: ObjectRef | None = None,
    ) -> None:
        super().__init__(message)
        self.uid = uid or (ref.uid if ref is not None else "")
        self.call_type = call_type
        self.ref = ref
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause

    def __str__(self) -> str:
        message = super().__str__()
        ref = getattr(self, "ref", None)  # absent on instances unpickled from older versions
        if ref is None or str(ref) in message:
            return message
        return f"{ref}: {message}"


class CallCancelled(CallOutcomeError):
    """Withdrawn before it was sent: object deleted, preempted, or cancelled by the caller."""

    result_label = "cancelled"


class DependencyFailed(CallCancelled):
    """A prerequisite call (on another object) failed or was cancelled, so this call was never
    sent; ``cause`` holds the prerequisite's exception."""


class CallConflict(CallOutcomeError):
    """The server kept answering 409 Conflict after the bounded number of rebases."""

    result_label = "conflict"


class CallStale(CallOutcomeError):
    """The object changed after the caller decided, in a way that makes the intent wrong (for
    example ``PodScheduled=False`` for a pod that has been bound since): nothing was sent, and
    the caller should decide again on the newer object. Not a success."""

    result_label = "stale"


class ObjectNotFound(CallOutcomeError):
    """The server answered 404: the object no longer exists."""

    result_label = "not_found"


class CallFailed(CallOutcomeError):
    """The call failed for good (permanent error, retries exhausted, or a bug in a merger);
    ``cause`` holds the underlying exception (a request's ``ApiError`` comes without its
    traceback, so it holds no frames)."""

    result_label = "failed"


class RequestDropped(KdispatchError):
    """A best-effort call (an Event) was dropped unsent: ``ExecutorConfig.events_max_pending``
    Events already waited for a worker and a token (or, with a budget shared with the calls,
    its follow-up request found no spare token). The ``cause`` of the call's ``CallFailed``;
    counted in ``kdispatch_events_dropped_total``."""


# --------------------------------------------------------------------------- backend errors


def without_tracebacks(error: _E) -> _E:
    """``error`` itself, with its traceback and those of its causes and contexts dropped, for an
    error kept as a value (a request's error carried to a call's future). A traceback holds the
    frames it passed through and, through them, whatever their callers held, the error among it:
    a reference cycle that only the garbage collector frees, and never once ``gc_freeze`` froze
    it. Any thread."""
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo:
        link = todo.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        link.__traceback__ = None
        todo.extend(e for e in (link.__cause__, link.__context__) if e is not None)
    return error


class ApiErrorFacts(TypedDict, total=False):
    """What an :class:`ApiError` subclass may state in its class header."""

    status: int
    reason: str
    retryable: bool
    ambiguous: bool


class ApiError(KdispatchError):
    """An error answered by (or on the way to) the apiserver.

    ``retryable``: the same request may succeed later; ``retry_after``: the server's
    Retry-After in seconds (0 when none), honoured on 429 and 5xx. ``ambiguous``: no answer
    says whether the request was applied; a call whose last request ended so reads its object
    once before it fails (:meth:`~kdispatch.Call.landed`). A subclass states its facts in its
    header (``class NotFoundError(ApiError, status=404, reason="NotFound")``).
    """

    status: int = 0
    retryable: bool = False
    ambiguous: bool = False
    reason: str = "Unknown"

    def __init_subclass__(cls, **facts: Unpack[ApiErrorFacts]) -> None:
        super().__init_subclass__()
        for name, value in facts.items():
            setattr(cls, name, value)

    def __init__(
        self, message: str = "", *, status: int | None = None, retry_after: float = 0.0
    ) -> None:
        super().__init__(message or self.reason)
        if status is not None:
            self.status = status
        self.retry_after = max(0.0, float(retry_after))


class NotFoundError(ApiError, status=404, reason="NotFound"):
    """404: the object does not exist (any more)."""


class ConflictError(ApiError, status=409, reason="Conflict"):
    """409 on a precondition (UID or resourceVersion) or an optimistic-concurrency failure."""


class AlreadyExistsError(ConflictError, reason="AlreadyExists"):
    """409 because the object (or a binding) already exists."""


class TooManyRequestsError(ApiError, status=429, retryable=True, reason="TooManyRequests"):
    """429; ``retry_after`` is the server's requested wait in seconds (0 when it gave none)."""

    def __init__(self, message: str = "", *, retry_after: float = 0.0) -> None:
        super().__init__(message, retry_after=retry_after)


class ServerError(ApiError, status=500, retryable=True, reason="InternalError"):
    """5xx."""


class RequestTimeoutError(ApiError, status=504, retryable=True, ambiguous=True, reason="Timeout"):
    """The client-side request timeout fired, or the server answered 504 (which does not say
    whether the request took effect)."""


class ApiConnectionError(
    ApiError, status=0, retryable=True, ambiguous=True, reason="ConnectionError"
):
    """The connection failed or was reset before a reply arrived (the request may have been
    applied)."""


class InvalidRequestError(ApiError, status=422, reason="Invalid"):
    """400/422 and other permanent 4xx: retrying the same request cannot help."""


class UnauthorizedError(InvalidRequestError, status=401, reason="Unauthorized"):
    """401: the credentials were refused. Never retried."""


class ForbiddenError(InvalidRequestError, status=403, reason="Forbidden"):
    """403: RBAC (or an admission webhook) forbids the request. Never retried."""


class BadResponseError(ApiError, status=0, reason="BadResponse"):
    """The server's reply could not be understood (garbage, wrong kind, missing fields)."""


class GoneError(ApiError, status=410, reason="Expired"):
    """410: the requested resourceVersion is older than the server's watch history."""


class InformerSyncTimeout(KdispatchError, TimeoutError):
    """An informer's ``wait_for_sync(timeout)`` ran out before its first list arrived (a
    ``TimeoutError`` too). ``last_error`` is the newest list/watch failure (None if the server
    simply did not answer in time); the message names the cause (``informer pods (Pod) did not
    sync within 2 s: cannot connect to http://127.0.0.1:1: ...``)."""

    def __init__(
        self, message: str, *, last_error: BaseException | None = None, cause: str = ""
    ) -> None:
        super().__init__(message)
        self.last_error = last_error
        self.cause = cause
        """The cause alone, as the message states it (``cannot connect to ...``)."""


class UnknownKindError(InvalidInputError):
    """A kind that is not in the kind table (:class:`~kdispatch.KindTable`): register it
    (:func:`~kdispatch.register_kind`), or fill the table from the apiserver's discovery
    documents (:func:`~kdispatch.register_from_discovery`)."""


class DisruptionBudgetError(TooManyRequestsError, reason="DisruptionBudget"):
    """429 on ``pods/eviction``: evicting the pod now would violate a PodDisruptionBudget
    ("Cannot evict pod as it would violate the pod's disruption budget."). Retryable: the
    budget frees up as other pods become ready."""


# --------------------------------------------------------------------------- call groups


class InvalidPrerequisiteError(InvalidInputError):
    """``after=`` holds something that is not a prerequisite of this dispatcher: each item
    must be a future that this dispatcher's ``submit``/``asubmit``/``preempt`` returned, or the
    ``future`` of one of its call groups."""


class DependencyCycleError(InvalidInputError):
    """A call's prerequisites would wait for the call itself, so none of them could ever be
    sent. Refused at submit, where the cycle would close: the call's prerequisites, followed
    through held calls and call groups, reach the group it joins, or a call not yet resolved
    on the call's own object."""


class GroupClosedError(InvalidInputError):
    """A step was added to a call group that is sealed (``seal()``, or the end of its
    ``with`` block): its ``future`` may already have resolved."""


class GroupsNotSupported(InvalidInputError):
    """This dispatcher does not hold calls (``after=``) or build call groups (e.g.
    ``ProcessDispatcher``): use an in-process ``Dispatcher``, or chain the futures yourself."""


class GroupFailed(KdispatchError):
    """A call group's ``future`` raises this when at least one step did not succeed (failed,
    cancelled, or never sent because a prerequisite failed). ``error`` is the first step error
    (in the order they resolved); ``results`` holds every step's outcome or exception, in the
    order the steps were submitted; ``cancelled`` is the cause label if the group was
    cancelled (``"caller"``, ``"owner_deleted"``, ...), else None."""

    def __init__(
        self,
        message: str,
        *,
        error: BaseException | None,
        results: list[Outcome | BaseException],
        cancelled: str | None = None,
    ) -> None:
        super().__init__(message)
        self.error = error
        self.results = results
        self.cancelled = cancelled
        if error is not None:
            self.__cause__ = error


class GangPartiallyBound(GroupFailed):
    """A gang's ``future`` raises this when its members were released and some did not land:
    ``bound`` and ``failed`` name the member pods (:class:`~kdispatch.ObjectRef`) whose binding
    succeeded and those whose binding did not, in submission order. The bound ones stay bound:
    the caller decides what to do with the others (for example, schedule them again). A member
    withdrawn after its request's reply was lost is in ``failed`` even if that request landed
    (docs/gangs.md): the pod's watch event tells."""

    def __init__(
        self,
        message: str,
        *,
        error: BaseException | None,
        results: list[Outcome | BaseException],
        cancelled: str | None = None,
        bound: list[ObjectRef],
        failed: list[ObjectRef],
    ) -> None:
        super().__init__(message, error=error, results=results, cancelled=cancelled)
        self.bound = bound
        self.failed = failed
