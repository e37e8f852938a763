"""DDP202: a shuffling DistributedSampler never given the epoch."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.loaders import (
    EVAL_WORDS,
    bound_names,
    epoch_loops,
    is_false,
    samplers,
)
from ddplint.lint.names import arg, names_in
from ddplint.lint.rules.base import Finding, Rule


def _set_epoch_receivers(ctx: LintContext) -> tuple[set[str], bool]:
    """Receivers of `.set_epoch(...)` in this module, and whether a project module it imports does.

    A trainer class or epoch function in another module usually reaches the sampler through
    its loader (`self.train_data.sampler.set_epoch(epoch)`), under names this module never sees.
    """
    receivers = {c.name.rsplit(".", 1)[0] for c in ctx.facts.calls if c.method == "set_epoch" and c.name}
    in_helper = any(
        any(c.method == "set_epoch" for c in module.calls) for module in ctx.imported_project_modules(depth=2)
    )
    return receivers, in_helper


class MissingSetEpoch(Rule):
    code = "DDP202"
    data_parallel = True
    severity = Severity.WARNING  # training runs, with a worse data order

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        shuffling = [s for s in samplers(facts) if not is_false(arg(s.node, 3, "shuffle"))]
        if not shuffling:
            return
        if not facts.is_script:
            # a loader-building function: the epoch loop lives in the script that calls it
            shuffling = [s for s in shuffling if s.function == "" or epoch_loops(facts, s.function)]
            if not shuffling:
                return
        receivers, in_helper = _set_epoch_receivers(ctx)
        if in_helper:
            return
        lasts = {r.rsplit(".", 1)[-1] for r in receivers}
        for site in shuffling:
            names = bound_names(facts, site.node)
            dataset = arg(site.node, 0, "dataset")
            if EVAL_WORDS.search(" ".join([*names, *(names_in(dataset) if dataset is not None else ())])):
                continue  # an evaluation sampler: its order does not matter
            if names and {n.rsplit(".", 1)[-1] for n in names} & lasts:
                continue
            if any(_escapes(ctx, n) for n in names):
                continue  # handed to a function this linter cannot see into
            if receivers and any(_returned(facts, site.function, n) for n in names):
                continue  # returned to a caller that keeps it under its own name (`self._sampler, ... = ...`)
            if lasts & {"sampler", "batch_sampler"} or not names and receivers:
                continue  # loader.sampler.set_epoch(epoch)
            label = names[0] if names else "sampler"
            yield Finding(
                site.node,
                f"DistributedSampler '{label}' is never given the epoch: every epoch sees the same "
                f"order; call {label}.set_epoch(epoch) at the start of the epoch loop",
            )


def _returned(facts, function: str, name: str) -> bool:
    info = facts.functions.get(function)
    return info is not None and any(name in names_in(value) for value in info.returns)


def _escapes(ctx: LintContext, name: str) -> bool:
    """The sampler is passed to a call that is neither torch's nor a function of the project."""
    for site in ctx.facts.calls:
        if (site.name or "").startswith("torch.") or site.name is None:
            continue
        if any(name in names_in(a.value) for a in site.node.args):
            if ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site)) is None:
                return True
    return False
