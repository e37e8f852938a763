"""Which statements run on the main process only, and which on some ranks but not others.

Rules about side effects (checkpoints, logs, directories) must stay quiet when only one rank
can get there, and the collective rule must speak when only some ranks can. Both questions
are answered from the `if` conditions that facts.py records around every call, from the
decorators of the enclosing function, and from the callers of that function, following
predicates and helpers into the user's own modules (`utils.is_main_process()`).

A test is classified by what it says about the process that passes it:
    "main"    true on one process only          rank == 0, is_main_process(), rank == world_size - 1
    "notmain" true only off the main process    rank != 0, not is_main_process()
    "single"  true only without distribution   not args.distributed, world_size == 1
    "dist"    true only with distribution       args.distributed, dist.is_initialized()
"""

from __future__ import annotations

import math
import weakref
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from ddplint.lint import constants
from ddplint.lint.facts import (
    Assert,
    Assignment,
    CallSite,
    Condition,
    ModuleFacts,
    constructed_method,
    enclosing_scopes,
    group_call,
    in_main_block,
    process_class,
    starts_own_workers,
    starts_workers,
)
from ddplint.lint.launch import LaunchTests
from ddplint.lint.names import (
    arg,
    argument_for,
    computed_test,
    dotted,
    int_value,
    names_in,
    parameter_for,
    reference,
    string_value,
)
from ddplint.lint.paths import literal_truth
from ddplint.lint.roles import (
    DIST_FLAGS,
    ENV_ROLES,
    GROUP_RANK_CALL,
    MAIN_DECORATORS,
    MAIN_PREDICATES,
    RANK_NAMES,
    RANKS,
    WORLD_NAMES,
    Role,
    last_part,
)
from ddplint.lint.summaries import Effect, Summaries
from ddplint.lint.vocabulary import BARRIER, COLLECTIVES, INIT_PG, WRAPPERS

if TYPE_CHECKING:
    from ddplint.lint.resolver import ProjectResolver

_DISTRIBUTED_RUN = frozenset({Effect.STARTS_GROUP, Effect.DATA_PARALLEL, Effect.COLLECTIVE})


class Kind(str, Enum):
    """What a test says about the process that passes it (the table above)."""

    MAIN = "main"
    NOTMAIN = "notmain"
    SINGLE = "single"
    DIST = "dist"


class World(str, Enum):
    """The processes a test can be true or false in: a run without distribution, the main rank
    of a distributed run, any other rank."""

    SINGLE = "S"
    MAIN = "M"
    NOT_MAIN = "N"


MAIN, NOTMAIN, SINGLE, DIST = Kind.MAIN, Kind.NOTMAIN, Kind.SINGLE, Kind.DIST
OPPOSITE = {MAIN: NOTMAIN, NOTMAIN: MAIN, SINGLE: DIST, DIST: SINGLE}
SINGLE_WORLD, MAIN_WORLD, NOT_MAIN_WORLD = World.SINGLE, World.MAIN, World.NOT_MAIN
ALL: frozenset[str] = frozenset(World)
Worlds = tuple[frozenset[str], frozenset[str]]  # where a test is true, where it is false
KIND_WORLDS: dict[str | None, Worlds] = {
    MAIN: (frozenset("SM"), frozenset("N")),
    NOTMAIN: (frozenset("N"), frozenset("SM")),
    SINGLE: (frozenset("S"), frozenset("MN")),
    DIST: (frozenset("MN"), frozenset("S")),
}

# Calls that every rank of the group makes, or the job hangs.
EVERY_RANK_CALLS = COLLECTIVES | {INIT_PG}
# How many bindings, arguments and parameters deep a test is followed to what it reads
# (`save_to_disk = get_rank() == 0` handed through a constructor and a `super().__init__`).
FOLLOW = 4


class Guards:
    def __init__(self, ctx: ProjectResolver, summaries: Summaries) -> None:
        self.ctx = ctx
        self.summaries = summaries
        self._callers: dict[int, dict[str, list[CallSite]]] = {}
        self._reached: dict[tuple[int, str], tuple[float, ...]] = {}
        self._predicates: dict[tuple[int, str], Worlds] = {}
        self._substituted: dict = {}  # predicates read with a call's arguments, kept alive for the memos
        self._methods: dict[str, Worlds] = {}
        self._refused: dict[int, frozenset[str]] = {}
        self._single_branches: dict[int, list[Assert]] = {}
        self._group_flags: dict[int, frozenset[str]] = {}
        self._every_rank: dict[tuple[int, str], bool] = {}
        self._dark_for_others: dict[tuple[int, int, bool], bool] = {}
        self._main_functions: dict[tuple[int, str, bool], bool] = {}
        self._ranks: dict[tuple[int, str], bool] = {}
        self._named_ranks: dict[tuple[int, str, str], bool] = {}
        self._helpers = set(ctx.config.main_process_helpers)
        self._extra_predicates = set(ctx.config.main_process_predicates)
        self._one_process: dict[tuple[int, str], bool] = {}
        self._launchers: dict[tuple[int, str], bool] = {}
        self._rank_params: dict[tuple[int, str], frozenset[str]] = {}
        self._spawns: dict[tuple[int, str], list[CallSite]] = {}  # per function: its calls that start the ranks
        self._own_group: dict[tuple[int, str], bool] = {}
        self._modes: dict[tuple[int, str], bool] = {}
        self._training: dict[tuple[int, str, int], bool] = {}
        self._masks: dict[tuple[int, str], bool] = {}
        self._callees: dict[int, dict[int, str]] = {}
        self._worlds: dict[tuple[int, int, str, int], tuple[frozenset[str], frozenset[str]]] = {}
        self._project_calls: dict[tuple[int, str], list[tuple[CallSite, ModuleFacts, Path]]] | None = None
        self.launch = LaunchTests(weakref.proxy(self))  # no reference cycle (see LintContext.guards)

    # -- tests -------------------------------------------------------------------------

    def test_kind(
        self, expr: cst.BaseExpression, facts: ModuleFacts, path: Path, function: str, depth: int = FOLLOW
    ) -> Kind | None:
        """What passing the test `expr` says about the process: MAIN, NOTMAIN, SINGLE, DIST or None."""
        return _kind_of_worlds(self.worlds(expr, facts, path, function, depth)[0])

    def worlds(
        self, expr: cst.BaseExpression, facts: ModuleFacts, path: Path, function: str, depth: int = FOLLOW
    ) -> tuple[frozenset[str], frozenset[str]]:
        """Where the test can be true and where it can be false, among S, M and N.

        S: a run without distribution; M: the main rank of a distributed run; N: any other rank.
        `rank == 0` is true in {S, M} and false in {N}; `epoch % 10 == 0` can be either anywhere.
        Negation swaps the two sets, `and`/`or` intersect and unite them, so that
        `if args.distributed and rank != 0: return` leaves {S, M} after it. A test that nothing
        else reads is the launch test when the process group starts under it (launch.py).
        """
        key = (id(expr), id(facts), function, depth)  # asked again for every site in the branch
        if key in self._worlds:
            return self._worlds[key]
        answer = self._read(expr, facts, path, function, depth)
        # a learned launch test says something of a test its parts left open, or of a compound
        # one (looked up only then: the lookup renders the test's code)
        asked = answer == (ALL, ALL) or type(expr) is cst.BooleanOperation
        launch = self.launch.worlds(expr, facts, path, function) if asked else None
        if launch is not None:
            # the test read whole as a launch test can say more than its parts: `if A and B:`
            # around the start is a distributed run where it passes, though A alone is either
            true, false = answer[0] & launch[0], answer[1] & launch[1]
            if true and false:
                answer = true, false
        if not self.launch.learning:  # an answer while a launch table is learned is provisional
            self._worlds[key] = answer
        return answer

    def _read(
        self, expr: cst.BaseExpression, facts: ModuleFacts, path: Path, function: str, depth: int
    ) -> tuple[frozenset[str], frozenset[str]]:
        if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Not:
            true, false = self.worlds(expr.expression, facts, path, function, depth)
            return false, true
        if type(expr) is cst.BooleanOperation or _bitwise_of_tests(expr):
            assert isinstance(expr, (cst.BooleanOperation, cst.BinaryOperation))
            lt, lf = self.worlds(expr.left, facts, path, function, depth)
            rt, rf = self.worlds(expr.right, facts, path, function, depth)
            if type(expr.operator) in (cst.And, cst.BitAnd):
                return lt & rt, lf | rf
            return lt | rt, lf & rf
        if type(expr) is cst.IfExp:  # `is_local_primary(a) if local else is_global_primary(a)`
            bt, bf = self.worlds(expr.body, facts, path, function, depth)
            ot, of = self.worlds(expr.orelse, facts, path, function, depth)
            return bt | ot, bf | of
        if type(expr) is cst.Comparison:
            if (same := _against_bool(expr)) is not None:  # `is_main == True`, `flag is False`
                true, false = self.worlds(expr.left, facts, path, function, depth)
                return (true, false) if same else (false, true)
            return _atom(self._comparison(expr, facts, path, function, depth))
        if type(expr) in (cst.Name, cst.Attribute, cst.Subscript):
            return self._name(expr, facts, path, function, depth)
        if type(expr) is cst.NamedExpr:  # `if (is_main := rank == 0):`
            return self.worlds(expr.value, facts, path, function, depth)
        if type(expr) is cst.Call:
            return self._call(expr, facts, path, function, depth)
        return ALL, ALL

    def _name(self, expr, facts, path, function, depth) -> tuple[frozenset[str], frozenset[str]]:
        name = reference(expr)
        if name is None:
            return ALL, ALL
        last = last_part(name)
        if type(expr) is cst.Name and self._function_object(name, facts, path, function):
            return ALL, frozenset()  # `if is_main_process:` without the call: a function is always true
        if self._declared(name, facts, self._extra_predicates) or facts.role_of(expr, function) is Role.MAIN_FLAG:
            return _atom(MAIN)
        if last in MAIN_PREDICATES:
            return _atom(MAIN)
        flag = self._flag(name, facts, path)
        if flag is not None:
            return flag
        if name in self._refused_when_distributed(facts, path):
            return frozenset(SINGLE_WORLD), ALL
        member = self.ctx.member_name(facts, name, function)
        if depth > 0 and self._is_property(facts, path, member):  # `if env.primary:`, a property of the project
            return self._project_predicate(facts, path, member)
        if "rank" in last and facts.holds_rank(expr, function):
            return _atom(NOTMAIN)  # `if rank:` is true off the main process; `if not rank:` on it
        if depth > 0 and self.set_on_main_only(name, facts, path, function, depth):
            return _atom(MAIN)  # `writer = None` / `if rank == 0: writer = SummaryWriter()` / `if writer:`
        if depth > 0:  # `is_chief = rank == 0`, then `if is_chief:`
            bindings = [
                a for a in facts.assigned(name) if a.function in {function, ""} or _same_object(name, a.function, function)
            ]
            values = [
                self.worlds(a.value, facts, path, a.function, depth - 1)
                for a in bindings + _set_by_callee(name, facts, function)
                if not _is_bool_literal(a.value)
            ] or self._through_parameter(name, facts, path, function, depth - 1)
            values = values or self._through_argument(name, facts, path, function, depth - 1)
            if values:
                return frozenset().union(*(t for t, _ in values)), frozenset().union(*(f for _, f in values))
        return ALL, ALL

    def _function_object(self, name: str, facts: ModuleFacts, path: Path, function: str) -> bool:
        """The name holds a function of the project, not a value: nothing binds it in scope and it
        names a function defined here or imported from a project module."""
        params = (facts.functions[s].params for s in enclosing_scopes(function) if s in facts.functions)
        if facts.visible(name, function) or any(name in p for p in params):
            return False
        resolved = self.ctx.resolve_function(facts, path, facts.qualify(name) or name)
        return resolved is not None and "." not in resolved.function

    def _through_parameter(self, name: str, facts: ModuleFacts, path: Path, function: str, depth: int) -> list:
        """`opt.is_master_node` read in a function whose parameter `opt` every call of it in the
        module fills with an object the caller set that attribute on: the caller's value."""
        root, _, rest = name.partition(".")
        info = facts.functions.get(function)
        if not rest or info is None or root not in info.params:
            return []
        calls = self.callers(facts).get(function, [])
        values = []
        for call in calls:
            given = argument_for(call.node, info.node, root)
            outer = reference(given) if given is not None and type(given) in (cst.Name, cst.Attribute) else None
            found = [
                self.worlds(a.value, facts, path, a.function, depth)
                for a in facts.assigned(f"{outer}.{rest}")
                if a.function in {call.function, ""} and not _is_bool_literal(a.value)
            ]
            if outer is None or not found:
                return []
            values += found
        return values

    def _through_argument(self, name: str, facts: ModuleFacts, path: Path, function: str, depth: int) -> list:
        """A parameter read as a test (`save_to_disk` of `__init__(self, model, save_to_disk)`): what
        every call of the function passes for it, where each call passes it (a constructor's
        callers and a subclass's `super().__init__(...)` included)."""
        info = facts.functions.get(function)
        if info is None or name not in info.params:
            return []
        values = []
        for site, module, where in self._calls_of(facts, function):
            value = argument_for(site.node, info.node, name)
            if value is None:
                return []
            values.append(self.worlds(value, module, where, site.function, depth))
        return values

    def _flag(self, name: str, facts: ModuleFacts, path: Path) -> tuple[frozenset[str], frozenset[str]] | None:
        """A flag about distribution, judged by the flag the process group starts under.

        With `if args.distributed: init_process_group(...)`, `args.distributed` is exactly
        "distributed". A flag that only implies it (`args.distributed = args.world_size > 1 or
        args.multiprocessing_distributed`) is true only when distributed, but false says
        nothing: a multi-node run of one process per node has it False on every rank. Without
        such evidence the conventional flag names are taken at their word, unless the module
        computes the flag from other tests: then its value says what it means.
        """
        group = self.group_flags(facts, path)
        copies = facts.assigned(name)
        if name in group or copies and all(reference(a.value) in group for a in copies):
            return _atom(DIST)  # the flag, or a name every binding of which copies it (`cfg.DISTRIBUTED = args.distributed`)
        if any(name in _disjuncts(a.value) for flag in group for a in facts.assigned(flag)):
            return DIST_WORLDS, ALL
        if last_part(name) in DIST_FLAGS and not (copies and all(computed_test(a.value) for a in copies)):
            return _atom(DIST)  # (a flag computed here, `use_ddp = ddp and batch >= n`, is read by its value)
        return None

    def group_flags(self, facts: ModuleFacts, path: Path) -> frozenset[str]:
        """Names whose truth starts the process group: `if args.distributed:` around an
        init_process_group call, or a call into a project helper that makes one."""
        key = id(facts)
        if key not in self._group_flags:
            self._group_flags[key] = frozenset()  # recursion guard
            starts = [s for s in facts.calls if s.name == INIT_PG] or [
                s for s in self.summaries.sites_with(Effect.INIT_GROUP) if facts is self.ctx.facts
            ]
            self._group_flags[key] = frozenset(
                name for site in starts for c in site.conditions if not c.negated and (name := reference(c.test)) is not None
            ) | {flag for site in starts if site.name != INIT_PG for flag in self._handed_flags(site, facts, path)}
        return self._group_flags[key]

    def _handed_flags(self, site: CallSite, facts: ModuleFacts, path: Path) -> set[str]:
        """The flags a helper starts the group under, on an object it is handed, as the caller
        names them: `init_dist(args, cfg)` with `if args.distributed: init_process_group(...)`
        inside makes the caller's `args.distributed` its flag."""
        resolved = self.ctx.resolve_function(facts, path, self.ctx.method_target(facts, site))
        if resolved is None:
            return set()
        inner, _, function = resolved
        definition = inner.functions[function].node
        inside = {
            name
            for start in inner.calls_within(function)
            if start.name == INIT_PG
            for c in start.conditions
            if not c.negated and (name := reference(c.test)) is not None
        }
        flags = set()
        for flag in inside:
            owner, _, attribute = flag.partition(".")
            given = argument_for(site.node, definition, owner) if attribute else None
            if type(given) is cst.Name:
                flags.add(f"{given.value}.{attribute}")
        return flags

    def _refused_when_distributed(self, facts: ModuleFacts, path: Path) -> frozenset[str]:
        """Options a distributed run refuses: after `if LOCAL_RANK != -1: assert not opt.evolve`,
        the `if opt.evolve:` branch runs in a single process only."""
        key = id(facts)
        if key not in self._refused:
            self._refused[key] = frozenset()  # recursion guard
            self._refused[key] = frozenset(
                name
                for a in facts.asserts
                if type(a.test) is cst.UnaryOperation
                and type(a.test.operator) is cst.Not
                and (name := dotted(a.test.expression)) is not None
                and any(self.condition_kind(c, facts, path, a.function, 1) == DIST for c in a.conditions)
            )
        return self._refused[key]

    def after_single_process_assert(self, site: CallSite | Assignment, facts: ModuleFacts, path: Path) -> bool:
        """Later in a branch that asserts it runs without distribution (`else: assert
        opt.local_rank == -1, "DDP mode not implemented for --evolve"`)."""
        key = id(facts)
        if key not in self._single_branches:
            self._single_branches[key] = []  # recursion guard
            self._single_branches[key] = [
                a for a in facts.asserts if a.conditions and self.test_kind(a.test, facts, path, a.function, 1) == SINGLE
            ]
        return any(
            a.function == site.function and a.order < site.order and a.conditions[-1] in site.conditions
            for a in self._single_branches[key]
        )

    def _call(self, call: cst.Call, facts, path, function, depth) -> tuple[frozenset[str], frozenset[str]]:
        raw = dotted(call.func)
        name = facts.qualify(raw)
        if name is None or raw is None:  # (raw is None only where name is)
            return ALL, ALL
        if name == "isinstance" and len(call.args) == 2 and dotted(call.args[1].value) != "int":
            if self._rankish(call.args[0].value, facts, path, function):
                return frozenset(), ALL  # a rank is an int, never an instance of another type
        last = last_part(name)
        if self._declared(raw, facts, self._extra_predicates):
            return _atom(MAIN)
        if last in MAIN_PREDICATES:
            return _atom(MAIN)
        if last in DIST_FLAGS:
            return _atom(DIST)
        if name == "torch.distributed.is_available":  # true wherever a group runs; false only in one process
            return ALL, frozenset({SINGLE_WORLD})
        member = self.ctx.member_name(facts, name, function)
        answer = self._project_predicate(facts, path, member)
        if answer == (ALL, ALL) and "." in raw and self.ctx.resolve_function(facts, path, name) is None:
            return self._method_of_project_classes(last)
        if answer == (ALL, ALL) and depth > 0:
            inlined = self._with_arguments(call, facts, path, member)
            if inlined is not None:
                return self.worlds(inlined, facts, path, function, depth - 1)
        return answer

    def _with_arguments(self, call: cst.Call, facts: ModuleFacts, path: Path, name: str | None) -> cst.BaseExpression | None:
        """The one `return` of a predicate of this module, with the call's arguments in place of
        the parameters: `is_main_device(rank)` where `def is_main_device(device): return
        isinstance(device, torch.device) or device == 0` reads `isinstance(rank, ...) or rank == 0`,
        though other callers hand the same predicate a device."""
        from ddplint.lint.caller_state import Handed, replaced  # (caller_state reads the guards' worlds)

        resolved = self.ctx.resolve_function(facts, path, name)
        if resolved is None or resolved.facts is not facts or any(a.star for a in call.args):
            return None
        info = facts.functions[resolved.function]
        if len(info.returns) != 1 or info.return_conditions[0] or facts.assignments_within(resolved.function):
            return None
        handed: Handed = {p: a for p in info.params if (a := argument_for(call, info.node, p)) is not None}
        return replaced(self._substituted, info.returns[0], handed) if handed else None

    def _method_of_project_classes(self, method: str) -> tuple[frozenset[str], frozenset[str]]:
        """`backend.is_root_worker()` on an object whose class is chosen at run time: the method of
        that name in the classes of the project modules this file imports, where they all agree."""
        if method not in self._methods:
            answers = {
                self._project_predicate(facts, path, function)
                for path, facts in self.ctx.imported_project_files(depth=3)
                for function in facts.functions
                if function.count(".") == 1 and function.endswith(f".{method}") and facts.has_members(function.split(".")[0])
            }
            self._methods[method] = answers.pop() if len(answers) == 1 else (ALL, ALL)
        return self._methods[method]

    def _is_property(self, facts: ModuleFacts, path: Path, name: str | None) -> bool:
        resolved = self.ctx.resolve_function(facts, path, name)
        return resolved is not None and any(
            last_part(d) in {"property", "cached_property"} for d in resolved.facts.functions[resolved.function].decorators
        )

    def _project_predicate(self, facts, path, name) -> tuple[frozenset[str], frozenset[str]]:
        """A project function answers where its returns do (`return get_rank() == 0`).

        A `return True` is true where the tests around it hold (`if dist.is_initialized():
        return True`); where they say nothing, it is the answer without a process group (`if
        args.no_dist: return True`). An outright `return False` adds no true world.
        """
        resolved = self.ctx.resolve_function(facts, path, name)
        if resolved is None:
            return ALL, ALL
        inner_facts, inner_path, function = resolved
        key = (id(inner_facts), function)
        if key not in self._predicates:
            self._predicates[key] = (ALL, ALL)  # recursion guard
            info = inner_facts.functions[function]
            returns = info.returns
            true: frozenset[str] = frozenset()
            false: frozenset[str] = frozenset()
            for value, conditions in zip(returns, info.return_conditions, strict=True):
                if (truth := literal_truth(value)) is not None:  # `return True`, `return 0`
                    if truth:
                        where = self._where(conditions, inner_facts, inner_path, function)
                        true |= where if where != ALL else {SINGLE_WORLD}
                    else:
                        false |= ALL
                    continue
                t, f = self.worlds(value, inner_facts, inner_path, function)
                true, false = true | t, false | f
            self._predicates[key] = (true, false) if returns else (ALL, ALL)
        return self._predicates[key]

    def _where(self, conditions, facts, path, function) -> frozenset[str]:
        """The worlds in which every one of the tests holds (its false side where negated)."""
        worlds = ALL
        for c in conditions:
            true, false = self.worlds(c.test, facts, path, function)
            worlds &= false if c.negated else true
        return worlds

    def _comparison(self, expr: cst.Comparison, facts, path, function, depth) -> Kind | None:
        if len(expr.comparisons) != 1:
            return None
        target = expr.comparisons[0]
        op = target.operator
        left, right = _int_constant(expr.left, facts, function), _int_constant(target.comparator, facts, function)
        if _is_zero_set(right) and self._rankish(left, facts, path, function):
            if type(op) is cst.In:
                return MAIN
            if type(op) is cst.NotIn:
                return NOTMAIN
            return None
        if int_value(left) == 0 and self._rankish(right, facts, path, function):
            left, right = right, left
            op = _FLIPPED.get(type(op), lambda: op)()
        if int_value(right) == 0 and self._rankish(left, facts, path, function):
            if type(op) in (cst.Equal, cst.LessThanEqual, cst.Is):
                return MAIN
            if type(op) in (cst.NotEqual, cst.GreaterThan, cst.IsNot):
                return NOTMAIN
            if facts.role_of(left, function) not in RANKS:  # `args.gpu >= 0` picks a GPU, not a launch
                return None
            if type(op) is cst.GreaterThanEqual:  # `local_rank >= 0`: started by a launcher
                return DIST
            return SINGLE if type(op) is cst.LessThan else None
        if (
            int_value(right) == 1
            and type(op) in (cst.LessThan, cst.GreaterThanEqual)
            and self._rankish(left, facts, path, function)
        ):
            return MAIN if type(op) is cst.LessThan else NOTMAIN  # `rank < 1`, `rank >= 1`
        if dotted(right) == "None" and type(op) in (cst.Is, cst.IsNot) and self._named_rank(left, facts, function):
            return SINGLE if type(op) is cst.Is else DIST  # `rank is None`: no process group
        if dotted(right) == "None" and type(op) in (cst.Is, cst.IsNot) and facts.role_of(left, function) is Role.WORLD_SIZE:
            return SINGLE if type(op) is cst.Is else DIST  # a world size, like a rank, is given to distributed runs
        if (
            type(op) in (cst.In, cst.NotIn)
            and ENV_ROLES.get(string_value(left) or "") is not None
            and facts.qualify(dotted(right)) == "os.environ"
        ):
            return DIST if type(op) is cst.In else SINGLE  # `"RANK" in os.environ`: torchrun's
        world = _world_test(left, op, right, facts, function)
        if world is not None:
            return world
        if (
            int_value(right) == 1
            and type(op) in (cst.Equal, cst.LessThanEqual)
            and type(left) is cst.Call
            and facts.qualify(dotted(left.func)) == "torch.cuda.device_count"
        ):
            return SINGLE  # one GPU: one process (more GPUs need not mean more processes: DataParallel)
        if type(op) in (cst.IsNot, cst.NotEqual) and dotted(right) == "None" and depth > 0:
            name = dotted(left)
            if name is not None and self.set_on_main_only(name, facts, path, function, depth):
                return MAIN
        if _minus_one(right) and self._rankish(left, facts, path, function):
            # `local_rank == -1`: the script was not started by a launcher
            if type(op) is cst.Equal:
                return SINGLE
            if type(op) is cst.NotEqual:
                return DIST
            return None
        if type(op) in (cst.Equal, cst.NotEqual) and self._one_rank(left, right, facts, path, function):
            # `rank == world_size - 1`: one process passes, as with rank 0
            return MAIN if type(op) is cst.Equal else NOTMAIN
        return None

    @staticmethod
    def _named_rank(expr: cst.BaseExpression, facts: ModuleFacts, function: str) -> bool:
        """Holds a rank by origin, or by a name that says rank (`rank=None` given only when
        distributed); a `gpu` may be None for other reasons (no GPU chosen)."""
        if facts.role_of(expr, function) in RANKS:
            return True
        name = reference(expr)
        return name is not None and "rank" in last_part(name) and facts.holds_rank(expr, function)

    def _one_rank(self, left, right, facts: ModuleFacts, path: Path, function: str) -> bool:
        """A rank compared with a value that is the same on every process (a literal, or an
        expression of the world size and constants)."""
        for rank, other in ((left, right), (right, left)):
            if not self._rankish(rank, facts, path, function) or self._rankish(other, facts, path, function):
                continue
            names = names_in(other)
            if (
                int_value(other) is not None
                or names
                and all(
                    last_part(n) in WORLD_NAMES
                    or facts.role_of_name(n, function) is Role.WORLD_SIZE
                    or _module_constant(n, facts)
                    for n in names
                )
            ):
                return True
        return False

    def set_on_main_only(self, name: str, facts: ModuleFacts, path: Path, function: str, depth: int) -> bool:
        """`name` holds a real value only on the main process, None (or False) elsewhere.

        `writer = None`, then `if rank == 0: writer = SummaryWriter(...)`, or in one binding
        `run = wandb.init() if rank == 0 else None`, or `create = False`, then `if rank == 0:
        create = True`: testing `writer` (or `run is not None`, `create`) later is a
        main-process test.
        """
        scope = [a for a in facts.assigned(name) if a.function == function or "." in name]
        if not scope:
            return depth > 0 and self._handed_on_main_only(name, facts, path, function, depth - 1)
        nones: list[Assignment] = []
        real: list[Assignment] = []
        chosen: list[cst.IfExp] = []
        returned: list[Assignment] = []  # `run = start_logger(rank)`, which returns a run on rank 0 only
        for a in scope:
            if literal_truth(a.value) is False:
                nones.append(a)
            elif type(a.value) is cst.IfExp and "None" in {dotted(a.value.body), dotted(a.value.orelse)}:
                chosen.append(a.value)
            elif type(a.value) is cst.Call and depth > 0 and self._returns_on_main_only(a.value, facts, path, depth - 1):
                returned.append(a)
            else:
                real.append(a)
        if not real and not chosen:
            return bool(returned)
        if self._lowered_on_the_others(real, nones, facts, path, depth):
            return True
        # None first (`writer = None`, then `if rank == 0: writer = ...`), or on the other side of
        # the same test (`if rank == 0: writer = ... else: writer = None`)
        if real:
            none_first = bool(nones) and min(a.order for a in nones) < min(a.order for a in real)
            if not none_first and not all(any(_other_side(r, n) for n in nones) for r in real):
                return False
        return all(self._main_side(choice, facts, path, function, depth) for choice in chosen) and all(
            # a flag raised in single-process runs only (`external = True`) says how the run was
            # launched, not which process this is
            any(
                self.condition_kind(c, facts, path, a.function, depth - 1)
                in ({MAIN} if _is_bool_literal(a.value) else {MAIN, SINGLE})
                for c in a.conditions
            )
            for a in real
        )

    def _lowered_on_the_others(
        self, raised: list[Assignment], lowered: list[Assignment], facts: ModuleFacts, path: Path, depth: int
    ) -> bool:
        """A flag raised on every process and then lowered on all but the main one (`verbose =
        True`, then `if dist.get_rank() != 0: verbose = False`)."""
        return (
            bool(raised)
            and bool(lowered)
            and all(literal_truth(a.value) is True and not a.conditions for a in raised)
            and max(a.order for a in raised) < min(a.order for a in lowered)
            and all(
                any(self.condition_kind(c, facts, path, a.function, depth - 1) is NOTMAIN for c in a.conditions) for a in lowered
            )
        )

    def _handed_on_main_only(self, name: str, facts: ModuleFacts, path: Path, function: str, depth: int) -> bool:
        """`name` is a parameter that every call of the function fills with a name its caller
        sets on the main process only (`train(model, run)` after `run = start_logger(rank)`)."""
        info = facts.functions.get(function)
        if info is None or name not in info.params:
            return False
        calls = self._calls_of(facts, function)
        for site, module, where in calls:
            value = argument_for(site.node, info.node, name)
            if type(value) is not cst.Name or not self.set_on_main_only(value.value, module, where, site.function, depth):
                return False
        return bool(calls)

    def _returns_on_main_only(self, call: cst.Call, facts: ModuleFacts, path: Path, depth: int) -> bool:
        """The project function the call names returns a real value only on the main process:
        each of its returns is None (or False), under a main-process test, or a name it sets
        on the main process only."""
        name = dotted(call.func)
        resolved = self.ctx.resolve_function(facts, path, facts.qualify(name) or name) if name else None
        if resolved is None:
            return False
        inner, where, function = resolved
        info = inner.functions[function]
        real = False
        for value, conditions in zip(info.returns, info.return_conditions, strict=True):
            if literal_truth(value) is False:
                continue
            named = reference(value) if type(value) is cst.Name else None
            if not (
                any(self.condition_kind(c, inner, where, function, depth) is MAIN for c in conditions)
                or named is not None
                and self.set_on_main_only(named, inner, where, function, depth)
            ):
                return False
            real = True
        return real

    def _main_side(self, choice: cst.IfExp, facts: ModuleFacts, path: Path, function: str, depth: int) -> bool:
        """`x if <test> else None` (or `None if <test> else x`) is not None on the main process only."""
        true, false = self.worlds(choice.test, facts, path, function, depth - 1)
        where = true if dotted(choice.orelse) == "None" else false
        return bool(where) and NOT_MAIN_WORLD not in where

    def _rankish(self, expr, facts: ModuleFacts, path: Path, function: str) -> bool:
        if type(expr) is cst.NamedExpr:
            expr = expr.value
        if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Modulo:
            return self._rankish(expr.left, facts, path, function)
        if type(expr) is cst.Call:
            name = facts.qualify(dotted(expr.func)) or ""
            if GROUP_RANK_CALL.fullmatch(last_part(name)) or last_part(name) in RANK_NAMES:
                return True  # `get_data_parallel_rank()`, a graph or communicator's `g.rank()`
            if name in {"int", "str"} and expr.args:
                return self._rankish(expr.args[0].value, facts, path, function)
            if facts.role_of(expr, function) is None and self._project_rank(facts, path, name):
                return True
        if facts.holds_rank(expr, function):  # also `getattr(opts, "rank")`
            return True
        if type(expr) is cst.Attribute and self._module_rank(expr, facts, path):
            return True
        reference_name = reference(expr) if type(expr) in (cst.Name, cst.Attribute, cst.Subscript) else None
        if reference_name is None:
            return False
        info = facts.functions.get(function)
        if type(expr) is cst.Name and info is not None and expr.value in info.params:
            return expr.value in self._rank_parameters(facts, path, function)
        # `dp_rank = mpu.get_data_parallel_rank()`, then `if dp_rank == 0:`; memoised, and a
        # binding that reads itself (`args.x = int(args.x)`, `a = b; b = a`) adds no rank
        key = (id(facts), function, reference_name)
        if key not in self._named_ranks:
            self._named_ranks[key] = False
            self._named_ranks[key] = any(
                type(b.value) is cst.Call and self._rankish(b.value, facts, path, b.function)
                for b in facts.assigned(reference_name)
                if b.function in {function, ""} or "." in reference_name
            )
        return self._named_ranks[key]

    def _module_rank(self, expr: cst.Attribute, facts: ModuleFacts, path: Path) -> bool:
        """`state.dist_rank` where `state` is a project module whose global holds a rank (bound by
        its setup function under `global dist_rank`)."""
        owner = dotted(expr.value)
        if owner is None or not facts.may_name_a_module(facts.qualify(owner) or owner):
            return False
        found = self.ctx.module_named(facts, path, owner)
        return found is not None and found[0].role_of_name(expr.attr.value, "") in RANKS

    def _rank_parameters(self, facts: ModuleFacts, path: Path, function: str) -> frozenset[str]:
        """Parameters of a function that every call of it in the linted module fills with a rank
        (`setup_logger(name, out, get_rank())` for `def setup_logger(name, save_dir,
        distributed_rank)`): a test of one inside is a rank test. Memoised; a recursive cycle adds
        no rank."""
        key = (id(facts), function)
        if key not in self._rank_params:
            self._rank_params[key] = frozenset()
            calls = self._calls_of(facts, function)
            definition = facts.functions[function].node
            found = set()
            for param in facts.functions[function].params:
                given = [(argument_for(c.node, definition, param), c, f, p) for c, f, p in calls]
                if given and all(a is not None and self._rankish(a, f, p, c.function) for a, c, f, p in given):
                    found.add(param)
            self._rank_params[key] = frozenset(found)
        return self._rank_params[key]

    def _calls_of(self, facts: ModuleFacts, function: str) -> list[tuple[CallSite, ModuleFacts, Path]]:
        """The calls of a function (of the linted module or a project helper), with the module
        each is in: in the linted module; for a helper's function, also in the project modules
        the linted one imports (`default_setup()` calling `setup_logger(..., get_rank())`)."""
        ctx = self.ctx
        if facts is ctx.facts:
            return [(c, ctx.facts, ctx.path) for c in self.callers(facts).get(function, [])]
        if self._project_calls is None:  # every call of those modules, by the function it calls: once
            self._project_calls = {}
            for path, module in [(ctx.path, ctx.facts), *ctx.imported_project_files(depth=2)]:
                for site in module.calls:
                    found = ctx.resolve_function(module, path, ctx.method_target(module, site))
                    if found is not None:
                        self._project_calls.setdefault((id(found.facts), found.function), []).append((site, module, path))
        return self._project_calls.get((id(facts), function), [])

    def _project_rank(self, facts, path, name) -> bool:
        """A project function that returns the rank (`def process_index(): return int(os.environ["RANK"])`);
        memoised, a recursive cycle returns no rank."""
        resolved = self.ctx.resolve_function(facts, path, name)
        if resolved is None:
            return False
        inner_facts, inner_path, function = resolved
        key = (id(inner_facts), function)
        if key not in self._ranks:
            self._ranks[key] = False
            returns = inner_facts.functions[function].returns
            self._ranks[key] = bool(returns) and all(self._rankish(r, inner_facts, inner_path, function) for r in returns)
        return self._ranks[key]

    # -- statements --------------------------------------------------------------------

    def condition_kind(
        self, condition: Condition, facts: ModuleFacts, path: Path, function: str, depth: int = FOLLOW
    ) -> Kind | None:
        """The kind of the branch a condition encloses: its test, or where the test is false."""
        true, false = self.worlds(condition.test, facts, path, function, depth)
        return _kind_of_worlds(false if condition.negated else true)

    def guarded_here(self, site: CallSite, facts: ModuleFacts | None = None, path: Path | None = None) -> bool:
        """Only the main process (or a run without distribution) gets past the site's own guards,
        or the site is the launcher's, which runs once."""
        facts, path = facts or self.ctx.facts, path or self.ctx.path
        return (
            self.own_guards(site, facts, path)
            or self.in_launcher(site, facts, path)
            or self._gated_by_argument(site, facts, path)
        )

    def _gated_by_argument(self, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
        """The call is handed a flag that holds only on the main process, for the callee to gate
        its own writing on (`save_pretrained(out, is_main_process=accelerator.is_main_process)`).
        A project function that only tests that parameter in its own branches is read instead:
        what the flag gates there is known (`train(..., verbose=(rank == 0))` with `if verbose:
        print(...)` gates no save); one that keeps or hands it on gates what it may."""
        resolved = self.ctx.resolve_function(facts, path, self.ctx.method_target(facts, site))
        return any(
            a.keyword is not None
            and _kind_of_worlds(self.worlds(a.value, facts, path, site.function)[0]) is MAIN
            and (resolved is None or not _only_tested(resolved.facts, resolved.function, a.keyword.value))
            for a in site.node.args
        )

    def own_guards(self, event: CallSite | Assignment, facts: ModuleFacts, path: Path) -> bool:
        """The event's tests, an earlier single-process assert or its function's decorator let
        only the main process, or a run without distribution, get there."""
        if any(self.one_process_branch(c, facts, path, event.function) for c in event.conditions):
            return True
        if self.after_single_process_assert(event, facts, path):
            return True
        return self._main_decorated(event.function, facts, path)

    def one_process_branch(self, condition: Condition, facts: ModuleFacts, path: Path, function: str) -> bool:
        """Only the main process, or a single-process run, takes the branch. A branch that wraps
        a model for data-parallel training (DDP, FSDP, itself or in a helper) is distributed
        whatever launch test it looks like: `if args.gpu is not None: ... else: model.cuda();
        model = DDP(model)` splits distributed runs; unless the test's other side starts the
        worker processes."""
        kind = self.condition_kind(condition, facts, path, function)
        if kind is MAIN:
            return True
        if kind is not SINGLE:
            return False
        # the other side of the test starts the workers: this one is the process running alone,
        # whatever it then calls (`if not cfg.multi_gpu: train_loop(0, cfg)`)
        if any(
            any(c.test is condition.test and c.negated != condition.negated for c in site.conditions)
            and self.starts_worker_processes(site, facts, path)
            for site in facts.calls
        ):
            return True
        # (what the branch's own tests say holds inside the call: `else: main_worker(0, args)`
        # under `if args.distributed:` does not reach main_worker's own `if args.distributed:` wrap)
        return not any(
            site.function == function
            and any(c is condition for c in site.conditions)
            and Effect.DATA_PARALLEL in self.summaries.effects(site, facts, path, constants.branch_facts(site.conditions))
            for site in facts.calls
        )

    def starts_worker_processes(self, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
        """`mp.spawn(...)`, a `Process(target=...)`, or a project helper that spawns the workers
        (`distributed_run(train_loop, cfg)`)."""
        return starts_workers(facts, site) or Effect.SPAWNS_WORKERS in self.summaries.effects(site, facts, path)

    def main_only(
        self, site: CallSite, facts: ModuleFacts | None = None, path: Path | None = None, main_first: bool = False
    ) -> bool:
        """No rank but the main one reaches the site: by its guards, or because every caller is guarded.

        A function of this module that nothing here calls is taken as guarded: its callers live
        elsewhere, and a call from the linted script to a project helper is judged at that call.
        """
        facts, path = facts or self.ctx.facts, path or self.ctx.path
        # main_first: also accept sites that never run concurrently (rank 0 first, or under a file lock)
        if self.guarded_here(site, facts, path) or main_first and (site.locked or self.rank_zero_first(site, facts, path)):
            return True
        info = _enclosing_function(facts, site.function)
        if info is None:
            return in_main_block(site) and self.single_process_main(facts, path)
        if not self.callers(facts).get(info.name) and info.name not in self.ctx.spawn_targets(facts):
            # Called from elsewhere. A function that uses the process group unconditionally runs
            # on every rank, and its unconditional writes with it; under a test this analysis
            # cannot read, the write is given the benefit of the doubt.
            return not self._runs_on_every_rank(info.name, facts, path) or any(
                self._may_vary(c, facts, path, site.function) for c in site.conditions
            )
        if site.conditions and self._dark_where_not_main(site, info.name, facts, path, main_first):
            return True
        return self._called_on_main_only(info.name, facts, path, main_first)

    def untrained_mode(self, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
        """The site runs only in a mode of the script that trains nothing: under a configuration
        test whose other side trains while its own side neither trains nor starts a group (`if
        args.mode == "train": train()` / `elif args.mode == "gen": generate()`), itself or at
        every call of its function. The distributed launch a script documents is known for its
        training run only; its other modes may run as one process (`python main.py --mode gen`),
        and where the analysis cannot tell, the write rules stay silent. (A load there is still
        reported: a distributed evaluation that restores onto GPU 0 runs out of memory.)"""
        if any(self._other_mode(c, facts, path, site.function) for c in site.conditions):
            return True
        info = _enclosing_function(facts, site.function)
        if info is None:
            return False
        key = (id(facts), info.name)
        if key not in self._modes:
            self._modes[key] = False  # recursion guard: a caller in a cycle adds nothing
            callers = self.callers(facts).get(info.name, [])
            self._modes[key] = (
                bool(callers)
                and info.name not in self.ctx.spawn_targets(facts)
                and all(self.untrained_mode(c, facts, path) for c in callers)
            )
        return self._modes[key]

    def _other_mode(self, condition: Condition, facts: ModuleFacts, path: Path, function: str) -> bool:
        """The condition's side trains nothing, starts no group and neither runs nor hands on a
        DDP-wrapped model of the module (`if args.eval: evaluate(ddp_model); return` evaluates
        on every rank); its other side trains or runs distributed (`if args.command == "train":
        run(args)` / `elif args.command == "inference": inference_cmd.run(args)`)."""
        if self.condition_kind(condition, facts, path, function) is not None or self._may_vary(condition, facts, path, function):
            return False
        own, other = [], []
        for s in facts.calls_in(function):
            sides = {c.negated for c in s.conditions if c.test is condition.test}
            if condition.negated in sides:
                own.append(s)
            elif sides:
                other.append(s)
        wrapped = {a.target for a in facts.assignments if type(a.value) is cst.Call and facts.callee(a.value) in WRAPPERS}
        quiet = not any(
            self._trains(s, facts, path, 2)
            or self.summaries.effects(s, facts, path) & _DISTRIBUTED_RUN
            or s.name in wrapped
            or any(reference(a.value) in wrapped for a in s.node.args)
            for s in own
        )
        return quiet and any(
            self._trains(s, facts, path, 2) or self.summaries.effects(s, facts, path) & _DISTRIBUTED_RUN for s in other
        )

    def _trains(self, site: CallSite, facts: ModuleFacts, path: Path, depth: int) -> bool:
        """The call runs backward(), itself or in a project function it calls (two calls deep).
        Not a step(): resuming replays a scheduler's steps (`for _ in range(start): sched.step()`)."""
        if site.method == "backward":
            return True
        resolved = self.ctx.resolve_function(facts, path, self.ctx.method_target(facts, site)) if depth else None
        if resolved is None or (resolved.facts is facts and resolved.function == site.function):
            return False
        key = (id(resolved.facts), resolved.function, depth)
        if key not in self._training:
            self._training[key] = False  # recursion guard
            self._training[key] = any(
                self._trains(s, resolved.facts, resolved.path, depth - 1) for s in resolved.facts.calls_within(resolved.function)
            )
        return self._training[key]

    def _may_vary(self, condition: Condition, facts: ModuleFacts, path: Path, function: str) -> bool:
        """The test may differ between the ranks: a rank test, or one whose names value flow may
        connect to a rank. A launch, configuration or file-system test (`if not
        os.path.exists(out):`) is the same on every rank."""
        kind = self.condition_kind(condition, facts, path, function)
        if kind in {MAIN, NOTMAIN}:
            return True
        if kind in {DIST, SINGLE}:
            return False
        names = _names_and_attributes(condition.test)
        return not names or any(self._rankish(n, facts, path, function) for n in names)

    def _dark_where_not_main(self, site: CallSite, function: str, facts: ModuleFacts, path: Path, main_first: bool) -> bool:
        """Every call of the function is main-only or passes constants under which the site's
        branch cannot run (`save_checkpoint(..., save_cur=True)` never reaches the `elif`)."""
        key = (id(facts), id(site.node), main_first)
        if key not in self._dark_for_others:
            self._dark_for_others[key] = False  # recursion guard: a caller in a cycle adds nothing
            callers = self.callers(facts).get(function, [])
            self._dark_for_others[key] = (
                bool(callers)
                and function not in self.ctx.spawn_targets(facts)
                and all(
                    constants.dark(site.conditions, constants.bind_call(c.node, facts, function, {}))
                    or self.main_only(c, facts, path, main_first)
                    for c in callers
                )
            )
        return self._dark_for_others[key]

    def one_process(self, event: CallSite | Assignment) -> bool:
        """Only one process of a run gets here: a single-process run, or the main rank (whose
        GPU 0 is its own). By the event's own guards, or because every call of its function in
        the linted module is such a place; a function nothing here calls may run anywhere."""
        facts, path = self.ctx.facts, self.ctx.path
        if self.own_guards(event, facts, path):
            return True
        if self.in_launcher(event, facts, path) and not self._starts_own_group(event.function, facts, path):
            return True  # the parent of mp.spawn; one that joins a group itself is a rank of some launch
        info = _enclosing_function(facts, event.function)
        if info is None:
            return in_main_block(event) and self.single_process_main(facts, path)
        key = (id(facts), info.name)
        if key not in self._one_process:
            self._one_process[key] = False  # a recursive cycle adds no caller that is one process
            callers = self.callers(facts).get(info.name, [])
            self._one_process[key] = (
                info.name not in self.ctx.spawn_targets(facts) and bool(callers) and all(self.one_process(c) for c in callers)
            )
        return self._one_process[key]

    def single_process_main(self, facts: ModuleFacts, path: Path) -> bool:
        """The module's `__main__` block runs one process: nothing in it, or in what it calls,
        has any effect of a distributed run (starts, uses or destroys a process group, binds a
        GPU, starts workers): a helper module's self-test, `Logger.init(...)` under `if __name__
        == "__main__":`."""
        key = (id(facts), "__main__", False)
        if key not in self._main_functions:
            self._main_functions[key] = False  # recursion guard
            sites = [s for s in facts.calls if in_main_block(s)]
            # module-level code outside the block (`if args.distributed: init_process_group(...)`)
            # has run in every process before the block
            top = [s for s in facts.calls if s.function == "" and not in_main_block(s)]
            self._main_functions[key] = (
                bool(sites)
                and facts.framework is None
                and not any(group_call(s) or Effect.STARTS_GROUP in self.summaries.effects(s, facts, path) for s in top)
                and not self.ctx.spawn_targets(facts)  # (workers, or a runner's callback: `fire.Fire(train)`)
                and not starts_own_workers(facts)
                and not any(group_call(s) or self.summaries.effects(s, facts, path) for s in sites)
            )
        return self._main_functions[key]

    def _called_on_main_only(self, function: str, facts: ModuleFacts, path: Path, main_first: bool) -> bool:
        """Every call of the function in its module is main-only (memoised; a caller in a
        recursive cycle adds nothing). mp.spawn's target runs on every rank."""
        key = (id(facts), function, main_first)
        if key not in self._main_functions:
            self._main_functions[key] = True
            callers = self.callers(facts).get(function, [])
            answer = (
                function not in self.ctx.spawn_targets(facts)
                and bool(callers)
                and all(self.main_only(c, facts, path, main_first) for c in callers)
            )
            self._main_functions[key] = answer
        return self._main_functions[key]

    def _runs_on_every_rank(self, function: str, facts: ModuleFacts, path: Path) -> bool:
        """every_rank, and the constructor of a class one of whose methods runs on every rank:
        each rank that calls the method built its own object (`Trainer(config)` before
        `trainer.train()` starts the group)."""
        if self.every_rank(function, facts, path):
            return True
        cls, _, member = function.rpartition(".")
        return (
            member == "__init__"
            and bool(cls)
            and any(
                name.rpartition(".")[0] == cls and name != function and self.every_rank(name, facts, path)
                for name in facts.functions
            )
        )

    def every_rank(self, function: str, facts: ModuleFacts, path: Path) -> bool:
        """The function starts or uses the process group on every path through it that a
        distributed run takes, so every rank must call it (a rank that did not would leave the
        others waiting): a train() that a launcher elsewhere calls, a trainer's `__init__` whose
        own `self._init_dist()` does, a method whose `dist.barrier()` only a launch test
        guards (`if self.args.use_multi_gpu:`: true on every rank of a distributed run)."""
        key = (id(facts), function)
        if key not in self._every_rank:
            self._every_rank[key] = False  # recursion guard: a cycle adds nothing
            every = [
                site
                for site in facts.calls_in(function)
                if all(self._whenever_distributed(c, facts, path, function) for c in site.conditions)
            ]
            self._every_rank[key] = any(site.name in EVERY_RANK_CALLS for site in every) or any(
                (target := self.ctx.method_target(facts, site)) in facts.functions and self.every_rank(target, facts, path)
                for site in every
            )
        return self._every_rank[key]

    def _whenever_distributed(self, condition: Condition, facts: ModuleFacts, path: Path, function: str) -> bool:
        """Every rank of a distributed run takes the branch; only a single process may not."""
        true, false = self.worlds(condition.test, facts, path, function)
        taken, skipped = (false, true) if condition.negated else (true, false)
        return DIST_WORLDS <= taken and not skipped & DIST_WORLDS

    def in_launcher(self, site: CallSite | Assignment, facts: ModuleFacts, path: Path) -> bool:
        """In the launcher process, the function that spawns the ranks (`os.makedirs(run_dir)`,
        `mp.spawn(worker, ...)`, then the results written): it runs once.

        Only where the spawn decides it: when the spawn runs on every path through the site (it
        is unconditional, or its branch holds the site), or when the function never starts a
        process group in its own process. One that does so on another path (`if args.spawn:
        mp.spawn(...) else: dist.init_process_group(...)`) runs on every rank of a torchrun
        launch, and so do its sites outside the spawn's branch. Running the spawned worker
        itself in the process (`else: worker(0, args)`) is the single-process fallback of a
        launcher, not a group of its own.
        """
        if not site.function and not in_main_block(site):
            return False  # module-level code outside the `__main__` block runs in every spawned process too
        key = (id(facts), site.function)
        if key not in self._spawns:
            self._spawns[key] = [c for c in facts.calls_in(site.function) if self._launches(c, facts, path)]
        spawns = self._spawns[key]
        if not spawns:
            return False
        if any(site.blocks[: len(c.blocks)] == c.blocks for c in spawns):
            return True
        return not self._starts_own_group(site.function, facts, path)

    def _launches(self, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
        """The call starts the ranks: mp.spawn or a worker Process, or a function of the project that
        does so in its own process (`launcher.run()` where `def run(self): mp.spawn(self.worker,
        ...)`), so that its caller is the launcher too (`run = wandb.init(); launcher.run(run)`)."""
        if starts_workers(facts, site):
            return not self._starts_plain_processes(site, facts, path)
        callee = self.callee(site, facts)
        if callee is not None:
            return self._is_launcher(callee, facts, path)
        # `train_distributed(...)` of another project module, which spawns the workers there
        resolved = self.ctx.resolve_function(facts, path, self.ctx.method_target(facts, site))
        if resolved is not None and resolved.facts is not facts:
            return self._is_launcher(resolved.function, resolved.facts, resolved.path)
        return self._hands_a_launcher(site, facts, path)

    def _starts_plain_processes(self, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
        """`Process(target=preprocess, ...)` whose target, a function of the module, does nothing
        of a distributed run (no group, GPU binding, collective or model wrap, itself or in what
        it calls): the workers of a data pipeline, not the ranks."""
        name = dotted(arg(site.node, None, "target")) if process_class(facts, site) else None
        if name is None:
            return False
        target = _nested_function(facts, name, site.function) or (name if name in facts.functions else None)
        return target is not None and not self.summaries.of_function(facts, path, target, {})

    def _hands_a_launcher(self, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
        """`study.optimize(objective, n_trials=...)`: a library call handed a function of the
        module that spawns the ranks, or an object whose `__call__` does, runs it here."""
        for a in site.node.args:
            if type(a.value) is not cst.Name:
                continue
            name = a.value.value
            handed = [name] if name in facts.functions else []
            for b in facts.reaching(name, site.function, site.order, site.blocks):
                if type(b.value) is cst.Call and f"{dotted(b.value.func)}.__call__" in facts.functions:
                    handed.append(f"{dotted(b.value.func)}.__call__")
            if any(self._is_launcher(function, facts, path) for function in handed):
                return True
        return False

    def _is_launcher(self, function: str, facts: ModuleFacts, path: Path) -> bool:
        key = (id(facts), function)
        if key not in self._launchers:
            self._launchers[key] = False  # a recursive cycle starts nothing
            self._launchers[key] = any(
                self._launches(c, facts, path) and (not c.conditions or not self._starts_own_group(function, facts, path))
                for c in facts.calls_in(function)
            )
        return self._launchers[key]

    def callee(self, site: CallSite, facts: ModuleFacts) -> str | None:
        """The function of the module a call site calls, as the call graph resolves it."""
        key = id(facts)
        if key not in self._callees:
            self._callees[key] = {id(c.node): function for function, sites in self.callers(facts).items() for c in sites}
        return self._callees[key].get(id(site.node))

    def _starts_own_group(self, function: str, facts: ModuleFacts, path: Path) -> bool:
        """The function starts a process group that several processes join, itself or through a
        helper other than the worker it spawns (the group of workers that mp.spawn starts, of
        this module or another, is theirs, also when a helper spawns them: `ddp.mp_train(...)`)."""
        key = (id(facts), function)
        if key not in self._own_group:
            workers = self.ctx.spawn_targets(facts)
            self._own_group[key] = False  # a recursive cycle starts nothing
            self._own_group[key] = any(
                self.ctx.method_target(facts, c) not in workers
                and not starts_workers(facts, c)
                and Effect.STARTS_GROUP in self.summaries.effects(c, facts, path)
                and not self._launches(c, facts, path)
                for c in facts.calls_in(function)
            )
        return self._own_group[key]

    def rank_zero_first(self, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
        """Between `if rank != 0: barrier()` and a later `if rank == 0: barrier()`: rank 0 runs
        the site alone, the others only after it is done (filling a download cache)."""
        before = after = False
        for other in facts.calls_in(site.function):
            if other.name != BARRIER:
                continue
            kinds = {self.condition_kind(c, facts, path, other.function) for c in other.conditions}
            before = before or other.order < site.order and NOTMAIN in kinds
            after = after or other.order > site.order and MAIN in kinds
        return before and after

    def rank_conditional(self, site: CallSite) -> bool:
        """The site runs on some ranks and not others: under a main-process guard or its negation."""
        facts, path = self.ctx.facts, self.ctx.path
        for condition in site.conditions:
            if self.condition_kind(condition, facts, path, site.function) in {MAIN, NOTMAIN}:
                return True
        return self._main_decorated(site.function, facts, path)

    def safe_helper(self, site: CallSite) -> bool:
        """A call to a helper the user declared as main-process only (`extend-main-process-helpers`)."""
        return self._declared(dotted(site.node.func), self.ctx.facts, self._helpers)

    def _main_decorated(self, scope: str, facts: ModuleFacts, path: Path) -> bool:
        """The function around the scope carries a decorator that lets only the main process run it."""
        info = _enclosing_function(facts, scope)
        return info is not None and any(self._main_decorator(d, info.name, facts, path) for d in info.decorators)

    def _main_decorator(self, name: str, function: str, facts: ModuleFacts, path: Path) -> bool:
        last = name.rsplit(".", 1)[-1]
        if last in MAIN_DECORATORS or name in self._helpers or last in self._helpers:
            return True
        # a project decorator, in the class body (`@_parallel_mask`), the module or another module
        owner = function.rpartition(".")[0]
        local = f"{owner}.{name}" if owner and f"{owner}.{name}" in facts.functions else name
        resolved = self.ctx.resolve_function(facts, path, local)
        return resolved is not None and self._masks_to_main(*resolved)

    def _masks_to_main(self, facts: ModuleFacts, path: Path, decorator: str) -> bool:
        """The decorator's wrapper calls the function it wraps only under a main-process test
        (`if self.rank_id == 0: return func(self, *args)`)."""
        key = (id(facts), decorator)
        if key not in self._masks:
            self._masks[key] = False  # a decorator that decorates itself
            info = facts.functions[decorator]
            wrapped = info.params[0] if info.params else None
            calls = [
                c for c in facts.calls_within(decorator) if wrapped is not None and c.name == wrapped and c.function != decorator
            ]
            self._masks[key] = bool(calls) and all(
                any(self.condition_kind(c, facts, path, site.function) is MAIN for c in site.conditions) for site in calls
            )
        return self._masks[key]

    def _declared(self, raw: str | None, facts: ModuleFacts, declared: set[str]) -> bool:
        if not raw or not declared:
            return False
        qualified = facts.qualify(raw) or raw
        return bool({raw, qualified, raw.rsplit(".", 1)[-1]} & declared)

    # -- call graph --------------------------------------------------------------------

    def callers(self, facts: ModuleFacts) -> dict[str, list[CallSite]]:
        """Function name -> the call sites in the same module that call it."""
        key = id(facts)
        if key not in self._callers:
            self._callers[key] = _callers(facts)
        return self._callers[key]

    def run_order(self, facts: ModuleFacts, site: CallSite) -> tuple[float, ...]:
        """Where the site first runs in a run of the module: the orders of the calls that first
        reach its function from module level, outermost first, then its own. `logger =
        make_logger()` in `main()` runs before the `Evaluator()` of `run()` that `main()` calls
        later, though `run` is written above `main`. Functions nothing here calls come last."""
        return (*self._reached_at(facts, site.function, frozenset()), site.order)

    def _reached_at(self, facts: ModuleFacts, function: str, visiting: frozenset[str]) -> tuple[float, ...]:
        if not function:
            return ()
        key = (id(facts), function)
        if key not in self._reached:
            chains = [
                (*self._reached_at(facts, c.function, visiting | {function}), c.order)
                for c in self.callers(facts).get(function, [])
                if c.function not in visiting and c.function != function
            ]
            self._reached[key] = min(chains, default=(math.inf,))
        return self._reached[key]


def _callers(facts: ModuleFacts) -> dict[str, list[CallSite]]:
    instances: dict[str, str] = {}  # `trainer` -> "Trainer" for `trainer = Trainer(...)`
    classes = {name.split(".")[0] for name in facts.functions if "." in name}
    for a in facts.assignments:
        if type(a.value) is cst.Call:
            cls = dotted(a.value.func)
            if cls in classes:
                instances[a.target] = cls
    out: dict[str, list[CallSite]] = {}
    for site in facts.calls:
        if site.name is None:
            method = constructed_method(facts, site.node)
            if method is not None:
                out.setdefault(method, []).append(site)
            continue
        if site.name in facts.functions:
            out.setdefault(site.name, []).append(site)
            continue
        nested = _nested_function(facts, site.name, site.function)
        if nested is not None:
            out.setdefault(nested, []).append(site)
            continue
        if f"{site.name}.__init__" in facts.functions:  # constructing the class runs __init__
            out.setdefault(f"{site.name}.__init__", []).append(site)
            continue
        receiver, _, method = site.name.rpartition(".")
        if not receiver:
            continue
        if receiver in {"self", "cls"}:
            cls = site.function.split(".")[0]
        else:
            cls = instances.get(receiver)
        if cls is not None and f"{cls}.{method}" in facts.functions:
            out.setdefault(f"{cls}.{method}", []).append(site)
    return out


def _nested_function(facts: ModuleFacts, name: str, function: str) -> str | None:
    """The function a bare name in `function` means when it is defined inside that function or
    one around it (`def run(): def test(loader): ...; test(val_loader)`); a class body is no
    enclosing scope."""
    if "." in name:
        return None
    scope = function
    while scope:
        if scope in facts.functions and f"{scope}.{name}" in facts.functions:
            return f"{scope}.{name}"
        scope = scope.rpartition(".")[0]
    return None


def _enclosing_function(facts: ModuleFacts, scope: str):
    """The innermost function around a scope ("Trainer.train" -> its FunctionInfo)."""
    while scope:
        if scope in facts.functions:
            return facts.functions[scope]
        scope = scope.rpartition(".")[0]
    return None


DIST_WORLDS = frozenset({MAIN_WORLD, NOT_MAIN_WORLD})


def _names_and_attributes(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The outermost names, attributes and calls a test reads."""
    found: list[cst.BaseExpression] = []
    pending: list[cst.CSTNode] = [test]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.Name, cst.Attribute, cst.Call)):
            found.append(node)
        else:
            pending.extend(node.children)
    return found


def _disjuncts(expr: cst.BaseExpression) -> set[str]:
    """The names `a or b or c` is true by."""
    if type(expr) is cst.BooleanOperation and type(expr.operator) is cst.Or:
        return _disjuncts(expr.left) | _disjuncts(expr.right)
    name = reference(expr)
    return {name} if name is not None else set()


def _atom(kind: Kind | None) -> tuple[frozenset[str], frozenset[str]]:
    return KIND_WORLDS.get(kind, (ALL, ALL))


def _kind_of_worlds(true: frozenset[str]) -> Kind | None:
    """Name the set of worlds where a branch runs."""
    if not true or true == ALL:
        return None
    if NOT_MAIN_WORLD not in true:
        return MAIN if MAIN_WORLD in true else SINGLE
    if MAIN_WORLD not in true:
        return NOTMAIN  # {N}, or {S, N}: off the main rank whenever distributed
    return DIST if SINGLE_WORLD not in true else None


def _int_constant(expr: cst.BaseExpression, facts: ModuleFacts, function: str) -> cst.BaseExpression:
    """`self.ROOT_RANK` in a method of a class whose body sets `ROOT_RANK = 0`, or a name that
    one binding in reach sets to an integer (`save_rank = 0`, then `rank == save_rank`): the literal."""
    name = dotted(expr)
    if type(expr) is cst.Name and name is not None:
        params = (facts.functions[s].params for s in enclosing_scopes(function) if s in facts.functions)
        values = [] if any(name in p for p in params) else facts.visible(name, function)
        if any(v.function == "" for v in values) and any(name in f.declared_global for f in facts.functions.values()):
            return expr  # a module global that a function rebinds (`global dist_rank` in setup())
    elif name is None or not name.startswith("self.") or name.count(".") != 1 or "." not in function:
        return expr
    else:
        values = facts.assigned(f"{function.split('.')[0]}.{name[5:]}")
    literal = values[0].value if len(values) == 1 else None
    return literal if literal is not None and int_value(literal) is not None else expr


def _module_constant(name: str, facts: ModuleFacts) -> bool:
    """A module global bound once, to an integer (`OFFSET = 1`): the same on every process."""
    values = facts.assigned(name)
    return len(values) == 1 and values[0].function == "" and int_value(values[0].value) is not None


def _is_zero_set(expr: cst.BaseExpression) -> bool:
    """`[0]`, `(-1, 0)`, `{0, -1}`: the ranks of the main process, with or without a launcher;
    `[0, "cuda:0"]`: its GPU, by index or by name (a rank that also names a device)."""
    if not isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        return False
    values = set()
    for element in expr.elements:
        value = element.value
        if type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus:
            number = int_value(value.expression)
            values.add(-number if number is not None else None)
        elif _text(value) == "cuda:0":
            values.add(0)
        else:
            values.add(int_value(value))
    return 0 in values and values <= {0, -1}


def _text(expr: cst.BaseExpression) -> str | None:
    """A string literal's value, also of an f-string without a placeholder (`f"cuda:0"`)."""
    if type(expr) is cst.FormattedString:
        texts = [part.value for part in expr.parts if type(part) is cst.FormattedStringText]
        return "".join(texts) if len(texts) == len(expr.parts) else None
    return string_value(expr)


def _is_world(expr: cst.BaseExpression, facts: ModuleFacts, function: str) -> bool:
    if facts.role_of(expr, function) is Role.WORLD_SIZE:  # `int(os.environ.get("WORLD_SIZE", 1))`
        return True
    if type(expr) is cst.Call:
        expr = expr.func
    name = facts.qualify(dotted(expr)) or ""
    return name.rsplit(".", 1)[-1] in WORLD_NAMES


def _world_test(left, op, right, facts: ModuleFacts, function: str) -> Kind | None:
    """The world size against 1 or 2, either side: `world_size > 1`, `world_size < 2`, `1 < n_gpus`."""
    flip = int_value(left) in (1, 2) and _is_world(right, facts, function)
    if flip:
        left, right = right, left
    kind = _FLIPPED.get(type(op), type(op)) if flip else type(op)
    if not _is_world(left, facts, function):
        return None
    bound = int_value(right)
    if bound == 1 and kind in (cst.Equal, cst.LessThanEqual) or bound == 2 and kind is cst.LessThan:
        return SINGLE
    if bound == 1 and kind in (cst.NotEqual, cst.GreaterThan) or bound == 2 and kind is cst.GreaterThanEqual:
        return DIST
    return None


def _bitwise_of_tests(expr: cst.BaseExpression) -> bool:
    """`(loss < best) & (args.local_rank == 0)`: `&` / `|` between comparisons is `and` / `or`."""
    return (
        type(expr) is cst.BinaryOperation
        and type(expr.operator) in (cst.BitAnd, cst.BitOr)
        and all(type(side) is cst.Comparison or _bitwise_of_tests(side) for side in (expr.left, expr.right))
    )


def _set_by_callee(name: str, facts: ModuleFacts, function: str) -> list[Assignment]:
    """`configs.is_master_node` set by a function of the module that this one hands `configs`
    to (`setup(gpu, configs)` binding `configs.is_master_node = ...` on its parameter): those
    bindings, read where they are made."""
    root, _, rest = name.partition(".")
    if not rest:
        return []
    found: list[Assignment] = []
    for call in facts.calls_in(function):
        info = facts.functions.get(call.name or "")
        if info is None:
            continue
        for a in call.node.args:
            param = parameter_for(call.node, info.node, a) if not a.star and reference(a.value) == root else None
            found += [b for b in facts.assigned(f"{param}.{rest}") if b.function == info.name] if param else []
    return found


def _same_object(name: str, assigned_in: str, read_in: str) -> bool:
    """`self.save_to_disk` set in one method of a class and read in another: the same object's."""
    owner = read_in.rpartition(".")[0]
    return name.startswith("self.") and bool(owner) and assigned_in.rpartition(".")[0] == owner


def _is_bool_literal(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Name and expr.value in {"True", "False"}


def _minus_one(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus and int_value(expr.expression) == 1


_FLIPPED = {
    cst.LessThan: cst.GreaterThan,
    cst.GreaterThan: cst.LessThan,
    cst.LessThanEqual: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThanEqual,
}


def _other_side(first: Assignment, second: Assignment) -> bool:
    """The two bindings sit on the two sides of the same innermost test."""
    if not first.conditions or not second.conditions:
        return False
    a, b = first.conditions[-1], second.conditions[-1]
    return a.test is b.test and a.negated != b.negated


def _against_bool(test: cst.Comparison) -> bool | None:
    """`x == True` / `x is True` / `x != False`: True (the test is `x`); `x == False`, `x is not
    True`: False (the test is `not x`); None for any other comparison."""
    if len(test.comparisons) != 1 or type(test.comparisons[0].comparator) is not cst.Name:
        return None
    value = cst.ensure_type(test.comparisons[0].comparator, cst.Name).value
    operator = type(test.comparisons[0].operator)
    if value not in {"True", "False"} or operator not in {cst.Equal, cst.Is, cst.NotEqual, cst.IsNot}:
        return None
    return (value == "True") == (operator in {cst.Equal, cst.Is})


def _only_tested(facts: ModuleFacts, function: str, param: str, seen: frozenset[str] = frozenset()) -> bool:
    """The function reads its parameter only as the test of its own branches (`if verbose:`),
    directly or through a flag it derives and only tests (`logging_on = run is not None`):
    nothing else keeps it, hands it on or returns it."""
    info = facts.functions[function]
    seen = seen | {param}
    for a in facts.assignments_within(function):
        if param not in names_in(a.value):
            continue
        derived = computed_test(a.value) and "." not in a.target and a.target not in seen
        if not (derived and _only_tested(facts, function, a.target, seen)):
            return False
    handed = [a.value for c in facts.calls_within(function) for a in c.node.args]
    return not any(param in names_in(value) for value in [*handed, *info.returns])
