"""perf.steps's GPU use: the job's GPUs sampled from NVML during the run (replayed machines:
no GPU here), matched to the ranks' steps by monotonic time; and the real NVML without a driver."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import wait_for_readings

from ddplint.runtime.checks.perf import check_steps
from ddplint.runtime.gpuuse import GpuSample, GpuSampling, sampled_gpus, use_between
from ddplint.runtime.nvml import NvmlUnavailable, ReplayReads, open_nvml
from ddplint.runtime.perfrecords import CommSample, PerfRecord, StepSample, StepTimes
from ddplint.runtime.records import RankRecord
from ddplint.runtime.verdict import Status

MACHINES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
GIB = 2**30


def machine(name: str, busy: dict[int, list[int]]) -> ReplayReads:
    """A recorded machine whose device at each position answers these utilisation readings."""
    inv = json.loads((MACHINES / f"{name}.json").read_text())
    inv = copy.deepcopy({k: v for k, v in inv.items() if not k.startswith("_")})
    for pos, readings in busy.items():
        inv["devices"][pos]["utilization"] = [{"gpu": b, "memory": b // 2} for b in readings]
    return ReplayReads(inv)


def ticking() -> Callable[[], float]:
    ticks = iter(range(10**6))
    return lambda: float(next(ticks))


def test_the_sampler_reads_the_visible_gpus_until_the_block_ends():
    reads = machine("a100_sxm_4x_foreign_processes", {0: [90, 95], 1: [3], 2: [50], 3: [50]})
    with sampled_gpus(range(2), {}, reads, interval=0.001, clock=ticking()) as sampling:
        wait_for_readings(sampling, 12)
    taken = len(sampling.samples)
    time.sleep(0.05)
    assert len(sampling.samples) == taken  # the thread stopped with the block
    assert sampling.gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]  # every GPU the ranks can pick
    assert sampling.ranks == (0, 1)
    assert {s.gpu for s in sampling.samples} == {"GPU0", "GPU1", "GPU2", "GPU3"}
    gpu0, gpu1, *_ = use_between(sampling, 0, 10**6)
    assert gpu0.busy_max_pct == 95 and 90 <= gpu0.busy_mean_pct <= 95 and gpu1.busy_mean_pct == 3
    assert gpu0.readings == gpu1.readings >= 3


def test_cuda_visible_devices_picks_the_gpus_sampled():
    reads = machine("a100_sxm_4x_foreign_processes", {2: [70], 3: [0]})
    with sampled_gpus(range(2), {"CUDA_VISIBLE_DEVICES": "3,2"}, reads, interval=0.001, clock=ticking()) as sampling:
        wait_for_readings(sampling, 2)
    assert sampling.gpus == ["GPU3", "GPU2"]


def test_readings_that_stop_answering_end_the_sampling_with_the_reason():
    reads = machine("rtx4090_2x_pcie_cross_socket", {0: [80], 1: [80]})

    def lost(i):
        raise RuntimeError("GPU is lost")

    reads.utilization = lost  # type: ignore[method-assign]
    with sampled_gpus(range(2), {}, reads, interval=0.001, clock=ticking()) as sampling:
        deadline = time.monotonic() + 120
        while sampling.stopped is None and time.monotonic() < deadline:
            time.sleep(0.002)
    assert sampling.stopped == "NVML stopped answering (GPU is lost)" and sampling.samples == []


def test_no_nvidia_driver_here_means_nothing_sampled_and_no_error():
    try:
        open_nvml().close()
        pytest.skip("this machine has an NVIDIA driver")
    except NvmlUnavailable:
        pass
    with sampled_gpus(range(2), {}) as sampling:
        pass
    assert sampling.unavailable is not None and sampling.unavailable.startswith("NVML not available")
    assert sampling.gpus == [] and sampling.samples == []


# ---- perf.steps judges the readings taken during the steps -------------------------------------


def timed_steps(start: float, step_s: float, n: int = 8) -> list[StepSample]:
    """n steps of one epoch from monotonic time `start`, 10% of each waiting for data."""
    return [StepSample(0, s, step_s * 0.1, step_s * 0.9, at=start + (s - 1) * step_s) for s in range(1, n + 1)]


def records(start: float, step_s: float, ranks: range = range(2)) -> dict[int, RankRecord]:
    perf = PerfRecord(times=StepTimes(timed_steps(start, step_s), [CommSample(i, 0.002, 0.001) for i in range(8)], 1))
    return {r: RankRecord(r, perf=perf) for r in ranks}


def sampling(busy: dict[str, int], start: float = 0.0, end: float = 20.0, every: float = 0.2) -> GpuSampling:
    """Readings every 0.2 s from `start` to `end`: each GPU at its utilisation, 12 GiB in use,
    sampled for a node with ranks 0 and 1."""
    out = GpuSampling(gpus=list(busy), ranks=(0, 1))
    t = start
    while t <= end:
        out.samples += [GpuSample(round(t, 4), gpu, pct, 12 * GIB) for gpu, pct in busy.items()]
        t += every
    return out


def test_one_busy_gpu_beside_idle_ones_warns_with_the_binding_fix():
    r = check_steps(records(5.0, 0.5), "/", sampling({"GPU0": 96, "GPU1": 1}))
    assert r.status is Status.WARN
    assert r.summary == "only GPU0 (96%) worked during the steps of this node's 2 ranks; GPU1 (1%) stayed idle"
    assert "torch.cuda.set_device(local_rank)" in r.fix and "bind.distinct" in r.fix
    assert "GPU use during the steps (NVML): GPU0 96% busy, 12.0 GiB in use; GPU1 1% busy, 12.0 GiB in use" in r.evidence
    assert [g["readings"] for g in r.data["gpus"]] == [18, 18]  # 3.5 s of steady steps (the first left out)


def test_gpus_busy_alike_pass_with_their_use_shown():
    r = check_steps(records(5.0, 0.5), "/", sampling({"GPU0": 88, "GPU1": 84}))
    assert r.status is Status.PASS
    assert "GPU use during the steps (NVML): GPU0 88% busy, 12.0 GiB in use; GPU1 84% busy, 12.0 GiB in use" in r.evidence


def test_idle_readings_before_and_after_the_steps_do_not_count():
    gpus = sampling({"GPU0": 0, "GPU1": 0}, 0.0, 20.0)
    during = [s for s in gpus.samples if 5.5 <= s.at <= 9.0]
    busy = [GpuSample(s.at, s.gpu, 90, s.memory_used_bytes) for s in during]
    gpus.samples = [s for s in gpus.samples if s not in during] + busy
    r = check_steps(records(5.0, 0.5), "/", gpus)
    assert r.status is Status.PASS and "GPU0 90% busy" in r.evidence[-1] and "GPU1 90% busy" in r.evidence[-1]


def test_ranks_on_gpus_of_their_own_choosing_are_no_warning():
    """Two ranks on a 4-GPU node that bind cuda:0 and cuda:2: two GPUs idle, none shared."""
    r = check_steps(records(5.0, 0.5), "/", sampling({"GPU0": 92, "GPU1": 0, "GPU2": 90, "GPU3": 0}))
    assert r.status is Status.PASS and "GPU0 92% busy" in r.evidence[-1] and "GPU3 0% busy" in r.evidence[-1]


def test_only_this_nodes_ranks_place_the_readings_in_time():
    """Ranks 2 and 3 ran on another node, whose monotonic clock is its own (here hours apart)."""
    recs = records(5.0, 0.5) | records(50_000.0, 0.5, range(2, 4))
    r = check_steps(recs, "/", sampling({"GPU0": 96, "GPU1": 1}))
    assert r.status is Status.WARN and [g["readings"] for g in r.data["gpus"]] == [18, 18]


def test_every_gpu_partly_busy_is_no_warning():
    """Low use on every GPU is a small model or a data-bound loop, which the split shows: only
    one GPU working while the others idle is the binding mistake this warns of."""
    r = check_steps(records(5.0, 0.5), "/", sampling({"GPU0": 30, "GPU1": 5}))
    assert r.status is Status.PASS


def test_steps_too_short_for_nvml_are_not_judged():
    r = check_steps(records(5.0, 0.01), "/", sampling({"GPU0": 96, "GPU1": 1}))
    assert r.status is Status.PASS
    assert any(e.startswith("GPU use not judged: the steps lasted 0.07 s") for e in r.evidence)


def test_unsampled_gpus_and_steps_without_times_are_said_not_judged():
    r = check_steps(records(5.0, 0.5), "/", GpuSampling(unavailable="NVML not available (no NVIDIA driver loaded)"))
    assert r.status is Status.PASS and "GPU use not sampled: NVML not available (no NVIDIA driver loaded)" in r.evidence
    untimed = records(5.0, 0.5)
    for rec in untimed.values():
        for s in rec.perf.times.steps:
            s.at = None  # a record of an older probe
    r = check_steps(untimed, "/", sampling({"GPU0": 96, "GPU1": 1}))
    assert r.status is Status.PASS and "GPU use not matched to the steps: the ranks noted no step times" in r.evidence


def test_on_the_cpu_nothing_is_said_of_gpus():
    r = check_steps(records(5.0, 0.5), "/", None)
    assert r.status is Status.PASS and "gpus" not in r.data and not any("GPU use" in e for e in r.evidence)
