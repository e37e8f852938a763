"""DDP103: an NCCL process group with no rank bound to its GPU."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.devices import (
    DeviceUse,
    binding_sites,
    builds_device,
    classify,
    device_uses,
    option_default,
    placed_by_helper,
    visible_devices_per_rank,
)
from ddplint.lint.names import arg, has_star_kwargs, string_value
from ddplint.lint.roles import DeviceKind
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import Effect
from ddplint.lint.vocabulary import DDP, FSDP, INIT_PG


class MissingSetDevice(Rule):
    """Finds an NCCL process group whose ranks are never bound to their own GPU."""

    code = "DDP103"
    severity = Severity.ERROR
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        if binding_sites(ctx):
            return
        explicit = any(_names_its_device(use) for use in device_uses(ctx)) or _builds_rank_device(ctx) or _hands_device(ctx)
        if explicit and not _on_current_device(ctx):
            return  # each rank picks its device (by the global rank: DDP105), or a hard-coded index is the problem (DDP101)
        library = not ctx.facts.is_script  # a helper module: its callers bind the device, or are reported
        starts = [site for site in ctx.facts.calls if not (library and site.function) and self._starts_nccl(ctx, site)]
        if starts and not _on_current_device(ctx) and any(self._helper_names_devices(ctx, site) for site in ctx.facts.calls):
            return
        if starts and visible_devices_per_rank(ctx):
            return
        for site in starts:
            yield Finding(
                site.node,
                "NCCL process group but no rank is bound to its GPU: all ranks share GPU 0 and "
                "collectives hang or run out of memory; call torch.cuda.set_device(local_rank) "
                "before init_process_group",
            )

    @staticmethod
    def _helper_names_devices(ctx: LintContext, site) -> bool:
        """The call runs a function (or builds a class) of another project module that places the
        model on a device each rank names (`train_fn(rank, ...)`: `DDP(model.to(rank),
        device_ids=[rank])`; a trainer class reading LOCAL_RANK in its constructor; also in the
        worker it spawns or a function that worker calls), as the script itself would be judged."""
        callee = ctx.callee_module(site)
        if callee is None:
            return False
        helper, resolved = callee
        key = ("functions naming their device", id(helper.facts))
        if key not in helper.memo:
            helper.memo[key] = {use.site.function for use in device_uses(helper) if _names_its_device(use)}
        return bool(helper.memo[key] & helper.reached_from(resolved.function))

    @staticmethod
    def _starts_nccl(ctx: LintContext, site) -> bool:
        """init_process_group("nccl") here, or in a helper of another project module."""
        if site.name != INIT_PG:
            resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
            if resolved is None or resolved.facts is ctx.facts:
                return False  # a function of this module is reported at its own init call
        effects = ctx.summaries.effects(site)
        if Effect.STARTS_NCCL in effects:
            return True
        # `init_process_group(backend=args.backend)` of an option whose default is "nccl"
        backend = arg(site.node, 0, "backend") if site.name == INIT_PG and Effect.STARTS_GROUP in effects else None
        default = option_default(ctx, backend, site) if backend is not None else None
        return "nccl" in (string_value(default) or "")


# A device each process names for itself: by its local or global rank, or a literal index.
PER_PROCESS = {DeviceKind.LOCAL, DeviceKind.GLOBAL, DeviceKind.INDEX}


def _names_its_device(use: DeviceUse) -> bool:
    """The rank's own device (by the local or global rank), a hard-coded index, or a device the
    script computed and hands to DDP's device_ids (`device_ids=[device]` with `device` from a
    config list or a helper): each process names one, whatever it is."""
    if use.kind in PER_PROCESS:
        return True
    return use.kind is DeviceKind.OTHER and use.site.name == DDP and string_value(use.expr) is None


def _builds_rank_device(ctx: LintContext) -> bool:
    """The script builds the rank's own device and keeps it (`device = torch.device(f"cuda:{rank}")`)
    to hand to the helpers that place the model and data on it."""
    facts = ctx.facts
    return any(
        builds_device(facts, a.value) and classify(ctx, a.value, a, True).kind in {DeviceKind.LOCAL, DeviceKind.GLOBAL}
        for a in facts.assignments
        if not a.element
    )


def _hands_device(ctx: LintContext) -> bool:
    """The script hands a computed value to a function of another project module that places or
    wraps the model on that parameter as its GPU (`build_model(cfg, gpu)` with `.cuda(gpu_id)` and
    `device_ids=[gpu_id]` inside): each process names its device there."""
    for site in ctx.facts.calls:
        computed = [a for a in site.node.args if not a.star and classify(ctx, a.value, site, True).kind in PER_PROCESS]
        if placed_by_helper(ctx, site, computed) is not None:
            return True
    return False


def _on_current_device(ctx: LintContext) -> bool:
    """FullyShardedDataParallel without device_id= moves the model to the current device, which
    only set_device makes the rank's own: explicit placement elsewhere does not help it."""
    return any(arg(site.node, None, "device_id") is None and not has_star_kwargs(site.node) for site in ctx.facts.calls_to(FSDP))
