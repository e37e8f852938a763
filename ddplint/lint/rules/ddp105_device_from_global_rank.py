"""DDP105: a GPU index taken from the global rank."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.devices import DeviceUse, classify, contains, device_uses, placed_by_helper
from ddplint.lint.facts import CallSite, ModuleFacts
from ddplint.lint.names import callee_text, names_in, reference
from ddplint.lint.paths import exclusive, never_runs
from ddplint.lint.roles import DeviceKind, Role
from ddplint.lint.rules.base import Finding, Inside, Rule


class DeviceFromGlobalRank(Rule):
    """Finds a GPU index taken from the global rank instead of the local rank."""

    code = "DDP105"
    severity = Severity.ERROR
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for use in _global_rank_devices(ctx):
            yield Finding(
                use.expr,
                "device chosen by the global rank: on every node but the first it names a GPU "
                "that does not exist; use LOCAL_RANK (or rank % torch.cuda.device_count())",
            )
        reported = {id(use.expr) for use in _global_rank_devices(ctx)}
        yield from _handed_to_helpers(ctx, reported)
        yield from _inside_helpers(ctx)


def _global_rank_devices(ctx: LintContext) -> list[DeviceUse]:
    """The module's devices chosen by the global rank, one per device built from the rank and
    kept (`device = f"cuda:{rank}"`, `device = torch.device("cuda", rank)`), however often it is
    used, and for the rank used directly as a device (`.to(rank)`, `.to(f"cuda:{rank}")`) the
    first place in each function and run (`if mode == "train": ... elif mode == "huge":` are two
    runs; a use before the if/else is in both). Memoised: a script asks it of its helpers."""
    key = "DDP105 global-rank devices"
    if key in ctx.memo:
        return ctx.memo[key]
    found: list[DeviceUse] = []
    kept: set[int] = set()  # id() of the devices built from the rank and kept
    runs: dict[str, list[CallSite]] = {}  # function -> the sites of its reported uses
    for use in device_uses(ctx):
        if use.kind is not DeviceKind.GLOBAL or not _global_binding_reaches(ctx, use):
            continue
        if not contains(use.site.node, use.expr) or ctx.facts.bindings_of(use.expr):
            if id(use.expr) in kept:
                continue
            kept.add(id(use.expr))
        else:
            done = runs.setdefault(use.site.function, [])
            if not all(exclusive(use.site, other) for other in done):
                continue  # the same run as a use already reported
            done.append(use.site)
        found.append(use)
    ctx.memo[key] = found
    return found


def _inside_helpers(ctx: LintContext) -> Iterator[Finding]:
    """A call, made by every rank, of a function or class of another project module that picks
    its device by the global rank itself (`BaseTrainer(config)` whose method runs
    `self.model.to(self.rank)` with `self.rank = dist.get_rank()`): reported at the script's
    first call, naming the line inside: once per module, the mistake being its way of naming
    the rank's GPU."""
    told: set[int] = set()  # id() of the helper modules' facts
    for site in sorted(ctx.facts.calls, key=lambda s: ctx.guards.run_order(ctx.facts, s)):
        if never_runs(ctx.facts, site) or ctx.guards.one_process(site):
            continue
        callee = ctx.callee_module(site)
        if callee is None or id(callee[1].facts) in told:
            continue
        helper, resolved = callee
        reached = helper.reached_from(resolved.function)
        for use in _global_rank_devices(helper):
            if use.site.function in reached and _read_there(helper.facts, use, reached):
                told.add(id(resolved.facts))
                yield Finding(
                    site.node,
                    f"{callee_text(site.node)}() chooses its device by the global rank: on every node but the "
                    "first it names a GPU that does not exist; use LOCAL_RANK (or rank % torch.cuda.device_count()) there",
                    inside=(Inside(resolved.path, use.expr, "the device is chosen by the global rank here"),),
                )
                break


def _read_there(facts: ModuleFacts, use: DeviceUse, reached: set[str]) -> bool:
    """The rank the use names is read by the functions the call runs (`self.rank =
    dist.get_rank()`, `args.rank = int(os.environ["RANK"])`), not only known there from how it
    is used (`init_process_group(rank=args.rank)` of an `args.rank` its caller set, perhaps to
    the local index mp.spawn gave it)."""
    for name in names_in(use.expr):
        for binding in facts.visible(name, use.site.function):
            if binding.function not in reached:
                continue
            value = binding.value
            while type(value) is cst.Call and facts.callee(value) in {"int", "str"} and value.args:
                value = value.args[0].value
            if type(value) in (cst.Call, cst.Subscript) and facts.role_of(value, binding.function) is Role.GLOBAL_RANK:
                return True
    return False


def _handed_to_helpers(ctx: LintContext, reported: set[int]) -> Iterator[Finding]:
    """The global rank handed to a function of another project module that takes that
    parameter as its GPU (`train(rank, world_size)` with `torch.cuda.set_device(rank)` inside),
    reported at the argument with the line inside the helper; a device built from the rank and
    already reported where it was built (`device = torch.device(rank)`) is not reported again."""
    facts = ctx.facts
    for site in facts.calls:
        ranks = [a for a in site.node.args if not a.star and facts.role_of(a.value, site.function) is Role.GLOBAL_RANK]
        ranks = [a for a in ranks if id(classify(ctx, a.value, site, True).origin) not in reported]
        if not ranks:
            continue  # (asked first: resolving the callee and the guards are the costly questions)
        placed = None if ctx.guards.one_process(site) else placed_by_helper(ctx, site, ranks)
        if placed is not None:
            argument, path, use = placed
            yield Finding(
                argument.value,
                f"the global rank is handed to {callee_text(site.node)}(), which takes it as its GPU: on every "
                "node but the first it names a GPU that does not exist; pass LOCAL_RANK (or "
                "rank % torch.cuda.device_count())",
                inside=(Inside(path, use.node, "the parameter is used as the device here"),),
            )


def _global_binding_reaches(ctx: LintContext, use: DeviceUse) -> bool:
    """A name or attribute that holds the global rank only from a binding later in the use's own
    function still holds what it held before there: `torch.cuda.set_device(args.local_rank)`,
    then `args.local_rank = dist.get_rank()` (the uses after that binding are reported)."""
    expr = use.expr
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute, cst.Subscript) else None
    if name is None:
        return True
    facts, site = ctx.facts, use.site
    binding_global = [b for b in facts.assigned(name) if not b.element and facts.role_of(b.value, b.function) is Role.GLOBAL_RANK]
    return not binding_global or any(
        b.function != site.function or b.order < site.order or any(loop in site.loops for loop in b.loops) for b in binding_global
    )
