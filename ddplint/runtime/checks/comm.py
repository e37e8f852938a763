"""comm.allreduce and comm.bandwidth: the process group the script built really communicates,
and how fast, measured the way nccl-tests does.

The rank side runs right after the script's init_process_group returns, on every rank at the
same point, with the same sequence of collectives, so it cannot leave a peer waiting.
"""

from __future__ import annotations

import time
from datetime import timedelta

from ddplint.runtime.checks.common import Findings, size_text
from ddplint.runtime.checks.records import env, node, part, rank_of, ranks_text
from ddplint.runtime.verdict import CheckResult, Status

SMOKE_TIMEOUT_S = 60.0
GPU_SIZES = [1 << (10 + 2 * k) for k in range(10)]  # 1 KiB .. 256 MiB
CPU_SIZES = [1 << 10, 1 << 14, 1 << 18, 1 << 22]  # 1 KiB .. 4 MiB: well under a second on gloo
FAR_BELOW = 0.4  # WARN when the best bus bandwidth is under 40% of what the links allow
NCCL_HINT = ("rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see where NCCL stops; "
             "check NCCL_SOCKET_IFNAME and the firewall between nodes")


def comm_device(backend: str):
    """CUDA device of this rank for NCCL (LOCAL_RANK modulo the visible GPUs), CPU for gloo."""
    import os

    import torch

    if "nccl" in backend and torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local % torch.cuda.device_count())
    return torch.device("cpu")


def measure() -> dict:
    """all_reduce smoke test, then the bandwidth sweep (times are the slowest rank's)."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend())
    rank, world = dist.get_rank(), dist.get_world_size()
    device = comm_device(backend)
    out: dict = {"backend": backend, "rank": rank, "world_size": world, "device": str(device)}

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    x = torch.tensor([float(rank + 1)], dtype=torch.float64, device=device)
    start = time.perf_counter()
    try:
        dist.all_reduce(x, async_op=True).wait(timeout=timedelta(seconds=SMOKE_TIMEOUT_S))
        value = x.item()
    except RuntimeError as exc:
        out["allreduce"] = {"ok": False, "phase": "first collective",
                            "error": str(exc).strip().splitlines()[0][:300],
                            "seconds": round(time.perf_counter() - start, 3)}
        return out
    expected = world * (world + 1) / 2
    out["allreduce"] = {"ok": value == expected, "value": value, "expected": expected,
                        "seconds": round(time.perf_counter() - start, 6)}

    sizes = GPU_SIZES if device.type == "cuda" else CPU_SIZES
    times = []
    for nbytes in sizes:
        buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)
        iters = 20 if device.type == "cuda" and nbytes <= 1 << 24 else 5
        dist.all_reduce(buf)  # warm-up, and every rank starts the timing together
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sync()
        times.append((time.perf_counter() - t0) / iters)
        del buf
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    out["sweep"] = [bandwidth_row(n, t, world) for n, t in zip(sizes, slowest.tolist())]
    return out


def bandwidth_row(nbytes: int, seconds: float, world: int) -> dict:
    """nccl-tests' definitions: algbw = size / time, busbw = algbw x 2(n-1)/n for all_reduce."""
    algbw = nbytes / seconds / 1e9
    return {"bytes": nbytes, "seconds": seconds, "algbw_gbps": algbw,
            "busbw_gbps": algbw * 2 * (world - 1) / world}


def last_nccl_line(log: str | None) -> str | None:
    lines = [l for l in (log or "").splitlines() if "NCCL" in l]
    return lines[-1].strip() if lines else None


def allreduce_check(records: list[dict], log_tail: str | None = None) -> CheckResult:
    nccl_line = last_nccl_line(log_tail)
    if not records:
        return CheckResult("comm.allreduce", Status.SKIP, "no rank reported (see run.hang and "
                           "run.failure)", [f"last NCCL line: {nccl_line}"] if nccl_line else [])
    if not any(r.get("init_called") or part(r, "comm") for r in records):
        return CheckResult("comm.allreduce", Status.SKIP,
                           "the script created no process group before the audit stopped it")
    found = Findings()
    evidence = []
    ok_ranks, seconds = [], []
    world = None
    for rec in sorted(records, key=rank_of):
        comm = part(rec, "comm")
        ar = comm.get("allreduce")
        rank = rank_of(rec)
        world = comm.get("world_size", world)
        if comm.get("error"):
            found.add(Status.FAIL, f"rank {rank}: the all_reduce test raised {comm['error']}",
                      NCCL_HINT)
        elif ar is None and rec.get("init_called"):
            found.add(Status.FAIL, f"rank {rank} ({node(rec)}): init_process_group did not "
                                   "return", NCCL_HINT)
        elif ar is None:
            found.add(Status.FAIL, f"rank {rank} ({node(rec)}) never called init_process_group "
                                   "while other ranks did",
                      "every rank must call init_process_group; take it out of rank-conditional "
                      "code")
        elif "error" in ar:
            found.add(Status.FAIL, f"all_reduce stalled in the {ar['phase']} on rank {rank} "
                                   f"after {ar['seconds']:g} s: {ar['error']}", NCCL_HINT)
        elif str(comm.get("world_size")) != env(rec).get("WORLD_SIZE", str(comm.get("world_size"))):
            found.add(Status.FAIL, f"rank {rank}'s process group has {comm['world_size']} "
                                   f"rank(s) but torchrun started {env(rec)['WORLD_SIZE']}: "
                                   "the all_reduce reached only part of the job",
                      "call init_process_group() without rank/world_size")
        elif not ar["ok"]:
            found.add(Status.FAIL, f"all_reduce of rank+1 gave {ar['value']:g} on rank {rank}, "
                                   f"expected W(W+1)/2 = {ar['expected']:g}",
                      "check that every rank joined the same process group with the same "
                      "WORLD_SIZE")
        else:
            ok_ranks.append(rank)
            seconds.append(ar["seconds"])
    if nccl_line and found.items:
        evidence.append(f"last NCCL line: {nccl_line}")
    if found.items:
        return CheckResult("comm.allreduce", found.status, found.summary, evidence, found.fix)
    backend = part(records[0], "comm").get("backend", "?")
    expected = world * (world + 1) // 2 if world else "?"
    return CheckResult("comm.allreduce", Status.PASS,
                       f"all_reduce of rank+1 = {expected} = W(W+1)/2 on {ranks_text(ok_ranks)} "
                       f"({backend}, slowest {max(seconds) * 1e3:.1f} ms)", evidence,
                       data={"seconds": dict(zip(ok_ranks, seconds))})


def bandwidth_check(records: list[dict]) -> CheckResult:
    sweeps = [(rec, part(rec, "comm")) for rec in records if part(rec, "comm").get("sweep")]
    if not sweeps:
        return CheckResult("comm.bandwidth", Status.SKIP, "no bandwidth sweep ran "
                           "(no process group, or the all_reduce test failed)")
    rec, comm = min(sweeps, key=lambda rc: rank_of(rc[0]))
    rows = comm["sweep"]
    world = comm["world_size"]
    if world < 2:
        return CheckResult("comm.bandwidth", Status.SKIP,
                           "a process group of one rank: nothing travels between ranks")
    evidence = [f"{'size':>10} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}"]
    evidence += [f"{size_text(r['bytes']):>10} {r['seconds'] * 1e6:>12.1f} "
                 f"{r['algbw_gbps']:>13.3f} {r['busbw_gbps']:>13.3f}" for r in rows]
    best = max(rows, key=lambda r: r["busbw_gbps"])
    head = (f"all_reduce peak bus bandwidth {best['busbw_gbps']:.2f} GB/s at "
            f"{size_text(best['bytes'])} over {world} ranks ({comm['backend']} on "
            f"{comm['device'].split(':')[0]})")
    data = {"sweep": rows, "world_size": world, "backend": comm["backend"]}
    nodes = {node(r) for r in records}
    if comm["device"].startswith("cpu"):
        return CheckResult("comm.bandwidth", Status.PASS,
                           f"{head}; no GPU links to compare with", evidence, data=data)
    if len(nodes) > 1:
        evidence.append("ranks span several nodes: the network sets the limit; compare with "
                        "the NIC bandwidth (e.g. 400 Gb/s InfiniBand ~ 50 GB/s)")
        return CheckResult("comm.bandwidth", Status.PASS, head, evidence, data=data)
    limits = [part(r, "info").get("nvml", {}) for r in records]
    limit = next((l for l in limits if l.get("expected_busbw_gbps")), None)
    if limit is None:
        evidence.append("the link bandwidth is unknown (NVML not readable in the ranks)")
        return CheckResult("comm.bandwidth", Status.PASS, head, evidence, data=data)
    allowed = limit["expected_busbw_gbps"]
    share = best["busbw_gbps"] / allowed
    evidence.append(f"the links allow about {allowed:.0f} GB/s ({limit.get('basis')}); "
                    f"measured {share:.0%} of that")
    data.update(expected_busbw_gbps=allowed, share=share)
    if share < FAR_BELOW:
        return CheckResult("comm.bandwidth", Status.WARN,
                           f"{head}: {share:.0%} of the {allowed:.0f} GB/s the links allow",
                           evidence, "run with NCCL_DEBUG=INFO to see which transport NCCL "
                           "chose (P2P/SHM/NET); check NCCL_P2P_DISABLE, NVLink state and "
                           "PCIe ACS settings", data=data)
    return CheckResult("comm.bandwidth", Status.PASS, head, evidence, data=data)
