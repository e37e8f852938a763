"""DDP205: a DistributedSampler built before the process group exists."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import Effect


class SamplerBeforeInit(Rule):
    """Finds a DistributedSampler without num_replicas= and rank= created before init_process_group."""

    code = "DDP205"
    severity = Severity.ERROR
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        creates = [c for c in facts.calls if Effect.BARE_SAMPLER in ctx.summaries.effects(c)]
        if not creates:
            return
        inits = ctx.summaries.sites_with(Effect.INIT_GROUP)
        for site in creates:
            here = [i for i in inits if i.function == site.function]
            if here and all(i.order > site.order for i in here):
                yield Finding(
                    site.node,
                    "DistributedSampler created before init_process_group: it asks the process group "
                    "for rank and world size and raises RuntimeError (default process group not "
                    "initialized); initialize the process group first or pass num_replicas= and rank=",
                )
