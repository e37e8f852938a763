"""DDP303: torch.load without map_location puts every rank's copy on the GPU it was saved from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint import constants
from ddplint.lint.caller_state import built_objects, gated_at_call, handed_state
from ddplint.lint.context import LintContext
from ddplint.lint.devices import visible_devices_per_rank
from ddplint.lint.facts import CallSite, ModuleFacts
from ddplint.lint.helpers import ask_helper
from ddplint.lint.names import (
    arg,
    callee_text,
    dotted,
    has_star_kwargs,
    names_in,
    parameter_for,
    reference,
    with_argument,
)
from ddplint.lint.paths import exclusive, never_runs
from ddplint.lint.rules.base import Finding, Inside, Remedy, Replace, Rule
from ddplint.lint.vocabulary import LR_SCHEDULERS, WRAPPERS
from ddplint.lint.writes import OUTSIDE_TRAINER, called_from


class LoadWithoutMapLocation(Rule):
    """Finds torch.load without map_location in a distributed script."""

    code = "DDP303"
    severity = Severity.ERROR
    beside_frameworks = OUTSIDE_TRAINER

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        found = list(self._loads(ctx))
        # each process that sees only its own GPU maps "cuda:0" to a different GPU (asked last:
        # it follows every helper)
        if found and not visible_devices_per_rank(ctx):
            yield from found

    def _loads(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        # a helper's load, reported at the first call that reaches it in each run (`if args.eval:
        # resume(path, model); return` and a later `resume(path, model, optimizer)` are two runs)
        reported: dict[int, list[CallSite]] = {}
        for site in sorted(facts.calls, key=lambda s: ctx.guards.run_order(facts, s)):
            if site.name == "torch.load":
                continue
            inside = _helper_loads(ctx, site, facts, ctx.path, top=True)
            if inside is None or not all(exclusive(site, other) for other in reported.get(id(inside.node), ())):
                continue
            if not ctx.guards.main_only(site) and not never_runs(facts, site):
                reported.setdefault(id(inside.node), []).append(site)
                yield Finding(
                    site.node,
                    f"{callee_text(site.node)}() restores a checkpoint with torch.load and no map_location "
                    "on every rank: each puts the tensors back on the GPU they were saved from (all on GPU 0: "
                    "out of memory); pass map_location='cpu' or map_location=f'cuda:{local_rank}' in it",
                    inside=(inside,),
                )
        for site in facts.calls_to("torch.load"):
            call = site.node
            if not _bare_restore(ctx, site, facts, ctx.path) or ctx.guards.main_only(site) or never_runs(facts, site):
                continue
            yield Finding(
                call,
                "torch.load without map_location: every rank puts the checkpoint's tensors back on the "
                "GPU they were saved from (all on GPU 0: out of memory); pass map_location='cpu' or "
                "map_location=f'cuda:{local_rank}'",
                # unsafe: code that uses the loaded tensors before moving them now gets CPU tensors
                None
                if any(a.star for a in call.args)
                else Remedy(
                    'pass map_location="cpu"',
                    Replace(call, with_argument(call, "map_location", 1, cst.SimpleString('"cpu"'))),
                    safe=False,
                ),
                inside=called_from(ctx, site),  # in a function of this module: where every rank calls it
            )


def _bare_restore(ctx: LintContext, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
    """torch.load without map_location whose result goes into a model or optimizer, or is the
    model itself (a whole pickled module)."""
    call = site.node
    if arg(call, 1, "map_location") is not None or has_star_kwargs(call):
        return False
    key = (id(facts), "restoring names")
    if key not in ctx.memo:
        ctx.memo[key] = _restoring_names(ctx, facts, path)
    return _restores(ctx, site, facts, path, ctx.memo[key]) or _loads_module(ctx, site, facts, path)


def _helper_loads(ctx: LintContext, site: CallSite, facts: ModuleFacts, path: Path, top: bool = False) -> Inside | None:
    """The torch.load without map_location, outside any rank test, that restores a checkpoint in
    the function of another project module the site calls (followed through its helpers), in a
    branch the call's constant arguments do not rule out (`get_networks(cfg)` leaves
    `load_checkpoint=False`: its `if load_checkpoint:` block stays dark)."""
    resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, site))
    built = built_objects(ctx, site, facts, path) if resolved is not None else {}
    bindings = constants.bind_call(site.node, resolved.facts, resolved.function, built) if resolved is not None else {}
    handed = handed_state(ctx, site, facts, path, resolved.facts, resolved.function) if resolved is not None else {}

    def answer(inner_facts: ModuleFacts, inner_path: Path, function: str) -> Inside | None:
        return next(
            (
                found
                for inner in inner_facts.calls_within(function)
                if not ctx.guards.guarded_here(inner, inner_facts, inner_path)
                and not (handed and any(gated_at_call(ctx, c, handed, site, facts, path) for c in inner.conditions))
                and not never_runs(inner_facts, inner)
                and not constants.dark(inner.conditions, bindings)
                and (
                    found := (
                        Inside(inner_path, inner.node, "torch.load() without map_location here, on every rank")
                        if _bare_restore(ctx, inner, inner_facts, inner_path)
                        else None
                    )
                    if inner.name == "torch.load"
                    else _helper_loads(ctx, inner, inner_facts, inner_path)
                )
                is not None
            ),
            None,
        )

    state = tuple(sorted((name, id(value)) for name, value in handed.items()))
    return ask_helper(ctx, site, facts, path, ("loads without map_location", constants.key(bindings), state), answer, None, top)


def _a_scheduler(ctx: LintContext, facts: ModuleFacts, path: Path, call: CallSite) -> bool:
    """`scheduler.load_state_dict(...)` of a learning-rate scheduler: every binding of the receiver
    in reach builds one (`scheduler = get_linear_schedule_with_warmup(optimizer, ...)`), also
    through a function of the project that returns one (a copy of that function returning
    `LambdaLR(...)`). Its state holds no tensors, so no GPU is involved."""
    receiver = call.name.rpartition(".")[0] if call.name else ""
    bindings = [b for b in facts.assigned(receiver) if b.function == call.function or "." in receiver] if receiver else []
    return bool(bindings) and all(type(b.value) is cst.Call and _builds_scheduler(ctx, facts, path, b.value) for b in bindings)


def _builds_scheduler(ctx: LintContext, facts: ModuleFacts, path: Path, call: cst.Call, hops: int = 1) -> bool:
    """The call builds a learning-rate scheduler of torch or transformers, itself or through a
    project function whose every return does."""
    callee = facts.callee(call)
    if callee is None:
        return False
    if LR_SCHEDULERS.fullmatch(callee) is not None:
        return True
    resolved = ctx.resolve_function(facts, path, callee) if hops else None
    if resolved is None:
        return False
    inner_facts, inner_path, function = resolved
    returns = inner_facts.functions[function].returns if function in inner_facts.functions else ()
    return bool(returns) and all(
        type(r) is cst.Call and _builds_scheduler(ctx, inner_facts, inner_path, r, hops - 1) for r in returns
    )


def _restoring_names(ctx: LintContext, facts: ModuleFacts, path: Path) -> dict[str, set[str]]:
    """Names mentioned in the arguments of `load_state_dict(...)` calls, and the dicts they are
    filled from: `model_dict.update(pretrained)`, `state = {k[7:]: v for k, v in ckpt.items()}`,
    `state = ckpt["model"]`; each with the functions it is read in there. A local name is the
    same variable only in its own function (and the functions nested in it)."""
    out: dict[str, set[str]] = {}
    frontier: list[tuple[str, str]] = []

    def add(name: str, function: str) -> None:
        if function not in out.setdefault(name, set()):
            out[name].add(function)
            frontier.append((name, function))

    for site in facts.calls:
        if site.method == "load_state_dict" and not _a_scheduler(ctx, facts, path, site):
            for a in site.node.args:
                for name in names_in(a.value):
                    add(name, site.function)
    updates: dict[str, list[tuple[str, set[str]]]] = {}  # container -> (function, what fills it)
    for site in facts.calls:
        if site.method == "update" and site.name and site.node.args:
            updates.setdefault(site.name.rsplit(".", 1)[0], []).append((site.function, _filled_from(site.node.args[0].value)))
    for store in facts.item_stores:  # `for k, v in ckpt.items(): state[k[7:]] = v`
        updates.setdefault(store.container, []).append((store.function, _filled_from(store.value)))
    while frontier:
        name, function = frontier.pop()
        for where, sources in updates.get(name, ()):
            if _same_variable(name, where, function):
                for source in sources:
                    add(source, where)
        for binding in facts.assigned(name):  # (a loop's `v` is filled from `ckpt.items()`)
            if _same_variable(name, binding.function, function):
                for source in _filled_from(binding.value):
                    add(source, binding.function)
    return out


def _same_variable(name: str, bound_in: str, read_in: str) -> bool:
    """A name bound in one function and read in another is the same variable: an attribute, a
    module-level name, or a local of an enclosing function."""
    return "." in name or bound_in in ("", read_in) or read_in.startswith(bound_in + ".")


def _filled_from(value: cst.BaseExpression) -> set[str]:
    """The dict a value copies or filters: a name, one of its entries (`ckpt["model"]`,
    `ckpt.pop("model")`, `ckpt.get("model")`), a comprehension over it."""
    if type(value) is cst.DictComp:
        value = value.for_in.iter
    if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in {"items", "copy", "pop", "get"}:
        value = value.func.value
    name = reference(value) if type(value) in (cst.Name, cst.Attribute, cst.Subscript) else None
    if name is None and type(value) is cst.Subscript:
        name = reference(value.value) if type(value.value) in (cst.Name, cst.Attribute) else None
    return {name} if name is not None else set()


def _restores(ctx: LintContext, site: CallSite, facts: ModuleFacts, path: Path, restores: dict[str, set[str]]) -> bool:
    """The loaded object is a checkpoint that goes into a model or optimizer, directly or by a
    key of it (`optimizer.load_state_dict(torch.load(path)["optimizer"])`)."""
    for outer in facts.calls:
        if outer.method == "load_state_dict" and any(_unkeyed(a.value) is site.node for a in outer.node.args):
            return not _a_scheduler(ctx, facts, path, outer)
    bindings = [*facts.bindings_of(site.node)]
    bindings += [a for a in facts.assignments if type(a.value) is cst.Subscript and a.value.value is site.node]
    return any(
        any(_same_variable(b.target, b.function, read) for read in restores.get(b.target, ()))
        # `checkpoint["model"]` read into a model: that function's own `checkpoint` only
        or any(
            r.startswith(b.target + ".") and any(_same_variable(b.target, b.function, f) for f in functions)
            for r, functions in restores.items()
        )
        for b in bindings
    )


def _unkeyed(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`ckpt["state"]["model"]` -> `ckpt`."""
    while type(expr) is cst.Subscript:
        expr = expr.value
    return expr


# Methods of an nn.Module that neither a tensor nor a state dict has: the object is a model.
MODULE_METHODS = frozenset(
    {
        "eval",
        "train",
        "parameters",
        "named_parameters",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "buffers",
        "named_buffers",
    }
)


def _loads_module(ctx: LintContext, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
    """`model = torch.load(path)`: the loaded object is a whole pickled model, because the name
    (or one rebound from it in the same function, `model = model.to(rank)`) is then used as a
    module: wrapped in DDP/FSDP, called, or asked for what only a module has (`.eval()`,
    `.parameters()`), here or in the project function it is handed to (`evaluate(loader,
    model)` whose `model.eval()` runs). `.to()`/`.cuda()` alone prove nothing: a tensor has
    them too. With `weights_only=True` no module can come back."""
    weights_only = arg(site.node, None, "weights_only")
    if isinstance(weights_only, cst.Name) and weights_only.value == "True":
        return False
    loaded = facts.bindings_of(site.node)
    names = {b.target for b in loaded}
    for use in facts.calls_in(site.function):
        if use.order <= site.order:
            continue
        receiver = use.name.rpartition(".")[0] if use.name and use.method in MODULE_METHODS else None
        wrapped = dotted(arg(use.node, 0, "module")) if use.name in WRAPPERS else None
        handed = {n for a in use.node.args if (n := reference(a.value)) is not None} & names
        for name in names & {receiver, wrapped, use.name} | {n for n in handed if _used_as_module(ctx, facts, path, use, n)}:
            if _holds_loaded(facts, name, use, loaded, set()):
                return True
    return False


def _used_as_module(ctx: LintContext, facts: ModuleFacts, path: Path, use: CallSite, name: str) -> bool:
    """The project function `use` calls receives `name` in a parameter that it calls, or asks
    for what only a module has (`def evaluate(loader, model): model.eval()`)."""
    resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, use))
    if resolved is None:
        return False
    definition = resolved.facts.functions[resolved.function].node
    params = {parameter_for(use.node, definition, a) for a in use.node.args if reference(a.value) == name} - {None}
    return any(
        inner.name in params or inner.method in MODULE_METHODS and inner.name.rpartition(".")[0] in params
        for inner in resolved.facts.calls_in(resolved.function)
        if inner.name is not None
    )


def _holds_loaded(facts: ModuleFacts, name: str, at, loaded: list, seen: set[int]) -> bool:
    """`name` at `at` may hold what the load bound, directly or through rebindings of the name
    made from itself (`model = convert_sync_batchnorm(model).to(rank)`)."""
    reaching = facts.reaching(name, at.function, at.order, at.blocks)
    node = getattr(at, "node", None)
    own = [b for b in reaching if node is not None and _contains(b.value, node)]
    if own:  # `model = DDP(model)`: the use inside a binding's own value sees the ones before it
        reaching = facts.reaching(name, own[0].function, own[0].order, own[0].blocks)
    for binding in reaching:
        if id(binding) in seen:
            continue
        seen.add(id(binding))
        if any(binding is b for b in loaded):
            return True
        mentioned = names_in(binding.value)
        derived = any(n == name or n.startswith(f"{name}.") for n in mentioned)
        if derived and _holds_loaded(facts, name, binding, loaded, seen):
            return True
    return False


def _contains(expr: cst.CSTNode, node: cst.CSTNode | None) -> bool:
    stack = [expr]
    while stack and node is not None:
        current = stack.pop()
        if current is node:
            return True
        stack.extend(current.children)
    return False
