"""mem.fit: DDP keeps a full replica per GPU; does the replica's training state fit the smallest?

Per rank, DDP holds the parameters and buffers, one gradient per trainable parameter, DDP's
gradient buckets (another gradient-sized copy unless gradient_as_bucket_view=True) and the
optimizer state. Activations come on top, so the model state should leave room for them.
"""

from __future__ import annotations

from ddplint.runtime.checks.common import mib, size_text
from ddplint.runtime.checks.records import part, rank_of, ranks_text
from ddplint.runtime.verdict import CheckResult, Status

# Optimizer state tensors per parameter when the state is still empty (created at first step).
STATE_SLOTS = {"Adam": 2, "AdamW": 2, "Adamax": 2, "NAdam": 2, "RAdam": 2, "Adagrad": 1,
               "Adadelta": 2, "Rprop": 2, "ASGD": 2, "SparseAdam": 2, "LBFGS": 0}
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
        live = [t for p in owned for t in opt.state.get(p, {}).values()
                if isinstance(t, torch.Tensor) and t.dim() > 0]
        if live:
            state += sum(t.numel() * t.element_size() for t in live)
            continue
        slots, note = _state_slots(opt)
        state += slots * sum(p.numel() * p.element_size() for p in owned)
        if note:
            notes.append(note)
    return {"parameters": len(params), "param_bytes": param_bytes, "buffer_bytes": buffers,
            "grad_bytes": grads, "bucket_bytes": buckets, "optimizer_bytes": state,
            "optimizers": sorted({type(o).__name__ for o in optimizers}),
            "total_bytes": param_bytes + buffers + grads + buckets + state, "notes": notes}


def fit_check(records: list[dict]) -> CheckResult:
    estimates = [(rec, part(rec, "binding").get("model")) for rec in records]
    estimates = [(rec, m) for rec, m in estimates if m]
    if not estimates:
        return CheckResult("mem.fit", Status.SKIP,
                           "no DistributedDataParallel model existed at the first batch")
    rec, est = max(estimates, key=lambda rm: rm[1]["total_bytes"])
    evidence = [f"per rank: parameters {size_text(est['param_bytes'])} + buffers "
                f"{size_text(est['buffer_bytes'])} + gradients {size_text(est['grad_bytes'])} + DDP buckets "
                f"{size_text(est['bucket_bytes'])} + optimizer state {size_text(est['optimizer_bytes'])} "
                f"({', '.join(est['optimizers']) or 'no optimizer found'}) = "
                f"{size_text(est['total_bytes'])}"] + est.get("notes", [])
    data = {"estimate": est}
    gpus = [(r, part(r, "binding").get("gpu")) for r in records]
    gpus = [(r, g) for r, g in gpus if g and g.get("total_memory")]
    if not gpus:
        return CheckResult("mem.fit", Status.SKIP,
                           f"model state {size_text(est['total_bytes'])} per rank; no GPU to fit it on",
                           evidence, data=data)
    small_rec, smallest = min(gpus, key=lambda rg: rg[1]["total_memory"])
    share = est["total_bytes"] / smallest["total_memory"]
    evidence.append(f"smallest GPU: {smallest['name']} {mib(smallest['total_memory'])} on "
                    f"{ranks_text([rank_of(small_rec)])}; model state is {share:.0%} of it")
    data.update(smallest_gpu_bytes=smallest["total_memory"], share=share)
    fix = ("shard the model state with FSDP (torch.distributed.fsdp) or ZeRO "
           "(ZeroRedundancyOptimizer / DeepSpeed), or use a smaller model or batch")
    if share >= 1:
        return CheckResult("mem.fit", Status.FAIL,
                           f"model state {size_text(est['total_bytes'])} per rank does not fit the "
                           f"{mib(smallest['total_memory'])} GPU", evidence, fix, data=data)
    if share > WARN_SHARE:
        return CheckResult("mem.fit", Status.WARN,
                           f"model state {size_text(est['total_bytes'])} per rank fills {share:.0%} of "
                           f"the smallest GPU, leaving little for activations", evidence, fix,
                           data=data)
    return CheckResult("mem.fit", Status.PASS,
                       f"model state {size_text(est['total_bytes'])} per rank, {share:.0%} of the "
                       f"smallest GPU", evidence, data=data)
