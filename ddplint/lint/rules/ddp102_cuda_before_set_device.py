"""DDP102: the current device used before a binding dominates the use."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.devices import (
    binding_sites,
    bound_before,
    bound_where_cuda,
    device_uses,
    visible_devices_per_rank,
)
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
        found = list(self._unbound_uses(ctx))
        if found and not visible_devices_per_rank(ctx):  # asked last: it follows every helper
            yield from found

    def _unbound_uses(self, ctx: LintContext) -> Iterator[Finding]:
        bindings = binding_sites(ctx)
        # model or utility code (no binding, no process group of its own): its caller binds; in a
        # script too, for the functions its own code never calls (a helper module with a test stub)
        utility = not ctx.summaries.sites_with(Effect.BINDS_DEVICE) and not ctx.summaries.sites_with(Effect.INIT_GROUP)
        callers = ctx.guards.callers(ctx.facts)
        entries = ctx.spawn_targets(ctx.facts)
        reported: set[str] = set()  # one finding per function: the first use that nothing binds
        for use in device_uses(ctx):
            function = use.site.function
            if use.kind is not DeviceKind.BARE or function in reported:
                continue
            if utility and function and (not ctx.facts.is_script or not _reached(function, callers, entries)):
                continue
            if not use.placement and bindings:
                continue
            if bound_before(ctx, use.site, bindings) and bindings or never_runs(ctx.facts, use.site):
                continue
            if bound_where_cuda(ctx, use, bindings):
                continue
            reported.add(function)
            yield Finding(
                use.expr,
                "'cuda' without an index before torch.cuda.set_device: every rank lands on GPU 0; "
                "call torch.cuda.set_device(local_rank) first or use f'cuda:{local_rank}'",
            )


def _reached(function: str, callers: dict, entries: set[str]) -> bool:
    """The module's own code calls the function (or an enclosing one), or starts it per rank."""
    scope = function
    while scope:
        if callers.get(scope) or scope in entries:
            return True
        scope = scope.rpartition(".")[0]
    return False
