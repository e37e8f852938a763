"""env.ranks: the launcher gave every rank a consistent identity."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddplint.runtime.checks.common import Findings, group_by, ranks_text
from ddplint.runtime.registry import ENV_RANKS, RUN_FAILURE, RUN_HANG
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from collections.abc import Callable

    from ddplint.runtime.records import RankRecord


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _env_value(var: str) -> Callable[[RankRecord], str | None]:
    return lambda rec: rec.env.get(var)


def ranks_check(records: list[RankRecord]) -> CheckResult:
    if not records:
        return CheckResult(ENV_RANKS, Status.SKIP, "no rank reported")
    found = Findings()
    evidence = [
        f"rank {r.rank}: {r.where}, LOCAL_RANK={r.env.get('LOCAL_RANK')}, "
        f"WORLD_SIZE={r.env.get('WORLD_SIZE')}, LOCAL_WORLD_SIZE="
        f"{r.env.get('LOCAL_WORLD_SIZE')}, MASTER_ADDR={r.env.get('MASTER_ADDR')}, "
        f"MASTER_PORT={r.env.get('MASTER_PORT')}"
        for r in sorted(records, key=lambda r: r.rank)
    ]

    for var in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        values = group_by(records, _env_value(var))
        if len(values) > 1:
            where = "; ".join(f"{v!r} on {ranks_text(rs)}" for v, rs in values.items())
            found.add(
                Status.FAIL,
                f"{var} differs between ranks: {where}",
                "launch every node with the same --nnodes/--nproc-per-node and master address",
            )
    world = _int(records[0].env.get("WORLD_SIZE"))
    ranks = [_int(r.env.get("RANK")) for r in records]
    dup = sorted({r for r in ranks if r is not None and ranks.count(r) > 1})
    if dup or None in ranks:
        found.add(
            Status.FAIL,
            f"RANK is not unique: {dup or 'missing on some ranks'}",
            "let torchrun assign RANK; do not export RANK in the launching shell",
        )
    if world is not None:
        outside = sorted(r for r in ranks if r is not None and not 0 <= r < world)
        if outside:
            found.add(Status.FAIL, f"RANK {outside} outside 0..{world - 1}", "let torchrun assign RANK")
        missing = sorted(set(range(world)) - {r for r in ranks if r is not None})
        if missing:
            evidence.append(f"no record from {ranks_text(missing)} (see {RUN_FAILURE} / {RUN_HANG})")

    by_node: dict[str, list[RankRecord]] = {}
    for rec in sorted(records, key=lambda r: r.rank):
        by_node.setdefault(rec.where, []).append(rec)
    for where, recs in by_node.items():
        local = [_int(r.env.get("LOCAL_RANK")) for r in recs]
        if len(set(local)) != len(local):
            found.add(Status.FAIL, f"LOCAL_RANK repeats on {where}: {local}", "give each node a distinct --node-rank")
        sizes = {_int(r.env.get("LOCAL_WORLD_SIZE")) for r in recs}
        complete = world is not None and len(records) == world
        if len(sizes) > 1 or (complete and sizes != {len(recs)}):
            found.add(
                Status.FAIL,
                f"LOCAL_WORLD_SIZE {sorted(s for s in sizes if s is not None)} does not match the {len(recs)} ranks on {where}",
                "use the same --nproc-per-node on every node",
            )
        gpus = {r.info.versions.device_count for r in recs if r.info.versions}
        gpus -= {None, 0}
        local_world = max((s for s in sizes if s is not None), default=len(recs))
        same_view = len({r.env.get("CUDA_VISIBLE_DEVICES") for r in recs}) == 1
        if gpus and same_view and local_world > min(gpus):
            found.add(
                Status.FAIL,
                f"{local_world} ranks on {where} but only {min(gpus)} GPUs visible to them: ranks must share GPUs",
                f"use --nproc-per-node {min(gpus)} on {where}",
            )
    for rec in records:
        comm = rec.comm
        if comm.rank is not None and (comm.rank != rec.rank or (world is not None and comm.world_size != world)):
            found.add(
                Status.FAIL,
                f"rank {rec.rank} joined the process group as rank {comm.rank} of {comm.world_size}",
                "call init_process_group() without rank/world_size, or pass the RANK/WORLD_SIZE torchrun sets",
            )
    if not found.items:
        return CheckResult(
            ENV_RANKS,
            Status.PASS,
            f"{ranks_text(r for r in ranks if r is not None)} of {world}: unique RANK and LOCAL_RANK, "
            "consistent WORLD_SIZE / MASTER_ADDR / MASTER_PORT",
            evidence,
        )
    return CheckResult(ENV_RANKS, found.status, found.summary, evidence, found.fix)
