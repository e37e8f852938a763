"""DDP304: a directory created by every rank without exist_ok=True."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.names import (
    callee_text,
    dotted,
    with_argument,
)
from ddplint.lint.rules.base import Finding, Remedy, Replace, Rule
from ddplint.lint.writes import MKDIR, OUTSIDE_TRAINER, called_from, unguarded_writes


class MakedirsRace(Rule):
    """Finds a directory every rank creates without exist_ok=True."""

    code = "DDP304"
    severity = Severity.ERROR
    beside_frameworks = OUTSIDE_TRAINER

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for site, inside in unguarded_writes(ctx, MKDIR):
            helper = callee_text(site.node) if inside else None
            # os.makedirs and Path.mkdir both take exist_ok as their third parameter; os.mkdir has none
            mkdir = ctx.facts.qualify(dotted(site.node.func)) == "os.mkdir"
            if helper:
                what, remedy = f"{helper}() creates a directory", "pass exist_ok=True"
            elif mkdir:
                what, remedy = "os.mkdir() runs", "use os.makedirs(path, exist_ok=True)"
            else:
                what, remedy = f"{callee_text(site.node)}() without exist_ok=True runs", "pass exist_ok=True"
            fixable = helper is None and not mkdir and not any(a.star for a in site.node.args)
            yield Finding(
                site.node,
                f"{what} on every rank: the ranks race and all but the first fail with FileExistsError; "
                f"{remedy} (or create it only on the main process)",
                Remedy("pass exist_ok=True", Replace(site.node, with_argument(site.node, "exist_ok", 2, cst.Name("True"))))
                if fixable
                else None,
                inside=inside or called_from(ctx, site),
            )
