"""Small helpers shared by the checks: findings, sizes, rank lists, truthy environment values."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, TypeVar

from ddplint.runtime.nvml import format_ranges
from ddplint.runtime.verdict import Status, worst

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

K = TypeVar("K", bound=Hashable)


def mib(n: int | None) -> str:
    return "? MiB" if n is None else f"{n / 2**20:.0f} MiB"


def size_text(n: int) -> str:
    """Bytes in the largest binary unit that keeps a number >= 1: "1.5 KiB", "3.2 GiB"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def gb_label(n: int) -> str:
    """Memory as cards are sold: 25757220864 bytes -> "24 GB"."""
    return f"{round(n / 2**30)} GB"


def ranks_text(ranks: Iterable[int]) -> str:
    ordered = sorted(set(ranks))
    return ("rank " if len(ordered) == 1 else "ranks ") + format_ranges(ordered)


def group_by(records: Iterable[RankRecord], value: Callable[[RankRecord], K]) -> dict[K, list[int]]:
    """{value: [ranks]} in first-seen order."""
    out: dict[K, list[int]] = {}
    for rec in sorted(records, key=lambda r: r.rank):
        out.setdefault(value(rec), []).append(rec.rank)
    return out


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


class Findings:
    """Problems found by one check; the worst one decides the status and the fix shown."""

    def __init__(self) -> None:
        self.items: list[tuple[Status, str, str | None]] = []

    def add(self, status: Status, summary: str, fix: str | None = None) -> None:
        self.items.append((status, summary, fix))

    @property
    def status(self) -> Status:
        return worst((s for s, _, _ in self.items), default=Status.PASS)

    @property
    def summary(self) -> str:
        top = self.status
        return "; ".join([m for s, m, _ in self.items if s is top] + [m for s, m, _ in self.items if s is not top])

    @property
    def fix(self) -> str | None:
        top = self.status
        return next((f for s, _, f in self.items if s is top and f), None)


def plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


def written_at(records: dict[int, RankRecord], path: str, last: bool = False) -> tuple[int, int] | None:
    """Where the training loader was when `path` was first (or `last`) saved with torch.save, by
    the lowest rank that saved it: (its epoch, the batches it had yielded in that epoch)."""
    for rank in sorted(records):
        saves = [w.at for w in records[rank].writes if w.path == path and w.op == "torch.save" and w.at]
        if saves:
            epoch, batches = saves[-1 if last else 0]
            return int(epoch), int(batches)
    return None
