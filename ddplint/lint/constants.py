"""Constant arguments, and the branches of a helper they switch off.

`create_dataloader(path, rank=-1)` on the main process is safe although the helper holds a
barrier: it sits under `if local_rank not in [-1, 0]:`, which -1 never enters. Following a
call into a project function, literal arguments (and literal defaults of the parameters left
out) are bound to the parameter names, and an `if` whose test they decide is known dark.
"""

from __future__ import annotations

import ast
import operator

import libcst as cst

from ddplint.lint.facts import Condition, ModuleFacts
from ddplint.lint.names import call_parameters, reference, string_value

Bindings = dict[str, object]
UNKNOWN = object()
_OPERATORS = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge,
    cst.In: lambda a, b: a in b,
    cst.NotIn: lambda a, b: a not in b,
    cst.Is: operator.is_,
    cst.IsNot: operator.is_not,
}
_EMPTY = cst.Module(body=[])
_NAMED = {"None": None, "True": True, "False": False}


def literal(expr: cst.BaseExpression | None) -> object:
    """The value of a literal expression (-1, "x", None, [-1, 0], {-1, 0}), else UNKNOWN."""
    if expr is None or not isinstance(
        expr, (cst.Integer, cst.Float, cst.SimpleString, cst.Name, cst.UnaryOperation, cst.List, cst.Set, cst.Tuple)
    ):
        return UNKNOWN
    if type(expr) is cst.Name:
        return _NAMED.get(expr.value, UNKNOWN)
    if type(expr) is cst.Integer:  # the common cases without generating and compiling code
        return int(expr.value, 0)
    if type(expr) is cst.SimpleString and (plain := string_value(expr)) is not None:
        return plain
    try:
        return ast.literal_eval(_EMPTY.code_for_node(expr))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return UNKNOWN


class Truth:
    """A value known only by its truth: a name an enclosing `if` tested (under `if not
    args.distributed:`, `args.distributed` is falsy). It decides tests of its truth, never a
    comparison."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __bool__(self) -> bool:
        return self.value

    def __repr__(self) -> str:
        return f"Truth({self.value})"


class Built:
    """An object that a class of the project built (`scaler = NativeScaler()`, handed on): it is
    not None. What it equals, and its truth (a class may define `__bool__` or `__len__`), stay
    unknown: it decides `is None` and `is not None` only."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Built()"


BUILT = Built()


def branch_facts(conditions: tuple[Condition, ...]) -> Bindings:
    """What the tests around a call say about the names and attributes they test: their truth
    (`if args.distributed:`), and the constant a name equals (`if phase == "train":`, also as
    one side of an `and` that holds, or the `else` of `!=`)."""
    known: Bindings = {}
    for condition in conditions:
        _learn(condition.test, not condition.negated, known)
    return known


def _learn(test: cst.BaseExpression, truth: bool, known: Bindings) -> None:
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test, truth = test.expression, not truth
    if type(test) is cst.BooleanOperation and type(test.operator) is (cst.And if truth else cst.Or):
        _learn(test.left, truth, known)  # both sides of an `and` that holds (of an `or` that fails)
        _learn(test.right, truth, known)
        return
    name = reference(test) if type(test) in (cst.Name, cst.Attribute) else None
    if name is not None:
        known[name] = Truth(truth)
        return
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        target = test.comparisons[0]
        equal = cst.Equal if truth else cst.NotEqual
        name = reference(test.left) if type(test.left) in (cst.Name, cst.Attribute) else None
        value = literal(target.comparator)
        if name is not None and type(target.operator) is equal and value is not UNKNOWN:
            known[name] = value


def carried(bindings: Bindings, facts: ModuleFacts, function: str) -> Bindings:
    """The bindings a call passes on to a function of the same module as they are: those about
    module-level names (`args.distributed` of a module-level `args`) that the function does not
    bind itself."""
    if not bindings:
        return {}
    own = set(facts.functions[function].params)
    own |= {a.target.split(".")[0] for a in facts.assignments_within(function) if a.function == function}
    return {
        name: value
        for name, value in bindings.items()
        if (head := name.split(".")[0]) not in own and any(a.function == "" for a in facts.assigned(head))
    }


def bind_arguments(call: cst.Call, definition: cst.FunctionDef, outer: Bindings) -> Bindings:
    """Parameter -> constant value for this call: literal arguments, arguments that are names
    bound in the caller, and literal defaults of the parameters the call leaves out."""
    if any(a.star for a in call.args):
        return {}
    params = call_parameters(call, definition)
    by_name = {p.name.value: p for p in (*params, *definition.params.kwonly_params)}
    given: dict[str, cst.BaseExpression] = {}
    positional = [a.value for a in call.args if a.keyword is None]
    for param, value in zip(params, positional, strict=False):
        given[param.name.value] = value
    for a in call.args:
        if a.keyword is not None and a.keyword.value in by_name:
            given[a.keyword.value] = a.value
    bound: Bindings = {}
    for name, param in by_name.items():
        if name in given:
            value = given[name]
            held = reference(value) if type(value) in (cst.Name, cst.Attribute) else None
            found = outer[held] if held in outer else literal(value)
            if held is not None:  # what the caller knows of the object's attributes (`args.distributed`)
                bound.update({name + key[len(held) :]: known for key, known in outer.items() if key.startswith(held + ".")})
        else:
            found = literal(param.default)
        if found is not UNKNOWN:
            bound[name] = found
    return bound


def bind_call(call: cst.Call, facts, function: str, outer: Bindings) -> Bindings:
    """bind_arguments for a call into `function` of the module `facts`, without the parameters
    the function reassigns before using them (they no longer hold the argument)."""
    bound = bind_arguments(call, facts.functions[function].node, outer)
    if bound:
        reassigned = {a.target for a in facts.assignments_within(function) if a.function == function}
        bound = {name: value for name, value in bound.items() if name not in reassigned and name.split(".")[0] not in reassigned}
    return bound


def dark(conditions: tuple[Condition, ...], bindings: Bindings) -> bool:
    """Some enclosing condition is known to be false under these bindings."""
    return bool(bindings) and any(truth(c.test, bindings) is c.negated for c in conditions)


def truth(test: cst.BaseExpression, bindings: Bindings) -> bool | None:
    """Whether the test holds under these bindings; None where they do not decide it."""
    value = _evaluate(test, bindings) if bindings else UNKNOWN
    return None if value is UNKNOWN else bool(value)


def key(bindings: Bindings) -> tuple:
    return tuple(sorted((name, repr(value)) for name, value in bindings.items()))


def _evaluate(expr: cst.BaseExpression, bindings: Bindings) -> object:
    if type(expr) is cst.Name or type(expr) is cst.Attribute:
        name = reference(expr)
        if name in bindings:
            return UNKNOWN if bindings[name] is BUILT else bindings[name]
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Not:
        inner = _evaluate(expr.expression, bindings)
        return UNKNOWN if inner is UNKNOWN else not inner
    if type(expr) is cst.BooleanOperation:
        left, right = _evaluate(expr.left, bindings), _evaluate(expr.right, bindings)
        if type(expr.operator) is cst.And:
            if left is not UNKNOWN and not left or right is not UNKNOWN and not right:
                return False
            return UNKNOWN if UNKNOWN in (left, right) else True
        if left is not UNKNOWN and left or right is not UNKNOWN and right:
            return True
        return UNKNOWN if UNKNOWN in (left, right) else False
    if type(expr) is cst.Comparison:
        left = _operand(expr.left, bindings)
        for target in expr.comparisons:
            right = _operand(target.comparator, bindings)
            compare = _OPERATORS.get(type(target.operator))
            if left is BUILT or right is BUILT:  # `scaler is not None`: a built object is not None
                if type(target.operator) not in (cst.Is, cst.IsNot) or (left is not None and right is not None):
                    return UNKNOWN
                if type(target.operator) is cst.Is:
                    return False
                left = right
                continue
            if left is UNKNOWN or right is UNKNOWN or compare is None or type(left) is Truth or type(right) is Truth:
                return UNKNOWN
            try:
                if not compare(left, right):
                    return False
            except TypeError:
                return UNKNOWN
            left = right
        return True
    return literal(expr)


def _operand(expr: cst.BaseExpression, bindings: Bindings) -> object:
    """A side of a comparison: as _evaluate, but a built object is itself (it decides `is None`)."""
    if type(expr) is cst.Name or type(expr) is cst.Attribute:
        name = reference(expr)
        if name in bindings and bindings[name] is BUILT:
            return BUILT
    return _evaluate(expr, bindings)
