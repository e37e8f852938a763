"""The one timing rule of the benchmarks: the median of `repeat` wall-clock runs."""

from __future__ import annotations

import statistics
import time


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
