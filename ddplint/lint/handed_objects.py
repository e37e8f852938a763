"""What a project helper sets on the objects it is handed, as bindings of its caller.

Research code fills a configuration object in helpers: `init_dist(args, cfg)` sets
`args.gpu = args.local_rank`, `load_cfg(args, cfg)` copies `cfg.RANK_ID = args.gpu` and
`cfg.DISTRIBUTED = args.distributed`, `setup(args)` raises `args.log = True` under `if
args.rank % n == 0:`. After such a call the caller's `cfg.RANK_ID` holds its
`args.local_rank`, `if cfg.DISTRIBUTED:` is its launch test and `if args.log:` lets the first
process of each machine through. The helper's bindings of an attribute of a parameter, from (an
attribute of) a parameter, a flag or a test of those, are replayed at the call with the
caller's names and the helper's tests around them, also through one helper it hands the
object on to (see `_Renamer` for why only these). A binding from anything else
(`args.rank = int(os.environ["RANK"])`) is not replayed; it only tells the caller that what
it knew of that attribute no longer holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from ddplint.lint.facts import Assignment, Condition, ModuleFacts, process_index_parameter, returned_role
from ddplint.lint.names import argument_for, computed_test, parameter_for, reference, string_value
from ddplint.lint.roles import FIELD_ROLES, RANKS, Role

if TYPE_CHECKING:
    from ddplint.lint.context import LintContext
    from ddplint.lint.paths import Event
    from ddplint.lint.resolver import Resolved


def with_handed_bindings(ctx: LintContext) -> ModuleFacts:
    """The linted module's facts with the bindings its calls of project functions make on the
    objects they hand over, and with the process index of each function it hands a project
    helper that passes it on to mp.spawn (`run_mp(train, n)`: train's first parameter is the
    local rank), as mp.spawn called here gives it (a copy; the facts other files share stay as
    they are), and with the roles of what it imports from the project."""
    facts = ctx.facts
    replayed: list[Assignment] = []
    kept: dict[tuple[str, str], Role] = {}
    for site in facts.calls:
        if not site.name or not any(type(a.value) is cst.Name for a in site.node.args):
            continue  # hands over no object by name
        resolved = ctx.resolve_function(facts, ctx.path, site.name)
        if resolved is None or "." in resolved.function:
            continue  # a plain function: a method's first parameter is the object it runs on
        handed = _handed(site.node, resolved.facts, resolved.function, {})
        for target, value, conditions in _replayed(ctx, resolved, handed, HANDED_ON):
            replayed.append(
                Assignment(target, value, site.function, site.order, site.conditions + conditions, site.loops, site.blocks)
            )
        for target, role in _roles_set(resolved, handed).items():
            if (site.function, target) not in facts.roles:
                kept[(site.function, target)] = role
    indexes = {
        (target, index): Role.LOCAL_RANK
        for target in ctx.spawned_through_helpers()
        if (index := process_index_parameter(facts, target)) is not None and (target, index) not in facts.roles
    }
    roles = {**_imported_roles(ctx), **_helper_returns(ctx), **_returned_fields(ctx), **kept, **indexes}
    return facts.with_bindings(replayed, roles) if replayed or roles else facts


def _roles_set(resolved: Resolved, handed: dict[str, str]) -> dict[str, Role]:
    """What the helper makes attributes of the objects it is handed hold, in the caller's names,
    where every binding of the attribute there gives it the same role: `args.rank =
    int(os.environ["RANK"])` makes the caller's `args.rank` the global rank."""
    facts, _, function = resolved
    roles: dict[str, set[Role | None]] = {}
    for target, binding in _attribute_bindings(facts, function, handed):
        roles.setdefault(target, set()).add(facts.role_of(binding.value, function))
    return {target: role for target, found in roles.items() if len(found) == 1 and (role := next(iter(found))) is not None}


def _attribute_bindings(facts: ModuleFacts, function: str, handed: dict[str, str]) -> list[tuple[str, Assignment]]:
    """The function's own bindings of an attribute of an object it is handed (`args.gpu = ...`),
    each with its target in the caller's names."""
    found = []
    for binding in facts.assignments_within(function):
        owner, _, attribute = binding.target.partition(".")
        if binding.function == function and not binding.element and owner in handed and attribute and "." not in attribute:
            found.append((f"{handed[owner]}.{attribute}", binding))
    return found


def _imported_roles(ctx: LintContext) -> dict[tuple[str, str], Role]:
    """The roles of the names the module imports from a project module that binds them at its
    top level (`from dist_env import RANK` where dist_env.py reads `RANK` from the environment)."""
    facts, roles = ctx.facts, {}
    called = {c.name.partition(".")[0] for c in facts.calls if c.name}
    for local, qualified in facts.imports.items():
        # only a name read as a value: looking up the functions, classes and modules the
        # module calls would parse every project module it imports, needed or not
        if local not in facts.names_read or local in called or ("", local) in facts.roles:
            continue
        for located in ctx.through_reexports(ctx.path, qualified):
            if located.attr and ("", located.attr) in located.facts.roles:
                roles[("", local)] = located.facts.roles[("", located.attr)]
                break
    return roles


def _helper_returns(ctx: LintContext) -> dict[tuple[str, str], Role]:
    """The rank a name holds that its one binding takes from a function of another project
    module returning it (`world_rank = utils.get_world_rank()` where that returns
    `dist.get_rank()`; `rank, world = setup()`, a place of the tuple it returns)."""
    facts, roles = ctx.facts, {}
    for a in facts.assignments:
        if type(a.value) is not cst.Call or a.element and a.position is None or "." in a.target:
            continue
        if (a.function, a.target) in facts.roles or len(facts.by_scope.get((a.function, a.target), ())) != 1:
            continue
        callee = facts.callee(a.value)
        resolved = ctx.resolve_function(facts, ctx.path, callee) if callee and callee not in facts.functions else None
        if resolved is None or resolved.facts is facts:
            continue
        role = returned_role(resolved.facts, resolved.function, a.position)
        if role in RANKS:
            roles[(a.function, a.target)] = role
    return roles


def _returned_fields(ctx: LintContext) -> dict[tuple[str, str], Role]:
    """The roles of the fields of a record that a function of another project module builds and
    returns (`return Runtime(device=device, leader=rank == 0, shard=rank)`, or a dict literal
    with those keys), as the caller's attributes of the name it binds it to: after `rt =
    start()`, `rt.leader` is the main-process flag and `rt.shard` the global rank. A field whose
    value differs in role between the function's returns is left unknown."""
    facts, roles = ctx.facts, {}
    for a in facts.assignments:
        if type(a.value) is not cst.Call or a.element or a.position is not None or "." in a.target:
            continue
        if len(facts.by_scope.get((a.function, a.target), ())) != 1:
            continue
        callee = facts.callee(a.value)
        resolved = ctx.resolve_function(facts, ctx.path, callee) if callee and callee not in facts.functions else None
        if resolved is None or resolved.facts is facts:
            continue
        for field, role in _record_roles(resolved.facts, resolved.function).items():
            if (a.function, f"{a.target}.{field}") not in facts.roles:
                roles[(a.function, f"{a.target}.{field}")] = role
    return roles


def _record_roles(facts: ModuleFacts, function: str) -> dict[str, Role]:
    """Field -> role of the record every `return` of the function gives (see _returned_fields)."""
    found: dict[str, set[Role | None]] = {}
    for returned in facts.functions[function].returns:
        record: cst.BaseExpression | None = returned
        if type(returned) is cst.Name:  # `runtime = Runtime(...)`, then `return runtime`
            bound = facts.by_scope.get((function, returned.value), [])
            record = bound[0].value if len(bound) == 1 and not bound[0].element and bound[0].position is None else None
        fields = _fields(record)
        if fields is None:
            return {}
        for field, value in fields.items():
            found.setdefault(field, set()).add(facts.role_of(value, function))
    return {field: role for field, seen in found.items() if len(seen) == 1 and (role := next(iter(seen))) in FIELD_ROLES}


def _fields(record: cst.BaseExpression | None) -> dict[str, cst.BaseExpression] | None:
    """The named fields of a record built in place: a call's keyword arguments (a NamedTuple, a
    dataclass, `dict(...)`), or a dict literal's constant keys."""
    if type(record) is cst.Call and record.args and all(a.keyword is not None and not a.star for a in record.args):
        return {a.keyword.value: a.value for a in record.args if a.keyword is not None}
    if type(record) is cst.Dict and record.elements:
        pairs = [(string_value(e.key), e.value) for e in record.elements if type(e) is cst.DictElement]
        if len(pairs) == len(record.elements) and all(k is not None and k.isidentifier() for k, _ in pairs):
            return {k: value for k, value in pairs if k is not None}
    return None


HANDED_ON = 1  # a helper that hands the object on to another (`init_dist(args)` calling `_init_pytorch(args)`)

Replayed = tuple[str, cst.BaseExpression, tuple[Condition, ...]]  # target, value, tests, as the caller names them


def _handed(call: cst.Call, facts: ModuleFacts, function: str, outer: dict[str, str]) -> dict[str, str]:
    """The function's parameters that the call fills with a name, by that name (as `outer`
    renames it, for a call inside a helper)."""
    definition = facts.functions[function].node
    handed = {}
    for param in facts.functions[function].params:
        given = argument_for(call, definition, param)
        if type(given) is cst.Name and (not outer or given.value in outer):
            handed[param] = outer.get(given.value, given.value)
    return handed


def _replayed(ctx: LintContext, resolved: Resolved, handed: dict[str, str], hops: int) -> list[Replayed]:
    """The bindings the function makes on attributes of the objects it is handed, with the tests
    around them, in the caller's names; and those of the project functions it hands them on to."""
    facts, path, function = resolved
    if not handed:
        return []
    renamer = _Renamer(handed)
    found: list[Replayed] = []
    for target, binding in _attribute_bindings(facts, function, handed):
        value, conditions = renamer.value(binding.value), renamer.conditions(binding.conditions)
        if value is not None and conditions is not None:
            found.append((target, value, conditions))
    for site in facts.calls_within(function) if hops else ():
        inner = ctx.resolve_function(facts, path, site.name) if site.name else None
        conditions = renamer.conditions(site.conditions)
        if inner is None or "." in inner.function or conditions is None:
            continue
        onward = _handed(site.node, inner.facts, inner.function, handed)
        found += [(t, v, conditions + c) for t, v, c in _replayed(ctx, inner, onward, hops - 1)]
    return found


class _Renamer:
    """The helper's values and tests in the caller's names. Only copies (`args.gpu =
    args.local_rank`), flags (`True`, `False`) and tests of the handed objects (`args.rank %
    n == 0`) are renamed, so that a replayed binding never holds a value the caller's tree has
    no place for (a device string, a call) and nothing is ever reported at one; anything else
    is None. Each test is renamed once, so that both sides of one `if` share it."""

    def __init__(self, handed: dict[str, str]) -> None:
        self.handed = handed
        self.tests: dict[int, cst.BaseExpression | None] = {}

    def value(self, value: cst.BaseExpression) -> cst.BaseExpression | None:
        if type(value) is cst.Name and value.value in {"True", "False", "None"}:
            return value
        if type(value) in (cst.Name, cst.Attribute):
            return self._reference(value)
        return self._test(value) if computed_test(value) else None

    def conditions(self, conditions: tuple[Condition, ...]) -> tuple[Condition, ...] | None:
        renamed = []
        for c in conditions:
            test = self._test(c.test)
            if test is None:
                return None
            renamed.append(Condition(test, c.negated))
        return tuple(renamed)

    def _test(self, test: cst.BaseExpression) -> cst.BaseExpression | None:
        if id(test) not in self.tests:
            try:
                self.tests[id(test)] = self._rebuilt(test)
            except cst.CSTValidationError:  # a shape libcst will not rebuild: the test is not replayed
                self.tests[id(test)] = None
        return self.tests[id(test)]

    def _rebuilt(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        if type(node) in (cst.Name, cst.Attribute):
            renamed = self.value(node)  # with the parentheses it had: `not(args.log)`
            return renamed.with_changes(lpar=node.lpar, rpar=node.rpar) if renamed is not None else None
        if type(node) in (cst.Integer, cst.SimpleString):
            return node
        if type(node) is cst.UnaryOperation:
            inner = self._rebuilt(node.expression)
            return node.with_changes(expression=inner) if inner is not None else None
        if isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)):
            left, right = self._rebuilt(node.left), self._rebuilt(node.right)
            return node.with_changes(left=left, right=right) if left is not None and right is not None else None
        if type(node) is cst.Comparison:
            left = self._rebuilt(node.left)
            targets = [c.with_changes(comparator=self._rebuilt(c.comparator)) for c in node.comparisons]
            if left is None or any(c.comparator is None for c in targets):
                return None
            return node.with_changes(left=left, comparisons=targets)
        return None

    def _reference(self, value: cst.BaseExpression) -> cst.BaseExpression | None:
        """`args.local_rank` in the helper as the caller names it; None for anything but a
        parameter or an attribute of one."""
        if type(value) is cst.Name:
            return cst.Name(self.handed[value.value]) if value.value in self.handed else None
        if type(value) is cst.Attribute:
            inner = self._reference(value.value)
            return cst.Attribute(value=inner, attr=cst.Name(value.attr.value)) if inner is not None else None
        return None


def set_by_helper(ctx: LintContext, head: str, attribute: str, site: Event) -> bool:
    """`head` was handed, before `site`, to a project function of another module that sets its
    `attribute` to anything (`setup(args)` doing `args.rank = int(os.environ["RANK"])`): what the
    caller's own tree says of that attribute, an argparse default included, no longer holds.
    A function that reads a module-level `args` sees it after the module's own code handed it
    (`init_distributed_mode(args)` in the `__main__` block, then `train()`)."""
    facts = ctx.facts
    calls = [c for c in facts.calls_in(site.function) if c.order < site.order]
    if site.function and facts.reads_global(head, site.function):
        calls += facts.calls_in("")
    for call in calls:
        if not any(reference(a.value) == head for a in call.node.args):
            continue
        resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, call))
        if resolved is None or resolved.facts is ctx.facts:
            continue
        definition = resolved.facts.functions[resolved.function].node
        params = {p for a in call.node.args if reference(a.value) == head and (p := parameter_for(call.node, definition, a))}
        if any(a.target in {f"{p}.{attribute}" for p in params} for a in resolved.facts.assignments_within(resolved.function)):
            return True
    return False
