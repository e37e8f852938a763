"""DDP301: a checkpoint written by every rank."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.names import (
    callee_text,
)
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.writes import CHECKPOINT, OUTSIDE_TRAINER, called_from, unguarded_writes


class UnguardedCheckpointSave(Rule):
    """Finds a checkpoint written by every rank instead of by the main process only."""

    code = "DDP301"
    severity = Severity.ERROR
    beside_frameworks = OUTSIDE_TRAINER

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for site, inside in unguarded_writes(ctx, CHECKPOINT):
            what = f"{callee_text(site.node)}() saves a checkpoint" if inside else f"{callee_text(site.node)}() runs"
            yield Finding(
                site.node,
                f"{what} on every rank: all ranks write the same file at once (corrupt or truncated "
                "checkpoint, N times the I/O); save only on the main process (if rank == 0:)",
                inside=inside or called_from(ctx, site),
            )
