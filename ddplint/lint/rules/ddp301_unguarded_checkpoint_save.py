"""DDP301: a checkpoint written by every rank."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.lint.context import LintContext
from ddplint.lint.names import (
    dotted,
)
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.writes import CHECKPOINT, OUTSIDE_TRAINER, unguarded_writes


class UnguardedCheckpointSave(Rule):
    code = "DDP301"
    beside_frameworks = OUTSIDE_TRAINER

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for site, helper in unguarded_writes(ctx, CHECKPOINT):
            what = f"{helper}() saves a checkpoint" if helper else f"{dotted(site.node.func) or 'save'}() runs"
            yield Finding(
                site.node,
                f"{what} on every rank: all ranks write the same file at once (corrupt or truncated "
                "checkpoint, N times the I/O); save only on the main process (if rank == 0:)",
            )
