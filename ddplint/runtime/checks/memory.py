"""mem.fit: DDP keeps a full replica per GPU; does the replica's training state fit the smallest?
mem.peak: what the audited steps really used, per rank.

Per rank, DDP holds the parameters and buffers, one gradient per trainable parameter, DDP's
gradient buckets (another gradient-sized copy unless gradient_as_bucket_view=True) and the
optimizer state. Activations come on top, so the model state should leave room for them.
The measured peak (the caching allocator's on GPU, the resident set on CPU) includes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddplint.runtime.checks.common import mib, ranks_text, size_text
from ddplint.runtime.perfrecords import DevicePeak
from ddplint.runtime.registry import MEM_FIT, MEM_PEAK
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

# Optimizer state tensors per parameter when the state is still empty (created at first step).
STATE_SLOTS = {
    "Adam": 2,
    "AdamW": 2,
    "Adamax": 2,
    "NAdam": 2,
    "RAdam": 2,
    "Adagrad": 1,
    "Adadelta": 2,
    "Rprop": 2,
    "ASGD": 2,
    "SparseAdam": 2,
    "LBFGS": 0,
}
WARN_SHARE = 0.7  # model state above 70% of the smallest GPU leaves little for activations


def _state_slots(optimizer) -> tuple[int, str | None]:
    name = type(optimizer).__name__
    defaults = getattr(optimizer, "defaults", {})
    if name == "SGD":
        return (1 if defaults.get("momentum") else 0), None
    if name == "RMSprop":
        return 1 + bool(defaults.get("momentum")) + bool(defaults.get("centered")), None
    if name in STATE_SLOTS:
        return STATE_SLOTS[name], None
    return 0, f"optimizer {name}: state not estimated"


def estimate(models: list, optimizers: list) -> dict | None:
    """Bytes of training state one rank holds for its DDP model(s); None without a DDP model."""
    import torch

    if not models:
        return None
    params, buffers, grads, buckets = {}, 0, 0, 0
    for model in models:
        for p in model.parameters():
            params[id(p)] = p
        buffers += sum(b.numel() * b.element_size() for b in model.buffers())
    trainable = {k: p for k, p in params.items() if p.requires_grad}
    param_bytes = sum(p.numel() * p.element_size() for p in params.values())
    grads = sum(p.numel() * p.element_size() for p in trainable.values())
    if not all(getattr(m, "gradient_as_bucket_view", False) for m in models):
        buckets = grads
    state, notes = 0, []
    for opt in optimizers:
        owned = [p for g in opt.param_groups for p in g["params"] if id(p) in trainable]
        if not owned:
            continue
        live = [t for p in owned for t in opt.state.get(p, {}).values() if isinstance(t, torch.Tensor) and t.dim() > 0]
        if live:
            state += sum(t.numel() * t.element_size() for t in live)
            continue
        slots, note = _state_slots(opt)
        state += slots * sum(p.numel() * p.element_size() for p in owned)
        if note:
            notes.append(note)
    return {
        "parameters": len(params),
        "param_bytes": param_bytes,
        "buffer_bytes": buffers,
        "grad_bytes": grads,
        "bucket_bytes": buckets,
        "optimizer_bytes": state,
        "optimizers": sorted({type(o).__name__ for o in optimizers}),
        "total_bytes": param_bytes + buffers + grads + buckets + state,
        "notes": notes,
    }


def fit_check(records: list[RankRecord]) -> CheckResult:
    estimates = [rec.binding.model for rec in records if rec.binding.model]
    if not estimates:
        return CheckResult(MEM_FIT, Status.SKIP, "no DistributedDataParallel model existed at the first batch")
    est = max(estimates, key=lambda m: m["total_bytes"])
    evidence = [
        (
            f"per rank: parameters {size_text(est['param_bytes'])} + buffers "
            f"{size_text(est['buffer_bytes'])} + gradients {size_text(est['grad_bytes'])} + DDP buckets "
            f"{size_text(est['bucket_bytes'])} + optimizer state {size_text(est['optimizer_bytes'])} "
            f"({', '.join(est['optimizers']) or 'no optimizer found'}) = "
            f"{size_text(est['total_bytes'])}"
        )
    ] + est.get("notes", [])
    data: dict = {"estimate": est}
    gpus = [(r.rank, g.name, g.total_memory) for r in records if (g := r.binding.gpu) and g.total_memory]
    if not gpus:
        return CheckResult(
            MEM_FIT,
            Status.SKIP,
            f"model state {size_text(est['total_bytes'])} per rank; no GPU to fit it on",
            evidence,
            data=data,
        )
    small_rank, small_name, smallest = min(gpus, key=lambda g: g[2])
    share = est["total_bytes"] / smallest
    evidence.append(f"smallest GPU: {small_name} {mib(smallest)} on {ranks_text([small_rank])}; model state is {share:.0%} of it")
    data.update(smallest_gpu_bytes=smallest, share=share)
    fix = (
        "shard the model state with FSDP (torch.distributed.fsdp) or ZeRO "
        "(ZeroRedundancyOptimizer / DeepSpeed), or use a smaller model or batch"
    )
    if share >= 1:
        return CheckResult(
            MEM_FIT,
            Status.FAIL,
            f"model state {size_text(est['total_bytes'])} per rank does not fit the {mib(smallest)} GPU",
            evidence,
            fix,
            data=data,
        )
    if share > WARN_SHARE:
        return CheckResult(
            MEM_FIT,
            Status.WARN,
            f"model state {size_text(est['total_bytes'])} per rank fills {share:.0%} of "
            f"the smallest GPU, leaving little for activations",
            evidence,
            fix,
            data=data,
        )
    return CheckResult(
        MEM_FIT,
        Status.PASS,
        f"model state {size_text(est['total_bytes'])} per rank, {share:.0%} of the smallest GPU",
        evidence,
        data=data,
    )


# -- mem.peak ------------------------------------------------------------------------------

PEAK_WARN_SHARE = 0.9  # a peak above 90% of the GPU: the next bigger batch or sequence OOMs
PEAK_FIX = (
    "shard the training state with FSDP or ZeRO (ZeroRedundancyOptimizer / DeepSpeed), use a "
    "smaller batch per GPU (gradient accumulation keeps the effective batch), or activation "
    "checkpointing (torch.utils.checkpoint)"
)


@dataclass
class RankPeak:
    """One rank's measured peaks, with the GPU it drives (binding) when there is one."""

    rank: int
    rss_bytes: int | None
    rss_at_first_batch_bytes: int | None
    device: DevicePeak | None
    gpu_name: str | None
    gpu_total_bytes: int | None

    def to_json(self) -> dict:
        d = self.device
        return {
            "rank": self.rank,
            "rss_peak_bytes": self.rss_bytes,
            "rss_at_first_batch_bytes": self.rss_at_first_batch_bytes,
            "device": None if d is None else f"cuda:{d.index}",
            "allocated_peak_bytes": None if d is None else d.allocated_bytes,
            "reserved_peak_bytes": None if d is None else d.reserved_bytes,
            "gpu_total_bytes": self.gpu_total_bytes,
        }


def rank_peak(rec: RankRecord) -> RankPeak | None:
    perf = rec.perf
    if not perf.steps_ran or perf.mem is None:
        return None
    gpu = rec.binding.gpu
    devices = perf.mem.devices
    device = next((d for d in devices if gpu is not None and d.index == gpu.index), None)
    if device is None and devices:
        device = max(devices, key=lambda d: d.reserved_bytes)
    return RankPeak(
        rec.rank,
        perf.mem.rss_peak_bytes,
        perf.mem.rss_at_first_batch_bytes,
        device,
        gpu.name if gpu else None,
        gpu.total_memory if gpu else None,
    )


def peak_check(records: list[RankRecord]) -> CheckResult:
    """Measured peaks of the audited steps, next to mem.fit's estimate of the model state."""
    peaks = [p for p in map(rank_peak, records) if p is not None]
    if not peaks:
        return CheckResult(MEM_PEAK, Status.SKIP, "no training step ran: nothing to measure")
    estimates = [r.binding.model["total_bytes"] for r in records if r.binding.model]
    estimate = max(estimates) if estimates else None
    data: dict = {"ranks": [p.to_json() for p in peaks], "estimate_bytes": estimate}
    tail = [f"{MEM_FIT}'s estimate of the model state: {size_text(estimate)} per rank"] if estimate else []
    on_gpu = [(p, p.device) for p in peaks if p.device is not None]
    if not on_gpu:
        top = max(peaks, key=lambda p: p.rss_bytes or 0)
        evidence = [
            f"rank {p.rank}: peak RSS {_size(p.rss_bytes)} ({_size(p.rss_at_first_batch_bytes)} when the first batch came)"
            for p in peaks
        ]
        evidence.append("RSS counts torch's libraries in every rank, and not DataLoader worker processes")
        return CheckResult(
            MEM_PEAK,
            Status.PASS,
            f"peak RSS {_size(top.rss_bytes)} per rank (rank {top.rank}), on CPU",
            evidence + tail,
            data=data,
        )
    top, top_device = max(on_gpu, key=lambda pd: pd[1].reserved_bytes)
    totals = [(p, p.gpu_total_bytes) for p in peaks if p.gpu_total_bytes]
    evidence = []
    for p, d in on_gpu:
        of = f", {d.reserved_bytes / p.gpu_total_bytes:.0%} of its {mib(p.gpu_total_bytes)}" if p.gpu_total_bytes else ""
        evidence.append(
            f"rank {p.rank}: cuda:{d.index} peak allocated {size_text(d.allocated_bytes)}, "
            f"reserved {size_text(d.reserved_bytes)}{of}"
        )
    reserved = size_text(top_device.reserved_bytes)
    if not totals:
        return CheckResult(MEM_PEAK, Status.PASS, f"peak {reserved} reserved on rank {top.rank}", evidence + tail, data=data)
    smallest, smallest_total = min(totals, key=lambda pt: pt[1])
    share = top_device.reserved_bytes / smallest_total
    data.update(smallest_gpu_bytes=smallest_total, share=round(share, 4))
    evidence.append(f"smallest GPU: {smallest.gpu_name} {mib(smallest_total)} (rank {smallest.rank})")
    if share > PEAK_WARN_SHARE:
        return CheckResult(
            MEM_PEAK,
            Status.WARN,
            f"peak {reserved} reserved on rank {top.rank} is {share:.0%} of the smallest GPU: "
            f"little headroom for a longer sequence or a bigger batch",
            evidence + tail,
            PEAK_FIX,
            data=data,
        )
    return CheckResult(
        MEM_PEAK,
        Status.PASS,
        f"peak {reserved} reserved on rank {top.rank}, {share:.0%} of the smallest GPU",
        evidence + tail,
        data=data,
    )


def _size(n: int | None) -> str:
    return "?" if n is None else size_text(n)
