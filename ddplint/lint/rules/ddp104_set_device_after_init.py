"""DDP104: set_device after the process group already ran a collective on GPU 0."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.names import arg, string_value
from ddplint.lint.paths import dominates, exclusive
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import Effect
from ddplint.lint.vocabulary import INIT_PG, SET_DEVICE


class SetDeviceAfterInit(Rule):
    """Finds torch.cuda.set_device called after init_process_group and a first collective."""

    code = "DDP104"
    data_parallel = True
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        inits = [
            s
            for s in ctx.facts.calls_to(INIT_PG)
            if string_value(arg(s.node, 0, "backend")) != "gloo" and arg(s.node, None, "device_id") is None
        ]
        if not inits:
            return
        communicating = ctx.summaries.sites_with(Effect.DEVICE_COLLECTIVE)
        for site in ctx.facts.calls_to(SET_DEVICE):
            # a binding that dominates the collective already put it on the rank's GPU; this one
            # only repeats it (`set_device(local_rank)` after init, and again before the trainer)
            bound = [b for b in ctx.facts.calls_to(SET_DEVICE) if b is not site and b.function == site.function]
            for init in inits:
                if init.function != site.function or init.order > site.order or exclusive(init, site):
                    continue
                between = [
                    c
                    for c in communicating
                    if c.function == site.function and init.order < c.order < site.order and not exclusive(c, site)
                ]
                if between and not all(any(dominates(b, c) for b in bound) for c in between):
                    yield Finding(
                        site.node,
                        "torch.cuda.set_device after init_process_group and a collective: that collective "
                        "already ran on GPU 0 for every rank (hang or extra memory on GPU 0); bind the "
                        "device before init_process_group",
                    )
                    break
