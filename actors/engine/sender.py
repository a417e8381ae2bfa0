"""Sending one request of a call and classifying how it ended: the executor's I/O half.

:class:`Sender` carries out a ``Send`` through :class:`ChargedBackend` (every request passes
the send gate, takes a token and is counted) and returns a ``Done``: 409 → one GET, then
``CONFLICT``; 404 → ``NOT_FOUND``; 429, 5xx, timeouts and connection errors → ``RETRY`` with
the retry policy's delay; anything else → ``FAILED``. A verifying read (``Send.verify``) comes
back as read, for the call to judge. Runs on an executor worker, or on the object actor's turn
with inline sends.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Final

from loguru import logger

from kdispatch.actors.model.backend import ApiBackend
from kdispatch.actors.model.calls import Call
from kdispatch.actors.model.config import RetryConfig
from kdispatch.actors.model.effects import Done, Result, Send
from kdispatch.actors.model.errors import (
    ApiConnectionError,
    ApiError,
    BadResponseError,
    ConflictError,
    DispatcherClosed,
    LeadershipLost,
    NotFoundError,
    RequestDropped,
    RequestTimeoutError,
    TooManyRequestsError,
    without_tracebacks,
)
from kdispatch.actors.model.objects import get_path

from .metrics import Metrics

if TYPE_CHECKING:
    from .executor import Executor

__all__ = ["ChargedBackend", "Sender"]


_GONE: Final[Any] = object()


def retry_reason(err: ApiError) -> str:
    """The ``reason`` label of a retried request."""
    if isinstance(err, TooManyRequestsError):
        return "429"
    if isinstance(err, RequestTimeoutError):
        return "timeout"
    if isinstance(err, ApiConnectionError):
        return "connection"
    if isinstance(err, BadResponseError):  # a re-read answered with garbage
        return "bad_response"
    return "5xx"


def _gate_closed() -> LeadershipLost:
    """The error of a request the send gate refused."""
    return LeadershipLost("not sent: this replica may not write (leader lease)")


class ChargedBackend:
    """The backend as the requests of one attempt see it: every request takes a token (the
    grant's for the first one; later ones wait for theirs), then passes the send gate, checked
    after any wait and right before the request, and is counted. The sending thread."""

    __slots__ = ("_backend", "_call", "_executor", "first_verb", "requests")

    def __init__(self, executor: Executor, backend: ApiBackend, call: Call) -> None:
        self._executor = executor
        self._backend = backend
        self._call = call
        self.requests = 0
        self.first_verb: str | None = None  # counted with the attempt, once it ended

    def _before(self, verb: str) -> None:
        """Admit one request, or raise ``LeadershipLost`` when the send gate is closed. The
        first request's token was the grant's. The sending thread."""
        gate = self._executor.send_gate
        if self.requests:
            self._follow_up(verb, gate)
        elif gate is not None and not gate():
            raise _gate_closed()
        else:
            self.first_verb = verb
        self.requests += 1

    def _follow_up(self, verb: str, gate: Callable[[], bool] | None) -> None:
        """A request after the first waits for a token of its own (none if the gate is closed
        already); the gate is checked again after that wait, right before the request goes
        out, since the wait can outlast the lease (then the token goes back: nothing is sent).
        The sending thread."""
        if gate is not None and not gate():
            raise _gate_closed()
        ex = self._executor
        best_effort = self._call.best_effort
        ex.take_followup_token(best_effort)
        if gate is not None and not gate():
            ex.refund_token(best_effort)
            raise _gate_closed()
        ex.metrics.request(self._call.call_type, verb)

    def get(self, kind: str, namespace: str, name: str) -> Any:
        self._before("get")
        return self._backend.get(kind, namespace, name)

    def patch_status(self, *args: Any, **kwargs: Any) -> Any:
        self._before("patch")
        return self._backend.patch_status(*args, **kwargs)

    def bind(self, *args: Any, **kwargs: Any) -> None:
        self._before("create")
        self._backend.bind(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> None:
        self._before("delete")
        self._backend.delete(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if not callable(attr):
            return attr

        def charged(*args: Any, **kwargs: Any) -> Any:
            self._before(name)
            return attr(*args, **kwargs)

        return charged


@dataclass(slots=True)
class Sender:
    """Sends one attempt and classifies it (see the module docstring)."""

    executor: Executor
    backend: ApiBackend
    retry: RetryConfig
    metrics: Metrics
    _: KW_ONLY
    rand: Callable[[], float] = random.random
    log_calls: bool = False

    def send(self, send: Send) -> tuple[Done, int]:
        """Send ``send`` and classify how it ended: the ``Done`` and the requests it made. The
        sending thread; blocks for the request(s)."""
        call = send.call
        ref = call.ref
        backend = ChargedBackend(self.executor, self.backend, call)
        start = time.perf_counter()
        result = Result.SUCCESS
        obj = None
        error: BaseException | None = None
        delay = 0.0
        refused = 0  # the request a 409 or a 429 refused before it was handled (1: the first)
        try:
            if send.read:
                result, obj = self._read(backend, send)
            else:
                obj = call.send(backend, send.obj)
        # An expected error travels on as a value, without the frames it passed through
        # (without_tracebacks); a bug's keeps them, for whoever reads the call's cause.
        except NotFoundError as exc:
            result, error = Result.NOT_FOUND, without_tracebacks(exc)
        except ConflictError as exc:
            result, error = Result.CONFLICT, without_tracebacks(exc)
            refused = backend.requests
            try:
                obj = self._reread(backend, call)
            except ApiError as read_error:  # throttled or down: judge the 409 after a backoff
                result, error, obj = Result.RETRY, without_tracebacks(read_error), None
                delay = self._backoff(send, read_error)
            if obj is _GONE:
                result, obj = Result.NOT_FOUND, None
        except (DispatcherClosed, RequestDropped) as exc:
            # the send gate closed, or stopping mid-call
            result, error = Result.FAILED, without_tracebacks(exc)
        except ApiError as exc:
            error = without_tracebacks(exc)
            if isinstance(exc, TooManyRequestsError):
                refused = backend.requests
            if exc.retryable or (send.read and isinstance(exc, BadResponseError)):
                result = Result.RETRY
                delay = self._backoff(send, exc)
            else:
                result = Result.FAILED
        except Exception as exc:  # a bug in a call's send(): fail this call only
            result, error = Result.FAILED, exc
            logger.opt(exception=exc).error("{} send raised", call.call_type)
        # upstream's execution metrics count the call's own attempts, not its re-reads
        seconds = None if send.read else time.perf_counter() - start
        label = result.value
        self.metrics.sent(call.call_type, backend.first_verb, label, seconds)
        if result is not Result.SUCCESS or self.log_calls:
            logger.debug(
                "{call_type} {uid} attempt {attempt}: {result}",
                uid=ref.uid,
                call_type=call.call_type,
                attempt=send.attempt,
                result=label,
                pod=ref.name,
            )
        # A 409 or a 429 refuses a request before it is handled: when it refused the first
        # request, the attempt applied nothing (after a 409 only its re-read follows, and a
        # read applies nothing, answered or not), and the object stays trusted. A later
        # request's refusal may follow one that landed.
        applied = error is None or refused != 1
        return Done(call, result, obj, error, delay, applied), backend.requests

    @staticmethod
    def _read(backend: ChargedBackend, send: Send) -> tuple[Result, Any]:
        """A read of the call's object (the re-read before it, or its read-back): the object,
        or ``NOT_FOUND`` when the name holds another object now (a read-back returns it: the
        call judges whether it landed). An object without a UID raises ``BadResponseError``
        (garbage: the read is retried, never taken for a deletion)."""
        ref = send.call.ref
        obj = backend.get(ref.kind, ref.namespace, ref.name)
        uid = get_path(obj, "metadata", "uid")
        if not isinstance(uid, str):
            raise BadResponseError(f"re-read of {ref} answered without metadata.uid")
        if uid != ref.uid and not send.verify:
            return Result.NOT_FOUND, None
        return Result.SUCCESS, obj

    def _backoff(self, send: Send, exc: ApiError) -> float:
        """The delay before ``send``'s call goes again after the retryable ``exc``: doubled by
        each failure of the call so far, never shorter than the server's Retry-After; the
        retry is counted (not a verifying read's: it is never retried)."""
        if not send.verify:
            self.metrics.retry(send.call.call_type, retry_reason(exc))
        return self.retry.delay(send.failures + 1, exc.retry_after, self.rand())

    @staticmethod
    def _reread(backend: ChargedBackend, call: Any) -> Any:
        """The one GET after a 409: the fresh object; ``_GONE`` if the name now holds another
        object or none (for a call keyed by name, another UID is its own object, and none is
        None: its next attempt makes it again); None if the read failed for good (the actor
        re-reads later). A retryable failure (429, 5xx, timeout) raises: the call backs off,
        as after its own."""
        ref = call.ref
        try:
            fresh = backend.get(ref.kind, ref.namespace, ref.name)
        except NotFoundError:  # gone; one keyed by name is made again by its next attempt
            return None if call.keyed_by_name else _GONE
        except ApiError as exc:
            if exc.retryable:
                raise
            without_tracebacks(exc)  # dropped here: it leaves no cycle behind
            logger.debug("re-read after conflict failed: {}", exc)
            return None
        except (DispatcherClosed, RequestDropped) as exc:  # stopping, or no token to spare
            without_tracebacks(exc)
            logger.debug("re-read after conflict failed: {}", exc)
            return None
        except Exception:  # a bug in the backend's get(): the 409 stands, without an object
            logger.opt(exception=True).error("re-read after conflict raised")
            return None
        uid = get_path(fresh, "metadata", "uid")
        if not isinstance(uid, str):
            return None  # garbage: retry the conflict without a fresh basis (bounded)
        if uid != ref.uid and not call.keyed_by_name:
            return _GONE  # same name, another object: ours was deleted and re-created
        return fresh
