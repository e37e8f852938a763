"""perf.steps and ckpt.resume: where the audited steps spent their time, and whether the
checkpoints the script wrote are enough to resume from.

perf.steps judges the training loader's steps (from one `__next__` to the next, the first step
of each epoch left out: worker start-up and DDP's first-iteration set-up are not the steady
state). In synchronous data parallelism every rank's step lasts as long as the slowest rank's,
so a straggler is found by what each rank does *not* spend waiting for its peers: its step
minus the gradient communication DDP's reducer saw exposed (not overlapped with backward).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ddplint.runtime.checks.common import Findings, size_text, written_at
from ddplint.runtime.datarecords import LoaderRecord
from ddplint.runtime.gpuuse import GpuSampling, GpuUse, use_between
from ddplint.runtime.perfrecords import (
    CheckpointContent,
    LiveTraining,
    PerfRecord,
    StepSample,
)
from ddplint.runtime.registry import BIND_DISTINCT, CKPT_RESUME, COMM_BANDWIDTH, PERF_SCALING, PERF_STEPS, ids
from ddplint.runtime.sites import short
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

PERF_CHECKS = ids("perf")  # in report order, after io.single_writer
INPUT_BOUND_SHARE = 0.30  # waiting for data in 30% of the step or more
STRAGGLER_RATIO = 1.5  # a rank's own work 1.5x the median of the others'
MIN_WAIT_S = 0.005  # a median wait under 5 ms per step is never input-bound (toy scripts)
MIN_EXCESS_S = 0.020  # and keeps the others waiting 20 ms per step or more: below, a busy host's noise
COMM_BOUND_SHARE = 0.50  # waiting in the gradient all_reduce half of the step or more
MIN_COMM_S = 0.020  # and 20 ms per step or more: a toy model's all_reduce is latency, not a bottleneck
GPU_BUSY_PCT = 50  # a GPU busy half of the steps or more ...
GPU_IDLE_PCT = 10  # ... while fewer GPUs than ranks get past 10%: the ranks share GPUs
MIN_GPU_READINGS = 3  # NVML readings within the steps needed to judge a GPU

INPUT_FIX = (
    "load batches ahead of the step: DataLoader(num_workers={workers}, pin_memory=True, "
    "persistent_workers=True, prefetch_factor=4){now}; move decoding and augmentation off the "
    "training loop (pre-process once, or decode on the GPU)"
)
STRAGGLER_FIX = (
    "find what rank {rank} does that the others do not (rank-0-only logging or evaluation inside "
    "the step, a slower GPU or node, a larger shard): every other rank waits for it in each "
    "gradient all_reduce"
)


@dataclass
class RankSteps:
    """One rank's steady-state steps (medians, seconds)."""

    rank: int
    steps: int  # steps judged
    step_s: float
    wait_s: float  # in the loader's __next__
    wait_share: float  # total wait / total step time
    comm_s: float | None  # gradient communication exposed per iteration; None without DDP's timers
    first_step_s: float | None  # median first step of an epoch (start-up), left out of the above
    forward_backward_s: float | None = None  # first module call to the last backward's end, less comm_s; None: no backward seen
    optimizer_s: float = 0.0  # in Optimizer.step

    @property
    def own_s(self) -> float:
        """The step minus the time spent waiting for peers in gradient communication."""
        return max(0.0, self.step_s - (self.comm_s or 0.0))

    @property
    def other_s(self) -> float:
        """What the split does not name: moving batches, logging, metrics (and forward+backward
        where no backward was seen)."""
        named = self.wait_s + (self.comm_s or 0.0) + (self.forward_backward_s or 0.0) + self.optimizer_s
        return max(0.0, self.step_s - named)


def _ms(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s >= 0.0095 else f"{s * 1000:.1f} ms"


def rank_steps(rank: int, perf: PerfRecord) -> RankSteps | None:
    samples: list[StepSample] = perf.times.steps
    if not samples:
        return None
    steady = [s for s in samples if s.step > 1] or samples
    firsts = [s.wait_s + s.rest_s for s in samples if s.step == 1 and len(steady) < len(samples)]
    totals = [s.wait_s + s.rest_s for s in steady]
    comm = sorted(perf.times.comm, key=lambda c: c.iteration)
    comm = comm[1:] if len(comm) > 1 else comm  # DDP's first iteration builds its buckets
    comm_s = statistics.median(c.exposed_s for c in comm) if comm else None
    computed = [s.compute_s for s in steady if s.compute_s is not None]
    return RankSteps(
        rank=rank,
        steps=len(steady),
        step_s=statistics.median(totals),
        wait_s=statistics.median(s.wait_s for s in steady),
        wait_share=sum(s.wait_s for s in steady) / max(sum(totals), 1e-9),
        comm_s=comm_s,
        first_step_s=statistics.median(firsts) if firsts else None,
        forward_backward_s=max(0.0, statistics.median(computed) - (comm_s or 0.0)) if computed else None,
        optimizer_s=statistics.median(s.optimizer_s for s in steady),
    )


def _training_loader(records: dict[int, RankRecord]) -> LoaderRecord | None:
    return next((loader for _, rec in sorted(records.items()) if (loader := rec.training_loader)), None)


def check_steps(records: dict[int, RankRecord], base: str, gpus: GpuSampling | None = None) -> CheckResult:
    """`gpus`: the job's GPUs sampled from NVML during the run (None on the CPU)."""
    ranks = [r for r in (rank_steps(rank, rec.perf) for rank, rec in sorted(records.items())) if r is not None]
    if not ranks:
        return CheckResult(PERF_STEPS, Status.SKIP, "no training step ran: nothing to time")
    loader = _training_loader(records)
    median_step = statistics.median(r.step_s for r in ranks)
    median_own = statistics.median(r.own_s for r in ranks)
    slowest = max(ranks, key=lambda r: r.own_s)
    data = {
        "ranks": [{**asdict(r), "own_s": r.own_s, "other_s": r.other_s} for r in ranks],
        "median_step_s": median_step,
        "slowest_rank": slowest.rank,
        "slowest_ratio": slowest.own_s / median_own if median_own else None,
        "input_bound_share": INPUT_BOUND_SHARE,
        "straggler_ratio": STRAGGLER_RATIO,
    }
    evidence = [_line(r) for r in ranks]
    if any(r.comm_s is None for r in ranks):
        evidence.append("gradient communication not separated (no DDP model): it is counted in forward+backward")
    if any(r.forward_backward_s is None for r in ranks):
        evidence.append("forward+backward not separated (no backward() seen in the steps): it is counted in the rest")
    findings = Findings()
    input_bound = [r for r in ranks if r.wait_share >= INPUT_BOUND_SHARE and r.wait_s >= MIN_WAIT_S]
    if input_bound:
        worst = max(input_bound, key=lambda r: r.wait_share)
        workers = loader.num_workers if loader else 0
        where = f" at {short(loader.site, base)}" if loader else ""
        findings.add(
            Status.WARN,
            f"input-bound: rank {worst.rank} waits for data {worst.wait_share:.0%} of each step "
            f"({_ms(worst.wait_s)} of {_ms(worst.step_s)}) in the training loader{where}",
            INPUT_FIX.format(workers=max(4, 2 * workers) if workers else 4, now=f" (now num_workers={workers})"),
        )
    if len(ranks) > 1:
        for r in sorted(ranks, key=lambda r: -r.own_s):
            others = statistics.median(o.own_s for o in ranks if o is not r)
            if r.own_s >= STRAGGLER_RATIO * others and r.own_s - others >= MIN_EXCESS_S:
                findings.add(
                    Status.WARN,
                    f"straggler: rank {r.rank} works {_ms(r.own_s)} per step, "
                    f"{r.own_s / max(others, 1e-9):.1f}x the {_ms(others)} of the others, "
                    f"who wait for it",
                    STRAGGLER_FIX.format(rank=r.rank),
                )
                data["straggler"] = r.rank
                break
    if "straggler" not in data and all(r.comm_s is not None for r in ranks):
        _communication_bound(records, ranks, findings, evidence)
    if gpus is not None:
        _gpu_use(records, gpus, findings, evidence, data)
    if findings.items:
        return CheckResult(PERF_STEPS, findings.status, findings.summary, evidence, findings.fix, data=data)
    split = _split(ranks)
    tail = f"; slowest rank {slowest.rank} {slowest.own_s / median_own:.2f}x the median" if len(ranks) > 1 and median_own else ""
    return CheckResult(
        PERF_STEPS,
        Status.PASS,
        f"median step {_ms(median_step)} over {ranks[0].steps} steps per rank: {split}{tail}",
        evidence,
        data=data,
    )


COMM_FIX = (
    "fewer or cheaper gradient all_reduces per sample: a larger per-GPU batch, gradient accumulation "
    "with model.no_sync() on all but the last micro-batch, a larger bucket_cap_mb, a bf16/fp16 "
    "compression comm hook; keep them overlapped with backward (find_unused_parameters=False, "
    "static_graph=True where the graph is fixed)"
)


def _communication_bound(records: dict[int, RankRecord], ranks: list[RankSteps], findings: Findings, evidence: list[str]) -> None:
    """The ranks wait for the gradient all_reduce most of each step (no straggler to blame):
    beside it, what the all_reduce test measured and what the links allow."""
    comm = statistics.median(r.comm_s or 0.0 for r in ranks)
    step = statistics.median(r.step_s for r in ranks)
    if comm < MIN_COMM_S or comm < COMM_BOUND_SHARE * step:
        return
    comms = [rec.comm for _, rec in sorted(records.items())]
    sweep = next((c for c in comms if c.sweep), None)
    on_cpu = sweep is None or (sweep.device or "cpu").startswith("cpu")
    if sweep is not None and sweep.sweep:
        best = max(row["busbw_gbps"] for row in sweep.sweep)
        limits = [rec.info.nvml.expected_busbw_gbps if rec.info.nvml else None for _, rec in sorted(records.items())]
        allowed = next((limit for limit in limits if limit), None)
        links = f"; the links allow about {allowed:.0f} GB/s" if allowed else ""
        evidence.append(f"the all_reduce test reached a peak bus bandwidth of {best:.2f} GB/s ({COMM_BANDWIDTH}){links}")
    summary = (
        f"communication-bound: the ranks wait {_ms(comm)} of each {_ms(step)} step ({comm / step:.0%}) "
        "for the gradient all_reduce"
    )
    if on_cpu:
        findings.add(Status.INFO, summary + " (gloo on the CPU: no forecast for NCCL between GPUs)", COMM_FIX)
    else:
        findings.add(Status.WARN, summary, COMM_FIX)


IDLE_GPU_FIX = (
    "every rank must compute on its own GPU: torch.cuda.set_device(local_rank) before building the "
    'model, the model and each batch moved to f"cuda:{local_rank}" (not "cuda:0" or "cuda" before '
    "set_device), DDP(model, device_ids=[local_rank])"
    f" (see {BIND_DISTINCT})"
)


def _gpu_use(records: dict[int, RankRecord], gpus: GpuSampling, findings: Findings, evidence: list[str], data: dict) -> None:
    """NVML's utilisation of each GPU the node's ranks can see, during their steps: fewer GPUs
    at work than ranks (and GPUs to give them) is what several ranks on one GPU, or a model left
    on one device, look like. Which GPUs the ranks picked (`cuda:{2 * local_rank}`) is theirs."""
    if gpus.unavailable is not None:
        evidence.append(f"GPU use not sampled: {gpus.unavailable}")
        return
    window = _steps_window({rank: rec for rank, rec in records.items() if rank in gpus.ranks})
    if window is None:
        evidence.append("GPU use not matched to the steps: the ranks noted no step times")
        return
    uses = use_between(gpus, *window)
    data["gpus"] = [asdict(u) for u in uses]
    judged = [u for u in uses if u.readings >= MIN_GPU_READINGS and u.busy_mean_pct is not None]
    if gpus.stopped is not None:
        evidence.append(gpus.stopped)
    if not judged:
        evidence.append(
            f"GPU use not judged: the steps lasted {window[1] - window[0]:.2f} s, too short for NVML's "
            f"readings every {gpus.interval_s:g} s (audit more steps: --steps)"
        )
        return
    evidence.append(
        "GPU use during the steps (NVML): "
        + "; ".join(
            f"{u.gpu} {u.busy_mean_pct:.0f}% busy"
            + (f", {size_text(u.memory_peak_bytes)} in use" if u.memory_peak_bytes is not None else "")
            for u in judged
        )
    )
    working = [u for u in judged if (u.busy_mean_pct or 0) >= GPU_IDLE_PCT]
    idle = [u for u in judged if u not in working]
    ranks = len(gpus.ranks)
    if any((u.busy_mean_pct or 0) >= GPU_BUSY_PCT for u in working) and len(working) < min(ranks, len(judged)):
        findings.add(
            Status.WARN,
            f"only {_gpus(working)} worked during the steps of this node's {ranks} ranks; {_gpus(idle)} stayed idle",
            IDLE_GPU_FIX,
        )


def _gpus(uses: list[GpuUse]) -> str:
    return ", ".join(f"{u.gpu} ({u.busy_mean_pct:.0f}%)" for u in uses)


def _steps_window(records: dict[int, RankRecord]) -> tuple[float, float] | None:
    """From the first judged step's start to the last one's end, over the ranks of one node
    (monotonic time is the node's own)."""
    spans = []
    for _, rec in sorted(records.items()):
        samples = rec.perf.times.steps
        steady = [s for s in samples if s.step > 1] or samples
        spans += [(s.at, s.ended_at) for s in steady if s.at is not None and s.ended_at is not None]
    if not spans:
        return None
    return min(a for a, _ in spans), max(b for _, b in spans)


# -- perf.scaling ----------------------------------------------------------------------------

SCALING_WARN = 0.80  # N processes giving less than 80% of N times one process's throughput


@dataclass(frozen=True)
class SingleRun:
    """The same steps run again with 1 process (--scaling)."""

    records: dict[int, RankRecord]
    failed: str | None = None  # why it gave no steps to compare
    skipped: str | None = None  # why it was not run


def _throughput(records: dict[int, RankRecord]) -> tuple[list[RankSteps], int | None, float] | None:
    """(the ranks' steady steps, the training loader's batch size, samples (or steps) per second
    of the whole run)."""
    ranks = [r for rank, rec in sorted(records.items()) if (r := rank_steps(rank, rec.perf))]
    if not ranks:
        return None
    loader = _training_loader(records)
    batch = loader.batch_size if loader else None
    return ranks, batch, sum((batch or 1) / r.step_s for r in ranks if r.step_s > 0)


def check_scaling(records: dict[int, RankRecord], single: SingleRun | None, nproc: int, on_cpu: bool) -> CheckResult:
    """Throughput with `nproc` processes against one, the efficiency, and where the step grew."""
    if single is None:
        return CheckResult(PERF_SCALING, Status.SKIP, "not asked for (--scaling runs the same steps with 1 process too)")
    if single.skipped is not None:
        return CheckResult(PERF_SCALING, Status.SKIP, single.skipped)
    if single.failed is not None:
        return CheckResult(PERF_SCALING, Status.WARN, f"the 1-process run gave nothing to compare: {single.failed}")
    many, one = _throughput(records), _throughput(single.records)
    if many is None or one is None:
        which = f"the {nproc}-process run" if many is None else "the 1-process run"
        return CheckResult(PERF_SCALING, Status.WARN, f"{which} timed no training step: nothing to compare")
    ranks, batch, thr_n = many
    [alone], _, thr_1 = one
    unit = "samples/s" if batch else "steps/s"
    speedup = thr_n / thr_1
    efficiency = speedup / nproc
    step_n = statistics.median(r.step_s for r in ranks)
    wait_n = statistics.median(r.wait_s for r in ranks)
    comm_n = statistics.median(r.comm_s or 0.0 for r in ranks)
    growth = {"waiting for data": wait_n - alone.wait_s}
    if alone.forward_backward_s is not None and all(r.forward_backward_s is not None for r in ranks):
        growth["forward+backward"] = statistics.median(r.forward_backward_s or 0.0 for r in ranks) - alone.forward_backward_s
    growth["gradient sync"] = comm_n - (alone.comm_s or 0.0)
    growth["optimizer"] = statistics.median(r.optimizer_s for r in ranks) - alone.optimizer_s
    growth["the rest"] = (step_n - alone.step_s) - sum(growth.values())
    data = {
        "processes": {"1": thr_1, str(nproc): thr_n},
        "unit": unit,
        "batch_size": batch,
        "speedup": speedup,
        "efficiency": efficiency,
        "step_s": {"1": alone.step_s, str(nproc): step_n},
        "growth_s": growth,
        "warn_below": SCALING_WARN,
    }
    summary = (
        f"{nproc} processes: {thr_n:.1f} {unit}, 1 process: {thr_1:.1f} {unit}: {speedup:.2f}x, "
        f"scaling efficiency {efficiency:.0%}"
    )
    evidence = [
        f"median step: {_ms(alone.step_s)} with 1 process, {_ms(step_n)} with {nproc}",
        "where the step grew: " + ", ".join(f"{what} {'-' if d < -5e-5 else '+'}{_ms(abs(d))}" for what, d in growth.items()),
    ]
    if on_cpu:
        evidence.append("measured on the CPU: the processes share this host's cores, so this is no forecast for GPUs")
        return CheckResult(PERF_SCALING, Status.INFO, summary, evidence, data=data)
    if efficiency >= SCALING_WARN:
        return CheckResult(PERF_SCALING, Status.PASS, summary, evidence, data=data)
    worst = max(growth, key=lambda k: growth[k])
    return CheckResult(
        PERF_SCALING, Status.WARN, f"{summary}, below {SCALING_WARN:.0%}: mostly {worst}", evidence, SCALING_FIX[worst], data=data
    )


SCALING_FIX = {
    "waiting for data": "the loader cannot feed more processes: more DataLoader workers per rank, "
    f"pin_memory, persistent_workers, data on a faster disk (see {PERF_STEPS})",
    "gradient sync": "communication grows with the process count: a larger per-GPU batch, gradient "
    f"accumulation under model.no_sync(), a larger bucket_cap_mb (see {COMM_BANDWIDTH} for the links)",
    "forward+backward": "each process computes more slowly beside the others: they share a resource "
    f"(CPU threads: set OMP_NUM_THREADS; ranks on one GPU: see {BIND_DISTINCT}; a PCIe switch or the "
    "host's memory bandwidth)",
    "optimizer": "the optimizer step grows with the process count: the processes share the host's "
    "CPU or memory bandwidth (a CPU-side or foreach=False optimizer; set OMP_NUM_THREADS), or the "
    "optimizer communicates (ZeRO: its all_gather is in this part)",
    "the rest": "per-step work that does not shrink with more processes (rank-0 logging or evaluation "
    "inside the step), or processes that share a host resource (CPU threads: set OMP_NUM_THREADS, "
    "a PCIe switch)",
}


def _split(ranks: list[RankSteps]) -> str:
    """Each part's share of the ranks' median steps, summed over the ranks."""
    step = sum(r.step_s for r in ranks) or 1e-9
    parts = [("waiting for data", sum(r.wait_share * r.step_s for r in ranks))]
    if all(r.forward_backward_s is not None for r in ranks):
        parts.append(("forward+backward", sum(r.forward_backward_s or 0.0 for r in ranks)))
    if all(r.comm_s is not None for r in ranks):
        parts.append(("waiting in gradient all_reduce", sum(r.comm_s or 0.0 for r in ranks)))
    parts.append(("optimizer", sum(r.optimizer_s for r in ranks)))
    parts.append(("the rest", max(0.0, step - sum(t for _, t in parts))))
    return ", ".join(f"{name} {t / step:.0%}" for name, t in parts)


def _line(r: RankSteps) -> str:
    compute = f", forward+backward {_ms(r.forward_backward_s)}" if r.forward_backward_s is not None else ""
    comm = f", gradient sync wait {_ms(r.comm_s)}" if r.comm_s is not None else ""
    first = f"; first step of an epoch {_ms(r.first_step_s)}" if r.first_step_s is not None else ""
    return (
        f"rank {r.rank}: step {_ms(r.step_s)} (median of {r.steps}): data wait {_ms(r.wait_s)} "
        f"({r.wait_share:.0%}){compute}{comm}, optimizer {_ms(r.optimizer_s)}, the rest {_ms(r.other_s)}; "
        f"own work {_ms(r.own_s)}{first}"
    )


# -- ckpt.resume ---------------------------------------------------------------------------


def misses(c: CheckpointContent, live: LiveTraining, mid_epoch: tuple[int, int] | None = None) -> list[str]:
    """What a resume from this checkpoint would not restore; `mid_epoch`: (epoch, batch) when it
    was saved inside an epoch that went on after it."""
    if c.error is not None:
        return [f"torch.load cannot read it back: {c.error}"]
    out = []
    if c.model is None:
        out.append("no model weights")
    stateful = sorted({o.kind for o in live.optimizers if o.stateful})
    hinted = bool(c.optimizer_groups)  # momentum or betas in the saved param_groups
    if c.optimizer is None and stateful:
        out.append(
            f"no optimizer state: {'/'.join(stateful)} keeps per-parameter state (momentum, moments) "
            f"that a resume restarts from zero"
        )
    elif c.optimizer is not None and c.optimizer_state_entries == 0 and (stateful or hinted):
        out.append(
            f"the optimizer state at {c.optimizer} is empty (saved before the first step, or "
            f"another optimizer's): its momentum restarts from zero"
        )
    if c.scheduler is None and live.schedulers:
        out.append(f"no LR scheduler state: {'/'.join(sorted(set(live.schedulers)))} restarts its schedule")
    if c.scaler is None and live.scaler:
        out.append("no GradScaler state: the loss scale restarts from its initial value")
    if not c.counters:
        out.append("no epoch/step counter: a resume starts again at epoch 0")
    elif mid_epoch is not None and all("epoch" in key.rsplit("[", 1)[-1] for key in c.counters):
        epoch, batch = mid_epoch
        out.append(
            f"no position in the epoch: saved after batch {batch} of epoch {epoch} with an epoch counter "
            f"only, a resume starts that epoch again from its first batch (or skips the rest of it)"
        )
    return out


def _saved_mid_epoch(records: dict[int, RankRecord], path: str) -> tuple[int, int] | None:
    """(epoch, batch) when the training loader went on in the same epoch after `path` was saved
    the last time (a save every N steps), not when the epoch had ended (a save after the epoch's
    loop): the file read back holds that last save."""
    loader = _training_loader(records)
    at = written_at(records, path, last=True)
    if loader is None or at is None:
        return None
    epoch, batches = at
    return at if epoch < len(loader.epochs) and 0 < batches < loader.epochs[epoch].yielded else None


def _kinds(c: CheckpointContent) -> frozenset[str]:
    held = (("model", c.model), ("optimizer", c.optimizer), ("scheduler", c.scheduler), ("scaler", c.scaler))
    return frozenset([k for k, where in held if where is not None] + ["counter"] * bool(c.counters) + ["rng"] * bool(c.rng))


def _renamed(where: str | None, name: str) -> str | None:
    """`checkpoint['model']` in the file `a.pt` -> `a.pt['model']`."""
    return None if where is None else name + where.removeprefix("checkpoint")


def _merged(directory: str, pieces: list[CheckpointContent]) -> CheckpointContent:
    pieces = list({p.path: p for p in pieces}.values())  # (a file beside the pieces of several ranks is read by each)
    m = CheckpointContent(path=directory, size_bytes=sum(p.size_bytes or 0 for p in pieces))
    for p in pieces:
        name = os.path.basename(p.path)
        m.parts.append(name)
        if m.model is None and p.model is not None:
            m.model, m.model_tensors = _renamed(p.model, name), p.model_tensors
            m.module_prefix, m.whole_module = p.module_prefix, p.whole_module
        if m.optimizer is None and p.optimizer is not None:
            m.optimizer, m.optimizer_state_entries = _renamed(p.optimizer, name), p.optimizer_state_entries
            m.optimizer_groups = p.optimizer_groups
        m.scheduler = m.scheduler or _renamed(p.scheduler, name)
        m.scaler = m.scaler or _renamed(p.scaler, name)
        m.counters.update({name + k.removeprefix("checkpoint"): v for k, v in p.counters.items()})
        m.rng += [name + r.removeprefix("checkpoint") for r in p.rng]
    return m


def by_directory(saved: list[tuple[int, CheckpointContent, LiveTraining]]) -> list[tuple[int, CheckpointContent, LiveTraining]]:
    """The files of one directory that hold different parts of the training state (weights in
    one, the optimizer in another, the step in a JSON file: save_pretrained beside
    torch.save, a trainer's checkpoint-N/), from every rank, as one checkpoint of that
    directory; the rest as they are. Files that each hold the same parts (epoch_0.pt,
    epoch_1.pt) or one that holds them all stay checkpoints of their own."""
    groups: dict[str, list[tuple[int, CheckpointContent, LiveTraining]]] = {}
    for item in saved:
        if item[1].error is None and not item[1].collective:
            groups.setdefault(os.path.dirname(item[1].path), []).append(item)
    joined: dict[str, tuple[int, CheckpointContent, LiveTraining]] = {}
    for directory, items in groups.items():
        kinds = [_kinds(c) for _, c, _ in items]
        if len(items) > 1 and all(k < frozenset().union(*kinds) for k in kinds):
            rank, _, live = min(items, key=lambda i: i[0])
            joined[directory] = (rank, _merged(directory, [c for _, c, _ in items]), live)
    out, placed = [], set()
    for item in saved:
        directory = os.path.dirname(item[1].path)
        if directory not in joined or item[1].error is not None or item[1].collective:
            out.append(item)
        elif directory not in placed:
            placed.add(directory)
            out.append(joined[directory])
    return out


def _holds(c: CheckpointContent) -> str:
    if c.error is not None:
        return "unreadable"
    parts = []
    if c.model is not None:
        what = "a whole nn.Module" if c.whole_module else f"{c.model_tensors} tensors"
        parts.append(f"model at {c.model} ({what}{', module. prefix' if c.module_prefix else ''})")
    if c.optimizer is not None:
        state = "" if c.optimizer_state_entries is None else f", {c.optimizer_state_entries} state entries"
        parts.append(f"optimizer at {c.optimizer}{state}")
    if c.scheduler is not None:
        parts.append(f"scheduler at {c.scheduler}")
    if c.scaler is not None:
        parts.append(f"GradScaler at {c.scaler}")
    parts += [f"{k} = {v}" for k, v in list(c.counters.items())[:3]]
    if c.rng:
        parts.append("RNG state")
    return ", ".join(parts) or "nothing recognised" + (f" (keys: {', '.join(c.keys[:6])})" if c.keys else "")


def check_resume(records: dict[int, RankRecord], base: str) -> CheckResult:
    saved = []
    for rank, rec in sorted(records.items()):
        perf = rec.perf
        saved += [(rank, c, perf.live) for c in perf.checkpoints]
    if not saved:
        return CheckResult(CKPT_RESUME, Status.SKIP, "the script saved no checkpoint during the audit")
    judged = [(rank, c, live, misses(c, live, _saved_mid_epoch(records, c.path))) for rank, c, live in by_directory(saved)]
    data = {"checkpoints": [{**asdict(c), "rank": rank, "missing": m} for rank, c, _, m in judged], "live": asdict(judged[0][2])}
    evidence = [
        f"{short(c.path, base)} (rank {rank}, {size_text(c.size_bytes or 0)}"
        f"{', a torch.distributed.checkpoint directory' if c.collective else ''}"
        f"{f', {len(c.parts)} files judged together: ' + ', '.join(c.parts) if c.parts else ''}): {_holds(c)}"
        for rank, c, _, _ in judged
    ]
    prefixed = [c for _, c, _, _ in judged if c.module_prefix]
    if prefixed:
        evidence.append(
            "keys carry DDP's 'module.' prefix: load them into the DDP-wrapped model, or save "
            "model.module.state_dict() to load into a plain one"
        )
    complete = [(rank, c) for rank, c, _, m in judged if not m]
    if complete:
        rank, c = complete[-1]
        partial = len(judged) - len(complete)
        also = f"; {partial} other checkpoint(s) hold less (weights for inference?)" if partial else ""
        held = ["model"] + [
            name
            for name, where in (("optimizer", c.optimizer), ("scheduler", c.scheduler), ("GradScaler", c.scaler))
            if where is not None
        ]
        held.append(next(iter(c.counters)))
        rng = "" if c.rng else " (no RNG state: a resume draws different random numbers)"
        return CheckResult(
            CKPT_RESUME,
            Status.PASS,
            f"{short(c.path, base)} holds what a resume needs: {', '.join(held)}{rng}{also}",
            evidence,
            data=data,
        )
    rank, c, _, missing = min(judged, key=lambda j: len(j[3]))
    for m in missing:
        evidence.append(f"missing: {m}")
    what = "the model, the optimizer (with its state) and the epoch/step counter in one dict: " + (
        "model_sd, optim_sd = get_state_dict(model, optimizer) (torch.distributed.checkpoint.state_dict); "
        "dcp.save({'model': model_sd, 'optimizer': optim_sd, 'scheduler': scheduler.state_dict(), "
        "'epoch': epoch}, checkpoint_id=path)"
        if c.collective
        else "torch.save({'model': model.module.state_dict(), 'optimizer': optimizer.state_dict(), "
        "'scheduler': scheduler.state_dict(), 'epoch': epoch}, path)"
    )
    return CheckResult(
        CKPT_RESUME,
        Status.WARN,
        f"a resume from {short(c.path, base)} would miss: {missing[0]}"
        + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""),
        evidence,
        f"save {what}",
        data=data,
    )
