"""One pass over a module that answers the questions every rule asks.

Rules never walk the tree themselves: they read the call sites, assignments, functions and
rank names recorded here. Each call site carries the conditions and loops that enclose it, so
guard recognition (`guards.py`) and loop questions need no second walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import libcst as cst

from ddplint.lint.names import (
    arg,
    data_name,
    dotted,
    format_call,
    int_value,
    names_in,
    other_device_type,
    over_range,
    reference,
    string_value,
)
from ddplint.lint.roles import (
    CALL_ROLES,
    ENV_ROLES,
    FIELD_ROLES,
    LOCAL_RANK_FLAGS,
    NAME_ROLES,
    RANK_NAMES,
    RANKS,
    Role,
    last_part,
)
from ddplint.lint.vocabulary import (
    CANONICAL,
    DDP,
    DEVICE_CONTEXTS,
    DIST,
    ENTRY_RUNNERS,
    EXECUTORS,
    FILE_LOCKS,
    FRAMEWORK_CALLS,
    FRAMEWORK_IMPORTS,
    FRAMEWORK_MODULES,
    FRAMEWORK_RUNNERS,
    INIT_PG,
    NETWORK_READS,
    NOT_DISTRIBUTED,
    OS_LOCKS,
    PROCESS_CLASSES,
    PROCESS_CONTEXTS,
    RPC,
    SAMPLER,
    SPAWN,
)
from ddplint.lint.walk import Walker


@dataclass(frozen=True)
class Condition:
    """An `if` test that encloses a statement; `negated` for its else branch or early exit."""

    test: cst.BaseExpression
    negated: bool


@dataclass(frozen=True)
class CallSite:
    node: cst.Call
    name: str | None  # resolved dotted name of the callee: "torch.distributed.barrier", "model.cuda"
    method: str | None  # last attribute of the callee, e.g. "cuda", "to", "save"
    function: str  # enclosing function's dotted name; "" at module level
    order: int  # position in source order among recorded events
    conditions: tuple[Condition, ...]
    loops: tuple[cst.For | cst.While, ...]
    caught: frozenset[str] = frozenset()  # exceptions caught around it: "FileExistsError", "OSError"
    locked: bool = False  # inside `with FileLock(...)`: one process at a time
    blocks: tuple[int, ...] = ()  # the branches around it, outermost first (paths.py)
    in_default: bool = False  # part of a parameter's default value: runs only for calls that omit it
    in_handler: bool = False  # inside an `except` clause: runs only when something failed
    inner_names: frozenset[str] = frozenset()  # bound by the lambdas and comprehensions around it
    # id() of the calls whose callee or arguments hold this one (it runs before them), up to a lambda
    within_calls: tuple[int, ...] = ()


@dataclass(frozen=True)
class Assert:
    """`assert local_rank == -1, "not with DDP"`: what a branch promises about its processes."""

    test: cst.BaseExpression
    function: str
    order: int
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Assignment:
    """A binding of a name, an attribute (`args.gpu`) or a constant key (`opt["rank"]` as `opt.rank`)."""

    target: str  # dotted target: "local_rank", "args.gpu", "self.gpu_id", "opt.rank"
    value: cst.BaseExpression
    function: str
    order: int
    conditions: tuple[Condition, ...]
    loops: tuple[cst.For | cst.While, ...] = ()
    blocks: tuple[int, ...] = ()
    element: bool = False  # a `for` target: holds one element of `value`, not `value` itself
    position: int | None = None  # `rank, world = setup()`: the element of the tuple `value` returns


@dataclass(frozen=True)
class ItemStore:
    """`state[k] = v` with a key that is not a constant: the container receives the value."""

    container: str  # dotted: "new_state_dict", "self.buffers"
    value: cst.BaseExpression
    function: str


@dataclass(frozen=True)
class Loop:
    node: cst.For | cst.While
    function: str
    order: int
    blocks: tuple[int, ...]


@dataclass
class FunctionInfo:
    name: str  # dotted, e.g. "Trainer._save" or "main"
    node: cst.FunctionDef
    params: tuple[str, ...]
    decorators: tuple[str, ...]  # resolved dotted names
    returns: list[cst.BaseExpression] = field(default_factory=list)  # values of its own `return`s
    return_conditions: list[tuple[Condition, ...]] = field(default_factory=list)  # the tests around each, as `returns`
    declared_global: set[str] = field(default_factory=set)  # its `global` names: bindings of the module's own


@dataclass
class ModuleFacts:
    imports: dict[str, str] = field(default_factory=dict)  # alias -> qualified name
    imported_modules: set[str] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)  # `comm = MPI.COMM_WORLD` -> qualified name
    options: dict[str, cst.BaseExpression] = field(default_factory=dict)  # argparse dest -> default=
    calls: list[CallSite] = field(default_factory=list)
    assignments: list[Assignment] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    bases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # class (dotted) -> its base classes, qualified
    # class (dotted) -> the fields a @dataclass keeps, in order: its constructor's parameters
    dataclass_fields: dict[str, tuple[str, ...]] = field(default_factory=dict)
    env_reads: set[str] = field(default_factory=set)  # os.environ["X"], os.getenv("X"), ...
    env_writes: dict[str, list[Assignment]] = field(default_factory=dict)  # os.environ["X"] = value
    env_names: set[str] = field(default_factory=set)  # launcher variables named in any string literal
    roles: dict[tuple[str, str], Role] = field(default_factory=dict)  # (function or "*", name) -> role
    framework: str | None = None
    optional_imports: set[str] = field(default_factory=set)  # local names imported under an `if` test
    is_distributed: bool = False
    rpc_only: bool = False  # RPC workers and no process group or DDP replica: not data-parallel
    is_script: bool = False  # has an `if __name__ == "__main__":` block
    names_read: set[str] = field(default_factory=set)  # every name the module's code mentions (not a def's own name)
    item_stores: list[ItemStore] = field(default_factory=list)
    download_items: set[int] = field(default_factory=set)  # id() of `with urlopen(u) as src, open(p, "wb")` items
    attributes: set[str] = field(default_factory=set)  # `x.<name>` (x not self nor a module), `x["<name>"]`
    asserts: list[Assert] = field(default_factory=list)
    arms: dict[int, tuple[int, int]] = field(default_factory=dict)  # block of an if/else arm -> both arms
    failing: set[int] = field(default_factory=set)  # blocks of the `except` clauses that end raising an error of their own
    # indexes built once after the walk, so that rules look bindings up instead of scanning
    by_target: dict[str, list[Assignment]] = field(default_factory=dict)
    by_scope: dict[tuple[str, str], list[Assignment]] = field(default_factory=dict)  # (function, target) -> its bindings
    by_value: dict[int, list[Assignment]] = field(default_factory=dict)  # id(value node) -> its bindings
    by_loop: dict[int, list[Assignment]] = field(default_factory=dict)  # id(loop) -> bindings inside it
    _calls_within: dict[str, list[CallSite]] = field(default_factory=dict)  # function -> its and nested calls
    _assignments_within: dict[str, list[Assignment]] = field(default_factory=dict)
    _outer_scopes: set[str] = field(default_factory=set)  # names that enclose a function
    _calls_in: dict[str, list[CallSite]] = field(default_factory=dict)  # function ("" module) -> its own calls
    _calls_named: dict[str | None, list[CallSite]] = field(default_factory=dict)  # callee -> its calls
    by_data_name: dict[str | None, list[CallSite]] = field(default_factory=dict)  # names.data_name(callee) -> its calls
    loaders_by_sampler: dict[int | str, list[int]] | None = None  # loaders.loader_calls_given, built on first use
    method_targets: dict[int, str | None] = field(default_factory=dict)  # id(call) -> LintContext.method_target
    _asking: set[str] = field(default_factory=set)  # roles being worked out (_env_role): a recursion guard
    _import_heads: frozenset[str] = frozenset()  # first parts of the names its imports and aliases bind

    # -- name resolution -------------------------------------------------------------

    def may_name_a_module(self, qualified: str) -> bool:
        """Whether a qualified name of this module can stand for a module (or a name in one):
        relative, or headed by what an import or a module-level alias binds. `model.train()`
        on a local `model` names no module, whatever files lie next to the script."""
        return qualified.startswith(".") or qualified.partition(".")[0] in self._import_heads

    def qualify(self, name: str | None) -> str | None:
        """Resolve the head of a dotted name through the import table and module-level aliases."""
        if name is None:
            return None
        head, _, rest = name.partition(".")
        base = self.imports.get(head) or self.aliases.get(head)
        if base is None:
            return name
        full = f"{base}.{rest}" if rest else base
        return CANONICAL.get(full, full)

    def callee(self, call: cst.Call) -> str | None:
        return self.qualify(dotted(call.func))

    def calls_to(self, name: str) -> list[CallSite]:
        """The calls of this callee (its qualified name)."""
        return self._calls_named.get(name, [])

    # -- bindings --------------------------------------------------------------------

    def with_bindings(self, extra: list[Assignment], roles: dict[tuple[str, str], Role] | None = None) -> ModuleFacts:
        """A copy that also holds `extra` bindings (made through calls) and `roles` (known
        through calls: the process index of a function a project helper spawns), indexed and
        with the roles they give; this one is left as it is."""
        copy = replace(
            self,
            assignments=[*self.assignments, *extra],
            roles={**self.roles, **(roles or {})},
            by_target={},
            by_scope={},
            by_value={},
            by_loop={},
            _calls_within={},
            _assignments_within={},
            _calls_in={},
            _calls_named={},
            by_data_name={},
            loaders_by_sampler=None,
            method_targets={},
            _asking=set(),
        )
        copy.assignments.sort(key=lambda a: a.order)
        _index(copy)
        _infer_roles(copy)
        return copy

    def assigned(self, target: str) -> list[Assignment]:
        """Every binding of `target` in the module, in source order."""
        return self.by_target.get(target, [])

    def bindings_of(self, value: cst.CSTNode) -> list[Assignment]:
        """The bindings whose value is this very node (`loader = DataLoader(...)`), or one side
        of it (`sampler = DistributedSampler(ds) if distributed else None`)."""
        return self.by_value.get(id(value), [])

    def calls_in(self, function: str) -> list[CallSite]:
        """The calls whose innermost enclosing function is `function` ("" for module level)."""
        return self._calls_in.get(function, [])

    def calls_within(self, scope: str) -> list[CallSite]:
        """The calls in a function or class, and in the functions nested in it."""
        return self._calls_within.get(scope, [])

    def assignments_within(self, scope: str) -> list[Assignment]:
        return self._assignments_within.get(scope, [])

    def has_members(self, scope: str) -> bool:
        """A class (or function) of that dotted name defines functions inside it."""
        return scope in self._outer_scopes

    def reaching(self, target: str, function: str, order: int, blocks: tuple[int, ...]) -> list[Assignment]:
        """The bindings of `target` that can reach a use at (`function`, `order`, `blocks`).

        Within the function: the last binding on every path to the use (one in an enclosing
        block, earlier), and the later ones in branches that may or may not have run. Without
        any, the module-level bindings (a global, or an attribute set elsewhere).
        """
        here = [a for a in self.by_scope.get((function, target), ()) if a.order < order]
        dominating = [a for a in here if _prefix(a.blocks, blocks)]
        start = dominating[-1].order if dominating else -1
        later = [a for a in here if a.order > start and not _prefix(a.blocks, blocks)]
        cut = self._rebound_on_every_arm(later, blocks) if later else None
        if cut is not None:  # `if c: x = a` / `else: x = b` before the use: what came before is gone
            return [a for a in here if a.order >= cut]
        if dominating:
            return [a for a in here if a.order >= start]
        if here:
            return here
        return self.assigned(target) if "." in target else self.by_scope.get(("", target), [])

    def _rebound_on_every_arm(self, later: list[Assignment], blocks: tuple[int, ...]) -> int | None:
        """The first binding of the last if/else (elif chains included) before the use, not
        around it, that binds the name on each of its arms; None when there is none."""
        bound = {a.blocks for a in later}
        found = None
        for a in later:
            depth = next((d for d in range(len(a.blocks)) if a.blocks[d] not in blocks), None)
            if depth is None or not _prefix(a.blocks[:depth], blocks) or a.blocks[depth] not in self.arms:
                continue
            outer, arms = a.blocks[:depth], self.arms[a.blocks[depth]]
            if all(_binds_in(bound, (*outer, arm), self.arms) for arm in arms):
                first = min(b.order for b in later if b.blocks[: depth + 1] in {(*outer, arm) for arm in arms})
                found = first if found is None else max(found, first)
        return found

    def replaced_unread(self, binding: Assignment) -> bool:
        """The name is bound again in the same block before anything reads it (a line pasted
        twice, `sampler = DistributedSampler(ds)` on two lines): the first value is never used."""
        if "." in binding.target:
            return False  # an attribute: read by other methods too
        later = [a for a in self.by_scope.get((binding.function, binding.target), ()) if a.order > binding.order]
        if not later or later[0].blocks != binding.blocks or later[0].loops != binding.loops:
            return False
        name, end = binding.target, later[0].order

        def reads(found: set[str]) -> bool:
            return any(n == name or n.startswith(name + ".") for n in found)

        info = self.functions.get(binding.function)
        events: list[CallSite | Assignment] = [*self.calls_in(binding.function), *self.assignments_within(binding.function)]
        loops = [loop.node.iter for loop in self.loops if loop.function == binding.function and type(loop.node) is cst.For]
        return not (
            reads(names_in(later[0].value))
            or any(reads(names_read(e)) for e in events if binding.order < e.order < end)
            or any(reads(names_in(expr)) for expr in [*loops, *(info.returns if info is not None else ())])
        )

    def visible(self, target: str, function: str) -> list[Assignment]:
        """The bindings of `target` that a read in `function` can see: its own, its enclosing
        functions' and the module's; every binding of an attribute (`self.out`, `args.dir`)."""
        if "." in target:
            return self.assigned(target)
        scopes = ("", *(s for s in enclosing_scopes(function) if s in self.functions))  # a class body is no scope of its methods
        return [a for scope in scopes for a in self.by_scope.get((scope, target), ())]

    def reads_global(self, name: str, function: str) -> bool:
        """A read of `name` in `function` reads the module's own binding: the module binds it at
        its top level, and neither the function nor one around it binds it or takes it as a
        parameter."""
        if function not in self.functions:
            return False
        scopes = [s for s in enclosing_scopes(function) if s in self.functions]
        if any(name in self.functions[s].params for s in scopes):
            return False
        seen = self.visible(name, function)
        return bool(seen) and all(a.function == "" for a in seen)

    # -- roles -----------------------------------------------------------------------

    def role_of_name(self, name: str, function: str) -> Role | None:
        for key in ((function, name), ("", name), ("*", name)):
            if key in self.roles:
                return self.roles[key]
        last = last_part(name)
        return NAME_ROLES.get(last) or (ENV_ROLES.get(last) if "." in name else None)  # `cfg.LOCAL_RANK`

    def role_of(self, expr: cst.BaseExpression | None, function: str) -> Role | None:
        """What an expression holds: a rank, the world size, a main-process flag, a local device."""
        if expr is None:
            return None
        if type(expr) is cst.NamedExpr:
            return self.role_of(expr.value, function)
        env = self.env_read(expr)
        if env is not None:
            return self._env_role(env)
        if type(expr) in (cst.Name, cst.Attribute, cst.Subscript):
            name = reference(expr)
            if name is None and type(expr) is cst.Subscript:
                return self._picked_by_local_rank(expr, function)
            if name is None or self.qualify(name) == "os.environ":
                return None
            return self.role_of_name(name, function)
        if type(expr) is cst.Call:
            if format_call(expr):
                return self._formatted([a.value for a in expr.args], function)  # "cuda:{}".format(rank)
            callee = self.callee(expr)
            if callee == "torch.distributed.get_rank" and not expr.args and self._group_of_local_ranks():
                return Role.LOCAL_RANK
            if callee in CALL_ROLES:
                return CALL_ROLES[callee]
            if callee in {"int", "str"} and expr.args:
                return self.role_of(expr.args[0].value, function)
            if callee == "torch.device":
                index = arg(expr, 1, "index")
                if other_device_type(arg(expr, 0, "type")):
                    return None
                role = self.role_of(index if index is not None else arg(expr, 0, "type"), function)
                return Role.LOCAL_DEVICE if role in {Role.LOCAL_RANK, Role.LOCAL_DEVICE} else role
            return None
        if type(expr) is cst.BinaryOperation:
            return self._arithmetic(expr, function)
        if type(expr) is cst.FormattedString:
            if other_device_type(expr):
                return None  # f"npu:{rank}"
            return self._formatted([p.expression for p in expr.parts if type(p) is cst.FormattedStringExpression], function)
        if type(expr) is cst.Comparison:
            if any(int_value(c.comparator) == 0 for c in expr.comparisons) and self.role_of(expr.left, function) in RANKS:
                return Role.MAIN_FLAG
            return None
        if type(expr) is cst.IfExp:
            return self.role_of(expr.body, function) or self.role_of(expr.orelse, function)
        return None

    def _picked_by_local_rank(self, expr: cst.Subscript, function: str) -> Role | None:
        """The entry of a per-node list that the local rank picks (`cfg.gpus[local_rank]`, a
        spawned worker's `devices[rank]`) is a device of this process's own, where it is used
        as one; an entry picked by the global rank is not known to be."""
        if len(expr.slice) != 1 or type(expr.slice[0].slice) is not cst.Index:
            return None
        if self.qualify(dotted(expr.value) or "") == "os.environ":
            return None
        return Role.LOCAL_DEVICE if self.role_of(expr.slice[0].slice.value, function) is Role.LOCAL_RANK else None

    def _formatted(self, values: list[cst.BaseExpression], function: str) -> Role | None:
        """A string built from values (`f"cuda:{local_rank}"`): a device of this rank's own if one
        is the local rank, the global rank's if one is that."""
        for value in values:
            role = self.role_of(value, function)
            if role in {Role.LOCAL_RANK, Role.LOCAL_DEVICE}:
                return Role.LOCAL_DEVICE
            if role is Role.GLOBAL_RANK:
                return role
        return None

    def _arithmetic(self, expr: cst.BinaryOperation, function: str) -> Role | None:
        """`rank % gpus_per_node` is a GPU of this node; `node * gpus_per_node + gpu` and
        `rank + offset` stay unique over all nodes; `"cuda:%d" % rank` formats a device."""
        if type(expr.operator) is cst.Modulo and string_value(expr.left) is not None:
            values = [e.value for e in expr.right.elements] if type(expr.right) is cst.Tuple else [expr.right]
            return self._formatted(values, function)
        left, right = self.role_of(expr.left, function), self.role_of(expr.right, function)
        if type(expr.operator) is cst.Modulo:
            return Role.LOCAL_RANK if left in RANKS else None
        if type(expr.operator) is cst.Add:
            if Role.GLOBAL_RANK in (left, right):
                return Role.GLOBAL_RANK
            scaled = [side for side, role in ((expr.left, right), (expr.right, left)) if role is Role.LOCAL_RANK]
            if any(type(s) is cst.BinaryOperation and type(s.operator) is cst.Multiply for s in scaled):
                return Role.GLOBAL_RANK  # node_rank * gpus_per_node + local_rank
        return None

    def _env_role(self, env: str) -> Role | None:
        """What the launcher's variable holds; `RANK` is the local rank in a script that writes it
        itself from the local rank (a worker it spawns: `os.environ["RANK"] = str(rank)`, the
        spawn index; a literal, the single-process `"0"`, agrees with it)."""
        role = ENV_ROLES.get(env)
        writes = [w for w in self.env_writes.get(env, []) if _literal_int(w.value) is None]
        if role is not Role.GLOBAL_RANK or not writes or env in self._asking:
            return role
        self._asking.add(env)  # a write of what it reads (`str(int(os.environ["RANK"]))`)
        try:
            local = all(self.role_of(w.value, w.function) is Role.LOCAL_RANK for w in writes)
        finally:
            self._asking.discard(env)
        return Role.LOCAL_RANK if local else role

    def _group_of_local_ranks(self) -> bool:
        """Every process group the module starts takes its rank from the local rank (the index
        of a worker it starts itself on one machine: `init_process_group(..., rank=rank)` in a
        Process target): `dist.get_rank()` is that local rank."""
        starts = self.calls_to(INIT_PG)
        ranks = [arg(c.node, None, "rank") for c in starts]
        if not ranks or any(r is None for r in ranks) or "group rank" in self._asking:
            return False
        self._asking.add("group rank")
        try:
            return all(self.role_of(r, c.function) is Role.LOCAL_RANK for r, c in zip(ranks, starts, strict=True))
        finally:
            self._asking.discard("group rank")

    def env_read(self, expr: cst.BaseExpression) -> str | None:
        """The variable name for `os.environ["X"]`, `os.environ.get("X")`, `os.getenv("X")`."""
        if type(expr) is cst.Subscript and self.qualify(dotted(expr.value)) == "os.environ":
            if len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Index:
                return string_value(expr.slice[0].slice.value)
            return None
        if type(expr) is cst.Call and self.callee(expr) in {"os.environ.get", "os.getenv"}:
            return string_value(arg(expr, 0, None))
        return None

    def holds_rank(self, expr: cst.BaseExpression, function: str) -> bool:
        """Holds some rank (global or local), by origin or by a conventional name."""
        if type(expr) is cst.NamedExpr:
            expr = expr.value
        if self.role_of(expr, function) in RANKS:
            return True
        name = reference(expr)
        return name is not None and last_part(name) in RANK_NAMES


def _literal_int(value: cst.BaseExpression) -> int | None:
    """`0`, `"0"`: a number written as it is."""
    text = string_value(value)
    return int(text) if text is not None and text.isdigit() else int_value(value)


def _binds_in(bound: set[tuple[int, ...]], block: tuple[int, ...], arms: dict[int, tuple[int, int]]) -> bool:
    """Some binding (of those at the blocks in `bound`) runs whenever the block does: in the
    block itself, or on both arms of an if/else in it (`else: if a: x = 1 else: x = 2`)."""
    if block in bound:
        return True
    size = len(block)
    nested = {b[size] for b in bound if len(b) > size and b[:size] == block}
    return any(x in arms and all(_binds_in(bound, (*block, arm), arms) for arm in arms[x]) for x in nested)


def _prefix(outer: tuple[int, ...], inner: tuple[int, ...]) -> bool:
    return inner[: len(outer)] == outer


class _Collector(Walker):
    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.order = 0
        self.function: list[str] = []
        self.in_class: list[bool] = []  # per open scope: a class body (not a function)
        self.conditions: list[Condition] = []
        # per undecorated `def`: its dotted name, where it stands (tests, blocks, try/except), its span of events
        self.definitions: list[tuple[str, tuple, int, int]] = []
        self.loops: list[cst.For | cst.While] = []
        self.suite_exits: list[int] = []  # conditions pushed by early exits, per open suite
        self.caught: frozenset[str] = frozenset()
        self.stored: set[int] = set()  # id() of subscript assignment targets: `x[k] = v` reads no `x[k]`
        self.locks = 0  # open `with FileLock(...)` blocks
        self.blocks: list[int] = []  # id() of the enclosing branch bodies (paths.py)
        self.in_default = False  # walking a parameter's default value
        self.handlers = 0  # open `except` clauses
        self.inner_names: list[frozenset[str]] = []  # per open lambda or comprehension: the names it binds
        self.open_calls: list[int] = []  # id() of the calls being walked, since the last lambda
        self.lambda_calls: list[list[int]] = []  # the open calls outside each open lambda
        self.bound_methods: dict[tuple[str, str], str] = {}  # (scope, name) -> method: `arg = parser.add_argument`

    def _next(self) -> int:
        self.order += 1
        return self.order

    @property
    def scope(self) -> str:
        return ".".join(self.function)

    # -- imports ---------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            full = dotted(alias.name)
            if full is None:
                continue
            self.facts.imported_modules.add(full)
            if alias.asname is not None and type(alias.asname.name) is cst.Name:
                local = alias.asname.name.value
                self.facts.imports[local] = full
            else:
                local = full.split(".")[0]
                self.facts.imports.setdefault(local, local)
            if self._optional():
                self.facts.optional_imports.add(local)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        module = dotted(node.module) if node.module is not None else ""
        prefix = "." * len(node.relative) + (module or "")
        self.facts.imported_modules.add(prefix)
        if isinstance(node.names, cst.ImportStar):
            return False
        for alias in node.names:
            name = dotted(alias.name)
            if name is None:
                continue
            local = alias.asname.name.value if alias.asname and type(alias.asname.name) is cst.Name else name
            sep = "" if prefix.endswith(".") else "."
            full = f"{prefix}{sep}{name}" if prefix else name
            self.facts.imports[local] = CANONICAL.get(full, full)
            if self._optional():
                self.facts.optional_imports.add(local)
        return False

    def _optional(self) -> bool:
        """Inside an `if` other than the `__main__` block: an import one mode of the script needs."""
        return any(not _is_main_block(c.test) for c in self.conditions)

    # -- scopes ----------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.function.append(node.name.value)
        self.in_class.append(True)
        named = [self.facts.qualify(dotted(b.value)) or dotted(b.value) for b in node.bases if b.keyword is None]
        self.facts.bases[".".join(self.function)] = tuple(b for b in named if b)
        decorators = {
            self.facts.qualify(dotted(d.decorator.func if type(d.decorator) is cst.Call else d.decorator))
            for d in node.decorators
        }
        if "dataclasses.dataclass" in decorators:
            self.facts.dataclass_fields[".".join(self.function)] = tuple(
                statement.body[0].target.value
                for statement in node.body.body
                if type(statement) is cst.SimpleStatementLine
                and type(statement.body[0]) is cst.AnnAssign
                and type(statement.body[0].target) is cst.Name
            )

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.function.pop()
        self.in_class.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for decorator in node.decorators:
            self.walk(decorator)
        self.function.append(node.name.value)
        self.in_class.append(False)
        params = tuple(p.name.value for p in (*node.params.posonly_params, *node.params.params))
        decorators = tuple(
            self.facts.qualify(dotted(d.decorator.func if type(d.decorator) is cst.Call else d.decorator)) or ""
            for d in node.decorators
        )
        self.facts.functions[self.scope] = FunctionInfo(self.scope, node, params, decorators)
        where = (tuple((id(c.test), c.negated) for c in self.conditions), tuple(self.blocks), self.caught, self.handlers)
        start = self.order
        saved = (self.conditions, self.loops, self.suite_exits, self.caught, self.blocks, self.handlers)
        self.conditions, self.loops, self.suite_exits, self.caught, self.blocks = [], [], [], frozenset(), []
        self.handlers = 0
        self.in_default = True
        self.walk(node.params)
        self.in_default = False
        self.walk(node.body)
        self.conditions, self.loops, self.suite_exits, self.caught, self.blocks, self.handlers = saved
        if not node.decorators:  # a decorator may keep the function alive (a registry, a CLI command)
            self.definitions.append((self.scope, where, start, self.order))
        self.function.pop()
        self.in_class.pop()
        return False

    # -- control flow ----------------------------------------------------------------

    def visit_If(self, node: cst.If) -> bool:
        self.walk(node.test)
        if not self.function and _is_main_block(node.test):
            self.facts.is_script = True
        self.conditions.append(Condition(node.test, False))
        self._branch(node.body)
        self.conditions.pop()
        if node.orelse is not None:
            arms = (id(node.body), id(node.orelse))
            self.facts.arms[id(node.body)] = self.facts.arms[id(node.orelse)] = arms
            self.conditions.append(Condition(node.test, True))
            self._branch(node.orelse)
            self.conditions.pop()
        if node.orelse is None and _exits(node.body):
            # `if rank != 0: return` guards the rest of the enclosing block
            self.conditions.append(Condition(node.test, True))
            if self.suite_exits:
                self.suite_exits[-1] += 1
        return False

    def visit_Assert(self, node: cst.Assert) -> None:
        self.facts.asserts.append(Assert(node.test, self.scope, self._next(), tuple(self.conditions)))

    def visit_Try(self, node: cst.Try) -> bool:
        saved = self.caught
        self.caught = saved | {name for handler in node.handlers for name in _exception_names(handler.type)}
        self.walk(node.body)
        self.caught = saved
        self.handlers += 1
        for handler in node.handlers:
            last = handler.body.body[-1] if type(handler.body) is cst.IndentedBlock and handler.body.body else None
            final = last.body[-1] if type(last) is cst.SimpleStatementLine else None
            if type(final) is cst.Raise and type(final.exc) is cst.Call:
                # ends the run with an error of its own: what it does, it does on the way to that
                # failure (a re-raise, `raise e`, is a clean-up on the way out: an emergency save)
                self.facts.failing.add(id(handler))
            self._branch(handler)
        self.handlers -= 1
        for part in (node.orelse, node.finalbody):
            if part is not None:
                self.walk(part)
        return False

    def _branch(self, body: cst.CSTNode) -> None:
        """Walk a body that may or may not run."""
        self.blocks.append(id(body))
        self.walk(body)
        self.blocks.pop()

    def visit_With(self, node: cst.With) -> bool | None:
        for item in node.items:  # `with open(path) as f`: f holds what the item gives
            if item.asname is not None:
                for name in _target_names(item.asname.name):
                    self._record(name, item.item)
        callees = {self.facts.callee(i.item) for i in node.items if type(i.item) is cst.Call}
        if NETWORK_READS & callees:  # what the block writes is what it downloads
            self.facts.download_items.update(id(item.item) for item in node.items)
        if DEVICE_CONTEXTS & callees:  # `with torch.cuda.device(i):` binds the device inside only,
            self.blocks.append(id(node.body))  # so the binding call is placed in the block it covers
            for item in node.items:
                self.walk(item)
            self.walk(node.body)
            self.blocks.pop()
            return False
        os_lock = self._takes_os_lock(node.body)
        if not FILE_LOCKS & callees and not os_lock:
            return None
        self.locks += os_lock  # the file the block locks is opened for it: its `open` is covered too
        for item in node.items:
            self.walk(item)
        self.locks += 1 - os_lock
        self.walk(node.body)
        self.locks -= 1
        return False

    def _takes_os_lock(self, body: cst.BaseSuite) -> bool:
        """`with open(lock_file) as f: fcntl.flock(f, fcntl.LOCK_EX); ...`: the block begins by
        taking an exclusive lock on what it opened, one process at a time."""
        first = body.body[0] if type(body) is cst.IndentedBlock and body.body else None
        if type(first) is not cst.SimpleStatementLine or type(first.body[0]) is not cst.Expr:
            return False
        call = first.body[0].value
        return type(call) is cst.Call and self.facts.callee(call) in OS_LOCKS

    def visit_IfExp(self, node: cst.IfExp) -> bool:
        # `SummaryWriter(...) if rank == 0 else None` guards its body like an `if` statement
        self.walk(node.test)
        self.conditions.append(Condition(node.test, False))
        self.walk(node.body)
        self.conditions[-1] = Condition(node.test, True)
        self.walk(node.orelse)
        self.conditions.pop()
        return False

    def _open_suite(self) -> None:
        self.suite_exits.append(0)

    def _close_suite(self) -> None:
        for _ in range(self.suite_exits.pop()):
            self.conditions.pop()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._open_suite()

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        self._close_suite()

    def visit_Module(self, node: cst.Module) -> None:
        self._open_suite()

    def leave_Module(self, original_node: cst.Module) -> None:
        self._close_suite()

    def visit_For(self, node: cst.For) -> bool:
        self.walk(node.target)
        self.walk(node.iter)
        for name in _target_names(node.target):  # rebinds the name: earlier values no longer reach
            self._record(name, node.iter, element=True)
        self._loop(node)
        return False

    def visit_While(self, node: cst.While) -> bool:
        self.walk(node.test)
        self._loop(node)
        return False

    def _loop(self, node: cst.For | cst.While) -> None:
        self.facts.loops.append(Loop(node, self.scope, self._next(), tuple(self.blocks)))
        self.loops.append(node)
        self._branch(node.body)
        self.loops.pop()
        if node.orelse is not None:
            self.walk(node.orelse)

    # -- events ----------------------------------------------------------------------

    def visit_Return(self, node: cst.Return) -> None:
        info = self.facts.functions.get(self.scope)
        if info is not None and node.value is not None:
            info.returns.append(node.value)
            info.return_conditions.append(tuple(self.conditions))

    def visit_Name(self, node: cst.Name) -> None:
        self.facts.names_read.add(node.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if len(node.value) < 32:  # `for v in ("LOCAL_RANK", "SLURM_LOCALID"): os.environ[v]`
            value = string_value(node)
            if value in ENV_ROLES:
                self.facts.env_names.add(value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        head = node.value.value if type(node.value) is cst.Name else None
        # not an object's own (`self.x`), nor a module's (`idr_torch.local_rank` after `import idr_torch`)
        if head not in {"self", "cls"} and self.facts.imports.get(head or "") not in self.facts.imported_modules:
            self.facts.attributes.add(node.attr.value)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if id(node) in self.stored:
            return
        env = self.facts.env_read(node)
        if env is not None:
            self.facts.env_reads.add(env)
        elif len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index:
            key = string_value(node.slice[0].slice.value)  # `cfg["local_rank"]` after `cfg.update(vars(args))`
            if key is not None and key.isidentifier():
                self.facts.attributes.add(key)

    def visit_Call(self, node: cst.Call) -> None:
        if type(node.func) is cst.Attribute:
            method: str | None = node.func.attr.value
        elif type(node.func) is cst.Name:  # `arg("--lr")` after `arg = parser.add_argument`
            method = self.bound_methods.get((self.scope, node.func.value)) or self.bound_methods.get(("", node.func.value))
        else:
            method = None
        if method == "add_argument":
            _record_option(self.facts, node)
        env = self.facts.env_read(node)
        if env is not None:
            self.facts.env_reads.add(env)
        name = self.facts.qualify(dotted(node.func))
        self.facts.calls.append(
            CallSite(
                node,
                name,
                method,
                self.scope,
                self._next(),
                tuple(self.conditions),
                tuple(self.loops),
                self.caught,
                self.locks > 0,
                tuple(self.blocks),
                self.in_default,
                self.handlers > 0,
                frozenset().union(*self.inner_names),
                tuple(self.open_calls),
            )
        )
        self.open_calls.append(id(node))

    def leave_Call(self, original_node: cst.Call) -> None:
        self.open_calls.pop()

    # -- scopes of their own: lambdas and comprehensions bind names their calls see -----

    def visit_Lambda(self, node: cst.Lambda) -> None:
        params = node.params
        self.inner_names.append(frozenset(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)))
        self.lambda_calls.append(self.open_calls)
        self.open_calls = []  # a lambda's body runs later, not before the call it is passed to

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.inner_names.pop()
        self.open_calls = self.lambda_calls.pop()

    def _comprehension(self, node: cst.BaseComp | cst.DictComp) -> None:
        names: set[str] = set()
        loop: cst.CompFor | None = node.for_in
        while loop is not None:
            names.update(_target_names(loop.target))
            loop = loop.inner_for_in
        self.inner_names.append(frozenset(names))

    def _leave_comprehension(self, original_node: cst.CSTNode) -> None:
        self.inner_names.pop()

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension
    leave_ListComp = leave_SetComp = leave_GeneratorExp = leave_DictComp = _leave_comprehension

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._assign(node.target, node.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._assign(target.target, node.value)
        if len(node.targets) == 1 and type(node.targets[0].target) is cst.Name and type(node.value) is cst.Attribute:
            self.bound_methods[(self.scope, node.targets[0].target.value)] = node.value.attr.value

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assign(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        name = reference(node.target)
        if name is not None:
            self._record(name, node.value)

    def visit_Global(self, node: cst.Global) -> bool:
        info = self.facts.functions.get(self.scope)
        if info is not None:
            info.declared_global.update(n.name.value for n in node.names)
        return False

    def _record(self, target: str, value: cst.BaseExpression, element: bool = False, position: int | None = None) -> None:
        self.facts.assignments.append(
            Assignment(
                target,
                value,
                self.scope,
                self._next(),
                tuple(self.conditions),
                tuple(self.loops),
                tuple(self.blocks),
                element,
                position,
            )
        )
        if self.in_class and self.in_class[-1] and "." not in target:
            self._record(f"{self.scope}.{target}", value)  # `class Config: device = "cuda:0"`: Config.device

    def _assign(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if type(target) is cst.Tuple or type(target) is cst.List:
            if (type(value) is cst.Tuple or type(value) is cst.List) and len(target.elements) == len(value.elements):
                for t, v in zip(target.elements, value.elements, strict=True):
                    self._assign(t.value, v.value)
            elif type(value) not in (cst.Tuple, cst.List):  # `loss, step = train(...)`: a part each
                simple = (e.value for e in target.elements if type(e.value) in (cst.Name, cst.Attribute))
                flat = [name for element in simple if (name := reference(element))]
                if len(flat) == len(target.elements):  # a name per element: each holds its place of what the call returns
                    for position, part in enumerate(flat):
                        self._record(part, value, element=True, position=position)
                else:
                    for part in _target_names(target):
                        self._record(part, value, element=True)
            return
        if type(target) is cst.Subscript:
            self.stored.add(id(target))  # `os.environ["RANK"] = "0"` sets it, reads nothing
        env = self.facts.env_read(target) if type(target) is cst.Subscript else None
        if env is not None:
            self.facts.env_writes.setdefault(env, []).append(
                Assignment(env, value, self.scope, self._next(), tuple(self.conditions), tuple(self.loops), tuple(self.blocks))
            )
            return
        name = reference(target)
        if name is None:
            if type(target) is cst.Subscript and (container := reference(target.value)) is not None:
                self.facts.item_stores.append(ItemStore(container, value, self.scope))
            return
        self._record(name, value)
        if type(value) is cst.Dict:  # `opt = {"rank": rank}` binds `opt.rank` too
            for element in value.elements:
                key = string_value(element.key) if type(element) is cst.DictElement else None
                if key is not None and key.isidentifier():
                    self._record(f"{name}.{key}", element.value)
        elif type(value) is cst.Call and dotted(value.func) == "dict":  # and `dict(rank=rank)`
            for argument in value.args:
                if argument.keyword is not None:
                    self._record(f"{name}.{argument.keyword.value}", argument.value)
        if not self.function and type(target) is cst.Name:
            source = dotted(value) if type(value) in (cst.Name, cst.Attribute) else None
            if source is not None and source.split(".")[0] in self.facts.imports:
                self.facts.aliases.setdefault(target.value, self.facts.qualify(source) or source)  # `comm = MPI.COMM_WORLD`


def _target_names(target: cst.BaseExpression) -> list[str]:
    """The names a `for` or `with ... as` target binds (`for i, (x, y) in ...`)."""
    if type(target) is cst.Tuple or type(target) is cst.List:
        return [name for element in target.elements for name in _target_names(element.value)]
    name = reference(target)
    return [name] if name is not None else []


def _record_option(facts: ModuleFacts, call: cst.Call) -> None:
    """`parser.add_argument("--device", default="cuda:0")`: args.device holds the default unless given."""
    default = arg(call, None, "default")
    dest = string_value(arg(call, None, "dest"))
    if dest is None:
        flags = [string_value(a.value) for a in call.args if a.keyword is None]
        long = [f for f in flags if f and f.startswith("--")] or [f for f in flags if f]
        dest = long[0].lstrip("-").replace("-", "_") if long else None
    if default is not None and dest and dest.isidentifier():
        facts.options.setdefault(dest, default)


def _exception_names(expr: cst.BaseExpression | None) -> set[str]:
    """`except (OSError, ValueError)` -> {"OSError", "ValueError"}; a bare except catches everything."""
    if expr is None:
        return {"BaseException"}
    if type(expr) is cst.Tuple:
        return {n for e in expr.elements for n in _exception_names(e.value)}
    name = dotted(expr)
    return {name.rsplit(".", 1)[-1]} if name else set()


def names_read(event: CallSite | Assignment, known: tuple[Condition, ...] = ()) -> set[str]:
    """The dotted names an event reads: in the call (or the value it binds) and in the tests of
    the branches around it, but for the tests in `known` (already decided before a binding that
    shares them)."""
    found = names_in(event.node if isinstance(event, CallSite) else event.value)
    for condition in event.conditions:
        if not any(condition is other for other in known):
            found |= names_in(condition.test)
    return found


def in_main_block(event: CallSite | Assignment | Assert) -> bool:
    """At module level inside `if __name__ == "__main__":`, which processes that mp.spawn starts
    skip (they import the module under another name)."""
    return not event.function and any(not c.negated and _is_main_block(c.test) for c in event.conditions)


def _is_main_block(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    sides = {
        dotted(test.left),
        string_value(test.comparisons[0].comparator),
        dotted(test.comparisons[0].comparator),
        string_value(test.left),
    }
    return "__name__" in sides and "__main__" in sides


def _exits(body: cst.BaseSuite) -> bool:
    """The block always leaves the enclosing block: return, continue, break, raise, sys.exit."""
    statements = body.body
    if not statements:
        return False
    last = statements[-1]
    small = last.body if type(last) is cst.SimpleStatementLine else None
    if type(body) is cst.SimpleStatementSuite:
        small = body.body
    if not small:
        return False
    final = small[-1]
    if type(final) in (cst.Return, cst.Continue, cst.Break, cst.Raise):
        return True
    if type(final) is cst.Expr and type(final.value) is cst.Call:
        return dotted(final.value.func) in {"sys.exit", "exit", "quit", "os._exit"}
    return False


def constructed_method(facts: ModuleFacts, call: cst.Call) -> str | None:
    """`Trainer(cfg).fit()`: the method of a class of this module called on a new instance."""
    func = call.func
    if not (type(func) is cst.Attribute and type(func.value) is cst.Call):
        return None
    cls = dotted(func.value.func)
    method = f"{cls}.{func.attr.value}"
    return method if cls is not None and method in facts.functions else None


def imported_constructed_method(facts: ModuleFacts, call: cst.Call) -> str | None:
    """`Options().parse()` where `Options` is imported: the qualified name of that method
    (`experiments.option.Options.parse`), for the project lookup to find."""
    func = call.func
    if not (type(func) is cst.Attribute and type(func.value) is cst.Call):
        return None
    cls = facts.qualify(dotted(func.value.func))
    if cls is None or cls == dotted(func.value.func) or not facts.may_name_a_module(cls):
        return None  # not a name an import binds
    return f"{cls}.{func.attr.value}"


def super_method(facts: ModuleFacts, site: CallSite) -> str | None:
    """`super().__init__(...)` in a method of `Class`: that method of its first base class."""
    func = site.node.func
    if not (type(func) is cst.Attribute and type(func.value) is cst.Call and dotted(func.value.func) == "super"):
        return None
    bases = facts.bases.get(site.function.rpartition(".")[0])
    return f"{bases[0]}.{func.attr.value}" if bases else None


def local_rank_flag(site: CallSite) -> str | None:
    """The `--local_rank`/`--local-rank` option an `add_argument(...)` call declares, among its
    option strings (`add_argument("-r", "--local_rank", type=int)`)."""
    if site.method != "add_argument":
        return None
    for argument in site.node.args:
        if argument.keyword is not None:
            break
        if (flag := string_value(argument.value)) in LOCAL_RANK_FLAGS:
            return flag
    return None


def never_named(facts: ModuleFacts, function: str) -> bool:
    """A top-level function of a script that nothing in it names (not called, handed on or
    decorated): left-over code that the script never runs. Importers of a script are rare."""
    top = function.split(".")[0]
    return facts.is_script and top in facts.functions and top not in facts.names_read


def starts_own_workers(facts: ModuleFacts) -> bool:
    """The script starts its worker processes itself (`mp.spawn(...)`, `Process(target=...)`):
    it owns their rendezvous and their options, no launcher passes them."""
    return any(starts_workers(facts, site) for site in facts.calls)


def starts_workers(facts: ModuleFacts, site: CallSite) -> bool:
    """`mp.spawn(...)`, or a `Process(target=...)` built to run one."""
    return site.name in SPAWN or process_class(facts, site) and arg(site.node, None, "target") is not None


def process_class(facts: ModuleFacts, site: CallSite) -> bool:
    """`multiprocessing.Process(...)`, or `.Process(...)` of a start-method context that the
    function holds (`mp = torch.multiprocessing.get_context("spawn"); mp.Process(...)`)."""
    if site.name in PROCESS_CLASSES:
        return True
    if site.method != "Process" or site.name is None:
        return False
    holder = site.name.rpartition(".")[0]
    held = [a for a in facts.by_target.get(holder, []) if a.function == site.function]
    return bool(held) and all(type(a.value) is cst.Call and facts.callee(a.value) in PROCESS_CONTEXTS for a in held)


def _process_indexes(facts: ModuleFacts) -> dict[tuple[str, str], Role]:
    """`for rank in range(n): Process(target=run, args=(rank, n)).start()`: the parameter of the
    target that the loop's index fills is the index of a worker started on this machine, its
    local rank."""
    found = {}
    for site in facts.calls:
        target = dotted(arg(site.node, None, "target")) if process_class(facts, site) else None
        given = arg(site.node, None, "args")
        loop = site.loops[-1] if site.loops else None
        if target not in facts.functions or type(given) is not cst.Tuple or type(loop) is not cst.For:
            continue
        if not over_range(loop.iter) or type(loop.target) is not cst.Name:
            continue
        for param, element in zip(facts.functions[target].params, given.elements, strict=False):
            if type(element.value) is cst.Name and element.value.value == loop.target.value:
                found[(target, param)] = Role.LOCAL_RANK
    return found


def spawn_targets(facts: ModuleFacts) -> set[str]:
    """Functions started by mp.spawn: their first parameter is the local process index.

    A wrapper that hands one of its own parameters to mp.spawn (`def launch(fn, n):
    mp.spawn(fn, ...)`) starts whatever its callers in this module pass for that parameter
    (`launch(worker, 2)` spawns `worker`), through any number of such wrappers.
    """
    wrappers = spawning_parameters(facts)
    targets = set()
    for call in facts.calls:
        if call.name in SPAWN:
            handed = [arg(call.node, 0, "fn")]
        elif call.name in wrappers:
            handed = [passed(call.node, facts.functions[call.name].params, p) for p in wrappers[call.name]]
        else:
            continue
        own = _plain_parameters(facts, call.function)
        named = (dotted(fn) for fn in handed)
        targets |= {_method_of_self(facts, name, call.function) for name in named if name is not None and name not in own}
    # `mp.spawn(Trainer, ...)`: a class of the module is started through its __init__
    return {f"{t}.__init__" if f"{t}.__init__" in facts.functions else t for t in targets}


def _method_of_self(facts: ModuleFacts, name: str, function: str) -> str:
    """`self.worker` handed on inside a method of `Launcher` is `Launcher.worker`."""
    if name.startswith("self.") and name.count(".") == 1 and "." in function:
        candidate = f"{function.split('.')[0]}.{name[5:]}"
        if candidate in facts.functions:
            return candidate
    return name


def process_index_parameter(facts: ModuleFacts, target: str) -> str | None:
    """The parameter of a function mp.spawn starts that receives the process index: the first,
    after `self` for a method."""
    info = facts.functions.get(target)
    if info is None:
        return None
    params = info.params[1:] if "." in target and info.params[:1] in (("self",), ("cls",)) else info.params
    return params[0] if params else None


def spawning_parameters(facts: ModuleFacts) -> dict[str, set[str]]:
    """Plain functions of the module -> their parameters that end up as the function mp.spawn
    starts (`def launch(fn, n): mp.spawn(fn, ...)` -> {"launch": {"fn"}}), directly or through
    another such wrapper of the module."""
    found: dict[str, set[str]] = {}
    changed = True
    while changed:
        changed = False
        for call in facts.calls:
            if call.name in SPAWN:
                handed = [arg(call.node, 0, "fn")]
            elif call.name in found:
                handed = [passed(call.node, facts.functions[call.name].params, p) for p in found[call.name]]
            else:
                continue
            for fn in handed:
                name = dotted(fn)
                if name in _plain_parameters(facts, call.function) and name not in found.get(call.function, set()):
                    found.setdefault(call.function, set()).add(name)
                    changed = True
    return found


def passed(call: cst.Call, params: tuple[str, ...], param: str) -> cst.BaseExpression | None:
    """The argument a call of a plain function (parameters `params`) gives for `param`."""
    return arg(call, params.index(param), param)


def _plain_parameters(facts: ModuleFacts, function: str) -> tuple[str, ...]:
    """The parameters of a plain function of the module (not a method: its callers name it
    directly and fill its parameters from the first)."""
    info = facts.functions.get(function)
    return info.params if info is not None and "." not in function else ()


def process_targets(facts: ModuleFacts) -> set[str]:
    """Functions of the module that a worker Process runs (`Process(target=init_process, args=(rank, size, run))`),
    and the functions handed to them that they call (`fn(rank, size)` for `run`): the PyTorch
    tutorial's way of starting ranks without a launcher."""
    found: set[str] = set()
    spawning = {site.function for site in facts.calls if site.name in SPAWN}
    for site in facts.calls:
        if not process_class(facts, site) or (target := dotted(arg(site.node, None, "target"))) not in facts.functions:
            continue
        if not site.loops and not site.inner_names and site.function in spawning:
            continue  # one Process beside the ranks that mp.spawn starts: a helper process (a log listener)
        found.add(target)
        given = arg(site.node, None, "args")
        if type(given) is not cst.Tuple:
            continue
        called = {c.name for c in facts.calls_in(target)}
        for param, element in zip(facts.functions[target].params, given.elements, strict=False):
            handed = dotted(element.value)
            if param in called and handed in facts.functions:
                found.add(handed)
    return found


def entry_points(facts: ModuleFacts) -> set[str]:
    """Functions of the module handed to a command-line runner, or submitted to a job executor."""
    executors = {a.target for a in facts.assignments if type(a.value) is cst.Call and facts.callee(a.value) in EXECUTORS}
    targets = set()
    for call in facts.calls:
        if call.name in ENTRY_RUNNERS:
            fn = arg(call.node, 0, ENTRY_RUNNERS[call.name])
        elif call.method in {"submit", "map_array"} and call.name and call.name.rpartition(".")[0] in executors:
            fn = arg(call.node, 0, "fn")
        else:
            continue
        name = dotted(fn) if fn is not None else None
        if name in facts.functions:
            targets.add(name)
    return targets


def _infer_roles(facts: ModuleFacts) -> None:
    for target in spawn_targets(facts):
        index = process_index_parameter(facts, target)
        if index is not None:
            facts.roles[(target, index)] = Role.LOCAL_RANK
    facts.roles.update(_process_indexes(facts))
    fallback: set[tuple[str, str]] = set()  # names held local where a branch binds the global rank
    branch_global: set[tuple[str, str]] = set()
    for _ in range(2):  # a second round lets roles flow through one more assignment
        _parameter_roles(facts)
        for a in facts.assignments:
            scope = "*" if "." in a.target else _binding_scope(facts, a)
            if type(a.value) is cst.DictComp:
                for key, env_role in _environment_dict(facts, a.value):
                    facts.roles[("*", f"{a.target}.{key}")] = env_role
                continue
            role = _returned_role(facts, a) if a.element else facts.role_of(a.value, a.function) or _returned_role(facts, a)
            if role is None:
                continue
            held = (scope, a.target)
            if role is Role.LOCAL_DEVICE and facts.roles.get(held) in RANKS:
                continue  # `rank = gpus[rank]`: the name is still read as the rank it was
            # a name that holds the local rank on one path and the global one only in a branch
            # (`rank = LOCAL_RANK if set, elif RANK: rank = RANK`) is taken as local: precision first
            if role is Role.GLOBAL_RANK and a.conditions and facts.roles.get(held) is Role.LOCAL_RANK:
                fallback.add(held)
                continue
            if role is Role.LOCAL_RANK and held in fallback:
                continue
            if role is Role.LOCAL_RANK and facts.roles.get(held) is Role.GLOBAL_RANK and held in branch_global:
                fallback.add(held)
            if role is Role.GLOBAL_RANK and a.conditions:
                branch_global.add(held)
            facts.roles[held] = role


def _returned_role(facts: ModuleFacts, a: Assignment) -> Role | None:
    """`rank, world_size = setup_ddp()`, `rank = get_rank()`: the role of what the module's
    function returns (returned_role)."""
    if type(a.value) is not cst.Call or a.element and a.position is None:
        return None
    return returned_role(facts, facts.callee(a.value) or "", a.position)


def returned_role(facts: ModuleFacts, function: str, position: int | None) -> Role | None:
    """The role of what every `return` of the function holds (at that place of the tuple),
    when they agree; a literal number there (the single-process `return 0, 1`, `if not
    dist.is_initialized(): return 0`) agrees with any of them."""
    info = facts.functions.get(function)
    if info is None or not info.returns:
        return None
    held = [
        r
        if position is None
        else r.elements[position].value
        if type(r) is cst.Tuple and len(r.elements) > position and type(r.elements[position]) is cst.Element
        else None
        for r in info.returns
    ]
    roles = {facts.role_of(value, info.name) for value in held if value is None or int_value(value) is None}
    role = roles.pop() if len(roles) == 1 else None
    if position is None and (role not in RANKS or any(_holds_a_device(facts, v, info.name) for v in held)):
        return None  # a device the function builds (`get_device(rank)`) is reported where it is built
    return role


def _holds_a_device(facts: ModuleFacts, value: cst.BaseExpression | None, function: str) -> bool:
    """`f"cuda:{rank}"`, `torch.device(...)`, or a name the function binds to one."""
    if type(value) is cst.FormattedString or type(value) is cst.Call and facts.callee(value) == "torch.device":
        return True
    name = reference(value) if type(value) is cst.Name else None
    return name is not None and any(
        _holds_a_device(facts, a.value, function) for a in facts.by_scope.get((function, name), ()) if a.value is not value
    )


def _binding_scope(facts: ModuleFacts, a: Assignment) -> str:
    """The scope a name's binding belongs to: its function's, or the module's ("") for a name
    the function declares `global` (`def setup(): global rank; rank = int(os.environ["RANK"])`)."""
    info = facts.functions.get(a.function)
    return "" if info is not None and a.target in info.declared_global else a.function


def _parameter_roles(facts: ModuleFacts) -> None:
    """A parameter that every call of its function in the module fills with the same rank holds
    it: `self.init_distributed(rank, world_size)` in a spawned `__init__(self, rank, ...)`, or
    `Trainer(rank, world_size)` for the constructor's `device_rank`. Likewise the fields of a
    record every call hands it by name: `train(rt)` after `rt = start()` whose `rt.leader` is the
    main-process flag makes `leader` of the parameter one too (handed_objects._returned_fields)."""
    calls_of: dict[str, list[CallSite]] = {}
    for call in facts.calls:
        callee = _method_of_self(facts, call.name, call.function) if call.name else None
        if callee is not None and callee not in facts.functions and f"{callee}.__init__" in facts.functions:
            callee = f"{callee}.__init__"  # `Trainer(rank, world_size)` fills the constructor's parameters
        if callee in facts.functions and not any(a.star for a in call.node.args):
            calls_of.setdefault(callee, []).append(call)
    fields: dict[tuple[str, str], dict[str, Role]] = {}  # (function, name) -> field -> role
    for (function, name), role in facts.roles.items():
        head, dot, field = name.partition(".")
        if dot and "." not in field and function != "*" and role in FIELD_ROLES:
            fields.setdefault((function, head), {})[field] = role
    for callee, calls in calls_of.items():
        info = facts.functions[callee]
        method = "." in callee and info.params[:1] in (("self",), ("cls",))
        for index, param in enumerate(info.params[1:] if method else info.params):
            given = [arg(c.node, index, param) for c in calls]
            if (callee, param) not in facts.roles:
                roles = {facts.role_of(g, c.function) for g, c in zip(given, calls, strict=True)}
                if len(roles) == 1 and (only := roles.pop()) in RANKS:
                    facts.roles[(callee, param)] = only
            held = [
                fields.get((c.function, g.value), {}) if type(g) is cst.Name else {} for g, c in zip(given, calls, strict=True)
            ]
            for field, role in held[0].items():
                if all(h.get(field) is role for h in held) and (callee, f"{param}.{field}") not in facts.roles:
                    facts.roles[(callee, f"{param}.{field}")] = role


def _environment_dict(facts: ModuleFacts, comp: cst.DictComp) -> list[tuple[str, Role]]:
    """`{k: int(os.environ[k]) for k in ("RANK", "LOCAL_RANK")}`: each key holds its variable."""
    loop = comp.for_in
    if type(comp.key) is not cst.Name or type(loop.target) is not cst.Name or comp.key.value != loop.target.value:
        return []
    if not isinstance(loop.iter, (cst.Tuple, cst.List)):
        return []
    value = comp.value
    while type(value) is cst.Call and facts.callee(value) in {"int", "str"} and value.args:
        value = value.args[0].value
    variable = loop.target.value
    if type(value) is cst.Subscript and facts.qualify(dotted(value.value)) == "os.environ":
        index = value.slice[0].slice if len(value.slice) == 1 else None
        reads = type(index) is cst.Index and type(index.value) is cst.Name and index.value.value == variable
    else:
        first = arg(value, 0, None) if type(value) is cst.Call else None
        reads = (
            type(value) is cst.Call
            and facts.callee(value) in {"os.environ.get", "os.getenv"}
            and type(first) is cst.Name
            and first.value == variable
        )
    if not reads:
        return []
    keys = (string_value(e.value) for e in loop.iter.elements)
    return [(key, ENV_ROLES[key]) for key in keys if key in ENV_ROLES]


def _requalify(facts: ModuleFacts) -> None:
    """Call names through module-level aliases bound after the call was read (`comm.Barrier()`).
    A name bound more than once at module level is no alias."""
    if not facts.aliases:
        return
    bound = [a.target for a in facts.assignments if a.function == "" and a.target in facts.aliases]
    facts.aliases = {name: value for name, value in facts.aliases.items() if bound.count(name) == 1}
    facts.calls = [
        replace(site, name=facts.qualify(site.name)) if site.name and site.name.split(".")[0] in facts.aliases else site
        for site in facts.calls
    ]


def _index(facts: ModuleFacts) -> None:
    for a in facts.assignments:
        facts.by_target.setdefault(a.target, []).append(a)
        facts.by_scope.setdefault((a.function, a.target), []).append(a)
        facts.by_value.setdefault(id(a.value), []).append(a)
        if type(a.value) is cst.IfExp:
            for side in (a.value.body, a.value.orelse):
                facts.by_value.setdefault(id(side), []).append(a)
        for loop in a.loops:
            facts.by_loop.setdefault(id(loop), []).append(a)
        for scope in enclosing_scopes(a.function):
            facts._assignments_within.setdefault(scope, []).append(a)
    for site in facts.calls:
        facts._calls_in.setdefault(site.function, []).append(site)
        facts._calls_named.setdefault(site.name, []).append(site)
        facts.by_data_name.setdefault(data_name(site.name), []).append(site)
        for scope in enclosing_scopes(site.function):
            facts._calls_within.setdefault(scope, []).append(site)
    facts._outer_scopes = {scope for name in facts.functions for scope in enclosing_scopes(name)[:-1]}


def enclosing_scopes(function: str) -> list[str]:
    """ "Trainer.fit.step" -> ["Trainer", "Trainer.fit", "Trainer.fit.step"]; none at module level."""
    parts = function.split(".") if function else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _detect_framework(facts: ModuleFacts) -> str | None:
    """The framework that runs the distributed training: one whose names the code uses (an
    `from accelerate import Accelerator` left unused leaves the script its own). A framework
    imported only under a test (`if args.use_accelerate: from accelerate import Accelerator`) in
    a script that starts its own process group is one of its modes: the script's own
    distributed mode is linted as any other."""
    own_group = any(site.name == INIT_PG and not single_process_init(site, facts) for site in facts.calls)
    for local, qualified in facts.imports.items():
        owner = next((p for p in FRAMEWORK_IMPORTS if qualified == p or qualified.startswith(p + ".")), None)
        if owner is not None and local in facts.names_read and not (own_group and local in facts.optional_imports):
            return FRAMEWORK_IMPORTS[owner]
    for module in facts.imported_modules:
        if module.startswith(FRAMEWORK_MODULES):
            return "torch testing harness"
    for call in facts.calls:
        if call.name in FRAMEWORK_CALLS:
            return FRAMEWORK_CALLS[call.name]
    return None


def _detect_distributed(facts: ModuleFacts) -> bool:
    inits = facts.calls_to(f"{DIST}.init_process_group")
    if inits and all(single_process_init(site, facts) for site in inits):
        return False
    for call in facts.calls:
        if group_call(call) or local_rank_flag(call) is not None:
            return True
    # a rank read from the launcher's environment; the world size alone (`WORLD_SIZE` with a
    # default of 1) is read by single-process code too
    if any(ENV_ROLES.get(name) in RANKS for name in facts.env_reads):
        return True
    return any(role in RANKS for role in facts.roles.values())


def group_call(site: CallSite) -> bool:
    """A call that uses a process group or starts its ranks: torch.distributed (not its
    availability queries), a DDP wrap, a DistributedSampler, mp.spawn."""
    name = site.name or ""
    return _distributed_call(name) or name in SPAWN or name in {DDP, SAMPLER}


def _distributed_call(name: str) -> bool:
    return name.startswith(DIST + ".") and not name.startswith(NOT_DISTRIBUTED)


def single_process_init(site: CallSite, facts: ModuleFacts) -> bool:
    """A process group only one process can join: the "fake" backend (tracing, compiling ahead
    of time) or a world_size of 1, literal or bound to it on every path (a unit test that needs
    an initialized group; `world_size = 1` on the side of a script that runs without torchrun)."""
    init = site.node
    if string_value(arg(init, 0, "backend")) == "fake":
        return True
    size = arg(init, None, "world_size")
    if type(size) is cst.Name:
        if any(size.value in facts.functions[f].params for f in enclosing_scopes(site.function) if f in facts.functions):
            return False  # a parameter: whatever each caller hands
        bindings = facts.reaching(size.value, site.function, site.order, site.blocks)
        return bool(bindings) and all(not b.element and b.position is None and int_value(b.value) == 1 for b in bindings)
    return int_value(size) == 1


def _rpc_only(facts: ModuleFacts) -> bool:
    names = [call.name or "" for call in facts.calls]
    distributed = [n for n in names if _distributed_call(n)]
    return any(n.startswith(RPC) for n in distributed) and all(n.startswith(RPC) for n in distributed) and DDP not in names


def collect(module: cst.Module, star_names: dict[str, str] | None = None) -> ModuleFacts:
    """The facts of a module; `star_names` are the names its `from m import *` lines bring in
    from the project (name -> qualified name), read before its own imports, which override them."""
    defined = _defined_at_top(module)
    facts = ModuleFacts(imports={name: qualified for name, qualified in (star_names or {}).items() if name not in defined})
    collector = _Collector(facts)
    collector.walk(module)
    _drop_shadowed(facts, collector.definitions)
    _unimport_redefined(facts, _redefined_after_import(module))
    _requalify(facts)
    _index(facts)
    _infer_roles(facts)
    facts.framework = _detect_framework(facts)
    facts.is_distributed = _detect_distributed(facts)
    facts.rpc_only = _rpc_only(facts)
    facts.is_script = facts.is_script or _starts_at_import(facts)
    facts._import_heads = frozenset(name.partition(".")[0] for name in (*facts.imports.values(), *facts.aliases.values()))
    return facts


def _defined_at_top(module: cst.Module) -> set[str]:
    """The functions and classes a module defines at its top level: a name that a `from models
    import *` also brings in (`def test(epoch):` beside a model file's own `test()`) is the
    module's own."""
    return {statement.name.value for statement in module.body if isinstance(statement, (cst.FunctionDef, cst.ClassDef))}


def _redefined_after_import(module: cst.Module) -> set[str]:
    """Names a module imports and then defines itself at its top level (`from logging import
    log`, later `def log(output, args):`): once the module has loaded, the name is its own
    function, which is what its functions call."""
    last: dict[str, bool] = {}  # name -> whether its last top-level binding is a def or class
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            if statement.name.value in last:
                last[statement.name.value] = True
        elif type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                if type(small) is cst.ImportFrom and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        bound = alias.asname.name if alias.asname else alias.name
                        if type(bound) is cst.Name:
                            last[bound.value] = False
    return {name for name, defined in last.items() if defined}


def _unimport_redefined(facts: ModuleFacts, names: set[str]) -> None:
    names &= set(facts.imports)
    if not names:
        return
    for name in names:
        del facts.imports[name]
    facts.calls = [
        replace(site, name=dotted(site.node.func)) if (dotted(site.node.func) or "").split(".")[0] in names else site
        for site in facts.calls
    ]


def _drop_shadowed(facts: ModuleFacts, definitions: list[tuple[str, tuple, int, int]]) -> None:
    """Forget what a function holds when a later `def` of the same name, in the same place,
    replaces it (a script that defines `train()` twice runs the second): its calls, bindings and
    loops run nowhere."""
    last: dict[tuple[str, tuple], int] = {}
    dead: list[tuple[str, int, int]] = []
    for name, where, start, end in reversed(definitions):
        if (name, where) in last:
            dead.append((name, start, end))
        else:
            last[(name, where)] = start
    if not dead:
        return

    def alive(event: CallSite | Assignment | Loop | Assert) -> bool:
        return not any(
            start < event.order <= end and (event.function == name or event.function.startswith(f"{name}."))
            for name, start, end in dead
        )

    facts.calls = [c for c in facts.calls if alive(c)]
    facts.assignments = [a for a in facts.assignments if alive(a)]
    facts.loops = [loop for loop in facts.loops if alive(loop)]
    facts.asserts = [a for a in facts.asserts if alive(a)]


def _starts_at_import(facts: ModuleFacts) -> bool:
    """Module-level code starts the processes or the group itself (`main()` at the bottom of a
    file without a `__main__` block), or builds a framework's runner that does (`accelerator =
    Accelerator()` among a notebook-style script's statements): the module is a script, not a
    library."""
    seen: set[str] = set()
    todo = [facts.calls_in("")]
    while todo:
        for site in todo.pop():
            if site.name == INIT_PG or site.name in SPAWN or site.name in FRAMEWORK_RUNNERS:
                return True
            function = site.name if site.name in facts.functions else constructed_method(facts, site.node)
            if function is None and site.name is not None and f"{site.name}.__init__" in facts.functions:
                function = f"{site.name}.__init__"
            if function is not None and function not in seen:
                seen.add(function)
                todo.append(facts.calls_within(function))
    return False
