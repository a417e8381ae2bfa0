"""An asyncio informer: list+watch through ``kubernetes.aio`` on the caller's event loop.

:class:`AioInformer` is the asyncio counterpart of :class:`kdispatch.adapters.informer.Informer`
for controllers that already run an event loop (kopf, ``kubernetes.aio``): one task lists a kind,
then watches it from the list's resourceVersion and hands every change to its handlers, usually
a dispatcher's ``on_add``/``on_update``/``on_delete`` (which only ``tell`` and return, so they
never block the loop).

* Any kind, CRDs included: give it the ``kubernetes.aio`` list method of the collection
  (``CoreV1Api(api).list_pod_for_all_namespaces``, or a ``functools.partial`` of
  ``CustomObjectsApi(api).list_cluster_custom_object`` with group/version/plural) and the
  ``kind`` its items are; selectors go in ``list_kwargs`` (``label_selector=...``).
* Replies are read raw (the methods' ``_without_preload_content`` variants) and decoded as
  JSON: objects reach the handlers as the plain dicts kdispatch works with, never as models.
* Keyed by ``metadata.uid``; an event whose resourceVersion is not newer than the cached one is
  a duplicate and dropped. A watch that ends is resumed from the last resourceVersion seen;
  410 Gone re-lists, with a synthetic delete for every object that vanished meanwhile.
* Failures back off exponentially (with jitter) and are visible: :attr:`last_error`, the
  ``on_error`` hook and a WARNING log. A handler that raises is logged and skipped.
* :meth:`run` runs until cancelled; :meth:`start` wraps it in a task, :meth:`stop` cancels it.

Every method runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Self

from loguru import logger

from kdispatch.actors.errors import (
    ApiConnectionError,
    ApiError,
    BadResponseError,
    GoneError,
    InvalidInputError,
)
from kdispatch.actors.objects import get_path

from .kubernetes import error_from_status

Obj = dict[str, Any]
OnEvent = Callable[[Obj], None]
OnError = Callable[[BaseException], None]


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


def _rv(obj: Mapping[str, Any]) -> str | None:
    rv = get_path(obj, "metadata", "resourceVersion")
    return rv if isinstance(rv, str) and rv else None


def _newer(candidate: Obj, current: Obj) -> bool:
    new, cur = _rv(candidate), _rv(current)
    if new is None or cur is None:
        return True
    if new.isdigit() and cur.isdigit():
        return int(new) > int(cur)
    return new != cur


def _uid(obj: Mapping[str, Any]) -> str | None:
    uid = get_path(obj, "metadata", "uid")
    return uid if isinstance(uid, str) and uid else None


class AioInformer:
    """List+watch of one kind on the running event loop; see the module docstring."""

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
        """Any thread (nothing starts). Raises :class:`InvalidInputError` for bad arguments."""
        self._raw = raw_variant(list_func)
        if not isinstance(kind, str) or not kind[:1].isupper():
            raise InvalidInputError(f"kind must be a Kubernetes kind like 'Pod', got {kind!r}")
        if api_version is not None and (not isinstance(api_version, str) or not api_version):
            raise InvalidInputError(f"api_version must be a non-empty str, got {api_version!r}")
        if list_kwargs is not None and not isinstance(list_kwargs, Mapping):
            raise InvalidInputError("list_kwargs must be a mapping of the list method's arguments")
        reserved = {"watch", "resource_version", "timeout_seconds", "_continue", "limit"}
        if list_kwargs and reserved & set(list_kwargs):
            raise InvalidInputError(
                f"list_kwargs may not set {sorted(reserved & set(list_kwargs))}"
            )
        if isinstance(watch_timeout, bool) or not isinstance(watch_timeout, int):
            raise InvalidInputError(f"watch_timeout must be an int, got {watch_timeout!r}")
        for label, value in (
            ("watch_timeout", watch_timeout),
            ("request_timeout", request_timeout),
            ("backoff_initial", backoff_initial),
            ("backoff_max", backoff_max),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidInputError(f"{label} must be a positive number, got {value!r}")
        if backoff_max < backoff_initial:
            raise InvalidInputError("backoff_max must be >= backoff_initial")
        if on_error is not None and not callable(on_error):
            raise InvalidInputError("on_error must be callable")
        self.kind = kind
        self.name = name or kind.lower()
        self._api_version = api_version
        self._kwargs = dict(list_kwargs or {})
        self._watch_timeout = watch_timeout
        self._request_timeout = float(request_timeout)
        self._backoff = (float(backoff_initial), float(backoff_max))
        self._on_error = on_error
        self._handlers: list[tuple[OnEvent | None, OnEvent | None, OnEvent | None]] = []
        self._items: dict[str, Obj] = {}
        self._rv: str | None = None
        self._synced: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._rng = random.Random()
        self._log = logger.bind(informer=self.name, kind=kind)
        self.last_error: BaseException | None = None
        """The most recent list/watch failure (None once a list or watch succeeds again)."""
        self.relists = 0

    # ----------------------------------------------------------------- public API

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
        for fn in (on_add, on_update, on_delete):
            if fn is not None and not callable(fn):
                raise InvalidInputError(f"handlers must be callable, got {fn!r}")
        self._handlers.append((on_add, on_update, on_delete))
        return self

    def attach(self, dispatcher: Any) -> Self:
        """Feed ``dispatcher.on_add/on_update/on_delete`` (they only tell; the loop goes on)."""
        for method in ("on_add", "on_update", "on_delete"):
            if not callable(getattr(dispatcher, method, None)):
                raise InvalidInputError(f"dispatcher has no {method}(obj)")
        return self.add_handler(dispatcher.on_add, dispatcher.on_update, dispatcher.on_delete)

    def start(self) -> Self:
        """Run :meth:`run` in a task of the running loop."""
        if self._task is not None:
            raise InvalidInputError(f"informer {self.name} already started")
        self._task = asyncio.get_running_loop().create_task(
            self.run(), name=f"aio-informer-{self.name}"
        )
        return self

    async def stop(self) -> None:
        """Cancel the task started by :meth:`start` and wait for it to end."""
        task = self._task
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def has_synced(self) -> bool:
        """True once the first list has reached the handlers."""
        return self._synced is not None and self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`has_synced` (True) or ``timeout`` seconds (False)."""
        try:
            await asyncio.wait_for(self._synced_event().wait(), timeout)
        except TimeoutError:
            return False
        return True

    @property
    def cache(self) -> Mapping[str, Obj]:
        """uid → newest object (read-only use)."""
        return self._items

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark)."""
        return self._rv

    async def run(self) -> None:
        """List, then watch and resume, until cancelled."""
        if self._task is None:
            self._task = asyncio.current_task()
        need_list, failures = True, 0
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list, failures = False, 0
                if await self._watch():
                    failures = 0
                self.last_error = None
                continue
            except GoneError as exc:
                self._log.info("watch expired ({}); re-listing", exc)
                need_list = True
                self.last_error = exc
                failures += 1
                if failures <= 1:
                    continue
            except (ApiError, OSError, TimeoutError) as exc:
                self.last_error = exc
                failures += 1
                self._log.warning("list/watch of {} failed: {}", self.kind, exc)
                if self._on_error is not None:
                    try:
                        self._on_error(exc)
                    except Exception:
                        self._log.opt(exception=True).error("on_error hook raised")
            low, high = self._backoff
            delay = min(high, low * 2 ** (failures - 1))
            await asyncio.sleep(delay * (0.5 + self._rng.random() / 2))

    # ----------------------------------------------------------------- internals

    def _synced_event(self) -> asyncio.Event:
        if self._synced is None:
            self._synced = asyncio.Event()
        return self._synced

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
            try:
                status = json.loads(body) if body else {}
            except ValueError:
                status = {}
            raise error_from_status(
                resp.status, status if isinstance(status, dict) else {}, what, resp.headers
            )
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
            body = json.loads(await resp.read())
        except ValueError as exc:
            raise BadResponseError(f"{what}: reply is not JSON ({exc})") from None
        finally:
            resp.release()
        items = body.get("items") if isinstance(body, dict) else None
        rv = get_path(body, "metadata", "resourceVersion")
        if not isinstance(items, list) or not isinstance(rv, str) or not rv:
            raise BadResponseError(f"{what}: reply has no items or no resourceVersion")
        fresh: dict[str, Obj] = {}
        for item in items:
            if isinstance(item, dict) and (uid := _uid(item)) is not None:
                fresh[uid] = self._typed(item)
        old, self._items = self._items, fresh
        for uid, obj in old.items():
            if uid not in fresh:
                self._emit(2, obj)
        for uid, obj in fresh.items():
            prev = old.get(uid)
            if prev is None:
                self._emit(0, obj)
            elif _newer(obj, prev):
                self._emit(1, obj)
        self._rv = rv
        self.relists += 1
        self.last_error = None
        self._synced_event().set()

    async def _watch(self) -> bool:
        """One watch request; True if it delivered anything."""
        what = f"watch {self.kind}"
        resp = await self._request(
            what,
            watch=True,
            resource_version=self._rv,
            timeout_seconds=self._watch_timeout,
            allow_watch_bookmarks=True,
            _request_timeout=self._watch_timeout + self._request_timeout,
        )
        progress = False
        try:
            while True:
                try:
                    line = await resp.content.readline()
                except Exception as exc:  # aiohttp.ClientPayloadError, connection reset
                    raise ApiConnectionError(f"{what}: {type(exc).__name__}: {exc}") from exc
                if not line:
                    return progress
                if line.strip():
                    self._event(line, what)
                    progress = True
        finally:
            resp.release()

    def _event(self, line: bytes, what: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            raise BadResponseError(f"{what}: event is not JSON") from None
        etype = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            raise BadResponseError(f"{what}: event has no object")
        if etype == "ERROR":
            code = obj.get("code")
            raise error_from_status(code if isinstance(code, int) else 500, obj, what)
        rv = _rv(obj)
        if etype == "BOOKMARK":
            if rv is not None:
                self._rv = rv
            return
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            raise BadResponseError(f"{what}: unknown event type {etype!r}")
        uid = _uid(obj)
        if uid is None:
            raise BadResponseError(f"{what}: {etype} event for an object without a uid")
        if rv is not None:
            self._rv = rv
        obj = self._typed(obj)
        prev = self._items.get(uid)
        if etype == "DELETED":
            self._items.pop(uid, None)
            self._emit(2, obj)
        elif prev is None:
            self._items[uid] = obj
            self._emit(0, obj)
        elif _newer(obj, prev):
            self._items[uid] = obj
            self._emit(1, obj)

    def _emit(self, which: int, obj: Obj) -> None:
        for handler in self._handlers:
            fn = handler[which]
            if fn is None:
                continue
            try:
                fn(obj)
            except Exception:
                self._log.opt(exception=True).error("handler failed for {}", _uid(obj))


__all__ = ["AioInformer", "raw_variant"]
