"""DDP401: a collective that only some ranks reach.

Every rank must enter each collective, in the same order. Inside `if rank == 0:` (or its
negation) the other ranks never arrive and the job hangs until the NCCL timeout. Saves that
gather state from every rank (torch.distributed.checkpoint, FSDP state dicts) are collectives
too, so they belong outside the guard.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.facts import CallSite
from ddplint.lint.guards import MAIN, NOTMAIN, OPPOSITE
from ddplint.lint.names import call_parameters, dotted
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import WRAPPERS, Effect, direct_effects


def _wrapped_models(ctx: LintContext) -> dict[str, tuple[str, int]]:
    """Names that hold a DDP/FSDP-wrapped model -> (function, order) of their first wrapping.

    Calling them afterwards is a forward pass that communicates; before it, the same name
    still holds the plain model.
    """
    wrapped: dict[str, tuple[str, int]] = {}
    for a in ctx.facts.assignments:
        if type(a.value) is cst.Call and ctx.facts.callee(a.value) in WRAPPERS and (
                a.target not in wrapped or a.order < wrapped[a.target][1]):
            wrapped[a.target] = (a.function, a.order)
    return wrapped


def _is_wrapped(name: str | None, site: CallSite, models: dict[str, tuple[str, int]]) -> bool:
    """`name` holds the wrapped model at `site` (after its wrapping, or in another function)."""
    if name not in models:
        return False
    function, order = models[name]
    return site.function != function or site.order > order


def _forwarded_model(ctx: LintContext, site: CallSite, models: dict[str, tuple[str, int]]) -> str | None:
    """The wrapped model a call hands to a project function that runs its forward pass
    (`validate(model, loader)` where validate calls `model(x)`)."""
    handed = [(i, a) for i, a in enumerate(site.node.args) if _is_wrapped(dotted(a.value), site, models)]
    if not handed or any(a.star for a in site.node.args):
        return None
    resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
    if resolved is None:
        return None
    inner_facts, _, function = resolved
    definition = inner_facts.functions[function].node
    params = [p.name.value for p in call_parameters(site.node, definition)]
    called = {inner.name for inner in inner_facts.calls_within(function)}
    for index, argument in handed:
        param = argument.keyword.value if argument.keyword is not None else (
            params[index] if index < len(params) else None)
        if param is not None and ({param, f"{param}.forward"} & called):
            return dotted(argument.value)
    return None


class CollectiveInRankBranch(Rule):
    code = "DDP401"
    severity = Severity.ERROR

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        guards = ctx.guards
        models = _wrapped_models(ctx)
        communicating = []
        for site in ctx.facts.calls:
            if _is_wrapped(site.name, site, models):
                communicating.append((site, f"forward pass of the wrapped model '{site.name}'"))
            elif (handed := _forwarded_model(ctx, site, models)) is not None:
                communicating.append(
                    (site, f"{dotted(site.node.func)}() runs the forward pass of the wrapped model '{handed}'"))
            elif Effect.COLLECTIVE in ctx.summaries.effects(site):
                direct = Effect.COLLECTIVE in direct_effects(site)
                what = (site.name or "") if direct else f"{dotted(site.node.func)}() (it runs a collective)"
                communicating.append((site, what))
        sides = {id(site): self._side(ctx, site) for site, _ in communicating}
        for site, what in communicating:
            forward = "forward pass" in what
            side = sides[id(site)]
            if side is None or not guards.rank_conditional(site):
                continue
            paired = any(
                other.name == site.name and other is not site and other.function == site.function
                and sides[id(other)] == OPPOSITE[side]
                for other, _ in communicating
            )
            if paired:  # `if rank == 0: barrier()` matched by `if rank != 0: barrier()`
                continue
            if forward:  # DDP syncs buffers (and, in training, gradients) with the other ranks
                model = site.name if what.startswith("forward pass") else what.rsplit("'", 2)[-2]
                fix = f"evaluate on one rank with the unwrapped model ('{model}.module') or run it on every rank"
            else:
                fix = "call it on every rank, outside the rank check"
            yield Finding(
                site.node,
                f"{what} runs only on some ranks (inside a rank-dependent branch): the other ranks "
                f"never join its collectives and the job hangs or mismatches later ones; {fix}",
            )

    @staticmethod
    def _side(ctx: LintContext, site: CallSite) -> str | None:
        """MAIN or NOTMAIN: which ranks the site's conditions let through."""
        for condition in site.conditions:
            kind = ctx.guards.condition_kind(condition, ctx.facts, ctx.path, site.function)
            if kind in {MAIN, NOTMAIN}:
                return kind
        return MAIN if ctx.guards.rank_conditional(site) else None
