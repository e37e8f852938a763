"""DDP302: logs, trackers and output files opened by every rank."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.names import (
    callee_text,
)
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.writes import LOG, OUTSIDE_TRAINER, called_from, unguarded_writes


class UnguardedLogWriter(Rule):
    """Finds a log, tracker run or output file that every rank creates instead of the main process."""

    code = "DDP302"
    beside_frameworks = OUTSIDE_TRAINER
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for site, inside in unguarded_writes(ctx, LOG):
            name = callee_text(site.node)
            what = f"{name}() writes to a file" if inside else f"{name}() opens a log/output"
            yield Finding(
                site.node,
                f"{what} on every rank: each process writes the same file or run (interleaved, "
                "duplicated or clobbered logs); create it only on the main process (if rank == 0:)",
                inside=inside or called_from(ctx, site),
            )
