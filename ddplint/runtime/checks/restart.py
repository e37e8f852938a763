"""ckpt.restart: does the script resume from its own checkpoint where it left off?

With `--resume-args`, after the audited run the script starts again with those arguments, in
the run's own copy-on-write layers, where every file it saved with torch.save is put back to
its first version: the job as it would restart had it been interrupted right after its first
checkpoint. The audited run went on from there, so it is the reference:
- the restart's first training batch, rank by rank, must be the batch the run drew next after
  that checkpoint was written (same sampler epoch, same position in the epoch);
- the DDP model's weights at that batch must be the ones the run had there (each parameter's
  sum, noted at every step of both runs);
- the first losses are shown side by side. They are not judged: dropout and augmentation draw
  from random generators that a restart need not reproduce exactly.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddplint.runtime.checks.common import written_at
from ddplint.runtime.datarecords import LoaderRecord
from ddplint.runtime.perfrecords import PerfRecord, StepSample
from ddplint.runtime.registry import CKPT_RESTART
from ddplint.runtime.sites import short
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

WEIGHT_RTOL = 1e-5  # parameter sums equal up to float reordering (GPU reductions)
NOT_ASKED = "not asked for: --resume-args '...' restarts the script from its first checkpoint and compares"


@dataclass(frozen=True)
class RestartRun:
    """The script started again with --resume-args, from its first checkpoint."""

    args: tuple[str, ...]
    records: dict[int, RankRecord] = field(default_factory=dict)
    restored: tuple[str, ...] = ()  # checkpoint paths put back to their first version
    failed: str | None = None  # why the restart gave nothing to compare
    skipped: str | None = None  # why it was not run


Position = tuple[int, int]  # (epoch of the training loader, 1-based batch in it)


def first_versions(records: dict[int, RankRecord]) -> dict[str, str]:
    """Every checkpoint path the run saved, with the copy of its first version (lowest rank's)."""
    kept: dict[str, str] = {}
    for rank in sorted(records):
        for path, copy in records[rank].kept.items():
            kept.setdefault(path, copy)
    return kept


def failure_of(records: dict[int, RankRecord], nproc: int) -> str | None:
    """Why a restart gave nothing to compare: a rank raised, or ranks never reported."""
    for rank in sorted(records):
        error = records[rank].error if records[rank].status == "raised" else None
        if error:
            where = f" at {error.site.file}:{error.site.line}" if error.site else ""
            return f"rank {rank} raised {error.message}{where}"
    if len(records) < nproc:
        missing = sorted(set(range(nproc)) - set(records))
        return f"rank(s) {', '.join(map(str, missing))} never reported (the restart failed or hung)"
    return None


def _batch(loader: LoaderRecord, at: Position) -> list | None:
    epoch, step = at
    if epoch >= len(loader.epochs) or not 1 <= step <= loader.epochs[epoch].yielded:
        return None
    drawn = loader.epochs[epoch].drawn
    return drawn[step - 1] if step - 1 < len(drawn) else None


def _next(loader: LoaderRecord, at: Position) -> Position:
    """The batch the run drew after a save at `at` (batches yielded in that epoch so far)."""
    epoch, batches = at
    if epoch < len(loader.epochs) and batches >= loader.epochs[epoch].yielded and batches:
        return epoch + 1, 1
    return epoch, batches + 1


def _where(loader: LoaderRecord, batch: list) -> Position | None:
    for e, epoch in enumerate(loader.epochs):
        for s, drawn in enumerate(epoch.drawn[: epoch.yielded]):
            if drawn == batch:
                return e, s + 1
    return None


def _step(perf: PerfRecord, at: Position) -> StepSample | None:
    return next((s for s in perf.times.steps if (s.epoch, s.step) == at), None)


def _same_weights(a: list[float] | None, b: list[float] | None) -> bool | None:
    if not a or not b:
        return None
    if len(a) != len(b):
        return False
    return all(math.isclose(x, y, rel_tol=WEIGHT_RTOL, abs_tol=1e-8) for x, y in zip(a, b, strict=True))


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _name(at: Position) -> str:
    return f"epoch {at[0]} batch {at[1]}"


def check_restart(records: dict[int, RankRecord], restart: RestartRun | None, base: str) -> CheckResult:
    if restart is None:
        return CheckResult(CKPT_RESTART, Status.SKIP, NOT_ASKED)
    args = shlex.join(restart.args)
    if restart.skipped:
        return CheckResult(CKPT_RESTART, Status.SKIP, restart.skipped)
    data: dict = {"resume_args": list(restart.args), "restored": list(restart.restored)}
    if restart.failed:
        return CheckResult(
            CKPT_RESTART,
            Status.FAIL,
            f"the restart with --resume-args '{args}' failed: {restart.failed}",
            fix="a resume that fails here fails after a real interruption too: run the script with these "
            "arguments against a checkpoint it saved, and fix what it raises (a `module.` prefix of the "
            "DDP wrapper in the weights, a key the checkpoint lacks)",
            data=data,
        )
    loaded = {p for rec in restart.records.values() for p in rec.perf.loaded}
    used = sorted(loaded & set(restart.restored))
    data["loaded"] = sorted(loaded)
    if not used:
        saw = f"it loaded {', '.join(short(p, base) for p in sorted(loaded))}" if loaded else "it called torch.load on no file"
        return CheckResult(
            CKPT_RESTART,
            Status.WARN,
            f"the restart with --resume-args '{args}' read none of the checkpoints the run saved ({saw})",
            evidence=[f"saved: {short(p, base)}" for p in restart.restored],
            fix="give --resume-args the arguments that make the script load the checkpoint it saved",
            data=data,
        )
    checkpoint = used[-1]
    findings: list[tuple[int, str]] = []
    evidence, compared = [f"restarted from {short(checkpoint, base)} as first saved"], 0
    saved_at = written_at(records, checkpoint)
    for rank in sorted(restart.records):
        first, again = records.get(rank), restart.records[rank]
        ref, new = (first.training_loader if first else None), again.training_loader
        if first is None or ref is None or new is None or saved_at is None or not new.epochs or not new.epochs[0].drawn:
            continue
        expected = _next(ref, saved_at)
        got = _where(ref, new.epochs[0].drawn[0])
        line = f"rank {rank}: saved after {_name(saved_at)}, the run went on with {_name(expected)}; the restart began with "
        if got is None:
            evidence.append(line + "a batch the run never drew (not compared)")
            continue
        compared += 1
        evidence.append(line + _name(got))
        if got != expected:
            how = "from the very start" if got == (0, 1) else f"at {_name(got)}"
            findings.append(
                (
                    rank,
                    f"resumed {how}, not at {_name(expected)}: the epoch counter or the sampler's epoch was not "
                    "restored from the checkpoint",
                )
            )
            continue
        ref_step, new_step = _step(first.perf, expected), _step(again.perf, (0, 1))
        if ref_step is None or new_step is None:
            continue
        same = _same_weights(ref_step.weights, new_step.weights)
        if same is False:
            findings.append(
                (
                    rank,
                    "began with model weights other than those the run had at that batch: the checkpoint's "
                    "weights were not loaded into the model that trains",
                )
            )
        if ref_step.loss is not None and new_step.loss is not None:
            evidence.append(f"rank {rank}: first loss {new_step.loss:.6g} after the restart, {ref_step.loss:.6g} in the run")
    data["compared_ranks"] = compared
    if findings:
        ranks_of: dict[str, list[int]] = {}
        for rank, what in findings:
            ranks_of.setdefault(what, []).append(rank)
        lines = [f"{_ranks(ranks)} {what}" for what, ranks in ranks_of.items()]
        return CheckResult(
            CKPT_RESTART,
            Status.WARN,
            f"the restart with --resume-args '{args}': {lines[0]}",
            evidence=evidence + lines[1:],
            fix="save and restore the epoch (and step) counter, call sampler.set_epoch(epoch) from the restored "
            "epoch, and load the weights into the model before wrapping it in DDP (or into model.module)",
            data=data,
        )
    if not compared:
        return CheckResult(
            CKPT_RESTART,
            Status.INFO,
            f"the restart loaded {short(checkpoint, base)}, but its first batches could not be matched to the run's",
            evidence=evidence,
            data=data,
        )
    return CheckResult(
        CKPT_RESTART,
        Status.PASS,
        f"the restart from {short(checkpoint, base)} went on with the batch and the weights the run had there "
        f"({compared} rank(s) compared)",
        evidence=evidence,
        data=data,
    )
