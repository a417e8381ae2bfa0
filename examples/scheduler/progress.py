"""A monitor thread: samples the run for the QPS-budget figure and draws a progress bar.

The bar is plain text on a stream (stderr by default): redrawn in place with ``\\r`` on a
terminal, one line every few seconds otherwise. Samples (time, tokens taken, futures
outstanding) are kept for :func:`budget_share`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True, slots=True)
class Sample:
    """One observation: monotonic time, tokens taken so far, futures outstanding."""

    t: float
    tokens: int
    outstanding: int


def budget_share(samples: list[Sample], qps: float, burst: int) -> float | None:
    """Share of the QPS budget used while work was pending: over the first continuous run of
    samples with outstanding futures that starts once the initial burst was spent, tokens
    taken divided by ``qps * duration``. None when unlimited or not measurable."""
    if not math.isfinite(qps) or qps <= 0:
        return None
    start = next(
        (i for i, s in enumerate(samples) if s.tokens >= burst and s.outstanding > 0), None
    )
    if start is None:
        return None
    end = start
    while end + 1 < len(samples) and samples[end + 1].outstanding > 0:
        end += 1
    first, last = samples[start], samples[end]
    duration = last.t - first.t
    if duration < 1.0:
        return None
    return (last.tokens - first.tokens) / (qps * duration)


class Monitor:
    """Samples ``probe()`` every ``interval`` seconds on its own thread; draws ``render()``
    on ``stream`` if given. ``probe`` and ``render`` run on the monitor thread."""

    def __init__(
        self,
        probe: Callable[[], tuple[int, int]],
        render: Callable[[], str] | None,
        stream: TextIO | None,
        *,
        interval: float = 0.05,
        redraw: float = 0.25,
    ) -> None:
        self._probe = probe
        self._render = render
        self._stream = stream
        self._interval = interval
        self._tty = bool(stream is not None and stream.isatty())
        self._redraw = redraw if self._tty else 2.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples: list[Sample] = []

    def start(self) -> None:
        """Caller thread."""
        self._thread = threading.Thread(target=self._loop, name="scheduler-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Caller thread. Take a last sample, end the bar's line, join the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        self._sample()
        self._draw(final=True)

    def _sample(self) -> None:
        tokens, outstanding = self._probe()
        self.samples.append(Sample(time.monotonic(), tokens, outstanding))

    def _draw(self, final: bool = False) -> None:
        if self._stream is None or self._render is None:
            return
        line = self._render()
        if self._tty:
            self._stream.write("\r" + line + ("\n" if final else ""))
        elif not final:
            self._stream.write(line + "\n")
        self._stream.flush()

    def _loop(self) -> None:
        """Monitor thread."""
        next_draw = time.monotonic()
        while not self._stop.wait(self._interval):
            try:
                self._sample()
                if time.monotonic() >= next_draw:
                    self._draw()
                    next_draw = time.monotonic() + self._redraw
            except Exception:  # a broken stream must not kill the run
                self._stream = None


def bar(done: int, total: int, width: int = 24) -> str:
    """``[#########---------]``."""
    filled = 0 if total <= 0 else min(width, round(width * done / total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def describe(counts: dict[str, Any], total: int, elapsed: float, calls: int) -> str:
    """One progress line from the scheduler's phase counts."""
    settled = counts.get("bound", 0) + counts.get("unschedulable", 0) + counts.get("gone", 0)
    rate = counts.get("bound", 0) / elapsed if elapsed > 0 else 0.0
    return (
        f"{bar(settled, total)} {settled:>6}/{total} settled | bound {counts.get('bound', 0)}"
        f" unschedulable {counts.get('unschedulable', 0)} preempted {counts.get('preempted', 0)}"
        f" | {rate:7.0f} pods/s | {calls} calls | {elapsed:5.1f}s"
    )
