"""``RuntimeConfig``'s GC options and ``Dispatcher.freeze_gc()``: what they do to the process's
collector while the dispatcher runs, and that ``stop()`` gives everything back. Also the
``GcWatch`` pause recorder the examples and benchmarks report with."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from examples.gcwatch import GcWatch
from kdispatch.actors.facade.dispatcher import Dispatcher
from kdispatch.actors.model.config import DispatcherConfig, RuntimeConfig
from kdispatch.actors.model.errors import InvalidConfigError
from kdispatch.testing.memory import InMemoryApiServer


@pytest.fixture(autouse=True)
def clean_gc_state() -> Iterator[None]:
    """Each test starts with nothing frozen and the default thresholds, and leaves it so."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def _dispatcher(runtime: RuntimeConfig) -> Dispatcher:
    return Dispatcher(InMemoryApiServer(), DispatcherConfig(runtime=runtime))


@pytest.mark.timeout(10)
@pytest.mark.parametrize("generation", [0, 1, 2])
def test_gc_freeze_freezes_at_start_and_after_every_collection(generation: int) -> None:
    callbacks = len(gc.callbacks)
    d = _dispatcher(RuntimeConfig(gc_freeze=True)).start()
    try:
        at_start = gc.get_freeze_count()
        assert at_start > 0  # what was alive at start is out of the scans
        survivors = [[i] for i in range(5000)]  # new tracked objects, alive
        gc.collect(generation)  # any collection: its survivors get frozen right after
        assert gc.get_freeze_count() >= at_start + len(survivors)
        assert not gc.get_objects(generation=1)  # nothing waits there for a longer scan
        assert len(gc.callbacks) == callbacks + 1
    finally:
        d.stop()
    assert gc.get_freeze_count() == 0  # stop gave everything back to the collector
    assert len(gc.callbacks) == callbacks


@pytest.mark.timeout(10)
def test_freeze_gc_without_the_option_is_undone_by_stop() -> None:
    before = gc.get_freeze_count()  # 0, or what the interpreter froze at start (3.12)
    d = _dispatcher(RuntimeConfig()).start()
    try:
        assert gc.get_freeze_count() == before  # the default leaves the collector alone
        d.freeze_gc()
        assert gc.get_freeze_count() > before
    finally:
        d.stop()
    assert gc.get_freeze_count() == 0


@pytest.mark.timeout(10)
def test_young_threshold_applies_while_running_and_is_restored() -> None:
    before = gc.get_threshold()
    d = _dispatcher(RuntimeConfig(gc_young_threshold=12_345)).start()
    try:
        assert gc.get_threshold() == (12_345, before[1], before[2])
    finally:
        d.stop()
    assert gc.get_threshold() == before


@pytest.mark.parametrize(
    "kwargs",
    [{"gc_freeze": 1}, {"gc_young_threshold": 0}, {"gc_young_threshold": 1.5}],
)
def test_bad_gc_options_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidConfigError):
        RuntimeConfig(**kwargs)  # type: ignore[arg-type]


def test_gc_watch_times_full_collections_until_uninstalled() -> None:
    with GcWatch() as watch:
        gc.collect()
        summary = watch.summary()
    assert summary["gen2"]["collections"] == 1
    assert watch.longest_ms(2) == pytest.approx(summary["gen2"]["max_ms"], abs=0.001)
    assert summary["gen2"]["max_ms"] > 0
    gc.collect()
    assert watch.summary()["gen2"]["collections"] == 1  # no longer recording
    watch.reset()
    assert watch.longest_ms(2) == 0.0


def test_gc_watch_readers_survive_a_collection_that_starts_while_they_read() -> None:
    """A collection can start inside ``summary()`` (it allocates while holding the watch's
    lock); the callback then runs on the reading thread itself and must not hang on it."""
    old = gc.get_threshold()
    with GcWatch() as watch:
        watch.pauses[0].extend([0.001] * 100)
        gc.set_threshold(1)  # every allocation starts a young collection
        try:
            for _ in range(50):
                summary = watch.summary()
                assert watch.longest_ms(0) >= 1.0
        finally:
            gc.set_threshold(*old)
    assert summary["gen0"]["collections"] >= 100
