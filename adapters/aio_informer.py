"""An asyncio informer: list+watch through ``kubernetes.aio`` on the caller's event loop.

:class:`AioInformer` is the asyncio counterpart of :class:`kdispatch.adapters.informer.Informer`
around the same :class:`~kdispatch.adapters.informer_core.InformerCore`; it reads the replies
of a ``kubernetes.aio`` list method's ``_without_preload_content`` variant raw, and backs off
with jitter after failures. Its behaviour: the "asyncio and kopf" guide (``docs/asyncio.md``).
Every method runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Self

from kdispatch.actors.engine.aio import running_loop
from kdispatch.actors.model.config import check_timeout
from kdispatch.actors.model.errors import (
    ApiConnectionError,
    ApiError,
    BadResponseError,
    GoneError,
    InvalidInputError,
)
from kdispatch.actors.model.objects import get_path

from .informer_core import (
    Handler,
    InformerCore,
    InformerShell,
    Obj,
    OnError,
    WatchLoop,
    check_dispatcher,
    check_handlers,
    check_settings,
    decode_event,
)
from .transport import decode_object, error_from_status, status_body

OnEvent = Callable[[Obj], None]

_RESERVED_KWARGS: Final = frozenset(
    {
        "watch",
        "resource_version",
        "timeout_seconds",
        "allow_watch_bookmarks",
        "_continue",
        "limit",
        "_request_timeout",
        "_preload_content",
    }
)
"""Arguments of the list method that :class:`AioInformer` sets itself: ``list_kwargs`` may not
set them."""


def raw_variant(list_func: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """The ``_without_preload_content`` variant of a ``kubernetes.aio`` API method (also inside
    a ``functools.partial``): it returns the raw ``aiohttp`` response. Raises
    :class:`InvalidInputError` for anything else."""
    if isinstance(list_func, functools.partial):
        inner = raw_variant(list_func.func)
        return functools.partial(inner, *list_func.args, **list_func.keywords)
    owner = getattr(list_func, "__self__", None)
    name = getattr(list_func, "__name__", "")
    raw = getattr(owner, f"{name}_without_preload_content", None)
    if not inspect.ismethod(list_func) or raw is None or not inspect.iscoroutinefunction(raw):
        raise InvalidInputError(
            "list_func must be a kubernetes.aio API list method (or a functools.partial of "
            f"one), got {list_func!r}"
        )
    return raw  # type: ignore[no-any-return]


def _check_arguments(raw: Callable[..., Awaitable[Any]], kwargs: Mapping[str, Any]) -> None:
    """:class:`InvalidInputError` when the list method ``raw`` takes no argument of one of the
    names in ``kwargs`` (when its signature can be read). Any thread."""
    try:
        signature = inspect.signature(raw)
    except (TypeError, ValueError):  # no signature to read: the requests will tell
        return
    try:
        signature.bind_partial(**kwargs)
    except TypeError as exc:
        raise InvalidInputError(f"list_kwargs do not fit the list method: {exc}") from None


class AioInformer(InformerShell):
    """List+watch of one kind on the running event loop (see the module docstring); a custom
    resource through ``CustomObjectsApi`` (the "asyncio and kopf" guide shows how)."""

    def __init__(
        self,
        list_func: Callable[..., Awaitable[Any]],
        *,
        kind: str,
        api_version: str | None = None,
        name: str | None = None,
        list_kwargs: Mapping[str, Any] | None = None,
        watch_timeout: int = 300,
        request_timeout: float = 30.0,
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
        on_error: OnError | None = None,
    ) -> None:
        """Any thread (nothing starts). Raises :class:`InvalidInputError` for bad arguments.

        ``list_kwargs`` go to every list and watch request: selectors
        (``label_selector``, ``field_selector``), a namespace for a namespaced list method,
        and so on. The list method must take each of them (:class:`InvalidInputError`
        otherwise); ``watch``, ``resource_version``, ``timeout_seconds``,
        ``allow_watch_bookmarks``, ``_continue``, ``limit``, ``_request_timeout`` (set by
        ``request_timeout``) and ``_preload_content`` are the informer's own."""
        self._raw = raw_variant(list_func)
        if not isinstance(kind, str) or not kind[:1].isupper():
            raise InvalidInputError(f"kind must be a Kubernetes kind like 'Pod', got {kind!r}")
        if api_version is not None and (not isinstance(api_version, str) or not api_version):
            raise InvalidInputError(f"api_version must be a non-empty str, got {api_version!r}")
        if list_kwargs is not None and not isinstance(list_kwargs, Mapping):
            raise InvalidInputError("list_kwargs must be a mapping of the list method's arguments")
        if list_kwargs and _RESERVED_KWARGS & set(list_kwargs):
            raise InvalidInputError(
                f"list_kwargs may not set {sorted(_RESERVED_KWARGS & set(list_kwargs))}"
            )
        _check_arguments(self._raw, list_kwargs or {})
        if isinstance(watch_timeout, bool) or not isinstance(watch_timeout, int):
            raise InvalidInputError(f"watch_timeout must be an int, got {watch_timeout!r}")
        backoff = check_settings(
            on_error,
            backoff_initial,
            backoff_max,
            watch_timeout=watch_timeout,
            request_timeout=request_timeout,
        )
        self.name = name or kind.lower()
        self._api_version = api_version
        self._server = _server_of(list_func)
        self._kwargs = dict(list_kwargs or {})
        self._watch_timeout = watch_timeout
        self._request_timeout = float(request_timeout)
        self._core = InformerCore(
            name=self.name, kind=kind, typed=self._typed, backoff=backoff, on_error=on_error
        )
        self._changed = asyncio.Event()  # set when synced or a failure comes
        self._task: asyncio.Task[None] | None = None
        self._stopped = False  # stop() was called: wait_for_sync returns False
        self._progress = False  # the current watch delivered something

    def add_handler(
        self,
        on_add: OnEvent | None = None,
        on_update: OnEvent | None = None,
        on_delete: OnEvent | None = None,
    ) -> Self:
        """Register callbacks (any may be None), each called with the newest object. Only
        before :meth:`run`/:meth:`start`."""
        if self._task is not None:
            raise InvalidInputError("add handlers before starting the informer")
        check_handlers(on_add, on_update, on_delete)
        self._core.add_handler(Handler(on_add, _newest_only(on_update), on_delete))
        return self

    def attach(self, dispatcher: Any) -> Self:
        """Feed ``dispatcher.on_add/on_update/on_delete`` (they only tell; the loop goes on)."""
        check_dispatcher(dispatcher)
        return self.add_handler(dispatcher.on_add, dispatcher.on_update, dispatcher.on_delete)

    def start(self) -> Self:
        """Run :meth:`run` in a task of the running loop (outside one:
        :class:`~kdispatch.NoEventLoopError`); once only, and never after :meth:`stop`
        (:class:`~kdispatch.InvalidInputError`)."""
        loop = running_loop("AioInformer.start()")
        self._check_startable(None)
        self._task = loop.create_task(self.run(), name=f"aio-informer-{self.name}")
        return self

    def _check_startable(self, task: asyncio.Task[Any] | None) -> None:
        """Refuse a start once stopped, or once started by another task than ``task`` (the
        one running :meth:`run`; None: none runs yet). The loop's thread."""
        if self._stopped:
            raise InvalidInputError(f"informer {self.name} was stopped: build a new one")
        if self._task is not None and self._task is not task:
            raise InvalidInputError(f"informer {self.name} already started")

    async def stop(self) -> None:
        """Cancel the task started by :meth:`start` and wait for it to end. A cancellation of
        the calling task while it waits is its own: raised, not swallowed."""
        self._stopped = True
        self._changed.set()  # wakes wait_for_sync
        task = self._task
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`has_synced`, then return True; False if the informer is (or gets)
        stopped before it synced. Raises as
        :meth:`Informer.wait_for_sync <kdispatch.Informer.wait_for_sync>` does:
        :class:`~kdispatch.InformerSyncTimeout` when ``timeout`` seconds pass first,
        ``UnauthorizedError``/``ForbiddenError`` as soon as a list is refused with 401/403, and
        :class:`~kdispatch.InvalidInputError` for a ``timeout`` that is not seconds >= 0 or
        None."""
        timeout = check_timeout(timeout, allow_zero=True)
        core = self._core
        seen = core.errors
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        while not core.synced:
            failure = core.sync_failure(seen)
            if failure is not None:
                raise failure
            if self._stopped:
                return False
            self._changed.clear()
            left = None if until is None else until - loop.time()
            if left is not None and left <= 0:
                raise core.sync_timeout(timeout, self._server)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True

    async def run(self) -> None:
        """List, then watch and resume, until cancelled (the same :class:`WatchLoop` as the
        threaded informer's). Once only, and never after :meth:`stop`
        (:class:`~kdispatch.InvalidInputError`), as :meth:`start`."""
        current = asyncio.current_task()
        self._check_startable(current)
        self._task = current
        core = self._core
        plan = WatchLoop()
        loop = asyncio.get_running_loop()
        while True:
            self._progress = False
            try:
                if plan.need_list:
                    await self._list()
                    plan.listed()
                    self._changed.set()
                started = loop.time()
                await self._watch()
                full_course = loop.time() - started >= min(self._watch_timeout, 1.0)
                if plan.watched(self._progress, full_course):
                    core.progressed()
                    continue
            except GoneError as exc:
                core.log.info("watch expired ({}); re-listing", exc)
                if plan.gone(self._progress):
                    continue
            except Exception as exc:  # cancellation is not an Exception: it ends the loop
                if isinstance(exc, ApiError | OSError | TimeoutError):
                    core.log.warning("list/watch of {} failed: {}", self.kind, exc)
                else:
                    core.log.exception("informer loop error")
                plan.failed(exc, self._progress)
                core.failed(exc)
                self._changed.set()
                core.tell_error(exc)
            await asyncio.sleep(core.retry_delay(plan.failures))

    async def _request(self, what: str, **kwargs: Any) -> Any:
        """The raw aiohttp response, or the :class:`ApiError` of a non-2xx reply."""
        try:
            resp = await self._raw(**self._kwargs, **kwargs)
        except ApiError:
            raise
        except Exception as exc:  # aiohttp.ClientError and friends
            raise ApiConnectionError(f"{what}: {type(exc).__name__}: {exc}") from exc
        if resp.status >= 400:
            try:
                body = await resp.read()
            finally:
                resp.release()
            raise error_from_status(resp.status, status_body(body), what, resp.headers)
        return resp

    def _typed(self, obj: Obj) -> Obj:
        if obj.get("kind") != self.kind:
            obj["kind"] = self.kind
        if self._api_version is not None:
            obj.setdefault("apiVersion", self._api_version)
        return obj

    async def _list(self) -> None:
        what = f"list {self.kind}"
        resp = await self._request(what, _request_timeout=self._request_timeout)
        try:
            body = decode_object(await resp.read(), what)
        finally:
            resp.release()
        items = body.get("items")
        rv = get_path(body, "metadata", "resourceVersion")
        if not isinstance(items, list) or not isinstance(rv, str) or not rv:
            raise BadResponseError(f"{what}: reply has no items or no resourceVersion")
        self._core.listed([item for item in items if isinstance(item, dict)], rv)

    async def _watch(self) -> None:
        """One watch request, to its end (``_progress`` says whether it delivered anything)."""
        what = f"watch {self.kind}"
        resp = await self._request(
            what,
            watch=True,
            resource_version=self._core.resource_version,
            timeout_seconds=self._watch_timeout,
            allow_watch_bookmarks=True,
            _request_timeout=self._watch_timeout + self._request_timeout,
        )
        try:
            while True:
                try:
                    line = await resp.content.readline()
                except Exception as exc:  # aiohttp.ClientPayloadError, connection reset
                    raise ApiConnectionError(f"{what}: {type(exc).__name__}: {exc}") from exc
                if not line:
                    return
                if line.strip():
                    self._core.event(*decode_event(line, what))
                    self._progress = True
        finally:
            resp.release()


def _newest_only(fn: OnEvent | None) -> Callable[[Obj, Obj], None] | None:
    """An ``on_update(new)`` handler in the core's ``(old, new)`` shape."""
    if fn is None:
        return None

    def on_update(_old: Obj, new: Obj) -> None:
        fn(new)

    return on_update


def _server_of(list_func: Callable[..., Awaitable[Any]]) -> str | None:
    """The apiserver URL behind a ``kubernetes.aio`` list method (or a partial of one)."""
    while isinstance(list_func, functools.partial):
        list_func = list_func.func
    owner = getattr(list_func, "__self__", None)
    host = getattr(getattr(getattr(owner, "api_client", None), "configuration", None), "host", "")
    return host if isinstance(host, str) and host else None


__all__ = ["AioInformer", "raw_variant"]
