"""DDP202: a shuffling DistributedSampler never given the epoch."""

from __future__ import annotations

import builtins
from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint import constants
from ddplint.lint.context import LintContext
from ddplint.lint.devices import contains
from ddplint.lint.facts import Assignment, CallSite, Loop, ModuleFacts
from ddplint.lint.loaders import (
    EVAL_WORDS,
    INSPECTING_BUILTINS,
    bound_names,
    calls_in_loop,
    epoch_loop,
    epoch_loops,
    evaluation_only,
    given_sampler,
    helper_calls,
    is_false,
    is_sampler,
    loader_calls_given,
    loaders,
    loaders_given,
    read_for_evaluation,
    readers,
    returned_loader,
    samplers,
    updates_weights,
)
from ddplint.lint.names import (
    arg,
    argument_for,
    callee_text,
    data_name,
    dotted,
    int_value,
    names_in,
    over_range,
    parameter_for,
    reference,
)
from ddplint.lint.paths import dominates
from ddplint.lint.resolver import Resolved
from ddplint.lint.rules.base import Finding, InsertBefore, Inside, Remedy, Rule
from ddplint.lint.vocabulary import LOADER, NO_GRAD

BUILTINS = frozenset(vars(builtins))


def _set_epoch_receivers(ctx: LintContext) -> tuple[set[str], bool]:
    """Receivers of `.set_epoch(...)` in this module, and whether a project module it imports does.

    A trainer class or epoch function in another module usually reaches the sampler through
    its loader (`self.train_data.sampler.set_epoch(epoch)`), under names this module never sees.
    """
    receivers = {
        _read_by_getattr(ctx.facts, name, c.function) or name
        for c in ctx.facts.calls
        if c.method == "set_epoch"
        and type(c.node.func) is cst.Attribute
        # `samplers["train"].set_epoch(e)`: the receiver by its constant key
        and (
            name := c.name.rsplit(".", 1)[0]
            if c.name
            else reference(c.node.func.value) or _through_element(ctx.facts, c.node.func.value, c.function)
        )
    }
    receivers |= _passed_for(ctx, receivers)
    in_helper = any(
        c.method == "set_epoch" and not _switched_off_by_the_script(ctx, module, c)
        for module in ctx.imported_project_modules(depth=2)
        for c in module.calls
    )
    return receivers, in_helper


def _switched_off_by_the_script(ctx: LintContext, module: ModuleFacts, site: CallSite) -> bool:
    """A trainer method's `set_epoch` under a flag its object keeps from the constructor (`if
    self.ddp:`, `self.ddp = ddp` in `__init__`), where every object of that class this script
    builds leaves the flag at a value that turns the branch off (`ddp=False` by default)."""
    cls = site.function.rpartition(".")[0]
    init = module.functions.get(f"{cls}.__init__")
    if not cls or not site.conditions or init is None:
        return False
    kept = {
        b.target: b.value.value
        for b in module.assignments_within(f"{cls}.__init__")
        if b.function == init.name and b.target.startswith("self.") and type(b.value) is cst.Name
    }
    # a flag set again anywhere in the class is not the constructor's alone
    kept = {t: p for t, p in kept.items() if sum(1 for a in module.assigned(t) if a.function.startswith(cls + ".")) == 1}
    if not kept:
        return False
    key = ("DDP202 objects built of", id(module), init.name)  # asked once per set_epoch of the class
    if key not in ctx.memo:
        ctx.memo[key] = [
            c
            for c in ctx.facts.calls
            if (found := ctx.resolve_function(ctx.facts, ctx.path, ctx.facts.qualify(dotted(c.node.func)), constructors=True))
            is not None
            and found.facts is module
            and found.function == init.name
        ]
    builds = ctx.memo[key]
    if not builds:
        return False
    for build in builds:
        bound = constants.bind_arguments(build.node, init.node, {})
        flags = {target: bound[param] for target, param in kept.items() if param in bound}
        if not constants.dark(site.conditions, flags):
            return False
    return True


def _passed_for(ctx: LintContext, receivers: set[str]) -> set[str]:
    """What this module's calls pass for a receiver that is a parameter of the function setting
    the epoch (`def train_epoch(..., sampler=None)`, then `sampler.set_epoch(epoch)`): the
    argument's name, and the sampler of a loader it was bound to, in either branch of a
    conditional (`train_sampler = train_loader.sampler if use_ddp else None`)."""
    facts, passed = ctx.facts, set()
    for c in facts.calls:
        receiver = c.name.rsplit(".", 1)[0] if c.method == "set_epoch" and c.name else None
        info = facts.functions.get(c.function)
        if receiver is None or receiver not in receivers or info is None or receiver not in info.params:
            continue
        for caller in ctx.guards.callers(facts).get(c.function, []):
            given = argument_for(caller.node, info.node, receiver)
            held = reference(given) if given is not None else None
            if held is None:
                continue
            passed.add(held)
            for binding in facts.reaching(held, caller.function, caller.order, caller.blocks):
                value = binding.value
                branches = (value.body, value.orelse) if type(value) is cst.IfExp else (value,)
                passed |= {r for b in branches if (r := reference(b)) is not None}
    return passed


def _read_by_getattr(facts: ModuleFacts, name: str, function: str) -> str | None:
    """`sampler = getattr(loader, "sampler", None)`, then `sampler.set_epoch(e)`: the receiver
    is `loader.sampler`, as if spelled so."""
    bound = [a.value for a in facts.assigned(name) if a.function == function]
    if len(bound) != 1 or type(call := bound[0]) is not cst.Call or dotted(call.func) != "getattr" or len(call.args) < 2:
        return None
    held, attribute = reference(call.args[0].value), call.args[1].value
    value = attribute.evaluated_value if type(attribute) is cst.SimpleString else None
    return f"{held}.{value}" if held is not None and isinstance(value, str) else None


def _through_element(facts: ModuleFacts, expr: cst.BaseExpression, function: str) -> str | None:
    """`loaders[0].sampler` where `loaders = [train_loader, val_loader]` in the same function:
    the receiver by the name of the element (`train_loader.sampler`)."""
    attributes = []
    while type(expr) is cst.Attribute:
        attributes.append(expr.attr.value)
        expr = expr.value
    if type(expr) is not cst.Subscript or len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index:
        return None
    index, held = int_value(expr.slice[0].slice.value), reference(expr.value)
    bound = [a.value for a in facts.assigned(held or "") if a.function == function]
    if index is None or len(bound) != 1 or not isinstance(bound[0], (cst.List, cst.Tuple)):
        return None
    elements = bound[0].elements
    element = reference(elements[index].value) if 0 <= index < len(elements) else None
    return ".".join([element, *reversed(attributes)]) if element is not None else None


class MissingSetEpoch(Rule):
    """Finds a shuffling DistributedSampler that is never told the epoch."""

    code = "DDP202"
    data_parallel = True
    severity = Severity.WARNING  # training runs, with a worse data order

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        yield from self._own(ctx)
        yield from self._in_helpers(ctx)

    def _in_helpers(self, ctx: LintContext) -> Iterator[Finding]:
        """A sampler that a function or class of another project module builds and never gives the
        epoch while it runs the epochs itself (`trainer = Trainer(cfg)` whose `__init__` builds the
        loader and whose `fit()` loops over it), as the helper's own lint finds it: reported once,
        at the first call of this module that reaches it. Not where this module sets an epoch
        itself (it may reach that sampler through the object: `trainer.loader.sampler`)."""
        facts = ctx.facts
        if any(c.method == "set_epoch" for c in facts.calls):
            return
        told: set[int] = set()
        key = "DDP202 own samplers"
        for site in facts.calls:
            callee = ctx.callee_module(site)
            if callee is None or ctx.guards.main_only(site) or ctx.runs_nowhere(site):
                continue
            helper, resolved = callee
            if key not in helper.memo:
                helper.memo[key] = [(f, _function_of(helper.facts, f.node)) for f in self._own(helper) if not f.inside]
            if not helper.memo[key]:
                continue
            reached = helper.reached_from(resolved.function)
            for finding, function in helper.memo[key]:
                if function in reached and id(finding.node) not in told:
                    told.add(id(finding.node))
                    built = Inside(helper.path, finding.node, "the DistributedSampler is built here, and its epochs run")
                    yield Finding(site.node, f"{callee_text(site.node)}(): {finding.message}", inside=(built,))

    def _own(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        samplers_inside = _samplers_from_helpers(ctx)
        loaders_inside = _loaders_from_helpers(ctx)
        inside = {site: built for site, (built, _) in [*samplers_inside.items(), *loaders_inside.items()]}
        shuffling = [s for s in samplers(facts) if not is_false(arg(s.node, 3, "shuffle")) and not ctx.runs_nowhere(s)] + list(
            inside
        )
        if not shuffling:
            return
        if not facts.is_script:
            # a loader-building function: the epoch loop lives in the script that calls it; a
            # trainer class builds its sampler in one method and runs the epochs in another
            workers = ctx.spawn_targets(facts)  # a worker the module spawns trains here, whoever imports it
            shuffling = [
                s
                for s in shuffling
                if s.function == ""
                or s.function in workers
                or any(_runs_steps(facts, loop) for loop in epoch_loops(facts, s.function))
                or _epochs_in_own_class(facts, s.function)
            ]
            if not shuffling:
                return
        receivers, in_helper = _set_epoch_receivers(ctx)
        if in_helper:
            return
        by_loader, receivers = _through_named_loaders(facts, receivers)
        lasts = {r.rsplit(".", 1)[-1] for r in receivers}
        # `self.loader.sampler.set_epoch(e)`: an attribute of some loader, not a variable named `sampler`
        through_loaders = any("." in r and r.rsplit(".", 1)[-1] in {"sampler", "batch_sampler"} for r in receivers)
        for site in shuffling:
            loader = loaders_inside.get(site)
            named = samplers_inside[site][1] if site in samplers_inside else None
            names = [loader[1]] if loader is not None else [named] if named else bound_names(facts, site.node)
            if id(site.node) in by_loader or by_loader & {id(b.value) for b in facts.bindings_of(site.node)}:
                continue  # loader.sampler.set_epoch(epoch) for the loader it was given to
            if _set_through_its_container(facts, site):
                continue  # `samplers = [DistributedSampler(d) for d in sets]`, then `samplers[i].set_epoch(epoch)`
            if facts.bindings_of(site.node) and all(facts.replaced_unread(b) for b in facts.bindings_of(site.node)):
                continue  # bound again before any use: the sampler the loader gets is the next one
            dataset = arg(site.node, 0, "dataset")
            held = None if names else _holder(facts, site)  # given inline to a named loader
            words = [*names, *(names_in(dataset) if dataset is not None else ()), (reference(dataset) or "") if dataset else ""]
            if (
                EVAL_WORDS.search(" ".join([*words, held[1] if held is not None else ""]))
                or _evaluates_only(ctx, site, names)
                or loader is not None
                and read_for_evaluation(ctx, loader[1], site.function)
            ):
                continue  # an evaluation sampler (or the sampler of an evaluation loader): its order does not matter
            if names and {n.rsplit(".", 1)[-1] for n in names} & lasts:
                continue
            if any(_escapes(ctx, n, loader is not None) or _set_by_receiver(ctx, n) for n in names) or any(
                _escapes(ctx, n, True) for n in loaders_given(facts, names, site.node)
            ):
                continue  # it or its loader handed to a function this linter cannot see into, or to one that sets the epoch
            if _single_pass(ctx, site, names) or _never_read(facts, site, names) or _iterated_once(ctx, site, names):
                continue  # one pass over the data, or none: there is no next epoch to reshuffle
            if receivers and any(_returned(facts, site.function, n) for n in names):
                continue  # returned to a caller that keeps it under its own name (`self._sampler, ... = ...`)
            if through_loaders or not names and receivers:
                continue  # loader.sampler.set_epoch(epoch) of a loader this module cannot name
            label = (
                f"{names[0]}.sampler" if loader is not None else names[0] if names else held[1] if held is not None else "sampler"
            )
            built = inside.get(site)
            yield Finding(
                site.node,
                f"DistributedSampler '{label}' is never given the epoch: every epoch sees the same "
                f"order; call {label}.set_epoch(epoch) at the start of the epoch loop",
                # a helper may return another sampler in other runs (RandomSampler): no fix
                _set_epoch_fix(facts, site) if built is None else None,
                inside=(built,) if built is not None else _returned_to(ctx, site),
            )


def _function_of(facts: ModuleFacts, node: cst.CSTNode) -> str | None:
    """The function of the module whose call `node` is."""
    return next((c.function for c in facts.calls if c.node is node), None)


def _samplers_from_helpers(ctx: LintContext) -> dict[CallSite, tuple[Inside, str | None]]:
    """Calls of a function of another project module that returns a shuffling DistributedSampler
    it builds (`sampler = dist.data_sampler(dataset, shuffle=True, distributed=...)`), with where
    it builds it and, when the function returns a tuple (`train_ds, val_ds, train_sampler,
    val_sampler = load_data(args)`), the caller's name for the sampler; a `shuffle` parameter is
    read from the call's constant arguments."""
    facts, found = ctx.facts, {}
    for site, resolved in helper_calls(ctx, given_to_loaders=True):
        inner_facts, inner_path, function = resolved
        returns = inner_facts.functions[function].returns
        names = bound_names(facts, site.node)
        parts = [e.value for e in returns[0].elements] if len(returns) == 1 and type(returns[0]) is cst.Tuple else []
        by_position = len(parts) == len(names) > 1 and all(b.element for b in facts.bindings_of(site.node))
        bindings = constants.bind_call(site.node, inner_facts, function, constants.branch_facts(site.conditions))
        for inner in inner_facts.calls_within(function):
            shuffle = arg(inner.node, 3, "shuffle")
            if not is_sampler(inner_facts, inner.name) or is_false(shuffle):
                continue
            if (
                constants.dark(inner.conditions, bindings)
                or type(shuffle) is cst.Name
                and bindings.get(shuffle.value, True) is False
            ):
                continue
            held = bound_names(inner_facts, inner.node)
            position = next((i for i, part in enumerate(parts) if reference(part) in held), None) if by_position else None
            if position is None and not any(value is inner.node for value in returns):
                continue
            if position is not None and EVAL_WORDS.search(names[position]):
                continue  # the caller's evaluation sampler: look on for its training one
            if position is not None and any(
                read_for_evaluation(ctx, names[i], site.function)
                for i in _loaders_given_it(inner_facts, function, parts, inner, held)
            ):
                continue  # returned beside the loader it is given to, which the caller only evaluates with
            found[site] = (
                Inside(inner_path, inner.node, "the DistributedSampler is built here"),
                names[position] if position is not None else None,
            )
            break
    return found


def _loaders_given_it(
    facts: ModuleFacts, function: str, parts: list[cst.BaseExpression], sampler: CallSite, held: list[str]
) -> list[int]:
    """The positions of the returned tuple that hold a DataLoader given this sampler."""
    return [
        i
        for i, part in enumerate(parts)
        if (loader := returned_loader(facts, function, part)) is not None
        and (given := given_sampler(facts, loader)) is not None
        and (given is sampler.node or reference(given) in held)
    ]


def _loaders_from_helpers(ctx: LintContext) -> dict[CallSite, tuple[Inside, str]]:
    """Calls of a function of another project module that returns a DataLoader it builds with
    a shuffling DistributedSampler (`train_loader, test_loader = get_loader(args)`), with where
    the sampler is built and the caller's name for that loader."""
    facts, found = ctx.facts, {}
    for site, resolved in helper_calls(ctx):
        names = bound_names(facts, site.node)
        inner_facts, inner_path, function = resolved
        info = inner_facts.functions[function]
        bindings = constants.bind_call(site.node, inner_facts, function, constants.branch_facts(site.conditions))
        # the returns the call's constant arguments leave reachable (`load_dataset(args, "train")`)
        returns = [
            r for r, around in zip(info.returns, info.return_conditions, strict=True) if not constants.dark(around, bindings)
        ]
        if len(returns) != 1:
            continue  # several returns: which loader a run gets is not one answer
        parts = [e.value for e in returns[0].elements] if type(returns[0]) is cst.Tuple else [returns[0]]
        if len(parts) != len(names) or len(parts) > 1 and not all(b.element for b in facts.bindings_of(site.node)):
            continue
        for position, part in enumerate(parts):
            sampler = _shuffling_sampler_of(inner_facts, function, part, bindings)
            held = bound_names(inner_facts, sampler.node) if sampler is not None else []
            if sampler is None or any(p is sampler.node or reference(p) in held for p in parts):
                continue  # a sampler returned beside its loader is the caller's to set, under its own name
            found[site] = (Inside(inner_path, sampler.node, "the DistributedSampler is built here"), names[position])
            break
    return found


def _shuffling_sampler_of(
    facts: ModuleFacts, function: str, returned: cst.BaseExpression, bindings: constants.Bindings
) -> CallSite | None:
    """The shuffling DistributedSampler of the DataLoader the function returns as `returned`
    (the loader itself, or a name bound to it), given inline or through a name; not one whose
    `shuffle` is a parameter the call sets to False (`create_dataloader(ds, shuffle=False)`)."""
    calls = facts.calls_within(function)
    loader = returned_loader(facts, function, returned)
    given = given_sampler(facts, loader) if loader is not None else None
    if given is None:
        return None
    for sampler in calls:
        shuffle = arg(sampler.node, 3, "shuffle")
        if type(shuffle) is cst.Name and bindings.get(shuffle.value) is False or constants.dark(sampler.conditions, bindings):
            continue  # a sampler that does not shuffle, or that this call never builds
        if not is_sampler(facts, sampler.name) or is_false(shuffle):
            continue
        if given is sampler.node or reference(given) in bound_names(facts, sampler.node):
            return sampler
    # `sampler = build_sampler(data_set, world_size, rank)`: a function of the same module that
    # builds it and returns it
    made = [a.value for a in facts.assignments if a.function == function and a.target == reference(given) and not a.element]
    builder = facts.callee(made[0]) if len(made) == 1 and type(made[0]) is cst.Call else None
    returns = facts.functions[builder].returns if builder is not None and builder in facts.functions else []
    if builder is None or len(returns) != 1:
        return None
    built = next((c for c in facts.calls_within(builder) if is_sampler(facts, c.name)), None)
    if built is None or is_false(arg(built.node, 3, "shuffle")):
        return None
    return built if returns[0] is built.node or reference(returns[0]) in bound_names(facts, built.node) else None


def _single_pass(ctx: LintContext, site: CallSite, names: list[str]) -> bool:
    """The loaders the sampler is given to are read only by loops that nothing repeats (`for
    step, batch in enumerate(loader):` with the steps inside, up to a limit; also through `bar =
    tqdm(loader)` or a function of the module it is handed to): no loop around them in their
    function but one of a single turn (`for epoch in range(1):`), and that function runs once,
    at module level, as the process's entry (what mp.spawn starts) or called from this module
    outside every loop."""
    found = [readers(ctx, loader) for loader in loader_calls_given(ctx.facts, names, site.node)]
    loops = [loop for reading in found for loop in reading or ()]
    return (
        bool(loops)
        and None not in found
        and all(
            not any(
                other.node is not loop.node and contains(other.node, loop.node) and not _one_turn(other.node)
                for other in ctx.facts.loops
            )
            and _runs_once(ctx, loop.function, set())
            for loop in loops
        )
    )


def _one_turn(loop: cst.For | cst.While) -> bool:
    """`for epoch in range(1):`, `range(0, 1)`: a loop that turns at most once repeats nothing."""
    if type(loop) is not cst.For or type(loop.iter) is not cst.Call or dotted(loop.iter.func) != "range":
        return False
    bounds = [int_value(a.value) if a.keyword is None and not a.star else None for a in loop.iter.args]
    known = [b for b in bounds if b is not None]
    if not 1 <= len(bounds) <= 2 or len(known) != len(bounds):
        return False
    start, stop = (0, known[0]) if len(known) == 1 else (known[0], known[1])
    return stop - start <= 1


def _runs_once(ctx: LintContext, function: str, seen: set[str]) -> bool:
    """`function` runs once per process: module-level code, an entry point, or a function whose
    every call in the module runs once (none in a loop). Unknown callers may call it again."""
    if function == "" or function in ctx.spawn_targets(ctx.facts):
        return True
    callers = ctx.guards.callers(ctx.facts).get(function, [])
    seen.add(function)
    return bool(callers) and all(not c.loops and c.function not in seen and _runs_once(ctx, c.function, seen) for c in callers)


def _iterated_once(ctx: LintContext, site: CallSite, names: list[str]) -> bool:
    """The sampler's loader is read only through iterators made once, outside every loop, that
    nothing makes again (`it = enumerate(loader)` before the step loop, `next(it)` in it): at most
    one pass over the data, so there is no next epoch to reshuffle. The iterators are made in the
    sampler's own function, or, where that function returns the loader, in the functions that
    call it once each (`loader = self.get_synth_loader()`, then `batches = iter(loader)`)."""
    facts = ctx.facts
    held = loaders_given(facts, names, site.node)
    if not held or any("." in name for name in held | set(names)):
        return False
    functions, passed = {site.function}, set()
    info = facts.functions.get(site.function)
    returned = [r for r in info.returns if reference(r) in held] if info is not None else []
    if returned:
        for caller in ctx.guards.callers(facts).get(site.function, []):
            bound = bound_names(facts, caller.node)
            if caller.loops or len(bound) != 1 or "." in bound[0]:
                return False  # a new loader, at epoch 0 again, on every turn
            functions.add(caller.function)
            passed.add(bound[0])
    loader_names = held | passed
    made = [
        a
        for a in facts.assignments
        if type(a.value) is cst.Call
        and dotted(a.value.func) in {"iter", "enumerate"}
        and a.value.args
        and reference(a.value.args[0].value) in loader_names
    ]
    if not made or any(a.loops or a.element or a.function not in functions for a in made):
        return False  # made in a loop, or in a function that may run again
    iterators = {a.target for a in made}
    if sum(a.target in iterators for a in facts.assignments) != len(made):
        return False  # made again when one runs out: another pass, in the same order
    making = {id(a.value) for a in made} | {id(loader.node) for loader in loaders(facts)} | {id(site.node)}
    making |= {id(r) for r in returned}
    return not any((loader_names | set(names)) & names_in(expr) for expr in _reads(facts, making))


def _evaluates_only(ctx: LintContext, site: CallSite, names: list[str]) -> bool:
    """Every loader the sampler is given to is read only by evaluation loops (loaders.evaluation_only:
    gradients off or the model in eval mode, no backward or step; `trainer.fit(train_loader,
    dev_loader)`, then `self.score(dev_loader)` under `torch.no_grad()`): its order does not matter."""
    given_to = loader_calls_given(ctx.facts, names, site.node)
    return bool(given_to) and all(evaluation_only(ctx, loader) for loader in given_to)


def _never_read(facts: ModuleFacts, site: CallSite, names: list[str]) -> bool:
    """The sampler's loader (and the sampler) are built and then never read: no loop iterates
    them, no call is given them, nothing is bound from them or returns them (a setup fragment)."""
    held = loaders_given(facts, names, site.node)
    if not held or any("." in name for name in held | set(names)):
        return False  # no named loader, or one kept on an object: read elsewhere
    built = {id(loader.node) for loader in loaders(facts)} | {id(site.node)}
    return not any((held | set(names)) & names_in(expr) for expr in _reads(facts, built))


def _reads(facts: ModuleFacts, skipped: set[int]) -> list[cst.BaseExpression]:
    """What the module reads its names in: loop iterables, call arguments, bound values and
    returns, but not the calls and values of `skipped` (by node id)."""
    return (
        [loop.node.iter for loop in facts.loops if type(loop.node) is cst.For]
        + [a.value for call in facts.calls if id(call.node) not in skipped for a in call.node.args]
        + [a.value for a in facts.assignments if id(a.value) not in skipped]
        + [value for info in facts.functions.values() for value in info.returns if id(value) not in skipped]
    )


def _through_named_loaders(facts: ModuleFacts, receivers: set[str]) -> tuple[set[int], set[str]]:
    """Split off the receivers `<loader>.sampler` of loaders bound in this module: they reach the
    sampler given to that loader only. Returns (id() of the samplers or of the expressions that
    hold them, as given to those loaders; the other receivers)."""
    reached: set[int] = set()
    used: set[str] = set()
    for loader in loaders(facts):
        given = given_sampler(facts, loader)
        for name in bound_names(facts, loader.node):
            if f"{name}.sampler" in receivers and given is not None:
                used.add(f"{name}.sampler")
                reached.add(id(given))
                held = reference(given)
                if held is not None:
                    reached |= {id(b.value) for b in facts.reaching(held, loader.function, loader.order, loader.blocks)}
    return reached, receivers - used


def _epochs_in_own_class(facts: ModuleFacts, function: str) -> bool:
    """Another method of the sampler's class runs the epochs: a loop that can run once per epoch
    and trains in each turn (a loop nested in it, or a method of the class it calls); a
    `for i in range(batch_size)` building a batch is no epoch loop."""
    cls, _, _ = function.rpartition(".")
    return (
        bool(cls)
        and facts.has_members(cls)
        and cls not in facts.functions
        and any(
            loop.function.startswith(f"{cls}.") and epoch_loop(loop.node) and _runs_steps(facts, loop) for loop in facts.loops
        )
    )


def _runs_steps(facts: ModuleFacts, loop: Loop) -> bool:
    """A loop whose turns each run a step: a loop nested in it, a call of the class's methods, or
    of a function of the module that loops itself (`train(model, loader, optimizer, epoch)`)."""
    return any(
        call.loops[-1] is not loop.node
        or (call.name or "").startswith(("self.", "cls."))
        or call.name in facts.functions
        and any(inner.loops for inner in facts.calls_within(call.name))
        for call in calls_in_loop(facts, loop)
    )


def _set_epoch_fix(facts: ModuleFacts, site: CallSite) -> Remedy | None:
    """`<sampler>.set_epoch(<epoch>)` as the first statement of the epoch loop, when both names are
    known: the sampler (or the loader it was handed to) is bound on every path to the epoch loop,
    in the same function, and nothing rebinds it before or inside the loop."""
    held = _holder(facts, site)
    if held is None:
        return None
    binding, receiver, guarded = held
    loop = _the_epoch_loop(facts, binding)
    if loop is None or facts.reaching(binding.target, loop.function, loop.order, loop.blocks) != [binding]:
        return None
    if any(a.target == binding.target for a in facts.by_loop.get(id(loop.node), [])):
        return None  # rebuilt or wrapped inside the loop: the first statement sees another object
    node = cst.ensure_type(loop.node, cst.For)
    call = f"{receiver}.set_epoch({cst.ensure_type(node.target, cst.Name).value})"
    code = f"if {receiver} is not None:\n    {call}\n" if guarded else f"{call}\n"
    first = cst.ensure_type(node.body, cst.IndentedBlock).body[0]
    if not isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        return None
    return Remedy(f"call {call} at the start of the epoch loop", InsertBefore(first, cst.parse_statement(code)))


def _set_through_its_container(facts: ModuleFacts, site: CallSite) -> bool:
    """The sampler (or the name it is bound to) is an element of a list (a comprehension or a
    literal) bound to a name, and the module calls `set_epoch` on an element of that name, by
    index (`self.samplers[k].set_epoch(epoch)`) or as a loop over it (`for s in samplers:
    s.set_epoch(epoch)`)."""
    own = facts.assignments_within(site.function) if site.function else facts.assignments
    names = set(bound_names(facts, site.node))
    held = {a.target for a in own if a.function == site.function and _an_element(a.value, site.node, names)}
    if not held:
        return False
    elements = {a.target for a in facts.assignments if a.element and reference(a.value) in held}
    for c in facts.calls:
        receiver = c.node.func.value if c.method == "set_epoch" and type(c.node.func) is cst.Attribute else None
        if receiver is None:
            continue
        if type(receiver) is cst.Subscript and reference(receiver.value) in held or reference(receiver) in elements:
            return True
    return False


def _an_element(value: cst.BaseExpression, node: cst.CSTNode, names: set[str]) -> bool:
    """`node` is what a comprehension makes each element of, or an element of a list literal,
    itself or by one of the `names` it is bound to."""
    if isinstance(value, (cst.ListComp, cst.GeneratorExp)):
        return value.elt is node
    return isinstance(value, (cst.List, cst.Tuple)) and any(
        e.value is node or reference(e.value) in names for e in value.elements
    )


def _holder(facts: ModuleFacts, site: CallSite) -> tuple[Assignment, str, bool] | None:
    """(the binding that holds the sampler, the expression that reaches it, whether that may be
    None instead: `sampler = DistributedSampler(ds) if distributed else None`)."""
    bindings = facts.bindings_of(site.node)
    if len(bindings) > 1:
        return None
    if bindings:
        binding = bindings[0]
        if binding.value is site.node:
            return binding, binding.target, False
        choice = cst.ensure_type(binding.value, cst.IfExp)
        other = choice.orelse if choice.body is site.node else choice.body
        return (binding, binding.target, True) if type(other) is cst.Name and other.value == "None" else None
    for loader in loaders(facts):  # DataLoader(ds, sampler=DistributedSampler(ds)): loader.sampler
        if given_sampler(facts, loader) is site.node:
            held = facts.bindings_of(loader.node)
            if len(held) == 1 and held[0].value is loader.node:
                return held[0], f"{held[0].target}.sampler", False
    return None


def _the_epoch_loop(facts: ModuleFacts, binding: Assignment) -> Loop | None:
    """The loop whose every iteration is one epoch over the loader: the loop right around the
    loops that iterate it (`for epoch in range(n): for batch in loader:`), or, where the loader is
    iterated in another function, the one loop named for epochs. It must count in a plain name
    over `range(...)` (an int), be dominated by `binding`, and be the only candidate."""
    counting = {
        id(loop.node): loop
        for loop in facts.loops
        if loop.function == binding.function and dominates(binding, loop) and _counts(loop.node)
    }
    drawing = _loader_names(facts, binding)
    iterations = [
        a
        for a in facts.assignments
        if a.element and a.function == binding.function and a.order > binding.order and names_in(a.value) & drawing
    ]
    if iterations:
        around = {id(a.loops[-1]) if a.loops else None for a in iterations}
        chosen = [counting[key] for key in around if key in counting]
        return chosen[0] if len(around) == 1 and chosen else None
    named = [
        loop
        for loop in counting.values()
        if "epoch" in cst.ensure_type(cst.ensure_type(loop.node, cst.For).target, cst.Name).value.lower()
    ]
    return named[0] if len(named) == 1 and not _nested_in(facts, named[0], counting) else None


def _counts(node: cst.For | cst.While) -> bool:
    """`for <name> in range(...)` (or trange/tqdm over one) with an indented body."""
    return (
        type(node) is cst.For and type(node.target) is cst.Name and type(node.body) is cst.IndentedBlock and over_range(node.iter)
    )


def _nested_in(facts: ModuleFacts, loop: Loop, counting: dict[int, Loop]) -> bool:
    """Another counting loop is around `loop` or inside it (stages of epochs, steps of an epoch)."""
    if any(id(outer) in counting for outer in _enclosing_loops(facts, loop)):
        return True
    return any(
        any(outer is loop.node for outer in _enclosing_loops(facts, other)) for other in counting.values() if other is not loop
    )


def _enclosing_loops(facts: ModuleFacts, loop: Loop) -> tuple[cst.For | cst.While, ...]:
    """The loops around `loop`, as its target's binding records them."""
    if type(loop.node) is not cst.For:
        return ()
    return next((a.loops for a in facts.bindings_of(loop.node.iter) if a.element), ())


def _loader_names(facts: ModuleFacts, binding: Assignment) -> set[str]:
    """The loaders that draw from the sampler `binding` holds (or the loader it is itself)."""
    if type(binding.value) is cst.Call and data_name(facts.callee(binding.value)) == LOADER:
        return {binding.target}
    out: set[str] = set()
    for loader in loaders(facts):
        given = given_sampler(facts, loader)
        if given is not None and binding.target in names_in(given):
            out.update(bound_names(facts, loader.node))
    return out


CONTAINERS = (cst.Dict, cst.List, cst.Tuple)


def _returned_to(ctx: LintContext, site: CallSite) -> tuple[Inside, ...]:
    """A sampler that a function of the module builds and returns as it is (`return
    DistributedSampler(dataset, shuffle=shuffle)`): the first call that takes it, to name beside it."""
    info = ctx.facts.functions.get(site.function)
    if info is None or not any(value is site.node for value in info.returns):
        return ()
    callers = ctx.guards.callers(ctx.facts).get(site.function, [])
    first = min(callers, key=lambda c: c.order, default=None)
    return (Inside(ctx.path, first.node, f"{site.function}() returns it here"),) if first is not None else ()


def _returned(facts, function: str, name: str) -> bool:
    """The sampler goes back to the caller: in a returned value, or in a container returned
    (`samplers = {"SUP": sup_sampler, ...}`, then `return loaders, samplers`)."""
    info = facts.functions.get(function)
    if info is None:
        return False
    returned = {n for value in info.returns for n in names_in(value)}
    return name in returned or any(
        a.function == function and a.target in returned and type(a.value) in CONTAINERS and name in names_in(a.value)
        for a in facts.assignments
    )


def _set_by_receiver(ctx: LintContext, name: str) -> bool:
    """The sampler is handed to a function or class of the project that sets its epoch, on the
    parameter it receives or on the attribute its `__init__` keeps it in (`Trainer(model, loader,
    sampler)`, then `self.sampler.set_epoch(epoch)` in a method), itself or through one more call
    it hands the parameter on to (a subclass's `__init__` passing it to `super().__init__`)."""
    return any(
        _sets_epoch_of(ctx, resolved, param, depth=1)
        for resolved, param in _handed_to(ctx, ctx.facts, ctx.path, ctx.facts.calls, name)
    )


def _handed_to(ctx: LintContext, facts: ModuleFacts, path, calls, name: str) -> Iterator[tuple[Resolved, str]]:
    """(the project function, its parameter) for each argument of these calls that is `name`."""
    for site in calls:
        given = [a for a in site.node.args if dotted(a.value) == name]
        if not given or any(a.star for a in site.node.args):
            continue  # (asked first: resolving the callee is the costly question)
        resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, site))
        if resolved is None:
            continue
        definition = resolved.facts.functions[resolved.function].node
        for argument in given:
            param = parameter_for(site.node, definition, argument)
            if param is not None:
                yield resolved, param


def _sets_epoch_of(ctx: LintContext, resolved: Resolved, param: str, depth: int) -> bool:
    """The function sets the epoch of what it receives as `param` (or, for an `__init__`, the
    class does, on the attribute it keeps it in), or hands it on to one that does."""
    receivers = {param}
    cls = resolved.function.rpartition(".")[0]
    if resolved.function.endswith(".__init__"):
        receivers |= {
            a.target
            for a in resolved.facts.assignments_within(resolved.function)
            if a.target.startswith("self.") and dotted(a.value) == param
        }
    scope = cls if resolved.function.endswith(".__init__") else resolved.function
    if any(
        c.method == "set_epoch" and c.name and c.name.rpartition(".")[0] in receivers for c in resolved.facts.calls_within(scope)
    ):
        return True
    inner = resolved.facts.calls_within(resolved.function)
    return depth > 0 and any(
        _sets_epoch_of(ctx, onward, onward_param, depth - 1)
        for onward, onward_param in _handed_to(ctx, resolved.facts, resolved.path, inner, param)
    )


def _escapes(ctx: LintContext, name: str, loader: bool = False) -> bool:
    """The sampler is passed to a call that is neither torch's, Python's own (`len(loader)`) nor
    a function of the project. A loader (a helper built it, with its sampler) escapes into any
    function of another module, which may set the epoch through `loader.sampler`, but not into
    a call whose result this module then iterates itself (`for batch in tqdm(loader)`)."""
    for site in ctx.facts.calls:
        if (site.name or "").startswith("torch.") or site.name is None or site.name in BUILTINS or data_name(site.name) == LOADER:
            continue
        if not any(_hands(a.value, name) for a in site.node.args):
            continue
        resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
        if resolved is None and not (loader and _iterated_here(ctx.facts, site)):
            return True
        if loader and resolved is not None and resolved.facts is not ctx.facts:
            if _may_set_epoch(ctx, resolved, site, name, iterated=_iterated_here(ctx.facts, site)) or _only_evaluates(resolved):
                return True
    return False


def _only_evaluates(resolved: Resolved) -> bool:
    """The function of another module the loader is handed to turns gradients off or puts the
    model in eval mode and runs no backward or step: it evaluates (`analysis(model, loader)`)."""
    calls = resolved.facts.calls_within(resolved.function)
    return any(c.name in NO_GRAD or c.method == "eval" for c in calls) and not any(updates_weights(c) for c in calls)


def _hands(node: cst.CSTNode, name: str) -> bool:
    """The argument gives the callee the object `name` (or something holding it), not only what
    Python's builtins read from it (`len(train_loader)`, also inside `{"epoch": i / len(loader)}`)."""
    if type(node) is cst.Call and dotted(node.func) in INSPECTING_BUILTINS:
        return False
    if type(node) in (cst.Name, cst.Attribute):
        return name in names_in(node)
    if type(node) is cst.Arg:  # (not its keyword's name)
        return _hands(node.value, name)
    return any(_hands(child, name) for child in node.children)


def _may_set_epoch(
    ctx: LintContext, resolved: Resolved, call: CallSite, name: str, depth: int = 2, iterated: bool = False
) -> bool:
    """The function of another module that a loader is handed to (`call`, with `name` in its
    arguments) may set its sampler's epoch: it, or its class (which may keep the loader for
    another method), calls `set_epoch`, or it hands the parameter that got the loader on to a
    call this analysis cannot follow. One that only iterates it (`for batch in
    enumerate(train_loader):`) sets nothing, nor does one whose caller iterates what it returns
    (`for batch in dist_tqdm(loader):` with `return tqdm.tqdm(obj)`): that call only wraps it."""
    facts, path, function = resolved
    owner = function.rpartition(".")[0]
    setting = owner if owner and facts.has_members(owner) else function
    if any(c.method == "set_epoch" and not _switched_off_by_the_script(ctx, facts, c) for c in facts.calls_within(setting)):
        return True
    definition = facts.functions[function].node
    received = {p for a in call.node.args if _hands(a.value, name) and (p := parameter_for(call.node, definition, a)) is not None}
    for inner in facts.calls_within(function):
        # (`super().__init__(net, None, loader)` is followed into the base class, where the project has it)
        if inner.name is None and not _to_base_class(inner):
            continue
        if (inner.name or "").startswith("torch.") or inner.name in BUILTINS or _iterated_here(facts, inner):
            continue
        if iterated and any(r is inner.node for r in facts.functions[function].returns):
            continue
        for param in received:
            if any((reference(a.value) or "").split(".")[0] == param for a in inner.node.args):  # it, or `loader.sampler`
                onward = ctx.resolve_function(facts, path, ctx.method_target(facts, inner))
                if onward is None or depth == 0 or _may_set_epoch(ctx, onward, inner, param, depth - 1):
                    return True
    return False


def _to_base_class(site: CallSite) -> bool:
    """`super().__init__(...)`, `super().fit(...)`: a call of the base class's method."""
    func = site.node.func
    return type(func) is cst.Attribute and type(func.value) is cst.Call and dotted(func.value.func) == "super"


def _iterated_here(facts: ModuleFacts, site: CallSite) -> bool:
    """A `for` loop of the module iterates the call's result: in its `in` clause, or through the
    names the result is bound to."""
    held = {*bound_names(facts, site.node)}
    return any(
        type(loop.node) is cst.For and (contains(loop.node.iter, site.node) or held & names_in(loop.node.iter))
        for loop in facts.loops
    )
