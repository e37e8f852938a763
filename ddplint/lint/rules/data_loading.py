"""DDP201-DDP205: every rank must read its own shard of the data, in a new order each epoch."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.facts import CallSite, Loop, ModuleFacts
from ddplint.lint.names import arg, dotted, has_keyword, is_constant, names_in
from ddplint.lint.roles import RANK_CALLS, RANKS
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import Effect

LOADER = "torch.utils.data.DataLoader"
SAMPLER = "torch.utils.data.DistributedSampler"
PLAIN_SAMPLERS = {
    "torch.utils.data.RandomSampler", "torch.utils.data.SequentialSampler",
    "torch.utils.data.SubsetRandomSampler", "torch.utils.data.WeightedRandomSampler",
}
BATCH_SAMPLER = "torch.utils.data.BatchSampler"
YES, NO, UNKNOWN = "yes", "no", "unknown"
EVAL_WORDS = re.compile(r"val|test|eval|dev\b|holdout", re.IGNORECASE)
SHARD_WORDS = re.compile(r"shard|split_by_node|split_dataset_by_node|nodesplitter|rank", re.IGNORECASE)


def _data_name(name: str | None) -> str | None:
    """torch.utils.data.sampler.RandomSampler -> torch.utils.data.RandomSampler."""
    if name and name.startswith("torch.utils.data."):
        return "torch.utils.data." + name.rsplit(".", 1)[-1]
    return name


def loaders(facts: ModuleFacts) -> list[CallSite]:
    return [c for c in facts.calls if _data_name(c.name) == LOADER]


def samplers(facts: ModuleFacts) -> list[CallSite]:
    return [c for c in facts.calls if _data_name(c.name) == SAMPLER]


def _targets(facts: ModuleFacts, node: cst.CSTNode) -> list[str]:
    """Names a value is assigned to: `train_loader = DataLoader(...)` -> ["train_loader"]."""
    return [a.target for a in facts.bindings_of(node)]


def sharding(expr: cst.BaseExpression | None, facts: ModuleFacts, site: CallSite, depth: int = 3) -> str:
    """Whether a sampler expression splits the data by rank: YES, NO, or UNKNOWN."""
    if expr is None or isinstance(expr, cst.Name) and expr.value == "None":
        return NO
    if isinstance(expr, cst.IfExp):
        return _either(sharding(expr.body, facts, site, depth), sharding(expr.orelse, facts, site, depth))
    if isinstance(expr, cst.Call):
        name = _data_name(facts.callee(expr)) or ""
        if name == SAMPLER or "Distributed" in name.rsplit(".", 1)[-1]:
            return YES
        if has_keyword(expr, "num_replicas") or has_keyword(expr, "rank"):
            return YES
        if name in PLAIN_SAMPLERS:
            return NO
        if name == BATCH_SAMPLER:
            return sharding(arg(expr, 0, "sampler"), facts, site, depth)
        return UNKNOWN
    name = dotted(expr)
    if name is None or depth == 0:
        return UNKNOWN
    values = [a.value for a in facts.reaching(name, site.function, site.order, site.blocks)]
    if not values:
        return UNKNOWN
    verdict = NO
    for value in values:
        verdict = _either(verdict, sharding(value, facts, site, depth - 1))
    return verdict


def _either(a: str, b: str) -> str:
    if YES in (a, b):
        return YES
    return UNKNOWN if UNKNOWN in (a, b) else NO


def _dataset_shards(ctx: LintContext, expr: cst.BaseExpression | None, site: CallSite) -> bool:
    """The dataset splits itself by rank: a sharded stream, or a dataset class that reads the rank."""
    if expr is None:
        return True
    facts = ctx.facts
    exprs = [expr]
    name = dotted(expr)
    if name is not None:
        exprs += [a.value for a in facts.reaching(name, site.function, site.order, site.blocks)]
    for e in exprs:
        if any(SHARD_WORDS.search(n.rsplit(".", 1)[-1]) for n in names_in(e)):
            return True
        if isinstance(e, cst.Call) and _class_reads_rank(ctx, facts.callee(e)):
            return True
    return False


def _class_reads_rank(ctx: LintContext, name: str | None) -> bool:
    if not name:
        return False
    found = (ctx.facts, name) if ctx.facts.has_members(name) else None
    if found is None:
        resolved = ctx.project.resolve(ctx.path, name)
        if resolved is None or not resolved[2]:
            return False
        found = (resolved[1], resolved[2])
    facts, cls = found
    prefix = cls + "."
    for site in facts.calls_within(cls):
        if (site.name or "").rsplit(".", 1)[-1] in RANK_CALLS:
            return True
    for a in facts.assignments_within(cls):
        if facts.role_of(a.value, a.function) in RANKS:
            return True
    return any(
        {"rank", "num_replicas", "world_size"} & set(info.params)
        for fname, info in facts.functions.items() if fname.startswith(prefix)
    )


def _is_training(facts: ModuleFacts, site: CallSite, dataset: cst.BaseExpression | None, backward: bool) -> bool:
    shuffle = arg(site.node, 2, "shuffle")
    if isinstance(shuffle, cst.Name) and shuffle.value == "True":
        return True
    words = " ".join([*_targets(facts, site.node), *(names_in(dataset) if dataset is not None else ())])
    if "train" in words.lower():
        return True
    if EVAL_WORDS.search(words):
        return False
    return backward  # the module trains: a loader with no name to say otherwise feeds it


class UnshardedDataLoader(Rule):
    code = "DDP201"
    name = "dataloader-without-distributed-sampler"
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        if not ctx.summaries.sites_with(Effect.DATA_PARALLEL):
            return  # rpc or custom schemes: no data-parallel training here
        backward = any(c.method == "backward" for c in facts.calls)
        for site in loaders(facts):
            call = site.node
            dataset = arg(call, 0, "dataset")
            chosen = arg(call, 4, "batch_sampler") or arg(call, 3, "sampler")
            if chosen is not None:
                if sharding(chosen, facts, site) != NO:
                    continue
            elif _dataset_shards(ctx, dataset, site) or any(a.star for a in call.args):
                continue
            if not _is_training(facts, site, dataset, backward) or ctx.guards.main_only(site):
                continue
            label = (_targets(facts, call) or ["DataLoader"])[0]
            yield Finding(
                call,
                f"training loader '{label}' has no DistributedSampler: every rank reads the whole "
                "dataset in the same order (duplicated batches, no speed-up); pass "
                "sampler=DistributedSampler(dataset) and call sampler.set_epoch(epoch) each epoch",
            )


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


class SamplerWithoutSetEpoch(Rule):
    code = "DDP202"
    name = "missing-set-epoch"
    data_parallel = True
    severity = Severity.WARNING  # training runs, with a worse data order

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        shuffling = [s for s in samplers(facts) if not _false(arg(s.node, 3, "shuffle"))]
        if not shuffling:
            return
        if not facts.is_script:
            # a loader-building function: the epoch loop lives in the script that calls it
            shuffling = [s for s in shuffling if s.function == "" or _epoch_loops(facts, s.function)]
            if not shuffling:
                return
        receivers, in_helper = _set_epoch_receivers(ctx)
        if in_helper:
            return
        lasts = {r.rsplit(".", 1)[-1] for r in receivers}
        for site in shuffling:
            names = _targets(facts, site.node)
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


def _epoch_loops(facts: ModuleFacts, function: str, after: int = 0) -> list[Loop]:
    """The epoch loops of a function (after a position in it)."""
    return [loop for loop in facts.loops if loop.function == function and loop.order > after and _epoch_loop(loop.node)]


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


def _false(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


class ShuffleWithSampler(Rule):
    code = "DDP203"
    name = "shuffle-with-sampler"

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for site in loaders(ctx.facts):
            shuffle = arg(site.node, 2, "shuffle")
            if not (isinstance(shuffle, cst.Name) and shuffle.value == "True"):
                continue
            for keyword, position in (("sampler", 3), ("batch_sampler", 4)):
                given = arg(site.node, position, keyword)
                if given is not None and not (isinstance(given, cst.Name) and given.value == "None"):
                    yield Finding(
                        shuffle,
                        f"shuffle=True together with {keyword}=: DataLoader raises ValueError (sampler "
                        f"option is mutually exclusive with shuffle); drop shuffle=True, the sampler shuffles",
                        replacement=cst.Name("False"),
                        fix_description="set shuffle=False: the sampler decides the order",
                    )
                    break


class ConstantSetEpoch(Rule):
    code = "DDP204"
    name = "constant-set-epoch"
    data_parallel = True
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        for site in facts.calls:
            if site.method != "set_epoch" or not site.node.args:
                continue
            value = site.node.args[0].value
            loops = [loop for loop in site.loops if _epoch_loop(loop)]
            if loops and (is_constant(value) or _loop_invariant(facts, loops, value)):
                yield Finding(
                    value,
                    "set_epoch() gets a value that does not change from one epoch to the next: the "
                    "sampler repeats the same order every epoch; pass the epoch loop variable "
                    "(sampler.set_epoch(epoch))",
                )
            elif not site.loops and is_constant(value) and self._once_before_loop(facts, site):
                yield Finding(
                    value,
                    "set_epoch() is called once, before the epoch loop: every epoch repeats this "
                    "order; call sampler.set_epoch(epoch) at the start of each epoch instead",
                )

    @staticmethod
    def _once_before_loop(facts: ModuleFacts, site: CallSite) -> bool:
        """An epoch loop follows in the same function, and no set_epoch on the same sampler runs inside one."""
        if not _epoch_loops(facts, site.function, after=site.order):
            return False
        return not any(
            other.method == "set_epoch" and other.name == site.name and any(_epoch_loop(lp) for lp in other.loops)
            for other in facts.calls
        )


def _epoch_loop(loop: cst.For | cst.While) -> bool:
    """A loop that can run once per epoch: `while`, `for ... in range(...)`, or an `epoch` target.

    `for sampler in samplers: sampler.set_epoch(2)` is setting up, not training.
    """
    if isinstance(loop, cst.While):
        return True
    if any("epoch" in n.lower() for n in names_in(loop.target)):
        return True
    iterated = loop.iter
    if isinstance(iterated, cst.Call) and dotted(iterated.func) in {"enumerate", "tqdm", "tqdm.tqdm", "trange"}:
        iterated = iterated.args[0].value if iterated.args else iterated
    return isinstance(iterated, cst.Call) and dotted(iterated.func) in {"range", "trange"}


def _loop_invariant(facts: ModuleFacts, loops: list[cst.For | cst.While], value: cst.BaseExpression) -> bool:
    if any(isinstance(n, cst.Call) for n in _walk(value)):
        return False
    used = names_in(value)
    changing: set[str] = set()
    for loop in loops:
        if isinstance(loop, cst.For):
            changing |= names_in(loop.target)
    changing |= {a.target for loop in loops for a in facts.by_loop.get(id(loop), [])}
    return not any(n in changing or n.split(".")[0] in changing for n in used)


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


class SamplerBeforeInit(Rule):
    code = "DDP205"
    name = "sampler-before-init"
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        creates = [
            c for c in facts.calls
            if Effect.BARE_SAMPLER in ctx.summaries.effects(c)
        ]
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
