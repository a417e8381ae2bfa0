"""One lightweight actor per object (Pod, ResourceClaim, ...), keyed by UID.

The actor is a thin shell around the object's pure machine
(:class:`~kdispatch.actors.model.object_state.ObjectState`): it feeds it one message at a time
and carries out the effects it returns. One message at a time means the rules need no locks;
only the actor resolves its futures, so each resolves exactly once. Every method but the
constructor runs on the actor's turn, on a pool worker (or on the executor worker that brings a
request's result to an idle actor), and never blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from loguru import logger

from kdispatch.actors.model.config import RetryConfig
from kdispatch.actors.model.effects import (
    Done,
    Effect,
    Merged,
    Ready,
    Rebased,
    Refund,
    Resolve,
    Retire,
    Send,
    about,
    when_gone,
)
from kdispatch.actors.model.errors import (
    CallCancelled,
    CallFailed,
    CallOutcomeError,
    DispatcherClosed,
    Outcome,
)
from kdispatch.actors.model.object_state import ObjectState
from kdispatch.actors.runtime.pool import Actor, ActorPool

from .messages import (
    CallFuture,
    Cancel,
    Close,
    Confirm,
    Deleted,
    FailDependency,
    Grant,
    Observed,
    Reap,
    Release,
    Revoke,
    Submit,
    View,
    Withdraw,
    settle,
)
from .metrics import Metrics


class ExecutorPort(Protocol):
    """What an object actor needs of the executor (see :class:`~.executor.Executor`)."""

    def ready(self, uid: str, actor: Any, relevance: int, not_before: float) -> bool: ...

    def job(self, actor: Any, send: Send) -> Done | None: ...

    def refund(self, uid: str | None = None) -> None: ...

    def leave_block(self, uid: str) -> None: ...


class RegistryPort(Protocol):
    """What an object actor needs of the registry (see :class:`~.registry.Registry`)."""

    def tell(
        self, uid: str, message: object, spawn: Callable[[str], Actor] | None = None
    ) -> bool: ...

    def tombstone(self, uid: str) -> None: ...

    def leave(self, uid: str, actor: Actor, *, tombstone: bool = False) -> None: ...

    remembers: bool

    def remember(self, uid: str, legacy: Any) -> None: ...

    def recall(self, uid: str) -> Any: ...


@dataclass(slots=True)
class ActorContext:
    """What every object actor of one dispatcher shares (one instance per dispatcher)."""

    registry: RegistryPort
    executor: ExecutorPort
    metrics: Metrics
    retry: RetryConfig
    pool: ActorPool
    clock: Callable[[], float]
    on_resolved: Callable[[CallFuture], None]  # after each future it resolves
    log_calls: bool = False  # also log calls that resolve as intended
    closing: bool = False

    def spawn(self, uid: str) -> ObjectActor:
        """A new actor for ``uid`` (the registry's spawn), knowing what the last one that
        left idle knew. Any thread."""
        actor = ObjectActor(uid, self)
        registry = self.registry
        if registry.remembers and (legacy := registry.recall(uid)) is not None:
            actor.machine.inherit(legacy)
        return actor


_REROUTED: Final = (Observed, Cancel, Withdraw, Revoke, Release, FailDependency)
"""Messages a stopped actor hands back to the registry (a type tuple built once)."""


class ObjectActor(Actor):
    """Carries out the effects of one object's machine (see the module docstring)."""

    __slots__ = ("ctx", "granted", "idle_since", "machine", "open", "pending_types", "uid")

    def __init__(self, uid: str, ctx: ActorContext) -> None:
        """The spawning thread; nothing runs until the first message."""
        super().__init__(ctx.pool)
        self.uid = uid
        self.ctx = ctx
        self.machine = ObjectState(uid, ctx.retry)
        self.open: dict[CallFuture, Any] = {}  # futures not resolved yet -> their call
        self.granted = False  # a grant is held and not yet answered (crash safety)
        self.pending_types: tuple[str, ...] = ()  # call types pending (the gauge)
        self.idle_since: float | None = None  # when it last became idle (for the reaper)

    def __repr__(self) -> str:
        return f"<ObjectActor {self.uid}>"

    def receive(self, message: Any) -> None:
        """Feed one message to the machine and carry out its effects."""
        machine = self.machine
        kind = type(message)
        if kind is Submit:  # the hot messages first, the rest through _HANDLERS
            call = message.call
            future = message.future
            if self.ctx.closing or future.group is not None:
                effects = self._submit_late_or_step(message)
            else:
                self.open[future] = call
                effects = machine.submit(call, future, message.holds, message.behind)
        elif kind is Grant:
            self.granted = True
            effects = machine.grant(message.now)
        elif kind is Done:
            effects = machine.done(message, self.ctx.clock())
        else:
            handler = _HANDLERS.get(kind)
            if handler is None:
                raise TypeError(f"{self!r} cannot handle {message!r}")
            effects = handler(self, message)
        if effects:
            self._carry_out(effects)
        if machine.queue or self.pending_types:
            self._update_pending()
        if not machine.idle:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = self.ctx.clock()

    def _submit_late_or_step(self, message: Submit) -> list[Effect] | None:
        """A Submit while closing (resolved ``DispatcherClosed``), or a group's step (refused
        if its group's cancellation came first)."""
        call = message.call
        future = message.future
        if self.ctx.closing:
            self._resolve(future, call.call_type, DispatcherClosed("dispatcher is stopping"))
            return None
        group = future.group
        if group is not None:  # a step: its group's cancellation may have come first
            refused = group._refusal(call, bool(message.holds))
            if refused is not None:
                self._resolve(future, call.call_type, refused)
                return None
        self.open[future] = call
        return self.machine.submit(call, future, message.holds, message.behind)

    def _view(self, message: View) -> None:
        """A custom ``apply`` that raises fails the view, not the actor."""
        try:
            view = self.machine.view()
        except Exception as exc:
            message.reply.set_exception(exc)
        else:
            message.reply.set_result(view)

    def _release(self, message: Release) -> list[Effect]:
        """A prerequisite succeeded. Unless the call it freed is now the next to send, free of
        other holds, the object leaves the token block of a gang it is in: a call that still
        holds another token cannot be granted until that prerequisite resolves (the block
        would hold every lane while waiting for it, and that prerequisite may need a token
        itself), and another call queued ahead of it must not take the block's token."""
        machine = self.machine
        freed = next((e for e in machine.queue if message.token in e.holds), None)
        effects = machine.release(message.token)
        queue = machine.queue
        if queue and (queue[0].holds or queue[0] is not freed):
            self.ctx.executor.leave_block(self.uid)
        return effects

    def _confirm(self, message: Confirm) -> None:
        """A gang asks: everything told before was handled (:class:`Confirm`)."""
        try:
            message.answer()
        except Exception:  # the gang's bookkeeping failing must not crash this object
            logger.opt(exception=True).error("a gang failed to take a confirmation")

    def _reap(self, message: Reap) -> None:
        """Leave if idle, atomically with every tell (a message queued meanwhile keeps it),
        leaving what it knew to the object's next actor."""
        del message
        machine = self.machine
        if machine.idle:
            registry = self.ctx.registry
            registry.remember(self.uid, machine.legacy())  # first: a successor may spawn
            if self.close_if_empty():
                registry.leave(self.uid, self)

    # ------------------------------------------------------------------ effects

    def _carry_out(self, effects: list[Effect]) -> None:
        """Carry out ``effects`` in order, and those of the grants and results they lead to on
        this same turn (a grant on the spot, a non-blocking backend's result)."""
        ctx = self.ctx
        machine = self.machine
        for effect in effects:  # grows while it is walked: a grant's or a result's effects
            kind = type(effect)
            if kind is Resolve:
                resolve: Resolve = effect  # type: ignore[assignment]
                future = resolve.future
                if resolve.successor is not None:  # OVERWRITTEN: who carries the intent on
                    future.successor = resolve.successor
                self._resolve(future, resolve.call_type, resolve.outcome)
            elif kind is Ready:
                relevance, not_before = effect  # type: ignore[misc]
                if ctx.executor.ready(self.uid, self, relevance, not_before):
                    self.granted = True
                    effects.extend(machine.grant(ctx.clock()))
            elif kind is Send:
                self.granted = False
                done = ctx.executor.job(self, effect)  # type: ignore[arg-type]
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
                if retire.tombstone:  # first: a sender finding it closed must not respawn it
                    ctx.registry.tombstone(self.uid)
                if retire.final:
                    self.stop()
                    ctx.registry.leave(self.uid, self)

    def _update_pending(self) -> None:
        """Move the pending-calls gauge by what changed in the queue (at most one entry per
        call type, so the queue's types are a set)."""
        queue = self.machine.queue
        now = tuple([e.call.call_type for e in queue]) if queue else ()
        old = self.pending_types
        if now != old:
            self.pending_types = now
            metrics = self.ctx.metrics
            for call_type in old:
                if call_type not in now:
                    metrics.pending_delta(call_type, -1)
            for call_type in now:
                if call_type not in old:
                    metrics.pending_delta(call_type, 1)

    def _resolve(
        self,
        future: CallFuture,
        call_type: str,
        outcome: Outcome | CallOutcomeError | DispatcherClosed,
    ) -> None:
        """Resolve one future (exactly once: only this actor resolves its futures)."""
        self.open.pop(future, None)
        if not settle(future, outcome):  # pragma: no cover - would be a bug
            logger.error("future of a {} call for {} resolved twice", call_type, self.uid)
            return
        ctx = self.ctx
        if isinstance(outcome, Outcome):
            label = outcome.value
            quiet = not ctx.log_calls
        else:
            quiet = False
            label = "closed" if isinstance(outcome, DispatcherClosed) else outcome.result_label
        ctx.metrics.outcome(call_type, label)
        ctx.on_resolved(future)
        if not quiet:
            logger.debug(
                "{call_type} {uid}: {result}", uid=self.uid, call_type=call_type, result=label
            )

    # ------------------------------------------------------------------ failure and leftovers

    def crashed(self, error: BaseException) -> None:
        """A bug (in a custom merger, say) crashed this actor: fail this object's futures with
        the error and leave the registry; the next message spawns a clean actor."""
        ctx = self.ctx
        ctx.metrics.actor_failed()
        logger.opt(exception=error).error("object actor for {} crashed", self.uid)
        for future, call in list(self.open.items()):
            if not future.done():
                failed = CallFailed(
                    f"object actor crashed: {error!r}",
                    uid=self.uid,
                    call_type=call.call_type,
                    cause=error,
                )
                self._resolve(future, call.call_type, failed)
        self.open.clear()
        self.machine.queue = []
        self._update_pending()
        if self.granted:  # the crash interrupted a grant: give the slot and token back
            self.granted = False
            ctx.executor.refund(self.uid)
        ctx.registry.leave(self.uid, self)

    def dropped(self, message: object) -> None:
        """A message that reached this actor as it stopped: route it to the object's current
        actor (or resolve its future), never lose it silently."""
        ctx = self.ctx
        if isinstance(message, Submit):
            call = message.call
            if ctx.closing:
                self._resolve(
                    message.future, call.call_type, DispatcherClosed("dispatcher is stopping")
                )
                return
            uid = self.uid
            try:
                routed = ctx.registry.tell(uid, message, ctx.spawn)
            except Exception as exc:  # ActorLimitExceeded
                failed = CallFailed(
                    about(call.ref, str(exc)), uid=uid, call_type=call.call_type, cause=exc
                )
                self._resolve(message.future, call.call_type, failed)
                return
            if not routed:  # tombstoned: gone, and a deletion got its way
                cancelled = CallCancelled(
                    about(call.ref, "object deleted"), uid=uid, call_type=call.call_type
                )
                self._resolve(message.future, call.call_type, when_gone(call, cancelled))
        elif isinstance(message, _REROUTED):
            ctx.registry.tell(self.uid, message)
        elif isinstance(message, Confirm):  # no actor left: the member has resolved
            if not ctx.registry.tell(self.uid, message):
                self._confirm(message)
        elif isinstance(message, Grant):
            ctx.executor.refund(self.uid)
        elif isinstance(message, View):
            message.reply.set_result(None)


_HANDLERS: Final[dict[type, Callable[[ObjectActor, Any], list[Effect] | None]]] = {
    Observed: lambda actor, m: actor.machine.observed_event(m.obj),
    View: ObjectActor._view,
    Deleted: lambda actor, m: actor.machine.deleted(),
    Cancel: lambda actor, m: actor.machine.cancel(m.call_type),
    Withdraw: lambda actor, m: actor.machine.withdraw(m.future, m.cause),
    Reap: ObjectActor._reap,
    Close: lambda actor, m: actor.machine.close(),
    Revoke: lambda actor, m: actor.machine.revoke(m.error),
    Release: ObjectActor._release,
    Confirm: ObjectActor._confirm,
    FailDependency: lambda actor, m: actor.machine.dependency_failed(m.token, m.cause),
}
"""What each of the other messages feeds the machine (or does itself)."""
