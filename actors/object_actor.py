"""One lightweight actor per object (Pod, ResourceClaim, ...), keyed by UID.

The actor is a thin shell around the object's pure state machine
(:class:`~kdispatch.actors.object_state.ObjectState`), where every per-object rule lives: it
feeds the machine one message at a time and carries out the effects it returns (resolve a
future, tell the executor there is work, hand over a job or refund a grant, retire). Since one
actor handles one message at a time, the rules need no locks; since only the actor resolves
its futures, each future resolves exactly once.

All ``on_*`` methods run on a pool thread of :mod:`.runtime`, one message at a time per actor.
They never block: the executor and the actor talk only in messages and non-blocking calls
(with a non-blocking backend the executor runs the request on this thread and returns its
``Done`` at once, and the whole call is one turn).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import InvalidStateError
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import pykka
from loguru import logger

from .calls import Call
from .config import RetryConfig
from .errors import (
    CallCancelled,
    CallFailed,
    CallOutcomeError,
    DispatcherClosed,
    Outcome,
)
from .messages import (
    CallFuture,
    Cancel,
    Close,
    Deleted,
    FailDependency,
    Grant,
    Job,
    Observed,
    Release,
    Revoke,
    Submit,
    View,
    Withdraw,
)
from .metrics import Metrics
from .object_state import (
    Done,
    Effect,
    Merged,
    ObjectState,
    Ready,
    Rebased,
    Refund,
    Resolve,
    Retire,
    Send,
    about,
)
from .registry import ReapRequest, Registry
from .runtime import ActorPool, PooledActor


class ExecutorPort(Protocol):
    """What an object actor needs of the executor (see :class:`~.executor.Executor`)."""

    def ready(self, uid: str, ref: Any, relevance: int, not_before: float) -> bool: ...

    def job(self, job: Job) -> Done | None: ...

    def refund(self, uid: str | None = None) -> None: ...


@dataclass(slots=True)
class ActorContext:
    """What every object actor of one dispatcher shares (one instance per dispatcher)."""

    registry: Registry
    executor: ExecutorPort
    metrics: Metrics
    retry: RetryConfig
    clock: Callable[[], float]
    on_resolved: Callable[[CallFuture], None]  # after each future it resolves
    spawn: Callable[[str], pykka.ActorRef[Any]]
    log_calls: bool = False  # also log calls that resolve as intended
    closing: bool = False


_REROUTED = (Observed, Cancel, Withdraw, Revoke, Release, FailDependency)
"""Messages a retiring actor hands back to the registry (a type tuple built once)."""

_OUTCOME_LABEL = {
    Outcome.SUCCESS: "success",
    Outcome.SKIPPED: "skipped",
    Outcome.OVERWRITTEN: "overwritten",
}


class ObjectActor(PooledActor):
    """Carries out the effects of one object's state machine, on the thread of each turn."""

    def __init__(self, uid: str, ctx: ActorContext, *, pool: ActorPool) -> None:
        super().__init__(pool=pool)
        self.uid = uid
        self.ctx = ctx
        self.machine = ObjectState(uid, ctx.retry)
        self.open: dict[CallFuture, str] = {}  # futures not resolved yet -> call type
        self.granted = False  # a grant is held and not yet answered (crash safety)
        self._pending: tuple[str, ...] = ()  # call types pending (the gauge)

    # ------------------------------------------------------------------ message dispatch

    def on_receive(self, message: Any) -> Any:
        """The turn's thread (see the module docstring). Feed one message to the state machine
        and carry out its effects."""
        machine = self.machine
        kind = type(message)
        if kind is Submit:
            future = message.future
            if self.ctx.closing:
                self._resolve(
                    message.call.call_type, future, DispatcherClosed("dispatcher is stopping")
                )
                return None
            group = future.group
            if group is not None:  # a step: its group's cancellation may have come first
                refused = group.refusal(message.call, bool(message.holds))
                if refused is not None:
                    self._resolve(message.call.call_type, future, refused)
                    return None
            self.open[future] = message.call.call_type
            effects = machine.submit(message.call, future, message.holds, message.behind)
        elif kind is Grant:
            self.granted = True
            effects = machine.grant(message.now)
        elif kind is Done:
            effects = machine.done(message, self.ctx.clock())
        elif kind is Observed:
            effects = machine.observed_event(message.obj)
        elif kind is View:
            return machine.view()
        elif kind is Deleted:
            effects = machine.deleted()
        elif kind is Cancel:
            effects = machine.cancel(message.call_type)
        elif kind is Withdraw:
            effects = machine.withdraw(message.future, message.cause)
        elif kind is ReapRequest:
            if machine.idle and self.ctx.registry.release(
                self.uid, self.actor_ref, message.generation
            ):
                self.stop()
            return None
        elif kind is Close:
            effects = machine.close()
        elif kind is Revoke:
            effects = machine.revoke(message.error)
        elif kind is Release:
            effects = machine.release(message.token)
        elif kind is FailDependency:
            effects = machine.dependency_failed(message.token, message.cause)
        else:
            return super().on_receive(message)
        self._carry_out(effects)
        return None

    # ------------------------------------------------------------------ effects

    def _carry_out(self, effects: list[Effect]) -> None:
        """Carry out ``effects`` in order, and those of the grants and results they lead to
        on this same turn (a grant on the spot, a non-blocking backend's result)."""
        ctx = self.ctx
        machine = self.machine
        i = 0
        while i < len(effects):
            effect = effects[i]
            i += 1
            kind = type(effect)
            if kind is Resolve:
                resolve: Resolve = effect  # type: ignore[assignment]
                if resolve.successor is not None:  # OVERWRITTEN: name who carries it on
                    resolve.future.successor = resolve.successor
                self._resolve(resolve.call_type, resolve.future, resolve.outcome)
            elif kind is Ready:
                ready: Ready = effect  # type: ignore[assignment]
                if ctx.executor.ready(self.uid, self.actor_ref, ready.relevance, ready.not_before):
                    self.granted = True
                    effects.extend(machine.grant(ctx.clock()))
            elif kind is Send:
                self.granted = False
                done = ctx.executor.job(Job(self.actor_ref, effect))  # type: ignore[arg-type]
                if done is not None:
                    effects.extend(machine.done(done, ctx.clock()))
            elif kind is Refund:
                self.granted = False
                ctx.executor.refund(self.uid)
            elif kind is Merged:
                ctx.metrics.merge(effect.call_type)  # type: ignore[union-attr]
            elif kind is Rebased:
                ctx.metrics.retry(effect.call_type, "conflict")  # type: ignore[union-attr]
            elif kind is Retire:
                retire: Retire = effect  # type: ignore[assignment]
                if retire.tombstone:
                    ctx.registry.tombstone(self.uid)
                if retire.final:
                    ctx.registry.retire(self.uid, self.actor_ref)
                    self.stop()
        self._update_pending()

    def _update_pending(self) -> None:
        """Move the pending-calls gauge by what changed in the queue (at most one entry per
        call type, so the queue's types are a set). The turn's thread."""
        queue = self.machine.queue
        now = tuple([e.call.call_type for e in queue]) if queue else ()
        old = self._pending
        if now != old:
            self._pending = now
            metrics = self.ctx.metrics
            for call_type in old:
                if call_type not in now:
                    metrics.pending_delta(call_type, -1)
            for call_type in now:
                if call_type not in old:
                    metrics.pending_delta(call_type, 1)

    def _resolve(
        self,
        call_type: str,
        future: CallFuture,
        outcome: Outcome | CallOutcomeError | DispatcherClosed,
    ) -> None:
        """Resolve one future (exactly once: only this actor resolves its futures)."""
        self.open.pop(future, None)
        try:
            if isinstance(outcome, Outcome):
                future.set_result(outcome)
                label = _OUTCOME_LABEL[outcome]
                quiet = not self.ctx.log_calls
            else:
                quiet = False
                future.set_exception(outcome)
                label = "closed" if isinstance(outcome, DispatcherClosed) else outcome.result_label
        except InvalidStateError:  # pragma: no cover - would be a bug: never resolve twice
            logger.error("future of a {} call for {} resolved twice", call_type, self.uid)
            raise
        ctx = self.ctx
        ctx.metrics.outcome(call_type, label)
        ctx.on_resolved(future)
        if not quiet:
            logger.debug(
                "{call_type} {uid}: {result}", uid=self.uid, call_type=call_type, result=label
            )

    # ------------------------------------------------------------------ failure and leftovers

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """The turn's thread. A bug (e.g. in a custom merger) crashed this actor: fail this object's
        futures with the error and leave the registry so the next message spawns a clean actor.
        Other objects are untouched."""
        self.ctx.metrics.actor_failures.inc()
        logger.opt(exception=exception_value).error("object actor for {} crashed", self.uid)
        for future, call_type in list(self.open.items()):
            if not future.done():
                self._resolve(
                    call_type,
                    future,
                    CallFailed(
                        f"object actor crashed: {exception_value!r}",
                        uid=self.uid,
                        call_type=call_type,
                        cause=exception_value,
                    ),
                )
        self.open.clear()
        self.machine.queue = []
        self._update_pending()
        if self.granted:  # the crash interrupted a grant: give the slot and token back
            self.granted = False
            self.ctx.executor.refund(self.uid)
        self.ctx.registry.forget(self.uid, self.actor_ref)

    def on_dropped(self, message: object) -> None:
        """The turn's thread. A message that reached this actor after it stopped: route it to the
        object's current actor (or resolve its future), never lose it silently."""
        ctx = self.ctx
        if isinstance(message, Submit):
            call: Call = message.call
            if ctx.closing:
                self._resolve(
                    call.call_type, message.future, DispatcherClosed("dispatcher is stopping")
                )
                return
            try:
                routed = ctx.registry.tell(self.uid, message, lambda: ctx.spawn(self.uid))
            except Exception as exc:  # ActorLimitExceeded
                self._resolve(
                    call.call_type,
                    message.future,
                    CallFailed(
                        about(call.ref, str(exc)),
                        uid=self.uid,
                        call_type=call.call_type,
                        cause=exc,
                    ),
                )
                return
            if not routed:
                self._resolve(
                    call.call_type,
                    message.future,
                    CallCancelled(
                        about(call.ref, "object deleted"), uid=self.uid, call_type=call.call_type
                    ),
                )
        elif isinstance(message, _REROUTED):
            ctx.registry.tell(self.uid, message)
        elif isinstance(message, Grant):
            ctx.executor.refund(self.uid)
