"""Labelled counters, gauges and histograms kept per thread and summed when scraped.

prometheus_client's own metrics take a lock per update; here each thread adds to numbers of its
own (:class:`Shards`), and a scrape sums them. The families are prometheus_client custom
collectors: ``collect`` runs on the scraping thread, and ``describe`` names them without
samples, so a registry still refuses a second collector of the same name.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["CounterFamily", "GaugeFamily", "HistogramCounts", "HistogramFamily", "Labels", "Shards"]

Labels = tuple[str, ...]


class Shards:
    """Numbers keyed by anything hashable, one dict per thread (:meth:`mine`, also
    ``local.numbers``), written only by that thread, so with no lock. A thread that ends
    leaves its numbers behind, so totals never go back."""

    def __init__(self) -> None:
        self.local = threading.local()
        self._lock = threading.Lock()  # guards the list of dicts, not the dicts
        self._dicts: list[dict[Any, Any]] = []

    def mine(self) -> dict[Any, Any]:
        """The calling thread's numbers. Any thread."""
        try:
            return self.local.numbers  # type: ignore[no-any-return]
        except AttributeError:
            numbers: dict[Any, Any] = {}
            with self._lock:
                self._dicts.append(numbers)
            self.local.numbers = numbers
            return numbers

    def snapshot(self) -> list[dict[Any, Any]]:
        """A copy of every thread's numbers. Any thread."""
        with self._lock:
            dicts = list(self._dicts)
        return [d.copy() for d in dicts]


@dataclass(eq=False)  # hashed by identity: a family is part of its numbers' keys
class _Family(Collector):
    """A named family of samples, one per tuple of label values, kept in ``shards`` under
    keys ``(self, *labels)``."""

    name: str
    documentation: str
    labelnames: Sequence[str]
    shards: Shards
    relabel: Callable[[Labels], Labels] | None = field(default=None, kw_only=True)
    """The labels samples show, from the labels they are kept under (None: the same)."""

    def _family(self) -> Metric:
        raise NotImplementedError

    def describe(self) -> Iterator[Metric]:
        """The family without samples (what a registry checks names against)."""
        yield self._family()

    def _rows(self, kept: _Family | None = None) -> dict[Labels, Any]:
        """The numbers kept under ``kept`` (default: this family) summed over the threads, by
        the labels this family's samples show: a value, or a histogram's row."""
        owner = self if kept is None else kept
        relabel = self.relabel
        out: dict[Labels, Any] = {}
        for numbers in self.shards.snapshot():
            for key, value in numbers.items():
                if key[0] is not owner:
                    continue
                labels = key[1:] if relabel is None else relabel(key[1:])
                if isinstance(value, list):
                    row = out.get(labels)
                    out[labels] = (
                        list(value)
                        if row is None
                        else [a + b for a, b in zip(row, value, strict=True)]
                    )
                else:
                    out[labels] = out.get(labels, 0.0) + value
        return out


class _ScalarFamily(_Family):
    """A family with one number per tuple of label values."""

    def add(self, labels: Labels, amount: float = 1.0) -> None:
        """Add ``amount`` to the sample of ``labels``. The calling thread's shard."""
        numbers = self.shards.mine()
        key = (self, *labels)
        numbers[key] = numbers.get(key, 0.0) + amount

    metric: ClassVar[type[CounterMetricFamily] | type[GaugeMetricFamily]]

    def _family(self) -> CounterMetricFamily | GaugeMetricFamily:
        return self.metric(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        rows = self._rows()
        if not rows and not self.labelnames:  # an unlabelled metric always has its sample
            rows[()] = 0.0
        for labels, value in rows.items():
            family.add_metric(list(labels), value)
        yield family


class CounterFamily(_ScalarFamily):
    """A counter family (``name`` may end in ``_total``; its samples do)."""

    metric = CounterMetricFamily


class GaugeFamily(_ScalarFamily):
    """A gauge family moved by deltas."""

    metric = GaugeMetricFamily


@dataclass(eq=False)
class HistogramFamily(_Family):
    """A histogram family with fixed, increasing upper bounds ``buckets`` (``+Inf`` is
    added)."""

    buckets: Sequence[float]

    def __post_init__(self) -> None:
        bounds = tuple(float(b) for b in self.buckets)
        if list(bounds) != sorted(set(bounds)) or bounds[-1] == float("inf"):
            raise ValueError("histogram buckets must be finite and strictly increasing")
        self.bounds = bounds  # the bucket bounds, +Inf left out
        self._le = [floatToGoString(b) for b in bounds] + ["+Inf"]  # type: ignore[no-untyped-call]

    def observe(self, labels: Labels, amount: float) -> None:
        """Count one observation of ``amount`` in the calling thread's shard: a row of counts
        per bucket (a bucket holds values <= its bound; not cumulative; +Inf last), then the
        sum."""
        numbers = self.shards.mine()
        key = (self, *labels)
        row = numbers.get(key)
        if row is None:
            row = numbers[key] = self.empty_row()
        row[bisect_left(self.bounds, amount)] += 1.0
        row[-1] += amount

    def empty_row(self) -> list[float]:
        """The row of a labels tuple not observed yet (see :meth:`observe`)."""
        return [0.0] * (len(self.bounds) + 2)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for labels, row in self._rows().items():
            cumulative: list[tuple[str, float]] = []
            total = 0.0
            for le, count in zip(self._le, row[:-1], strict=True):
                total += count
                cumulative.append((le, total))
            family.add_metric(list(labels), cumulative, sum_value=row[-1])
        yield family


class HistogramCounts(CounterFamily):
    """A counter family of a histogram's observation counts (``relabel`` maps the labels they
    are kept under to this family's): one update counts in both."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        histogram: HistogramFamily,
        relabel: Callable[[Labels], Labels],
    ) -> None:
        super().__init__(name, documentation, labelnames, histogram.shards, relabel=relabel)
        self.histogram = histogram

    def add(self, labels: Labels, amount: float = 1.0) -> None:
        """Not counted directly: observe the histogram."""
        raise TypeError(f"{self.name} counts the observations of {self.histogram.name}")

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for labels, row in self._rows(self.histogram).items():
            family.add_metric(list(labels), sum(row[:-1]))
        yield family
