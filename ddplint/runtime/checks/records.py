"""Reading the per-rank records the probe writes: who ran where, and what each hook found."""

from __future__ import annotations

from ddplint.runtime.nvml import format_ranges

IDENTITY_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "TORCHELASTIC_RUN_ID",
)


def part(record: dict, key: str) -> dict:
    """A hook's dict, or {} when the hook did not run or raised (then "error" says why)."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def env(record: dict) -> dict:
    return part(record, "info").get("env", {})


def host(record: dict) -> str:
    return part(record, "info").get("hostname") or record.get("node") or "?"


def node(record: dict) -> str:
    """The node a rank ran on: torchrun's GROUP_RANK, with the host name.

    Two ddplint processes acting as two nodes on one host share the host name, so the host
    name alone cannot tell the nodes apart.
    """
    group = env(record).get("GROUP_RANK")
    return f"node {group} ({host(record)})" if group is not None else host(record)


def rank_of(record: dict) -> int:
    return int(record.get("rank", env(record).get("RANK", -1)))


def ranks_text(ranks) -> str:
    ranks = sorted(set(ranks))
    return ("rank " if len(ranks) == 1 else "ranks ") + format_ranges(ranks)


def group_by(records: list[dict], value) -> dict:
    """{value: [ranks]} in first-seen order."""
    out: dict = {}
    for rec in sorted(records, key=rank_of):
        out.setdefault(value(rec), []).append(rank_of(rec))
    return out
