"""stack.consistent: every rank and node runs the same code on the same software stack."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddplint.runtime.checks.common import group_by, ranks_text
from ddplint.runtime.registry import STACK_CONSISTENT
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from collections.abc import Callable

    from ddplint.runtime.records import RankRecord, Versions

FIELDS = (
    ("Python", "python"),
    ("torch", "torch"),
    ("CUDA", "cuda"),
    ("cuDNN", "cudnn"),
    ("NCCL", "nccl"),
    ("packages", "packages_hash"),
    ("script sha256", "script_sha256"),
    ("git commit", "git_commit"),
)


def _short(value) -> str:
    text = str(value)
    return text[:12] if len(text) > 16 and " " not in text else text


def package_diff(base: list[str], other: list[str], limit: int = 10) -> list[str]:
    """ "name: a -> b", "+name==v", "-name==v" between two `name==version` lists."""
    a = dict(p.split("==", 1) for p in base)
    b = dict(p.split("==", 1) for p in other)
    out = [f"{n}: {a[n]} -> {b[n]}" for n in sorted(a.keys() & b.keys()) if a[n] != b[n]]
    out += [f"+{n}=={b[n]}" for n in sorted(b.keys() - a.keys())]
    out += [f"-{n}=={a[n]}" for n in sorted(a.keys() - b.keys())]
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


def _field_of(versions: dict[int, Versions], key: str) -> Callable[[RankRecord], object]:
    return lambda rec: getattr(versions[rec.rank], key)


def consistent_check(records: list[RankRecord]) -> CheckResult:
    versions = {r.rank: v for r in records if (v := r.info.versions)}
    if not versions:
        return CheckResult(STACK_CONSISTENT, Status.SKIP, "no rank reported its versions")
    by_rank = {r.rank: r for r in records if r.rank in versions}
    reported = list(by_rank.values())

    def where(ranks) -> str:
        nodes = sorted({by_rank[r].where for r in ranks})
        return f"{ranks_text(ranks)} ({', '.join(nodes)})"

    differ, evidence = [], []
    for label, key in FIELDS:
        groups = group_by(reported, _field_of(versions, key))
        if len(groups) < 2:
            continue
        differ.append(label)
        evidence.append(f"{label:<14} " + " | ".join(f"{_short(v)} on {where(rs)}" for v, rs in groups.items()))
        if key == "packages_hash":
            ordered = sorted(groups.values(), key=len, reverse=True)
            base = versions[ordered[0][0]].packages
            for ranks in ordered[1:]:
                other = versions[ranks[0]].packages
                evidence.append(f"  {where(ranks)} vs {where(ordered[0])}: " + "; ".join(package_diff(base, other)))
    nodes = {r.where for r in reported}
    scope = f"{len(reported)} ranks on {len(nodes)} node{'s' if len(nodes) > 1 else ''}"
    if not differ:
        v = versions[reported[0].rank]
        return CheckResult(
            STACK_CONSISTENT,
            Status.PASS,
            f"{scope} run the same script, torch {v.torch}, Python {v.python} and package set",
            data={"nodes": sorted(nodes)},
        )
    return CheckResult(
        STACK_CONSISTENT,
        Status.FAIL,
        f"{', '.join(differ)} {'differs' if len(differ) == 1 else 'differ'} across {scope}",
        evidence,
        "run the same code and environment everywhere: the same commit and script on every node, the same `pip freeze`",
        data={"differ": differ, "nodes": sorted(nodes)},
    )
