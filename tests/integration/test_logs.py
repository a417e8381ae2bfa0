"""Logs: one loguru name, off by default, and the bridge to standard logging."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger

from kdispatch import logs
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import DispatcherConfig
from kdispatch.actors.model.errors import CallConflict, InvalidConfigError, InvalidInputError
from kdispatch.actors.model.pod_calls import PodBinding
from kdispatch.testing.memory import InMemoryApiServer, make_pod
from tests.subprocesses import run_command

pytestmark = pytest.mark.timeout(30)


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def stdlib() -> Iterator[Collect]:
    handler = Collect()
    target = logging.getLogger("kdispatch")
    old_level = target.level
    target.addHandler(handler)
    target.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        target.removeHandler(handler)
        target.setLevel(old_level)
        logger.disable("kdispatch")


def library_log(message: str, **fields: str) -> None:
    """A record as a kdispatch module writes it (the record's name is its module)."""

    def rename(record: Any) -> None:
        record["name"] = "kdispatch.actors.fake"

    logger.patch(rename).bind(**fields).info(message)


def stopped_records(stdlib: Collect) -> list[str]:
    return [
        r.getMessage()
        for r in stdlib.records
        if r.name == "kdispatch.actors.facade.dispatcher"
        and r.getMessage().startswith("dispatcher stopped")
    ]


def test_the_bridge_forwards_library_records_with_bound_fields(stdlib: Collect) -> None:
    sink = logs.to_stdlib()
    try:
        library_log("bound", uid="uid-1", call_type="pod_binding")
        with Dispatcher(InMemoryApiServer()):
            pass  # the dispatcher logs "dispatcher stopped" at DEBUG from its own module
        assert stopped_records(stdlib) == ["dispatcher stopped (drained=True)"]
        logger.disable("kdispatch")  # the one switch turns the library's records off again
        with Dispatcher(InMemoryApiServer()):
            pass
        assert len(stopped_records(stdlib)) == 1
    finally:
        logger.remove(sink)
    bound = next(r for r in stdlib.records if r.getMessage() == "bound")
    assert bound.name == "kdispatch.actors.fake"
    assert bound.levelno == logging.INFO
    assert bound.uid == "uid-1"  # type: ignore[attr-defined]
    assert bound.extra == {"uid": "uid-1", "call_type": "pod_binding"}  # type: ignore[attr-defined]


def call_records(stdlib: Collect, uid: str) -> list[str]:
    """The per-attempt and per-resolution records of the calls for ``uid``."""
    return [
        r.getMessage()
        for r in stdlib.records
        if r.name in ("kdispatch.actors.engine.sender", "kdispatch.actors.engine.object_actor")
        and uid in r.getMessage()
    ]


@pytest.mark.parametrize("log_calls", [False, True])
def test_per_call_records_of_calls_that_succeed_need_log_calls(
    stdlib: Collect, log_calls: bool
) -> None:
    server = InMemoryApiServer()
    ok = server.create(make_pod("ok", uid="uid-ok"))
    bound = server.create(make_pod("bound", uid="uid-bound"))
    server.bind("default", "bound", uid="uid-bound", node="n0")  # after our snapshot
    sink = logs.to_stdlib()
    try:
        with Dispatcher(server, DispatcherConfig(log_calls=log_calls)) as d:
            d.submit(PodBinding.for_pod(ok, "n1")).result(timeout=10)
            with pytest.raises(CallConflict):  # already bound: a conflict
                d.submit(PodBinding.for_pod(bound, "n1")).result(timeout=10)
    finally:
        logger.remove(sink)
    assert server.get("Pod", "default", "ok")["spec"]["nodeName"] == "n1"
    assert call_records(stdlib, "uid-ok") == (
        ["pod_binding uid-ok attempt 1: success", "pod_binding uid-ok: success"]
        if log_calls
        else []
    )
    failed = call_records(stdlib, "uid-bound")  # logged whatever log_calls says
    assert "pod_binding uid-bound attempt 1: conflict" in failed
    assert failed[-1] == "pod_binding uid-bound: conflict"


def test_log_calls_must_be_a_bool() -> None:
    with pytest.raises(InvalidConfigError, match="log_calls must be a bool"):
        DispatcherConfig(log_calls="yes")  # type: ignore[arg-type]


def test_import_kdispatch_switches_its_logs_off() -> None:
    code = (
        "import kdispatch\n"
        "from loguru import logger\n"
        "seen = []\n"
        "logger.remove()\n"
        "logger.add(seen.append, level=0)\n"
        "from kdispatch.testing.memory import InMemoryApiServer\n"
        "with kdispatch.Dispatcher(InMemoryApiServer()):\n"
        "    pass\n"
        "print(len(seen))\n"
        "logger.enable('kdispatch')\n"
        "with kdispatch.Dispatcher(InMemoryApiServer()):\n"
        "    pass\n"
        "print(len(seen) > 0)\n"
    )
    out = run_command([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "True"]


def test_stdlib_levels_apply(stdlib: Collect) -> None:
    logging.getLogger("kdispatch").setLevel(logging.WARNING)
    sink = logs.to_stdlib()
    try:
        library_log("info is below warning")
    finally:
        logger.remove(sink)
    assert stdlib.records == []


def test_only_kdispatch_records_are_forwarded(stdlib: Collect) -> None:
    root = Collect()
    logging.getLogger().addHandler(root)
    sink = logs.to_stdlib()
    try:
        logger.info("an application's own loguru record")
    finally:
        logger.remove(sink)
        logging.getLogger().removeHandler(root)
    assert root.records == [] and stdlib.records == []


@pytest.mark.parametrize("level", ["LOUD", True, 1.5, -1])
def test_bad_level_is_typed(level: object) -> None:
    with pytest.raises(InvalidInputError):
        logs.to_stdlib(level)  # type: ignore[arg-type]
