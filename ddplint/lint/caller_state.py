"""What the objects a call hands to a helper of another module hold, in the caller's terms.

A trainer or logger class keeps the rank it was built with (`GpuLogger(dist_id=dist_rank)`
keeps `self.dist_id = dist_id`) and a helper of another module gates its writes on it
(`if log.dist_id == 0: torch.save(...)`). Inside the helper the attribute is just an attribute;
at the call it is the caller's `dist_rank`. A test of the helper that reads such attributes is
read again with the caller's expressions in their place, where the caller's roles and launch
tests are known: `dist_rank == 0` holds on the main process only.

A parameter the helper tests itself (`def split(seed, device): ... if device == 0:
json.dump(...)`) is read the same way, with the argument the call gives it, unless the helper
rebinds it. Of an object, only a constructor argument kept as it is (`self.x = x` in
`__init__`, `self.x = kwargs["x"]` of its keywords, or in the base's `__init__` that a
constructor of `*args, **kwargs` hands them on to; a field of a `@dataclass`) is followed; the object must be built once
before the call, in the caller's function.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from ddplint.lint import constants
from ddplint.lint.facts import CallSite, Condition, ModuleFacts, super_method
from ddplint.lint.guards import NOT_MAIN_WORLD
from ddplint.lint.names import argument_for, dotted, names_in, parameter_for, reference, string_value

if TYPE_CHECKING:
    from ddplint.lint.context import LintContext

Handed = dict[str, cst.BaseExpression]  # "log.dist_id" in the helper -> the caller's expression


def handed_state(ctx: LintContext, site: CallSite, facts: ModuleFacts, path: Path, inner: ModuleFacts, function: str) -> Handed:
    """The parameters the call fills (those the helper never rebinds) and the attributes of the
    objects it hands over (its arguments by name, its receiver as `self`, the object a
    constructor builds as `self`), as the caller's expressions."""
    definition = inner.functions[function].node
    handed: Handed = {}
    for a in site.node.args:
        if a.star:
            break
        param = parameter_for(site.node, definition, a)
        if param is not None and not inner.by_scope.get((function, param)):
            handed[param] = a.value  # `divide(device=rank)`, then `if device == 0:` there
        if param is not None and type(a.value) is cst.Name:
            built = _built_before(facts, site, a.value.value)
            for attribute, value in _kept(ctx, built, facts, path).items() if built is not None else ():
                handed[f"{param}.{attribute}"] = value
    func = site.node.func
    if definition.name.value == "__init__":
        kept = _kept(ctx, site.node, facts, path)
    elif type(func) is cst.Attribute and type(func.value) is cst.Name:
        built = _built_before(facts, site, func.value.value)
        kept = _kept(ctx, built, facts, path) if built is not None else {}
    else:
        kept = {}
    handed.update({f"self.{attribute}": value for attribute, value in kept.items()})
    return handed


def built_objects(ctx: LintContext, site: CallSite, facts: ModuleFacts, path: Path) -> constants.Bindings:
    """The names the call hands over that hold, at the call, an object a class of the project
    built (`scaler = NativeScaler()`, then `save_model(..., scaler)`): never None, so a helper's
    `if scaler is not None:` is taken and its `else:` dark (constants.BUILT)."""
    found: constants.Bindings = {}
    for a in site.node.args:
        name = reference(a.value) if type(a.value) in (cst.Name, cst.Attribute) else None
        if name is None or name in found:
            continue
        reaching = facts.reaching(name, site.function, site.order, site.blocks)
        if reaching and all(_constructs(ctx, b.value, facts, path) and not b.element and b.position is None for b in reaching):
            found[name] = constants.BUILT
    return found


def _constructs(ctx: LintContext, value: cst.BaseExpression, facts: ModuleFacts, path: Path) -> bool:
    if type(value) is not cst.Call:
        return False
    resolved = ctx.resolve_function(facts, path, facts.qualify(dotted(value.func)), constructors=True)
    return resolved is not None and resolved.function.endswith(".__init__")


def _built_before(facts: ModuleFacts, site: CallSite, name: str) -> cst.Call | None:
    """The call whose result `name` holds at the site: its one reaching binding, a call."""
    reaching = facts.reaching(name, site.function, site.order, site.blocks)
    if len(reaching) != 1 or reaching[0].element:
        return None
    value = reaching[0].value
    return value if type(value) is cst.Call else None


def _kept(ctx: LintContext, call: cst.Call, facts: ModuleFacts, path: Path, cls: str | None = None, hops: int = 2) -> Handed:
    """The constructor arguments a project class (`cls`, else the one the call names) keeps as
    they are, by attribute name."""
    name = cls or dotted(call.func)
    resolved = ctx.resolve_function(facts, path, f"{facts.qualify(name) or name}.__init__") if name else None
    if any(a.star for a in call.args):
        return {}
    if resolved is None and name:
        return _dataclass_fields(ctx, call, facts, path, name)
    if resolved is None or not resolved.function.endswith(".__init__"):
        return {}
    inner, inner_path, init = resolved
    definition = inner.functions[init].node
    kept: Handed = {}
    for b in inner.assignments_within(init):
        if b.function != init or b.target.count(".") != 1 or not b.target.startswith("self."):
            continue
        param = b.value.value if type(b.value) is cst.Name else _keyword_taken(b.value, definition)
        value = argument_for(call, definition, param) if param is not None else None
        if value is not None:
            kept.setdefault(b.target[5:], value)
    if hops and _hands_everything_on(definition):
        for site in inner.calls_in(init):
            base = super_method(inner, site)
            if base is not None:
                kept = {**_kept(ctx, call, inner, inner_path, base.rpartition(".")[0], hops - 1), **kept}
    return kept


def _dataclass_fields(ctx: LintContext, call: cst.Call, facts: ModuleFacts, path: Path, name: str) -> Handed:
    """A @dataclass of the project keeps each argument as the field of its name or position
    (`EngineConfig(..., is_master_process=is_master_process)`)."""
    fields = facts.dataclass_fields.get(name)
    if fields is None:
        found = ctx.project.resolve(path, facts.qualify(name) or name)
        fields = found.facts.dataclass_fields.get(found.attr) if found is not None and found.attr else None
    if fields is None:
        return {}
    positional = [a.value for a in call.args if a.keyword is None]
    kept: Handed = dict(zip(fields, positional, strict=False))
    kept.update({a.keyword.value: a.value for a in call.args if a.keyword is not None and a.keyword.value in fields})
    return kept


def _keyword_taken(value: cst.BaseExpression, definition: cst.FunctionDef) -> str | None:
    """`kwargs["gpu_index"]` in `def __init__(self, **kwargs)`: the keyword argument it takes."""
    star = definition.params.star_kwarg
    if type(value) is not cst.Subscript or not isinstance(star, cst.Param) or dotted(value.value) != star.name.value:
        return None
    index = value.slice[0].slice if len(value.slice) == 1 else None
    return string_value(index.value) if type(index) is cst.Index else None


def _hands_everything_on(definition: cst.FunctionDef) -> bool:
    """`def __init__(self, *args, **kwargs): super().__init__(*args, **kwargs)`."""
    params = definition.params
    return isinstance(params.star_arg, cst.Param) and params.star_kwarg is not None


class _Replace(cst.CSTTransformer):
    def __init__(self, handed: Handed) -> None:
        self.handed = handed
        self.not_read: set[int] = set()  # names that are no value: `x.device`'s attribute, `f(device=...)`'s keyword

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.not_read.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.not_read.add(id(node.keyword))

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return self.handed.get(dotted(original) or "", updated)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return updated if id(original) in self.not_read else self.handed.get(original.value, updated)


def replaced(memo: dict, expr: cst.BaseExpression, handed: Handed) -> cst.BaseExpression:
    """`expr` with the caller's expressions in place of what it reads of `handed`; one copy per
    expression and hand-over, kept alive in `memo` (the guards memoise by node identity)."""
    key = ("caller's test", id(expr), tuple(sorted((k, id(v)) for k, v in handed.items())))
    if key not in memo:
        memo[key] = expr.visit(_Replace(handed))
    return memo[key]


def gated_at_call(
    ctx: LintContext, condition: Condition, handed: Handed, caller: CallSite, facts: ModuleFacts, path: Path
) -> bool:
    """The helper's branch, read with the caller's expressions, is taken by no rank but the
    main one (or a run without distribution)."""
    names = names_in(condition.test)
    if not any(name == key or name.startswith(key + ".") for name in names for key in handed):
        return False  # (`self.cfg.GPU_ID` reads the handed `self.cfg`)
    true, false = ctx.guards.worlds(replaced(ctx.memo, condition.test, handed), facts, path, caller.function)
    side = false if condition.negated else true
    return bool(side) and NOT_MAIN_WORLD not in side
