"""The job's GPUs sampled from NVML while it runs: how busy each one is and the memory in use,
so that "only one GPU works" is seen directly rather than inferred.

NVML's utilisation is the share of its last sample period (1/6 s to 1 s, by GPU) in which a
kernel ran. A thread of the audit reads it every SAMPLE_INTERVAL_S; the ranks are not touched,
so the job's own step times stay its own. Readings are matched to the training steps by
`time.monotonic()`, which every process of a node shares.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ddplint.runtime.checks.gpu import visible_gpus
from ddplint.runtime.nvml import NvmlReadFailed, NvmlReads, NvmlUnavailable, PynvmlReads, load_machine, open_nvml

SAMPLE_INTERVAL_S = 0.2


@dataclass(frozen=True)
class GpuSample:
    at: float  # time.monotonic() of the reading
    gpu: str  # the GPU's label ("GPU3", NVML's index)
    busy_pct: int | None  # NVML utilization.gpu; None where NVML has no answer (a MIG parent)
    memory_used_bytes: int | None


@dataclass
class GpuSampling:
    """The job's GPUs (labels, CUDA's order) and what was read from them; `unavailable` says why
    nothing could be (no NVML, no GPU visible), `stopped` why the readings ended early."""

    gpus: list[str] = field(default_factory=list)
    ranks: tuple[int, ...] = ()  # the ranks of this node: the steps these readings are matched to
    samples: list[GpuSample] = field(default_factory=list)
    unavailable: str | None = None
    stopped: str | None = None
    interval_s: float = SAMPLE_INTERVAL_S


@contextmanager
def sampled_gpus(
    ranks: Sequence[int],
    environ: dict[str, str],
    reads: NvmlReads | None = None,
    interval: float = SAMPLE_INTERVAL_S,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[GpuSampling]:
    """Sample every GPU the node's `ranks` can see (CUDA_VISIBLE_DEVICES honoured: which of them
    a rank binds is its own choice) for the duration of the `with` block. `reads` replaces the
    real NVML (tests replay machines)."""
    sampling = GpuSampling(ranks=tuple(ranks), interval_s=interval)
    opened: PynvmlReads | None = None
    try:
        if reads is None:
            reads = opened = open_nvml()
        machine = load_machine(reads)
        job = visible_gpus(machine, environ.get("CUDA_VISIBLE_DEVICES")).indices
    except (NvmlUnavailable, NvmlReadFailed) as e:
        sampling.unavailable = str(e)
    except Exception as e:  # noqa: BLE001  # gpu.inventory reports a failing GPU; the job still runs
        sampling.unavailable = f"NVML could not be read ({e})"
    else:
        if not job:
            sampling.unavailable = "no GPU is visible to the job"
    if sampling.unavailable is not None:
        if opened is not None:
            opened.close()
        yield sampling
        return
    sampling.gpus = [machine.gpus[pos].label for pos in job]
    stop = threading.Event()

    def read_all() -> None:
        assert reads is not None
        for pos in job:
            busy = reads.utilization(pos)
            memory = reads.memory(pos)
            sampling.samples.append(
                GpuSample(
                    round(clock(), 4),
                    machine.gpus[pos].label,
                    busy["gpu"] if busy else None,
                    memory["used"] if memory else None,
                )
            )

    def run() -> None:
        while True:
            try:
                read_all()
            except Exception as e:  # noqa: BLE001  # a GPU fell off the bus: the report says so, the job goes on
                sampling.stopped = f"NVML stopped answering ({e})"
                return
            if stop.wait(interval):
                return

    thread = threading.Thread(target=run, name="ddplint-gpu-sampler", daemon=True)
    thread.start()
    try:
        yield sampling
    finally:
        stop.set()
        thread.join()
        if opened is not None:
            opened.close()


@dataclass(frozen=True)
class GpuUse:
    """One GPU over a span of the job: its readings, mean and highest utilisation, peak memory."""

    gpu: str
    readings: int
    busy_mean_pct: float | None
    busy_max_pct: int | None
    memory_peak_bytes: int | None


def use_between(sampling: GpuSampling, start: float, end: float) -> list[GpuUse]:
    """Each of the job's GPUs over the readings taken from `start` to `end` (monotonic seconds)."""
    uses = []
    for gpu in sampling.gpus:
        mine = [s for s in sampling.samples if s.gpu == gpu and start <= s.at <= end]
        busy = [s.busy_pct for s in mine if s.busy_pct is not None]
        memory = [s.memory_used_bytes for s in mine if s.memory_used_bytes is not None]
        uses.append(
            GpuUse(
                gpu,
                len(mine),
                sum(busy) / len(busy) if busy else None,
                max(busy) if busy else None,
                max(memory) if memory else None,
            )
        )
    return uses
