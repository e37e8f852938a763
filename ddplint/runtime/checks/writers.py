"""io.single_writer: no file path is written by more than one rank.

Built from the writes the probe recorded (and redirected) in each rank. Directories are left
out: `os.makedirs(..., exist_ok=True)` on every rank is fine; so are collective saves
(torch.distributed.checkpoint), which every rank must call. A path written through
torch.save (or named like a checkpoint) by several ranks is a checkpoint race (DDP301); any
other shared path is a log or tracker write (DDP302).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddplint.runtime.registry import IO_SANDBOX, IO_SINGLE_WRITER
from ddplint.runtime.sites import short
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

# a checkpoint written through open() + torch.save(f) or pickle is still a checkpoint
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".pkl")


def written_paths(records: dict[int, RankRecord], collective: bool = False) -> dict[str, dict]:
    """path -> {"ranks": [...], "ops": [...], "sites": [...]} over every rank: the files, or with
    `collective` the directories of collective saves."""
    paths: dict[str, dict] = {}
    for rank, rec in sorted(records.items()):
        for w in rec.writes:
            if w.dir or w.library or w.collective is not collective:
                continue
            entry = paths.setdefault(w.path, {"ranks": [], "ops": [], "sites": []})
            if rank not in entry["ranks"]:
                entry["ranks"].append(rank)
            if w.op not in entry["ops"]:
                entry["ops"].append(w.op)
            if w.site and w.site not in entry["sites"]:
                entry["sites"].append(w.site)
    return paths


def check_single_writer(records: dict[int, RankRecord], base: str, sandboxed: bool = False) -> CheckResult:
    paths = written_paths(records)
    collective = written_paths(records, collective=True)
    data = {"paths": [{"path": p, **e} for p, e in sorted(paths.items())]}

    def line(path: str, entry: dict) -> str:
        sites = ", ".join(short(s, base) for s in entry["sites"][:2])
        ops = "/".join(sorted({op.split(":")[0] for op in entry["ops"]}))
        ranks = ", ".join(map(str, entry["ranks"]))
        return f"{short(path, base)}: rank{'s' if len(entry['ranks']) > 1 else ''} {ranks} ({ops} at {sites})"

    shared = {p: e for p, e in paths.items() if len(e["ranks"]) > 1}
    together = [f"{line(p, e)}: a collective save, each rank writes its own shard" for p, e in sorted(collective.items())]
    if not shared:
        workers = sum(record.own_workers for record in records.values())
        if not paths and not collective and workers:
            return CheckResult(
                IO_SINGLE_WRITER,
                Status.SKIP,
                f"the ranks wrote no files; the {workers} worker process(es) the script started itself "
                "(mp.spawn) are not followed"
                + (
                    f" ({IO_SANDBOX} lists what the job created)"
                    if sandboxed
                    else ": what they wrote, if anything, went to the disk unseen"
                ),
                data=data,
            )
        if not paths:
            what = "the script wrote no files" if not collective else "the script wrote only collective checkpoints"
            return CheckResult(IO_SINGLE_WRITER, Status.PASS, what, together, data=data)
        return CheckResult(
            IO_SINGLE_WRITER,
            Status.PASS,
            # opened, not necessarily written: a write to a read-only file system fails
            f"{len(paths)} path(s) opened for writing, each by one rank ("
            + ("inside the sandbox" if sandboxed else "Python's file calls redirected")
            + ")",
            [line(p, e) for p, e in sorted(paths.items())] + together,
            data=data,
        )
    checkpoint = any("torch.save" in e["ops"] or p.endswith(_CHECKPOINT_SUFFIXES) for p, e in shared.items())
    first = sorted(shared)[0]
    summary = (
        f"{len(shared)} path(s) written by more than one rank: {short(first, base)} by ranks "
        f"{', '.join(map(str, shared[first]['ranks']))}"
    )
    return CheckResult(
        IO_SINGLE_WRITER,
        Status.FAIL,
        summary,
        [line(p, e) for p, e in sorted(shared.items())],
        fix="write only on rank 0 (`if dist.get_rank() == 0:`), or give each rank its own path",
        rule="DDP301" if checkpoint else "DDP302",
        data=data,
    )
