"""comm.allreduce and comm.bandwidth: the process group the script built really communicates,
and how fast, measured the way nccl-tests does.

The rank side runs right after the script's init_process_group returns, on every rank at the
same point, with the same sequence of collectives, so it cannot leave a peer waiting.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ddplint.runtime.checks.causes import cause_of
from ddplint.runtime.checks.common import Findings, ranks_text, size_text
from ddplint.runtime.registry import COMM_ALLREDUCE, COMM_BANDWIDTH, RUN_FAILURE, RUN_HANG
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

SMOKE_TIMEOUT_S = 60.0  # the first collective also builds the NCCL communicator
SWEEP_TIMEOUT_S = 60.0  # the whole bandwidth sweep
GPU_SIZES = [1 << (10 + 2 * k) for k in range(10)]  # 1 KiB .. 256 MiB
CPU_SIZES = [1 << 10, 1 << 14, 1 << 18, 1 << 22]  # 1 KiB .. 4 MiB: well under a second on gloo
FAR_BELOW = 0.4  # WARN when the best bus bandwidth is under 40% of what the links allow
NCCL_HINT = (
    "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see where NCCL stops; "
    "check NCCL_SOCKET_IFNAME and the firewall between nodes"
)
NO_NCCL_FIX = "use --backend gloo, or install a CUDA build of torch (https://pytorch.org/get-started/locally/)"


class CollectiveTimeout(RuntimeError):
    """A collective gave no result within its limit: a peer never joined or NCCL hangs."""


def comm_device(backend: str):
    """The CUDA device the script's own NCCL collectives use, CPU for gloo.

    The device the script bound to the process group (init_process_group(device_id=...)) comes
    first, then the current device when the script set one; NCCL throws when a collective runs
    on another GPU than the bound one. Only a script that bound nothing (current device still 0
    on a rank with LOCAL_RANK > 0) gets LOCAL_RANK modulo the visible GPUs, as torch guesses.
    """
    import os

    import torch
    import torch.distributed as dist

    if "nccl" not in backend or not torch.cuda.is_available():
        return torch.device("cpu")
    bound = getattr(dist.distributed_c10d._get_default_group(), "bound_device_id", None)
    if bound is not None and bound.type == "cuda":
        return torch.device("cuda", bound.index if bound.index is not None else 0)
    current = torch.cuda.current_device()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if current != 0 or local == 0:
        return torch.device("cuda", current)
    return torch.device("cuda", local % torch.cuda.device_count())


def wait_all(works: list, deadline: float, what: str) -> None:
    """Wait for async collectives by polling, never by Work.wait(timeout): NCCL's wait ignores
    the timeout on torch 2.1-2.3 unless TORCH_NCCL_BLOCKING_WAIT=1, and CUDA synchronize has
    none. A completed work is then waited on, which raises its error if it failed."""
    spins = 0
    while not all(w.is_completed() for w in works):
        if time.monotonic() >= deadline:
            raise CollectiveTimeout(f"{what} gave no result within the audit's limit")
        spins += 1
        if spins > 10_000:  # keep small collectives timed to the microsecond, then back off
            time.sleep(0.001)
    for w in works:
        w.wait()


def error_line(exc: BaseException) -> str:
    """The line of an error that says what went wrong: NCCL's "Last error:" detail (such as
    "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000", or NCCL 2.30's
    "Multiple Ranks are using the same GPU/Partition") over its headline."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [repr(exc)]
    after = next((lines[k + 1] for k, line in enumerate(lines[:-1]) if line.rstrip(":").lower() == "last error"), None)
    return (after or lines[0])[:300]


def failure_fix(*texts: str | None) -> str:
    """The fix for a failed collective: the known cause's (two ranks on one GPU, a broken
    driver), else where to look in NCCL's own log."""
    cause = cause_of(*texts)
    return cause.fix if cause else NCCL_HINT


def measure(phase=None) -> dict:
    """all_reduce smoke test, then the bandwidth sweep (times are the slowest rank's).

    Every collective is bounded: a stall is returned as {"stalled": True} with the phase, so
    the probe can stop the script (its own collectives would hang the same way). `phase`
    publishes "bandwidth sweep" once the first all_reduce is through: until then the rank is
    setting up the communicator, which the launcher bounds by the rendezvous timeout.
    """
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend())
    rank, world = dist.get_rank(), dist.get_world_size()
    device = comm_device(backend)
    out: dict = {"backend": backend, "rank": rank, "world_size": world, "device": str(device)}

    x = torch.tensor([float(rank + 1)], dtype=torch.float64, device=device)
    start = time.perf_counter()
    try:
        wait_all([dist.all_reduce(x, async_op=True)], time.monotonic() + SMOKE_TIMEOUT_S, "the first all_reduce")
        value = x.item()
    except RuntimeError as exc:
        out["allreduce"] = {
            "ok": False,
            "phase": "first collective",
            "error": error_line(exc),
            "seconds": round(time.perf_counter() - start, 3),
        }
        out["stalled"] = isinstance(exc, CollectiveTimeout)
        return out
    expected = world * (world + 1) / 2
    out["allreduce"] = {
        "ok": value == expected,
        "value": value,
        "expected": expected,
        "seconds": round(time.perf_counter() - start, 6),
    }
    if phase is not None:
        phase("bandwidth sweep")

    sizes = GPU_SIZES if device.type == "cuda" else CPU_SIZES
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    times = []
    try:
        for nbytes in sizes:
            buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)
            iters = 20 if device.type == "cuda" and nbytes <= 1 << 24 else 5
            # warm-up, and every rank starts the timing together
            wait_all([dist.all_reduce(buf, async_op=True)], deadline, "the bandwidth sweep")
            t0 = time.perf_counter()
            works = []
            for _ in range(iters):  # NCCL queues them on one stream; gloo runs one at a time
                works.append(dist.all_reduce(buf, async_op=True))
                if device.type != "cuda":
                    wait_all(works[-1:], deadline, "the bandwidth sweep")
            wait_all(works, deadline, "the bandwidth sweep")
            times.append((time.perf_counter() - t0) / iters)
            del buf
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        wait_all([dist.all_reduce(slowest, op=dist.ReduceOp.MAX, async_op=True)], deadline, "the bandwidth sweep")
    except RuntimeError as exc:
        out["sweep_error"] = {"phase": "bandwidth sweep", "error": error_line(exc)}
        out["stalled"] = isinstance(exc, CollectiveTimeout)
        return out
    if device.type == "cuda":
        torch.cuda.empty_cache()
    out["sweep"] = [bandwidth_row(n, t, world) for n, t in zip(sizes, slowest.tolist(), strict=True)]
    return out


def bandwidth_row(nbytes: int, seconds: float, world: int) -> dict:
    """nccl-tests' definitions: algbw = size / time, busbw = algbw x 2(n-1)/n for all_reduce."""
    algbw = nbytes / seconds / 1e9
    return {"bytes": nbytes, "seconds": seconds, "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world}


def last_nccl_line(log: str | None) -> str | None:
    """NCCL's last word in the log: the detail under its last "Last error:" when that comes
    last (it says what went wrong; the line above it only says "invalid usage")."""
    lines = [line.strip().lstrip("|").strip() for line in (log or "").splitlines()]
    picked = None
    for k, line in enumerate(lines):
        if "NCCL" in line:
            picked = line
        elif line.rstrip(":").lower() == "last error" and k + 1 < len(lines) and lines[k + 1]:
            picked = lines[k + 1]
    return picked


def allreduce_check(records: list[RankRecord], log_tail: str | None = None) -> CheckResult:
    nccl_line = last_nccl_line(log_tail)
    if not records:
        return CheckResult(
            COMM_ALLREDUCE,
            Status.SKIP,
            f"no rank reported (see {RUN_HANG} and {RUN_FAILURE})",
            [f"last NCCL line: {nccl_line}"] if nccl_line else [],
        )
    if not any(r.init_called or r.comm.ran for r in records):
        return CheckResult(COMM_ALLREDUCE, Status.SKIP, "the script created no process group before the audit stopped it")
    raised_in_init = [r.rank for r in records if r.init_called and r.comm.allreduce is None and r.status == "raised"]
    # the script's error is run.failure's to tell; a torch without NCCL is this check's
    if raised_in_init and not any(r.comm.allreduce or _no_nccl(r) for r in records):
        return CheckResult(
            COMM_ALLREDUCE, Status.SKIP, f"init_process_group raised on {ranks_text(raised_in_init)} (see {RUN_FAILURE})"
        )
    found = Findings()
    evidence = []
    ok_ranks, seconds = [], []
    world = None
    for rec in sorted(records, key=lambda r: r.rank):
        comm = rec.comm
        ar = comm.allreduce
        rank = rec.rank
        world = comm.world_size if comm.world_size is not None else world
        if comm.error:
            found.add(Status.FAIL, f"rank {rank}: the all_reduce test raised {comm.error}", failure_fix(comm.error))
        elif ar is None and rec.init_called and _no_nccl(rec):
            found.add(
                Status.FAIL,
                f"rank {rank} ({rec.where}): this torch build has no NCCL "
                f"(torch {_torch_version(rec)}), so the nccl backend cannot "
                "start",
                NO_NCCL_FIX,
            )
        elif ar is None and rec.init_called:
            found.add(Status.FAIL, f"rank {rank} ({rec.where}): init_process_group did not return", NCCL_HINT)
        elif ar is None:
            found.add(
                Status.FAIL,
                f"rank {rank} ({rec.where}) never called init_process_group while other ranks did",
                "every rank must call init_process_group; take it out of rank-conditional code",
            )
        elif ar.error is not None and comm.stalled:
            found.add(
                Status.FAIL,
                f"all_reduce stalled in the {ar.phase} on rank {rank} after {ar.seconds:g} s with no result",
                NCCL_HINT,
            )
        elif ar.error is not None:
            found.add(
                Status.FAIL,
                f"all_reduce failed in the {ar.phase} on rank {rank} after {ar.seconds:g} s: {ar.error}",
                failure_fix(ar.error),
            )
        elif str(comm.world_size) != rec.env.get("WORLD_SIZE", str(comm.world_size)):
            found.add(
                Status.FAIL,
                f"rank {rank}'s process group has {comm.world_size} "
                f"rank(s) but torchrun started {rec.env['WORLD_SIZE']}: "
                "the all_reduce reached only part of the job",
                "call init_process_group() without rank/world_size",
            )
        elif not ar.ok:
            found.add(
                Status.FAIL,
                f"all_reduce of rank+1 gave {ar.value:g} on rank {rank}, expected W(W+1)/2 = {ar.expected:g}",
                "check that every rank joined the same process group with the same WORLD_SIZE",
            )
        else:
            ok_ranks.append(rank)
            seconds.append(ar.seconds)
    if nccl_line and found.items:
        evidence.append(f"last NCCL line: {nccl_line}")
    if found.items:
        return CheckResult(COMM_ALLREDUCE, found.status, found.summary, evidence, found.fix)
    backend = records[0].comm.backend or "?"
    expected = world * (world + 1) // 2 if world else "?"
    return CheckResult(
        COMM_ALLREDUCE,
        Status.PASS,
        f"all_reduce of rank+1 = {expected} = W(W+1)/2 on {ranks_text(ok_ranks)} "
        f"({backend}, slowest {max(seconds) * 1e3:.1f} ms)",
        evidence,
        data={"seconds": dict(zip(ok_ranks, seconds, strict=True))},
    )


def _no_nccl(rec: RankRecord) -> bool:
    """The rank asked for nccl from a torch without it (a CPU build, macOS)."""
    asked = (rec.backend.forced or rec.backend.requested) if rec.backend else None
    versions = rec.info.versions
    message = rec.error.text if rec.error else ""
    return (
        str(asked).startswith("nccl") and versions is not None and versions.nccl_available is False
    ) or "doesn't have NCCL built in" in message


def _torch_version(rec: RankRecord) -> str:
    versions = rec.info.versions
    return (versions.torch if versions else None) or "?"


def bandwidth_check(records: list[RankRecord]) -> CheckResult:
    failed = sorted(r.rank for r in records if r.comm.sweep_error)
    if failed:
        first = next(r for r in records if r.rank == failed[0]).comm
        assert first.sweep_error is not None
        how = "stalled (no result within the audit's limit)" if first.stalled else f"failed: {first.sweep_error['error']}"
        return CheckResult(COMM_BANDWIDTH, Status.FAIL, f"the bandwidth sweep {how} on {ranks_text(failed)}", fix=NCCL_HINT)
    sweeps = [rec for rec in records if rec.comm.sweep]
    if not sweeps:
        return CheckResult(
            COMM_BANDWIDTH, Status.SKIP, "no bandwidth sweep ran (no process group, or the all_reduce test failed)"
        )
    comm = min(sweeps, key=lambda r: r.rank).comm
    rows = comm.sweep or []
    world = comm.world_size or 1
    device = comm.device or "cpu"
    if world < 2:
        return CheckResult(COMM_BANDWIDTH, Status.SKIP, "a process group of one rank: nothing travels between ranks")
    evidence = [f"{'size':>10} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}"]
    evidence += [
        f"{size_text(r['bytes']):>10} {r['seconds'] * 1e6:>12.1f} {r['algbw_gbps']:>13.3f} {r['busbw_gbps']:>13.3f}" for r in rows
    ]
    best = max(rows, key=lambda r: r["busbw_gbps"])
    head = (
        f"all_reduce peak bus bandwidth {best['busbw_gbps']:.2f} GB/s at "
        f"{size_text(best['bytes'])} over {world} ranks ({comm.backend} on "
        f"{device.split(':')[0]})"
    )
    data = {"sweep": rows, "world_size": world, "backend": comm.backend}
    nodes = {r.where for r in records}
    if device.startswith("cpu"):
        return CheckResult(COMM_BANDWIDTH, Status.PASS, f"{head}; no GPU links to compare with", evidence, data=data)
    if len(nodes) > 1:
        return _across_nodes(records, head, best["busbw_gbps"], evidence, data)
    limit = next((r.info.nvml for r in records if r.info.nvml and r.info.nvml.expected_busbw_gbps), None)
    if limit is None or limit.expected_busbw_gbps is None:
        evidence.append("the link bandwidth is unknown (NVML not readable in the ranks)")
        return CheckResult(COMM_BANDWIDTH, Status.PASS, head, evidence, data=data)
    allowed = limit.expected_busbw_gbps
    share = best["busbw_gbps"] / allowed
    evidence.append(f"the links allow about {allowed:.0f} GB/s ({limit.basis}); measured {share:.0%} of that")
    data.update(expected_busbw_gbps=allowed, share=share)
    if share < FAR_BELOW:
        return CheckResult(
            COMM_BANDWIDTH,
            Status.WARN,
            f"{head}: {share:.0%} of the {allowed:.0f} GB/s the links allow",
            evidence,
            "run with NCCL_DEBUG=INFO to see which transport NCCL "
            "chose (P2P/SHM/NET); check NCCL_P2P_DISABLE, NVLink state and "
            "PCIe ACS settings",
            data=data,
        )
    return CheckResult(COMM_BANDWIDTH, Status.PASS, head, evidence, data=data)


def _across_nodes(records: list[RankRecord], head: str, busbw: float, evidence: list[str], data: dict) -> CheckResult:
    """Between nodes the NICs set the limit: each rank sends through the nearest active port,
    so a node's share is its fastest ports, one per local rank, and the slowest node decides."""
    per_node: dict[str, float] = {}
    for rec in records:
        rates = rec.info.nics_gbps
        if rates is None:
            continue
        local = int(rec.env.get("LOCAL_WORLD_SIZE", "1") or 1)
        per_node[rec.where] = sum(rates[:local]) / 8  # Gb/s -> GB/s
    if not per_node or not all(per_node.values()) or len(per_node) < len({r.where for r in records}):
        evidence.append(
            "ranks span several nodes: the network sets the limit, and no active "
            "InfiniBand/RoCE port rate was read to compare with (TCP sockets?)"
        )
        return CheckResult(COMM_BANDWIDTH, Status.PASS, head, evidence, data=data)
    allowed = min(per_node.values())
    share = busbw / allowed
    evidence.append(
        f"ranks span several nodes: their active InfiniBand/RoCE ports allow about "
        f"{allowed:.1f} GB/s per node; measured {share:.0%} of that"
    )
    data.update(expected_busbw_gbps=allowed, share=share)
    if share < FAR_BELOW:
        return CheckResult(
            COMM_BANDWIDTH,
            Status.WARN,
            f"{head}: {share:.0%} of the {allowed:.1f} GB/s the nodes' ports allow",
            evidence,
            "run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET to see "
            "whether NCCL uses IB (NET/IB) or sockets (NET/Socket); check "
            "NCCL_IB_HCA, GPUDirect RDMA (nvidia-peermem) and the switch",
            data=data,
        )
    return CheckResult(COMM_BANDWIDTH, Status.PASS, head, evidence, data=data)
