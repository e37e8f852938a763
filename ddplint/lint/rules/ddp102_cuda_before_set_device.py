"""DDP102: the current device used before a binding dominates the use."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.devices import (
    binding_sites,
    bound_before,
    bound_before_cuda_named,
    bound_where_cuda,
    device_uses,
    on_local_rank_zero,
    replaced_before_read,
    visible_devices_per_rank,
)
from ddplint.lint.guards import DIST
from ddplint.lint.paths import never_runs
from ddplint.lint.roles import DeviceKind
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import Effect


class CudaBeforeSetDevice(Rule):
    """Finds tensors or models placed on "cuda" before any torch.cuda.set_device, so on GPU 0."""

    code = "DDP102"
    severity = Severity.ERROR
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        found = self._unbound_uses(ctx)
        if found and not visible_devices_per_rank(ctx):  # asked last: it follows every helper
            yield from found

    def _unbound_uses(self, ctx: LintContext) -> list[Finding]:
        bindings = binding_sites(ctx)
        # model or utility code (no binding, no process group of its own): its caller binds; in a
        # script too, for the functions its own code never calls (a helper module with a test stub)
        utility = not ctx.summaries.sites_with(Effect.BINDS_DEVICE) and not ctx.summaries.sites_with(Effect.INIT_GROUP)
        callers = ctx.guards.callers(ctx.facts)
        entries = ctx.spawn_targets(ctx.facts)
        # one finding per function: the first use that nothing binds, or the first that every run
        # of the function makes when the first is in a branch (`map_location=device` on resume)
        first: dict[str, Finding] = {}
        branched: set[str] = set()  # functions whose finding so far is a use in a branch
        for use in device_uses(ctx):
            function = use.site.function
            if use.kind is not DeviceKind.BARE or function in first and (function not in branched or use.site.conditions):
                continue
            if utility and function and (not ctx.facts.is_script or not _reached(function, callers, entries)):
                continue
            if not use.placement and (bindings or replaced_before_read(ctx.facts, use.site.node)):
                continue  # a torch.device built, not yet used: the uses are judged where they bind or place
            if bound_before(ctx, use.site, bindings) and bindings or never_runs(ctx.facts, use.site):
                continue
            if bound_where_cuda(ctx, use, bindings) or bound_before_cuda_named(ctx, use, bindings):
                continue
            if on_local_rank_zero(ctx, use.site):
                continue  # GPU 0 is local rank 0's own
            first[function] = Finding(
                use.expr,
                "'cuda' without an index before torch.cuda.set_device: every rank lands on GPU 0; "
                "call torch.cuda.set_device(local_rank) first or use f'cuda:{local_rank}'",
            )
            # a branch every distributed run takes (`if distributed:`) is where the mistake shows
            if any(ctx.guards.condition_kind(c, ctx.facts, ctx.path, function) is not DIST for c in use.site.conditions):
                branched.add(function)
            else:
                branched.discard(function)
        if bindings or len(first) < 2:
            return list(first.values())
        # nothing binds anywhere: one mistake, told once, where the run first meets it (a use in
        # a function the others' functions call comes after theirs)
        outermost = [f for f in first if not _called_from(f, set(first) - {f}, callers)]
        return [first[(outermost or list(first))[0]]]


def _called_from(function: str, others: set[str], callers: dict) -> bool:
    """Some function in `others` calls `function`, directly or through the module's functions."""
    seen, todo = {function}, [function]
    while todo:
        for site in callers.get(todo.pop(), []):
            if site.function in others:
                return True
            if site.function not in seen:
                seen.add(site.function)
                todo.append(site.function)
    return False


def _reached(function: str, callers: dict, entries: set[str]) -> bool:
    """The module's own code calls the function (or an enclosing one), or starts it per rank."""
    scope = function
    while scope:
        if callers.get(scope) or scope in entries:
            return True
        scope = scope.rpartition(".")[0]
    return False
