"""DDP401: a collective that only some ranks reach.

Every rank must enter each collective, in the same order. Inside `if rank == 0:` (or its
negation) the other ranks never arrive and the job hangs until the NCCL timeout. Saves that
gather state from every rank (torch.distributed.checkpoint, FSDP state dicts) are collectives
too, so they belong outside the guard.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.caller_state import gated_at_call, handed_state
from ddplint.lint.context import LintContext
from ddplint.lint.facts import Assignment, CallSite, ModuleFacts
from ddplint.lint.guards import MAIN, NOTMAIN, OPPOSITE, SINGLE, Kind
from ddplint.lint.loaders import is_false
from ddplint.lint.names import arg, argument_for, call_parameters, callee_text, dotted, parameter_for, reference
from ddplint.lint.paths import dominates, never_runs
from ddplint.lint.rules.base import Finding, Inside, Rule
from ddplint.lint.summaries import Effect, direct_effects
from ddplint.lint.vocabulary import DDP, MODULE_RETURNS_ITSELF, WRAPPERS

HAND_ON_HOPS = 2  # how many functions deep a model handed on as it is is followed


def _wrapped_models(ctx: LintContext) -> dict[str, tuple[str, int]]:
    """Names that hold a DDP/FSDP-wrapped model -> (function, order) of their first wrapping.

    Calling them afterwards is a forward pass that communicates; before it, the same name
    still holds the plain model. Memoised: the rule and a script calling the module ask it.
    """
    key = "DDP401 wrapped models"
    if key not in ctx.memo:
        wrapped: dict[str, tuple[str, int]] = {}
        for a in ctx.facts.assignments:
            if _wraps(ctx, ctx.facts, ctx.path, a.value) and (a.target not in wrapped or a.order < wrapped[a.target][1]):
                wrapped[a.target] = (a.function, a.order)
        ctx.memo[key] = wrapped
    return ctx.memo[key]


def _wraps(ctx: LintContext, facts: ModuleFacts, path: Path, value: cst.BaseExpression, through: int = 1) -> bool:
    """The value is a DDP/FSDP wrapper: `DDP(net, ...)`, also moved or switched on the way
    (`DDP(net, device_ids=[rank]).to(device)`: a module's `.to()` returns the module), chosen
    on the distributed side of a conditional expression, or what a
    function of the project returns when one of its `return`s is one (`model = set_model(model,
    distributed=True)`, whose distributed path wraps: a distributed run takes it)."""
    value = _unmoved(value)
    if type(value) is cst.IfExp:  # `DDP(model, ...) if args.distributed else model`: the distributed side
        return any(_wraps(ctx, facts, path, side, through) for side in (value.body, value.orelse))
    if type(value) is not cst.Call:
        return False
    callee = facts.callee(value)
    if callee in WRAPPERS:  # DDP(net, broadcast_buffers=False): its forward pass sends nothing
        return not (callee == DDP and is_false(arg(value, None, "broadcast_buffers")))
    resolved = ctx.resolve_function(facts, path, callee, constructors=False) if callee and through > 0 else None
    if resolved is None:
        return False
    inner, where, function = resolved
    return any(
        _wraps(ctx, inner, where, r, through - 1)
        or type(r) is cst.Name
        and any(a.function == function and _wraps(ctx, inner, where, a.value, through - 1) for a in inner.assigned(r.value))
        for r in inner.functions[function].returns
    )


def _is_wrapped(ctx: LintContext, name: str | None, site: CallSite, models: dict[str, tuple[str, int]]) -> bool:
    """`name` holds the wrapped model at `site`. An attribute (`self.model`) or a parameter does
    after its wrapping, or in another function; a variable the site's function binds itself does
    when one of its bindings that reach the site wraps (`model = from_pretrained(...)` later in
    `main()` is another model than `train()`'s DDP one); a free variable does when it is the
    module's global or an enclosing function's variable that is wrapped."""
    if name is None or name not in models or _not_an_instance_here(site, name):
        return False
    function, order = models[name]
    facts = ctx.facts
    info = facts.functions.get(site.function)
    if "." in name or info is not None and name in info.params:
        if any(
            a.function == site.function and a.order < site.order and dotted(a.value) == f"{name}.module"
            for a in facts.assigned(name)
        ):
            return False  # unwrapped first (`if isinstance(model, DDP): model = model.module`)
        return site.function != function or site.order > order
    if any(a.function == site.function for a in facts.assigned(name)):
        reaching = facts.reaching(name, site.function, site.order, site.blocks)
        return any(
            _wraps(ctx, facts, ctx.path, b.value) if not b.element else _handed_back_wrapped(ctx, b, HAND_ON_HOPS)
            for b in reaching
        )
    return not function or site.function.startswith(f"{function}.")


def _handed_back_wrapped(ctx: LintContext, binding: Assignment, hops: int) -> bool:
    """`model, optimizer = resume(opts, model, optimizer)`: a project function that returns, in
    that place of its tuple, the parameter it was given, as it is, gives back the model it was
    handed: a wrapped one where the bindings reaching the call wrap."""
    call = binding.value
    if hops == 0 or binding.position is None or type(call) is not cst.Call or any(a.star for a in call.args):
        return False
    resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.facts.callee(call))
    if resolved is None:
        return False
    facts, _, function = resolved
    info = facts.functions[function]
    given: set[str] = set()
    for returned in info.returns:
        elements = returned.elements if type(returned) is cst.Tuple else ()
        if binding.position >= len(elements) or type(elements[binding.position].value) is not cst.Name:
            return False
        given.add(cst.ensure_type(elements[binding.position].value, cst.Name).value)
    param = given.pop() if len(given) == 1 else None
    if param is None or param not in info.params or any(a.function == function for a in facts.assigned(param)):
        return False
    argument = argument_for(call, info.node, param)
    held = reference(argument) if argument is not None else None
    reaching = ctx.facts.reaching(held, binding.function, binding.order, binding.blocks) if held else []
    return any(
        _wraps(ctx, ctx.facts, ctx.path, b.value) if not b.element else _handed_back_wrapped(ctx, b, hops - 1)
        for b in reaching
        if b.value is not call
    )


def _not_an_instance_here(site: CallSite, name: str) -> bool:
    """The site runs only where a type test on the model failed (`model.module(x) if
    isinstance(model, DDP) else model(x)`): whatever it holds there, it is not the wrapper."""
    for condition in site.conditions:
        test = condition.test
        if condition.negated and type(test) is cst.Call and dotted(test.func) == "isinstance" and test.args:
            if dotted(test.args[0].value) == name:
                return True
    return False


def _forwarded_model(ctx: LintContext, site: CallSite, models: dict[str, tuple[str, int]]) -> str | None:
    """The wrapped model a call hands to a project function that runs its forward pass
    (`validate(model, loader)` where validate calls `model(x)`)."""
    handed = [a for a in site.node.args if _is_wrapped(ctx, dotted(a.value), site, models)]
    if not handed or any(a.star for a in site.node.args):
        return None
    resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
    if resolved is None:
        return None
    inner_facts, inner_path, function = resolved
    for argument in handed:
        param = parameter_for(site.node, inner_facts.functions[function].node, argument)
        if param is not None and _runs_forward(ctx, inner_facts, inner_path, function, param, HAND_ON_HOPS):
            return dotted(argument.value)
    return None


def _unmoved(value: cst.BaseExpression) -> cst.BaseExpression:
    """The module a chain of moves and switches returns (`model.to(device).eval()`: `model`);
    a module's `.to()`, `.cuda()`, `.eval()` return the module itself."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MODULE_RETURNS_ITSELF:
        value = value.func.value
    return value


def _runs_forward(ctx: LintContext, facts: ModuleFacts, path: Path, function: str, param: str, hops: int) -> bool:
    """`function` runs the forward pass of the model in its parameter `param`: it calls it (or
    its `forward`), or hands it on as it is to a project function that does (`evaluate(model,
    loader)` calling `extract_features(model, loader)`). A function that rebinds the parameter
    to anything but the same model moved (`model = model.module`) may run something else: no
    evidence."""
    if any(a.target == param and dotted(_unmoved(a.value)) != param for a in facts.assignments_within(function)):
        return False
    calls = facts.calls_within(function)
    if any(c.name in (param, f"{param}.forward") and not _single_process_only(ctx, facts, path, c) for c in calls):
        return True
    if hops <= 0:
        return False
    for c in calls:
        passed = [a for a in c.node.args if dotted(a.value) == param]
        if not passed or any(a.star for a in c.node.args):
            continue
        resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, c))
        if resolved is None:
            continue
        inner_facts, inner_path, inner = resolved
        for argument in passed:
            name = parameter_for(c.node, inner_facts.functions[inner].node, argument)
            if name is not None and _runs_forward(ctx, inner_facts, inner_path, inner, name, hops - 1):
                return True
    return False


def _forward_under_own_rank_test(
    ctx: LintContext, site: CallSite, models: dict[str, tuple[str, int]]
) -> tuple[str, Path, CallSite] | None:
    """The wrapped model a call hands to a function of another project module that runs its
    forward pass only on one side of its own rank tests (`test_and_eval(opts, model)` with `if opts.rank == 0: ...
    model(images)`): the model's name, and the first such forward call, in its module."""
    handed = [a for a in site.node.args if _is_wrapped(ctx, dotted(a.value), site, models)]
    if not handed or any(a.star for a in site.node.args):
        return None
    resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
    if resolved is None or resolved.facts is ctx.facts:
        return None  # (a function of this module: its forward pass is judged where it is)
    facts, path, function = resolved
    state = handed_state(ctx, site, ctx.facts, ctx.path, facts, function)

    def side(forward: CallSite) -> Kind | None:  # `if opts.rank == 0:`, read with the caller's `opts` too
        for condition in forward.conditions:
            kind = ctx.guards.condition_kind(condition, facts, path, forward.function)
            if kind in {MAIN, NOTMAIN}:
                return kind
            if state and gated_at_call(ctx, condition, state, site, ctx.facts, ctx.path):
                return MAIN
        return None

    for argument in handed:
        param = parameter_for(site.node, facts.functions[function].node, argument)
        if param is None or any(a.target == param for a in facts.assignments_within(function)):
            continue
        forwards = [c for c in facts.calls_within(function) if c.name in (param, f"{param}.forward")]
        # every forward pass on one side of the rank tests: with one on each side, every rank joins
        if forwards and len(sides := {side(f) for f in forwards}) == 1 and None not in sides:
            return dotted(argument.value) or param, path, forwards[0]
    return None


def _model_it_sees(ctx: LintContext, site: CallSite, models: dict[str, tuple[str, int]]) -> str | None:
    """The wrapped model a function of the module runs through a name it does not bind itself:
    a module global (`def estimate_loss(): ... model(x)`), its enclosing function's variable (a
    nested `def test(loader): ... model(x)`), or, for a method called on `self` by a method of
    its class, the object's attribute (`self.evaluate(loader)`, which runs `self.model(x)`)."""
    facts = ctx.facts
    function = ctx.guards.callee(site, facts)
    if function is None:
        return None
    own = set(facts.functions[function].params) | {a.target.split(".")[0] for a in facts.assignments_within(function)}
    cls = function.rpartition(".")[0]
    same_object = bool(cls) and site.name == f"self.{function.rpartition('.')[2]}" and site.function.rpartition(".")[0] == cls
    for inner in facts.calls_within(function):
        if inner.name is None:
            continue
        attribute = same_object and inner.name.count(".") == 1 and inner.name.startswith("self.")
        rebound = attribute and any(a.target == inner.name for a in facts.assignments_within(function))
        seen = attribute and not rebound or inner.name.split(".")[0] not in own
        if seen and _is_wrapped(ctx, inner.name, inner, models) and not _single_process_only(ctx, facts, ctx.path, inner):
            return inner.name
    return None


def _single_process_only(ctx: LintContext, facts: ModuleFacts, path: Path, site: CallSite) -> bool:
    """Only a run without distribution gets to the site (`else:` of the launch test, where
    `self.model.module(x)` is the distributed side): there is no other rank to wait for."""
    return any(ctx.guards.condition_kind(c, facts, path, site.function) == SINGLE for c in site.conditions)


def _model_in_attribute(ctx: LintContext, site: CallSite, models: dict[str, tuple[str, int]]) -> str | None:
    """The wrapped model a method runs through the object that keeps it (`runner.predict(x)`,
    where `runner = Runner(model)` stored the wrapped model as `self.net` in `__init__` and
    `predict` calls `self.net(x)`, or where `__init__` wraps it itself: `self.net = DDP(net)`):
    `runner.net`.

    Every binding of the object that reaches the call must construct that class (from the
    wrapped model, for an attribute bound from a constructor parameter), and the attribute must
    be bound nowhere but in `__init__`: an object that may hold something else is no evidence.
    """
    if site.name is None or site.name.count(".") != 1:
        return None
    facts = ctx.facts
    resolved = ctx.resolve_function(facts, ctx.path, site.name)
    if resolved is None or "." not in resolved.function:
        return None
    inner_facts, inner_path, method = resolved
    cls = method.rpartition(".")[0]
    init = inner_facts.functions.get(f"{cls}.__init__")
    obj = site.name.partition(".")[0]
    bindings = facts.reaching(obj, site.function, site.order, site.blocks)
    if init is None or not bindings:
        return None
    called = {
        inner.name for inner in inner_facts.calls_within(method) if not _single_process_only(ctx, inner_facts, inner_path, inner)
    }

    def runs(attribute: str) -> bool:  # `runner.net = runner.net.module` replaces it
        return bool({f"self.{attribute}", f"self.{attribute}.forward"} & called) and not facts.assigned(f"{obj}.{attribute}")

    attributes = _attributes_of(inner_facts, cls)
    forwarded = {a for a in attributes if runs(a)}
    own = {a for a in _wrapped_in_init(ctx, inner_facts, inner_path, cls) if runs(a)}
    for binding in bindings:
        construction = None if binding.element else _call_site(ctx, binding.value)
        built = ctx.resolve_function(facts, ctx.path, construction.name) if construction is not None else None
        if construction is None or built is None or built.facts is not inner_facts or built.function != f"{cls}.__init__":
            return None
        if any(a.star for a in construction.node.args):
            forwarded = set()  # which argument fills which parameter is unknown
            continue
        params = [p.name.value for p in call_parameters(construction.node, init.node)]
        handed = {
            a.keyword.value if a.keyword is not None else (params[i] if i < len(params) else None)
            for i, a in enumerate(construction.node.args)
            if _is_wrapped(ctx, dotted(a.value), construction, models)
        }
        forwarded = {a for a in forwarded if attributes[a] in handed}
    found = forwarded | own
    return f"{obj}.{min(found)}" if found else None


def _self_bindings(facts: ModuleFacts, cls: str) -> dict[str, list[Assignment]]:
    """attribute -> its bindings `self.<attribute> = ...` anywhere in the class."""
    bound: dict[str, list[Assignment]] = {}
    for a in facts.assignments_within(cls):
        if a.target.startswith("self.") and a.target.count(".") == 1:
            bound.setdefault(a.target[5:], []).append(a)
    return bound


def _wrapped_in_init(ctx: LintContext, facts: ModuleFacts, path: Path, cls: str) -> set[str]:
    """Attributes of a class bound only in its `__init__`, unconditionally, whose last binding
    there wraps the model (`self.encoder = DDP(self.encoder, device_ids=[gpu])`)."""
    init = f"{cls}.__init__"
    return {
        attr
        for attr, found in _self_bindings(facts, cls).items()
        if all(a.function == init and not a.conditions for a in found)
        and _wraps(ctx, facts, path, max(found, key=lambda a: a.order).value)
    }


def _attributes_of(facts: ModuleFacts, cls: str) -> dict[str, str]:
    """Attributes of a class bound only in its `__init__`, each to one parameter as it is
    (`self.net = network`) -> that parameter."""
    init = f"{cls}.__init__"
    params = facts.functions[init].params
    found = {}
    for attr, bindings in _self_bindings(facts, cls).items():
        values = {a.value.value if type(a.value) is cst.Name and a.function == init else None for a in bindings}
        if len(values) == 1 and (value := values.pop()) in params:
            found[attr] = value
    return found


def _call_site(ctx: LintContext, node: cst.BaseExpression) -> CallSite | None:
    """The recorded call site of a call node of the linted module."""
    key = "call sites by node"
    if key not in ctx.memo:
        ctx.memo[key] = {id(site.node): site for site in ctx.facts.calls}
    return ctx.memo[key].get(id(node))


def _met_by_the_others(ctx: LintContext, site: CallSite, communicating: list[tuple[CallSite, str]]) -> bool:
    """The ranks that do not take the site's rank branch meet its collective elsewhere: the
    same collective in the branch's `else`, or after it when the branch leaves (`if rank != 0:
    barrier(); return`, then `barrier()` for the ranks that went on), with the same loops
    around it and no other rank test."""
    guards, facts = ctx.guards, ctx.facts

    def rank_test(condition) -> bool:
        return guards.condition_kind(condition, facts, ctx.path, site.function) in {MAIN, NOTMAIN}

    tests = {id(c.test) for c in site.conditions if not c.negated and rank_test(c)}
    for other, _ in communicating:
        if other is site or other.name != site.name or other.function != site.function or other.loops != site.loops:
            continue
        complement = {id(c) for c in other.conditions if c.negated and id(c.test) in tests}
        if complement and not any(rank_test(c) for c in other.conditions if id(c) not in complement):
            return True
    return False


def _run_by_the_others(ctx: LintContext, site: CallSite, side: Kind) -> bool:
    """The other side of the rank test runs the same function of the module, called or handed
    to a library (`if master: study.optimize(self.objective)` / `else: self.objective(None)`,
    Optuna's distributed trials): every rank reaches its collectives."""
    mine = _runs_functions(ctx, site)
    return bool(mine) and any(
        other is not site and _side(ctx, other) == OPPOSITE[side] and _runs_functions(ctx, other) & mine
        for other in ctx.facts.calls_in(site.function)
    )


def _runs_functions(ctx: LintContext, site: CallSite) -> set[str]:
    """The functions of the module a call runs: the one it calls, and those it is handed
    (`study.optimize(self.objective)` on the main rank, `self.objective(None)` on the others:
    both sides run the objective's collectives)."""
    facts = ctx.facts
    named = [ctx.method_target(facts, site), *(dotted(a.value) for a in site.node.args)]
    found = {LintContext.member_name(facts, name, site.function) for name in named if name}
    return {name for name in found if name in facts.functions}


def _in_rank_branches(ctx: LintContext) -> list[tuple[CallSite, str, str]]:
    """The collectives and forward passes of the wrapped model in the module that only some ranks
    reach: (the site, what it runs, the fix). Memoised per module: a script asks it of the
    project modules it calls."""
    key = "DDP401 rank branches"
    if key not in ctx.memo:
        ctx.memo[key] = list(_find_in_rank_branches(ctx))
    return ctx.memo[key]


def _find_in_rank_branches(ctx: LintContext) -> Iterator[tuple[CallSite, str, str]]:
    guards = ctx.guards
    models = _wrapped_models(ctx)
    communicating = []
    for site in ctx.facts.calls:
        if _is_wrapped(ctx, site.name, site, models):
            communicating.append((site, f"forward pass of the wrapped model '{site.name}'"))
        elif (
            handed := _forwarded_model(ctx, site, models)
            or _model_in_attribute(ctx, site, models)
            or _model_it_sees(ctx, site, models)
        ) is not None:
            what = f"{callee_text(site.node)}() (it runs the forward pass of the wrapped model '{handed}')"
            communicating.append((site, what))
        elif Effect.COLLECTIVE in ctx.summaries.effects(site):
            direct = Effect.COLLECTIVE in direct_effects(site, ctx.facts)
            what = (site.name or "") if direct else f"{callee_text(site.node)}() (it runs a collective)"
            communicating.append((site, what))
    sides = {id(site): _side(ctx, site) for site, _ in communicating}
    branches: set[tuple] = set()  # the forward passes of one branch are one mistake, told at the first
    forwards: list[CallSite] = []  # the forward passes told
    # functions of the module whose own forward pass is under a rank test: reported there, not
    # again at the calls of the function (`if master: self.estimate_loss()` where
    # estimate_loss returns early on the other ranks)
    inside = {
        site.function
        for site, what in communicating
        if what.startswith("forward pass") and sides[id(site)] is not None and guards.rank_conditional(site)
    }
    for site, what in communicating:
        forward = "forward pass" in what
        side = sides[id(site)]
        if side is None or not guards.rank_conditional(site) or never_runs(ctx.facts, site):
            continue
        if forward and not what.startswith("forward pass") and ctx.method_target(ctx.facts, site) in inside:
            continue
        if _single_process_only(ctx, ctx.facts, ctx.path, site):
            continue  # only a run without distribution gets there: no other rank to wait for
        paired = any(
            other.name == site.name
            and other is not site
            and other.function == site.function
            and sides[id(other)] == OPPOSITE[side]
            for other, _ in communicating
        )
        if paired or _met_by_the_others(ctx, site, communicating) or _run_by_the_others(ctx, site, side):
            continue  # `if rank == 0: barrier()` matched by `if rank != 0: barrier()`, or where the others go on
        if forward:  # DDP syncs buffers (and, in training, gradients) with the other ranks
            branch = (site.function, tuple(id(c.test) for c in site.conditions), tuple(id(loop) for loop in site.loops))
            # (or nested later in a branch already told: the run hangs at the first)
            if branch in branches or any(dominates(told, site) for told in forwards):
                continue
            branches.add(branch)
            forwards.append(site)
            model = site.name if what.startswith("forward pass") else what.rsplit("'", 2)[-2]
            fix = f"evaluate on one rank with the unwrapped model ('{model}.module') or run it on every rank"
        else:
            fix = "call it on every rank, outside the rank check"
        yield site, what, fix


def _helper_in_rank_branch(ctx: LintContext, site: CallSite) -> tuple[Path, cst.CSTNode, str, str] | None:
    """A function of another project module that the call enters, which runs a collective or a
    forward pass of the model it wraps inside its own rank test (`trainer.train(loader)` whose
    `if dist.get_rank() == 0: self.evaluate(model)` runs the DDP model on rank 0 only): where,
    what it runs, and the fix."""
    callee = ctx.callee_module(site)
    if callee is None:
        return None
    helper, resolved = callee
    for inner, what, fix in _in_rank_branches(helper):
        if inner.function == resolved.function:
            return resolved.path, inner.node, what, fix
    return None


def _side(ctx: LintContext, site: CallSite) -> Kind | None:
    """MAIN or NOTMAIN: which ranks the site's conditions let through."""
    for condition in site.conditions:
        kind = ctx.guards.condition_kind(condition, ctx.facts, ctx.path, site.function)
        if kind in {MAIN, NOTMAIN}:
            return kind
    return MAIN if ctx.guards.rank_conditional(site) else None


class CollectiveInRankBranch(Rule):
    """Finds a collective inside a branch that only some ranks take, which hangs the job."""

    code = "DDP401"
    severity = Severity.ERROR

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        guards = ctx.guards
        models = _wrapped_models(ctx)
        for site, what, fix in _in_rank_branches(ctx):
            yield Finding(
                site.node,
                f"{what} runs only on some ranks (inside a rank-dependent branch): the other ranks "
                f"never join its collectives and the job hangs or mismatches later ones; {fix}",
            )
        told: set[int] = set()  # a helper's mistake, told at the first call that reaches it
        for site in sorted(ctx.facts.calls, key=lambda s: guards.run_order(ctx.facts, s)):
            if guards.rank_conditional(site) or never_runs(ctx.facts, site):
                continue  # (a call in a rank branch is judged above)
            if any(guards.condition_kind(c, ctx.facts, ctx.path, site.function) == SINGLE for c in site.conditions):
                continue  # a run without distribution
            inner = _helper_in_rank_branch(ctx, site)
            if inner is not None:
                path, node, what, fix = inner
                if id(node) in told:
                    continue
                told.add(id(node))
                yield Finding(
                    site.node,
                    f"{callee_text(site.node)}() runs {what} only on some ranks (inside its own rank-dependent "
                    f"branch): the other ranks never join its collectives and the job hangs or mismatches later ones; {fix}",
                    inside=(Inside(path, node, f"{what} here, under a rank test"),),
                )
                continue
            found = _forward_under_own_rank_test(ctx, site, models)
            if found is not None:
                model, path, first = found
                yield Finding(
                    site.node,
                    f"{callee_text(site.node)}() runs the forward pass of the wrapped model '{model}' only on some "
                    "ranks (inside its own rank-dependent branch): the other ranks never join its collectives "
                    f"and the job hangs or mismatches later ones; evaluate with the unwrapped model ('{model}.module') "
                    "there or run it on every rank",
                    inside=(Inside(path, first.node, "the forward pass runs here, under a rank test"),),
                )
