"""DDP102: the current device used before a binding dominates the use."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.devices import (
    binding_sites,
    bound_before,
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
        # model or utility code (no entry point, no process group of its own): its caller binds
        library = (
            not ctx.summaries.sites_with(Effect.BINDS_DEVICE)
            and not ctx.facts.is_script
            and not ctx.summaries.sites_with(Effect.INIT_GROUP)
        )
        reported: set[str] = set()  # one finding per function: the first use that nothing binds
        for use in device_uses(ctx):
            if use.kind is not DeviceKind.BARE or library and use.site.function or use.site.function in reported:
                continue
            if not use.placement and bindings:
                continue
            if bound_before(ctx, use.site, bindings) and bindings or never_runs(ctx.facts, use.site):
                continue
            reported.add(use.site.function)
            yield Finding(
                use.expr,
                "'cuda' without an index before torch.cuda.set_device: every rank lands on GPU 0; "
                "call torch.cuda.set_device(local_rank) first or use f'cuda:{local_rank}'",
            )
