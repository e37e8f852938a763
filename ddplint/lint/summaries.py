"""What calling a function does, summarised once per function and reused by every rule.

A call's effects are those of the call itself (`dist.init_process_group("nccl")` starts an
NCCL group) and, for a function of the user's project, the effects of every call in its body
that the call's constant arguments do not switch off. Summaries are memoised per function and
set of constant arguments; a recursive cycle is cut once, here, so no rule keeps a depth limit
of its own.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from ddplint.lint import constants
from ddplint.lint.facts import Assignment, CallSite, ModuleFacts, single_process_init
from ddplint.lint.names import arg, data_name, dotted, enters, getattr_call, names_in, reference, string_value
from ddplint.lint.paths import never_runs
from ddplint.lint.roles import RANKS
from ddplint.lint.vocabulary import (
    BINDING,
    BINDING_METHODS,
    BLOCKING,
    DESTROY_PG,
    INIT_PG,
    LIBRARY_GROUP_STARTS,
    MPI,
    MPI_COLLECTIVES,
    ON_DEVICE,
    SAMPLER,
    SPAWN,
    WRAPPERS,
)

if TYPE_CHECKING:
    from ddplint.lint.resolver import ProjectResolver, Resolved


class Effect(Enum):
    INIT_GROUP = "calls init_process_group"
    STARTS_GROUP = "starts a process group that several processes join"
    STARTS_NCCL = "starts an NCCL process group"
    DESTROYS_GROUP = "destroys the process group"
    BINDS_DEVICE = "binds the process to a GPU"
    COLLECTIVE = "runs a collective that every rank must join"
    DEVICE_COLLECTIVE = "runs an NCCL operation on the current GPU"
    DATA_PARALLEL = "starts data-parallel training"
    BARE_SAMPLER = "builds a DistributedSampler that asks the process group for its rank"
    OWN_GPU_ONLY = "narrows CUDA_VISIBLE_DEVICES to the process's own GPU"
    SPAWNS_WORKERS = "starts worker processes of its own (mp.spawn)"


def direct_effects(site: CallSite, facts: ModuleFacts) -> frozenset[Effect]:
    """What the call itself does, before looking into any function it names."""
    name, effects = site.name or "", set()
    if name == INIT_PG:
        effects.add(Effect.INIT_GROUP)
        if not single_process_init(site, facts):
            effects |= {Effect.STARTS_GROUP, Effect.DATA_PARALLEL}
            backend = string_value(arg(site.node, 0, "backend"))
            if backend is not None and "nccl" in backend:
                effects.add(Effect.STARTS_NCCL)
        if arg(site.node, None, "device_id") is not None:
            effects.add(Effect.BINDS_DEVICE)
    elif name in LIBRARY_GROUP_STARTS:
        effects |= {Effect.INIT_GROUP, Effect.STARTS_GROUP, Effect.DATA_PARALLEL}
        backend = string_value(arg(site.node, 1, "backend"))
        if backend is None or "nccl" in backend:
            effects.add(Effect.STARTS_NCCL)
    elif name == DESTROY_PG:
        effects.add(Effect.DESTROYS_GROUP)
    elif name in SPAWN:
        effects.add(Effect.SPAWNS_WORKERS)
    if name in BINDING or site.method in BINDING_METHODS:
        effects.add(Effect.BINDS_DEVICE)
    # A collective on a group of its own (`group=...`) may involve just the ranks that get there.
    group = arg(site.node, None, "group")
    world = group is None or dotted(group) == "None"
    if (name in BLOCKING and world) or name.startswith(MPI) and site.method in MPI_COLLECTIVES:
        effects.add(Effect.COLLECTIVE)
    if name in ON_DEVICE:
        effects.add(Effect.DEVICE_COLLECTIVE)
    if name in WRAPPERS:
        effects.add(Effect.DATA_PARALLEL)
    if data_name(name) == SAMPLER and (arg(site.node, 1, "num_replicas") is None or arg(site.node, 2, "rank") is None):
        effects.add(Effect.BARE_SAMPLER)
    return frozenset(effects)


def per_process_visible_devices(facts: ModuleFacts) -> list[Assignment]:
    """Writes of CUDA_VISIBLE_DEVICES that differ per process: a rank, or a value computed in a
    function, or one written anew before each worker start in the loop around it. A constant
    string, an option written at module level, or the launcher's write before mp.spawn (inherited
    alike by every process it starts, whatever it reads: `str(args.gpu)`, an option the workers
    later set from their index) gives every process the same GPUs."""
    found = []
    for w in facts.env_writes.get("CUDA_VISIBLE_DEVICES", []):
        starts = [c for c in facts.calls_in(w.function) if c.name in SPAWN]
        if _an_option(facts, w.value):
            continue  # the command line every process is started with: the same GPUs in each
        computed = string_value(w.value) is None
        if any({id(loop) for loop in w.loops} & {id(loop) for loop in c.loops} for c in starts):
            if computed:  # `for rank in ...: os.environ[...] = str(rank); mp.start_processes(...)`
                found.append(w)
        elif not starts and (
            facts.role_of(w.value, w.function) is not None
            or _picked_by_rank(facts, w.value, w.function)
            or computed
            and w.function != ""
            and not _joins_a_list(facts, w.value, w.function)
        ):
            found.append(w)
    return found


def _an_option(facts: ModuleFacts, value: cst.BaseExpression) -> bool:
    """`args.gpu_ids` of `add_argument("--gpu-ids", default="0")`, which nothing in the module
    assigns: what the command line says, the same in every process (but `--local_rank`, which
    torch.distributed.launch fills per process, and any option where the group takes its rank
    from the command line: each process is then started with a command line of its own)."""
    name = reference(value) if _unassigned_option(facts, value) else None
    if name is None or name.endswith(".local_rank"):
        return False
    ranks = [arg(site.node, None, "rank") for site in facts.calls_to(INIT_PG)]
    return not any(rank is not None and _unassigned_option(facts, rank) for rank in ranks)


def _unassigned_option(facts: ModuleFacts, value: cst.BaseExpression) -> bool:
    """`args.X` where X is an argparse option of the module and nothing assigns `args.X`."""
    name = reference(value) if type(value) is cst.Attribute else None
    return name is not None and name.count(".") == 1 and name.partition(".")[2] in facts.options and not facts.assigned(name)


def _joins_a_list(facts: ModuleFacts, value: cst.BaseExpression, function: str) -> bool:
    """`",".join(str(g) for g in cfg["gpu_ids"])`: every GPU of a list that no rank picks from,
    the same list in every process. A list sliced or built from a rank, here or where its name
    was bound in the function, is the process's own."""
    if type(value) is not cst.Call or type(value.func) is not cst.Attribute or value.func.attr.value != "join":
        return False
    if type(value.func.value) is not cst.SimpleString or len(value.args) != 1:
        return False
    read = names_in(value.args[0].value)
    read |= {n for name in read for b in facts.assigned(name) if b.function == function for n in names_in(b.value)}
    return not any(facts.role_of_name(n, function) is not None for n in read)


def _picked_by_rank(facts: ModuleFacts, value: cst.BaseExpression, function: str, follow: bool = True) -> bool:
    """`str(gpus[local_rank])`, `cfg["gpu"][rank]`, or a name of the same function bound only to
    such a pick (`gpu = int(cfg["gpu"][local_rank])`): one entry of a list per process."""
    while type(value) is cst.Call and facts.callee(value) in {"int", "str"} and value.args:
        value = value.args[0].value
    if type(value) is cst.Subscript:
        return any(type(s.slice) is cst.Index and facts.role_of(s.slice.value, function) in RANKS for s in value.slice)
    if type(value) is not cst.Name or not follow:
        return False
    bindings = [b for b in facts.assigned(value.value) if b.function == function]
    return bool(bindings) and all(not b.element and _picked_by_rank(facts, b.value, function, follow=False) for b in bindings)


class Summaries:
    def __init__(self, ctx: ProjectResolver) -> None:
        self.ctx = ctx
        self._functions: dict[tuple, frozenset[Effect]] = {}
        self._sites: dict[int, frozenset[Effect]] = {}

    def effects(
        self,
        site: CallSite,
        facts: ModuleFacts | None = None,
        path: Path | None = None,
        bindings: constants.Bindings | None = None,
    ) -> frozenset[Effect]:
        """What the call does, directly or through the project functions it calls."""
        own = facts is None and bindings is None
        if own and id(site.node) in self._sites:
            return self._sites[id(site.node)]
        if own:  # what the tests around the call decide holds inside it (`if not args.distributed: train()`)
            bindings = constants.branch_facts(site.conditions)
        facts, path = facts or self.ctx.facts, path or self.ctx.path
        found = direct_effects(site, facts)
        resolved = self.ctx.resolve_function(facts, path, self.ctx.method_target(facts, site))
        if site.name in SPAWN:
            # a helper that spawns the workers does what they do (`dist.launch(main, n_gpu)`), and
            # so does a spawn of another module's function; the linted module's own workers are
            # judged where they act
            target = arg(site.node, 0, "fn")
            worker = self.ctx.resolve_function(facts, path, facts.qualify(dotted(target))) if target is not None else None
            if facts is not self.ctx.facts or worker is not None and worker.facts is not facts:
                resolved = worker
        # a call that leaves a required parameter unfilled (`trainer.train()` of `def train(self,
        # rank, world_size)`) raises TypeError: it does nothing of the body
        if resolved is not None and (site.name in SPAWN or _fills(site, resolved)):
            inner_facts, inner_path, function = resolved
            inner_bindings = constants.bind_call(site.node, inner_facts, function, bindings or {})
            if inner_facts is facts:
                inner_bindings = {**constants.carried(bindings or {}, facts, function), **inner_bindings}
            found |= self.of_function(inner_facts, inner_path, function, inner_bindings)
        elif resolved is None:
            found |= self._dispatched(site, facts, path, bindings or {})
        if site.in_handler:  # a teardown only when something failed is no teardown on the way out
            found -= {Effect.DESTROYS_GROUP}
        if own:
            self._sites[id(site.node)] = found
        return found

    def _dispatched(self, site: CallSite, facts: ModuleFacts, path: Path, bindings: constants.Bindings) -> frozenset[Effect]:
        """`getattr(common_utils, "init_dist_%s" % args.launcher)(...)`: what every function of
        that project module the name can pick does (each one given the call's arguments)."""
        picked = getattr_call(site.node.func)
        if picked is None:
            return frozenset()
        holder, prefix = picked
        module = self.ctx.module_named(facts, path, holder)
        if module is None:
            return frozenset()
        inner_facts, inner_path = module
        candidates = [f for f in inner_facts.functions if f.startswith(prefix) and "." not in f]
        if not candidates:
            return frozenset()
        return frozenset.intersection(
            *(
                self.of_function(inner_facts, inner_path, f, constants.bind_call(site.node, inner_facts, f, bindings))
                for f in candidates
            )
        )

    def of_function(self, facts: ModuleFacts, path: Path, function: str, bindings: constants.Bindings) -> frozenset[Effect]:
        key = (id(facts), function, constants.key(bindings))
        if key not in self._functions:
            self._functions[key] = frozenset()  # a recursive call adds nothing new
            found: frozenset[Effect] = frozenset()
            for inner in facts.calls_within(function):
                if not constants.dark(inner.conditions, bindings) and not never_runs(facts, inner):
                    found |= self.effects(inner, facts, path, bindings)
            if any(w.function == function or w.function.startswith(function + ".") for w in per_process_visible_devices(facts)):
                found |= {Effect.OWN_GPU_ONLY}
            self._functions[key] = found
        return self._functions[key]

    def sites_with(self, effect: Effect) -> list[CallSite]:
        """Call sites of the linted module that have `effect`, directly or through helpers."""
        return [site for site in self.ctx.facts.calls if effect in self.effects(site) and not self.ctx.runs_nowhere(site)]


def _fills(site: CallSite, resolved: Resolved) -> bool:
    """The call can enter the function it names (names.enters)."""
    return enters(site.node, resolved.facts.functions[resolved.function].node)
