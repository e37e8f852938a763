"""DDP101-DDP106: every rank must run on its own GPU, chosen from its local rank."""

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
from ddplint.lint.facts import INIT_PG, SET_DEVICE
from ddplint.lint.names import arg, string_value
from ddplint.lint.paths import never_runs
from ddplint.lint.roles import DeviceKind
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import Effect


class HardCodedCudaIndex(Rule):
    code = "DDP101"
    name = "hard-coded-cuda-index"
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        if visible_devices_per_rank(ctx):
            return
        for use in device_uses(ctx):
            if use.kind is DeviceKind.INDEX:
                yield Finding(
                    use.expr,
                    f"device index {use.index} is hard-coded: every rank uses GPU {use.index}; "
                    "use the local rank (int(os.environ['LOCAL_RANK'])) instead",
                )


class BareCudaBeforeSetDevice(Rule):
    code = "DDP102"
    name = "cuda-before-set-device"
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        if visible_devices_per_rank(ctx):
            return
        bindings = binding_sites(ctx)
        # model or utility code (no entry point, no process group of its own): its caller binds
        library = not bindings and not ctx.facts.is_script and not ctx.summaries.sites_with(Effect.INIT_GROUP)
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


class NoDeviceBinding(Rule):
    code = "DDP103"
    name = "missing-set-device"
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        if visible_devices_per_rank(ctx) or binding_sites(ctx):
            return
        if any(use.kind in {DeviceKind.LOCAL, DeviceKind.INDEX} for use in device_uses(ctx)):
            return  # each rank picks its device explicitly, or a hard-coded index is the problem (DDP101)
        library = not ctx.facts.is_script  # a helper module: its callers bind the device, or are reported
        for site in ctx.facts.calls:
            if library and site.function or not self._starts_nccl(ctx, site):
                continue
            yield Finding(
                site.node,
                "NCCL process group but no rank is bound to its GPU: all ranks share GPU 0 and "
                "collectives hang or run out of memory; call torch.cuda.set_device(local_rank) "
                "before init_process_group",
            )

    @staticmethod
    def _starts_nccl(ctx: LintContext, site) -> bool:
        """init_process_group("nccl") here, or in a helper of another project module."""
        if site.name != INIT_PG:
            resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
            if resolved is None or resolved[0] is ctx.facts:
                return False  # a function of this module is reported at its own init call
        return Effect.STARTS_NCCL in ctx.summaries.effects(site)




class SetDeviceAfterCollective(Rule):
    code = "DDP104"
    name = "set-device-after-init"
    data_parallel = True
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        inits = [
            s for s in ctx.facts.calls_to(INIT_PG)
            if string_value(arg(s.node, 0, "backend")) != "gloo" and arg(s.node, None, "device_id") is None
        ]
        if not inits:
            return
        communicating = ctx.summaries.sites_with(Effect.DEVICE_COLLECTIVE)
        for site in ctx.facts.calls_to(SET_DEVICE):
            for init in inits:
                if init.function != site.function or init.order > site.order or _exclusive(init, site):
                    continue
                between = [
                    c for c in communicating
                    if c.function == site.function and init.order < c.order < site.order and not _exclusive(c, site)
                ]
                if between:
                    yield Finding(
                        site.node,
                        "torch.cuda.set_device after init_process_group and a collective: that collective "
                        "already ran on GPU 0 for every rank (hang or extra memory on GPU 0); bind the "
                        "device before init_process_group",
                    )
                    break


def _exclusive(a, b) -> bool:
    """The two sites sit in opposite branches of the same test (`if args.distributed:` ... `else:`)."""
    return any(
        ca.negated != cb.negated and (ca.test is cb.test or ca.test.deep_equals(cb.test))
        for ca in a.conditions for cb in b.conditions
    )


class DeviceFromGlobalRank(Rule):
    code = "DDP105"
    name = "device-from-global-rank"
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for use in device_uses(ctx):
            if use.kind is DeviceKind.GLOBAL:
                yield Finding(
                    use.expr,
                    "device chosen by the global rank: on every node but the first it names a GPU "
                    "that does not exist; use LOCAL_RANK (or rank % torch.cuda.device_count())",
                )


class LocalRankArgument(Rule):
    code = "DDP106"
    name = "local-rank-argument"
    data_parallel = True
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        flags = [
            (site, flag) for site in ctx.facts.calls
            if site.method == "add_argument"
            and (flag := string_value(arg(site.node, 0, None))) in {"--local_rank", "--local-rank"}
        ]
        if not flags or "LOCAL_RANK" in ctx.facts.env_reads | ctx.facts.env_names or any(
            "LOCAL_RANK" in module.env_reads | module.env_names for module in ctx.imported_project_modules(depth=2)
        ):
            return  # no flag, or the binding comes from the environment and the flag is a leftover
        if "local_rank" not in ctx.facts.attributes and not any(
            "local_rank" in module.attributes for module in ctx.imported_project_modules(depth=2)
        ):
            return  # kept so that torch.distributed.launch does not reject it, and never read
        for site, flag in flags:
            yield Finding(
                site.node,
                f"'{flag}' is only passed by the deprecated torch.distributed.launch: under "
                "torchrun it keeps its default on every rank (torchrun sets LOCAL_RANK in the "
                "environment instead); read int(os.environ['LOCAL_RANK'])",
            )
