"""Which tests decide a script's launch mode, read from what the script does under them.

A script's distributed test is whatever condition encloses the start of its process group, the
DDP/FSDP wrap, a call of a project helper that starts the group, or the start of its worker
processes: `if args.num_nodes > 1:`,
`if "RANK" in os.environ:`, `if cfg.launcher != "none":`. Passing it means a distributed run,
failing it a single process, however it is spelled. The same test met again (the same
expression, its complement, `not` it, or a name whose every binding is it) is read the same way.
Each part of `if A and B:` around the start is necessary to it: where `A` fails, the run is a
single process; where it passes, it may be either. Likewise each part of `if A or B:` whose
other side starts the group skips the start: where `B` holds, the run is a single process
(`if args.local_rank == -1 or args.no_cuda:`). A launch test that picks values of one
expression (`if args.mode in ("train", "finetune"):`) around every start decides the tests that
pick other values of it: `elif args.mode == "eval":` passes only where the launch test fails.

A test is learned only where nothing else reads it (a rank test stays a rank test, the
`if not dist.is_initialized():` around an init stays what it is) and only when the group starts
on one side of it: `if torch.cuda.is_available(): init("nccl") else: init("gloo")` is no launch
test.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from ddplint.lint.facts import CallSite, ModuleFacts
from ddplint.lint.names import argument_for, names_in, reference
from ddplint.lint.summaries import Effect
from ddplint.lint.vocabulary import DDP, FSDP, INIT_PG

if TYPE_CHECKING:
    from ddplint.lint.guards import Guards, Worlds

GROUP_STARTS = frozenset({INIT_PG, DDP, FSDP})
_CODE = cst.Module(body=[])
_COMPLEMENTS: dict[type, type] = {
    cst.Equal: cst.NotEqual,
    cst.NotEqual: cst.Equal,
    cst.LessThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThan,
    cst.GreaterThan: cst.LessThanEqual,
    cst.LessThanEqual: cst.GreaterThan,
    cst.In: cst.NotIn,
    cst.NotIn: cst.In,
    cst.Is: cst.IsNot,
    cst.IsNot: cst.Is,
}


def test_key(expr: cst.BaseExpression) -> str:
    """The test's code without layout: the same test spelled on two lines matches."""
    return "".join(_CODE.code_for_node(expr).split())


def complement_key(expr: cst.BaseExpression) -> str | None:
    """The key of the test that is true exactly where `expr` is false, when it has one."""
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Not:
        return test_key(expr.expression)
    if type(expr) is cst.Comparison and len(expr.comparisons) == 1:
        target = expr.comparisons[0]
        flipped = _COMPLEMENTS.get(type(target.operator))
        if flipped is not None:
            return test_key(expr.with_changes(comparisons=[target.with_changes(operator=flipped())]))
    return None


def _literal(expr: cst.BaseExpression) -> object:
    """A string or integer literal's value, else _NO_VALUE."""
    return expr.evaluated_value if isinstance(expr, (cst.SimpleString, cst.Integer)) else _NO_VALUE


_NO_VALUE = object()


def literal_choice(expr: cst.BaseExpression) -> tuple[str, frozenset, bool] | None:
    """`X == "a"`, `X in ("a", "b")`, `X == "a" or X == "b"`: (X's key, the values, True); the
    complements `X != "a"`, `X not in (...)`: the same with False (the test passes elsewhere)."""
    if type(expr) is cst.BooleanOperation and type(expr.operator) is cst.Or:
        one, two = literal_choice(expr.left), literal_choice(expr.right)
        if one and two and one[0] == two[0] and one[2] and two[2]:
            return one[0], one[1] | two[1], True
        return None
    if type(expr) is not cst.Comparison or len(expr.comparisons) != 1:
        return None
    target = expr.comparisons[0]
    op, left, right = type(target.operator), expr.left, target.comparator
    if op in (cst.Equal, cst.NotEqual):
        for subject, value in ((left, _literal(right)), (right, _literal(left))):
            if value is not _NO_VALUE and _literal(subject) is _NO_VALUE:
                return test_key(subject), frozenset({value}), op is cst.Equal
    if op in (cst.In, cst.NotIn) and type(right) in (cst.Tuple, cst.List, cst.Set):
        assert isinstance(right, (cst.Tuple, cst.List, cst.Set))
        values = [_literal(e.value) for e in right.elements if type(e) is cst.Element]
        if values and len(values) == len(right.elements) and _NO_VALUE not in values:
            return test_key(left), frozenset(values), op is cst.In
    return None


def _operands(expr: cst.BaseExpression, operator: type[cst.And] | type[cst.Or]) -> list[cst.BaseExpression]:
    """The parts of `A and B and C` (or of `A or B or C`), when there are several."""
    if type(expr) is cst.BooleanOperation and type(expr.operator) is operator:
        return [*(_operands(expr.left, operator) or [expr.left]), *(_operands(expr.right, operator) or [expr.right])]
    return []


class LaunchTests:
    """The launch tests of each module, learned once per module."""

    def __init__(self, guards: Guards) -> None:
        self.guards = guards
        self._tables: dict[int, dict[str, Worlds]] = {}
        self._choices: dict[int, list[tuple[str, frozenset, Worlds]]] = {}  # launch tests that pick values
        self.learning = 0  # tables being learned: until they are, answers are provisional

    def worlds(self, expr: cst.BaseExpression, facts: ModuleFacts, path: Path, function: str = "") -> Worlds | None:
        """Where the test is true and where false, when it is one of the launch tests of the
        module at `path` (read in `function`: a method's `self.args.multi_gpu` is the launch
        test `args.multi_gpu` where the object keeps the `args` it was built with)."""
        table = self._table(facts, path)
        if not table:
            return None
        answer = table.get(test_key(expr))
        if answer is None and (kept := _as_built_with(expr, facts, function)) is not None:
            answer = table.get(test_key(kept))
        if answer is None and (choice := literal_choice(expr)) is not None:
            return self._other_values(choice, self._choices.get(id(facts), []))
        return answer

    @staticmethod
    def _other_values(choice: tuple[str, frozenset, bool], launch: list[tuple[str, frozenset, Worlds]]) -> Worlds | None:
        """A test that picks values no launch test of the same expression picks passes only
        where that launch test fails."""
        from ddplint.lint.guards import ALL

        subject, values, picks = choice
        for key, picked, (_, false) in launch:
            if key != subject:
                continue
            if picks and picked.isdisjoint(values):
                return false, ALL
            if not picks and picked <= values:  # `X not in (...)` of every value the launch test picks
                return false, ALL
            if not picks and picked.isdisjoint(values):  # `X != "eval"`: fails only for "eval"
                return ALL, false
        return None

    def _table(self, facts: ModuleFacts, path: Path) -> dict[str, Worlds]:
        key = id(facts)
        if key not in self._tables:
            self._tables[key] = {}  # recursion guard: no test is a launch test while learning
            self.learning += 1
            try:
                self._tables[key] = self._learn(facts, path)
            finally:
                self.learning -= 1
        return self._tables[key]

    def _learn(self, facts: ModuleFacts, path: Path) -> dict[str, Worlds]:
        from ddplint.lint.guards import ALL, DIST, KIND_WORLDS, SINGLE, SINGLE_WORLD

        ctx = self.guards.ctx
        starts = [s for s in facts.calls if s.name in GROUP_STARTS]
        if facts is ctx.facts:
            starts += [
                s
                for s in self.guards.summaries.sites_with(Effect.INIT_GROUP)
                if s.name not in GROUP_STARTS and self._starts_unconditionally(s, facts, path)
            ]
        # the start of the worker processes says the same as a group start: its side has many
        # processes (`if not cfg.multi_gpu: train_loop(0, cfg) else: mp.spawn(train_loop, ...)`)
        starts += [s for s in facts.calls if s.conditions and self.guards.starts_worker_processes(s, facts, path)]
        sides: dict[str, set[str]] = {}
        tests: dict[str, cst.BaseExpression] = {}
        necessary: dict[str, cst.BaseExpression] = {}  # each part of `if A and B:` around a start
        sufficient: dict[str, tuple[cst.BaseExpression, str]] = {}  # each part of `if A or B:` that skips a start
        started_under: set[str] = set()  # tests with a start on their true side
        around: dict[str, set[int]] = {}  # the starts each test passes around
        for site in starts:
            for condition in site.conditions:
                test = condition.test
                if "__name__" in names_in(test):
                    continue
                if condition.negated:  # `if A or B: <one process> else: <start>`: B true is one process
                    for part in _operands(test, cst.Or):
                        if self.guards.worlds(part, facts, path, site.function) == (ALL, ALL):
                            sufficient.setdefault(test_key(part), (part, test_key(test)))
                else:
                    started_under.add(test_key(test))
                if self.guards.worlds(test, facts, path, site.function) != (ALL, ALL):
                    continue
                side = SINGLE if condition.negated else DIST
                if side is DIST:
                    around.setdefault(test_key(test), set()).add(id(site))
                for expr in (test, *self._bound_from(test, facts)):
                    sides.setdefault(test_key(expr), set()).add(side)
                    tests[test_key(expr)] = expr
                if side is DIST:
                    for part in _operands(test, cst.And):
                        if self.guards.worlds(part, facts, path, site.function) == (ALL, ALL):
                            necessary.setdefault(test_key(part), part)
        table: dict[str, Worlds] = {}
        for key, kinds in sides.items():
            if len(kinds) != 1:
                continue
            true, false = KIND_WORLDS[kinds.pop()]
            table[key] = (true, false)
            other = complement_key(tests[key])
            if other is not None:
                table.setdefault(other, (false, true))
        # values picked around every start: no other value starts the group
        self._choices[id(facts)] = [
            (choice[0], choice[1], table[key])
            for key, expr in tests.items()
            if key in table
            and len(around.get(key, ())) == len(starts)
            and (choice := literal_choice(expr)) is not None
            and choice[2]
        ]
        for key, part in necessary.items():  # false: a single process; true: either
            if key not in table:
                table[key] = (ALL, frozenset({SINGLE_WORLD}))
                other = complement_key(part)
                if other is not None:
                    table.setdefault(other, (frozenset({SINGLE_WORLD}), ALL))
        for key, (part, whole) in sufficient.items():  # true: a single process; false: either
            if key not in table and whole not in started_under:
                table[key] = (frozenset({SINGLE_WORLD}), ALL)
                other = complement_key(part)
                if other is not None:
                    table.setdefault(other, (ALL, frozenset({SINGLE_WORLD})))
        return table

    def _starts_unconditionally(self, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
        """A call of a helper that starts the group whenever it runs (`setup_ddp()`); not one
        that decides by a test of its own (`main(0, args)` of a `main` that starts the group
        under `args.nodes > 1`): that test is the launch test, read where it is."""
        ctx = self.guards.ctx
        resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, site))
        if resolved is None:
            return True
        inner = [s for s in resolved.facts.calls_within(resolved.function) if s.name == INIT_PG]
        return not inner or any(not s.conditions for s in inner)

    @staticmethod
    def _bound_from(test: cst.BaseExpression, facts: ModuleFacts) -> list[cst.BaseExpression]:
        """`ddp = world_size > 1`, then `if ddp:` around the start: `world_size > 1` is the test too."""
        name = reference(test) if type(test) in (cst.Name, cst.Attribute, cst.Subscript) else None
        values = [a.value for a in facts.assigned(name)] if name is not None else []
        keys = {test_key(v) for v in values}
        if len(keys) != 1 or type(values[0]) is cst.Name and values[0].value in {"True", "False"}:
            return []
        return values[:1]


def _as_built_with(expr: cst.BaseExpression, facts: ModuleFacts, function: str) -> cst.BaseExpression | None:
    """The test with each `self.X` that the method's class keeps from its constructor's parameter
    `X` (`self.args = args`) read as `X`, where every construction of the class in the module
    hands it a name `X` (`BaseTrainer(model, loaders, args)`): the same object as the caller's."""
    cls = function.split(".")[0] if "." in function else ""
    init = facts.functions.get(f"{cls}.__init__")
    if init is None:
        return None
    kept = {
        f"self.{param}"
        for param in init.params
        if [(a.function, reference(a.value)) for a in facts.assigned(f"self.{param}")] == [(init.name, param)]
    }
    read = {
        name.split(".")[0] + "." + name.split(".")[1]
        for name in names_in(expr)
        if name.startswith("self.") and name.count(".") > 1
    }
    used = read & kept
    if not used:
        return None
    built = [c for c in facts.calls if c.name == cls]
    for attribute in used:
        param = attribute[5:]
        given = [argument_for(c.node, init.node, param) for c in built]
        if not given or any(g is None or reference(g) != param for g in given):
            return None
    read_as = expr.visit(_Unkept(used))
    return read_as if isinstance(read_as, cst.BaseExpression) else None


class _Unkept(cst.CSTTransformer):
    """`self.args.multi_gpu` -> `args.multi_gpu` for the kept attributes."""

    def __init__(self, kept: set[str]) -> None:
        self.kept = kept

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        if reference(original) in self.kept:
            return cst.Name(original.attr.value)
        return updated
