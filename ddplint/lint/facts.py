"""One pass over a module that answers the questions every rule asks.

Rules never walk the tree themselves: they read the call sites, assignments, functions and
rank names recorded here. Each call site carries the conditions and loops that enclose it, so
guard recognition (`guards.py`) and loop questions need no second walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ddplint.lint.names import CANONICAL, arg, dotted, int_value, string_value
from ddplint.lint.walk import Walker

DIST = "torch.distributed"
DDP = "torch.nn.parallel.DistributedDataParallel"
SPAWN = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"}
# torch.distributed calls that a single-process script makes too: reading or writing the DCP
# checkpoint format, asking whether a process group exists.
NOT_DISTRIBUTED = ("torch.distributed.checkpoint.", "torch.distributed.is_available", "torch.distributed.is_initialized")
# Inter-process file locks: the block runs in one process at a time.
FILE_LOCKS = frozenset({"filelock.FileLock", "filelock.SoftFileLock", "filelock.UnixFileLock"})
# Model-parallel RPC: workers with different roles, each placing its own modules on devices.
RPC = ("torch.distributed.rpc.", "torch.distributed.autograd.", "torch.distributed.optim.")
INIT_PG = "torch.distributed.init_process_group"
SET_DEVICE = "torch.cuda.set_device"
# Calls that every rank of the group must reach, in the same order.
COLLECTIVES = frozenset(
    f"{DIST}.{name}"
    for name in (
        "barrier", "monitored_barrier", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
        "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
        "all_to_all_single", "all_gather_object", "broadcast_object_list", "gather_object",
        "scatter_object_list", "send", "recv", "isend", "irecv", "new_group",
    )
) | {DDP}

# Environment variables set by torchrun / SLURM, by what they hold.
ENV_KINDS = {
    "LOCAL_RANK": "local",
    "SLURM_LOCALID": "local",
    "MPI_LOCALRANKID": "local",
    "OMPI_COMM_WORLD_LOCAL_RANK": "local",
    "RANK": "global",
    "SLURM_PROCID": "global",
    "OMPI_COMM_WORLD_RANK": "global",
    "WORLD_SIZE": "world",
    "LOCAL_WORLD_SIZE": "world",
    "SLURM_NTASKS": "world",
}
CALL_KINDS = {
    "torch.distributed.get_rank": "global",
    "torch.distributed.get_global_rank": "global",
    "torch.distributed.get_node_local_rank": "local",
    "torch.distributed.get_world_size": "world",
}
# Attribute/variable names whose meaning is unambiguous in training scripts.
NAME_KINDS = {
    "local_rank": "local",
    "ddp_local_rank": "local",
    "localrank": "local",
    "local_process_index": "local",
    "world_size": "world",
    "ddp_world_size": "world",
    "master_process": "main",
    "is_master": "main",
    "is_main_process": "main",
    "is_main": "main",
    "main_process": "main",
    "is_rank_zero": "main",
    "is_global_zero": "main",
    "is_local_main_process": "main",
}
# Names that hold some rank, global or local; enough to recognize `if rank == 0:`.
RANKISH = {"rank", "global_rank", "ddp_rank", "world_rank", "rank_id", "proc_id", "process_index",
           "gpu", "gpu_id", "device_id"}

# Frameworks that own process groups, samplers and device placement.
FRAMEWORK_IMPORTS = {
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "lightning_fabric": "lightning",
    "accelerate": "accelerate",
    "deepspeed": "deepspeed",
    "ignite": "ignite",
    "colossalai": "colossalai",
    "jax": "jax",  # JAX/Flax training: its own processes and devices, not torch.distributed
    "flax": "jax",
}
# PyTorch's own distributed test harness spawns the processes, builds the group and binds
# each process to its device before a test method runs.
FRAMEWORK_MODULES = ("torch.testing._internal.common_distributed", "torch.testing._internal.common_fsdp",
                     "torch.testing._internal.distributed")
FRAMEWORK_CALLS = {
    "transformers.Trainer": "transformers",
    "transformers.Seq2SeqTrainer": "transformers",
    "trl.SFTTrainer": "transformers",
}


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


@dataclass(frozen=True)
class Assert:
    """`assert local_rank == -1, "not with DDP"`: what a branch promises about its processes."""

    test: cst.BaseExpression
    function: str
    order: int
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class Assignment:
    target: str  # dotted target: "local_rank", "args.gpu", "self.gpu_id"
    value: cst.BaseExpression
    function: str
    order: int
    conditions: tuple[Condition, ...]
    loops: tuple[cst.For | cst.While, ...] = ()


@dataclass
class FunctionInfo:
    name: str  # dotted, e.g. "Trainer._save" or "main"
    node: cst.FunctionDef
    params: tuple[str, ...]
    decorators: tuple[str, ...]  # resolved dotted names
    returns: list[cst.BaseExpression] = field(default_factory=list)  # values of its own `return`s


@dataclass
class ModuleFacts:
    imports: dict[str, str] = field(default_factory=dict)  # alias -> qualified name
    imported_modules: set[str] = field(default_factory=set)
    calls: list[CallSite] = field(default_factory=list)
    assignments: list[Assignment] = field(default_factory=list)
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    env_reads: set[str] = field(default_factory=set)  # os.environ["X"], os.getenv("X"), ...
    env_writes: dict[str, Assignment] = field(default_factory=dict)  # os.environ["X"] = value
    env_names: set[str] = field(default_factory=set)  # launcher variables named in any string literal
    name_kinds: dict[tuple[str, str], str] = field(default_factory=dict)  # (function, name) -> kind
    framework: str | None = None
    is_distributed: bool = False
    rpc_only: bool = False  # RPC workers and no process group or DDP replica: not data-parallel
    is_script: bool = False  # has an `if __name__ == "__main__":` block
    idle_with_calls: set[int] = field(default_factory=set)  # id() of `with open(...): pass` items
    attributes: set[str] = field(default_factory=set)  # every `x.<name>` used: "local_rank", "gpu"
    asserts: list[Assert] = field(default_factory=list)

    # -- name resolution -------------------------------------------------------------

    def qualify(self, name: str | None) -> str | None:
        """Resolve the head of a dotted name through the import table."""
        if name is None:
            return None
        head, _, rest = name.partition(".")
        base = self.imports.get(head)
        if base is None:
            return name
        full = f"{base}.{rest}" if rest else base
        return CANONICAL.get(full, full)

    def callee(self, call: cst.Call) -> str | None:
        return self.qualify(dotted(call.func))

    def calls_to(self, *names: str) -> list[CallSite]:
        wanted = set(names)
        return [c for c in self.calls if c.name in wanted]

    def calls_named(self, predicate) -> list[CallSite]:
        return [c for c in self.calls if c.name is not None and predicate(c.name)]

    # -- rank names ------------------------------------------------------------------

    def kind_of_name(self, name: str, function: str) -> str | None:
        for key in ((function, name), ("", name), ("*", name)):
            if key in self.name_kinds:
                return self.name_kinds[key]
        last = name.rsplit(".", 1)[-1]
        return NAME_KINDS.get(last)

    def kind_of(self, expr: cst.BaseExpression | None, function: str) -> str | None:
        """What an expression holds: "local", "global", "world", "main" or "device" (per rank)."""
        if expr is None:
            return None
        if isinstance(expr, (cst.Name, cst.Attribute)):
            name = dotted(expr)
            if name is not None:
                if self.qualify(name) == "os.environ":
                    return None
                return self.kind_of_name(name, function)
            return None
        env = self.env_read(expr)
        if env is not None:
            return ENV_KINDS.get(env)
        if isinstance(expr, cst.Call):
            callee = self.callee(expr)
            if callee in CALL_KINDS:
                return CALL_KINDS[callee]
            if callee in {"int", "str"} and expr.args:
                return self.kind_of(expr.args[0].value, function)
            if callee == "torch.device":
                index = arg(expr, 1, "index")
                kind = self.kind_of(index, function) if index is not None else self.kind_of(arg(expr, 0, "type"), function)
                return "device" if kind in {"local", "device"} else kind
            return None
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo):
            # rank % gpus_per_node is the local index of the GPU on this node
            if self.kind_of(expr.left, function) in {"global", "local"}:
                return "local"
            return None
        if isinstance(expr, cst.FormattedString):
            for part in expr.parts:
                if isinstance(part, cst.FormattedStringExpression):
                    kind = self.kind_of(part.expression, function)
                    if kind in {"local", "device"}:
                        return "device"
                    if kind == "global":
                        return "global"
            return None
        if isinstance(expr, cst.Comparison):
            if any(int_value(c.comparator) == 0 for c in expr.comparisons) and self.kind_of(expr.left, function) in {
                "global",
                "local",
            }:
                return "main"
            return None
        if isinstance(expr, cst.IfExp):
            return self.kind_of(expr.body, function) or self.kind_of(expr.orelse, function)
        return None

    def env_read(self, expr: cst.BaseExpression) -> str | None:
        """The variable name for `os.environ["X"]`, `os.environ.get("X")`, `os.getenv("X")`."""
        if isinstance(expr, cst.Subscript) and self.qualify(dotted(expr.value)) == "os.environ":
            if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
                return string_value(expr.slice[0].slice.value)
            return None
        if isinstance(expr, cst.Call) and self.callee(expr) in {"os.environ.get", "os.getenv"}:
            return string_value(arg(expr, 0, None))
        return None

    def is_rankish(self, expr: cst.BaseExpression, function: str) -> bool:
        """Holds some rank (global or local), by origin or by a conventional name."""
        if self.kind_of(expr, function) in {"global", "local"}:
            return True
        name = dotted(expr)
        return name is not None and name.rsplit(".", 1)[-1] in RANKISH


class _Collector(Walker):
    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.order = 0
        self.function: list[str] = []
        self.classes: list[str] = []
        self.conditions: list[Condition] = []
        self.loops: list[cst.For | cst.While] = []
        self.suite_exits: list[int] = []  # conditions pushed by early exits, per open suite
        self.caught: frozenset[str] = frozenset()
        self.env_targets: set[int] = set()  # id() of `os.environ[...]` assignment targets
        self.locks = 0  # open `with FileLock(...)` blocks

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
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.facts.imports[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.facts.imports.setdefault(head, head)
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
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            sep = "" if prefix.endswith(".") else "."
            full = f"{prefix}{sep}{name}" if prefix else name
            self.facts.imports[local] = CANONICAL.get(full, full)
        return False

    # -- scopes ----------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.function.append(node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.function.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for decorator in node.decorators:
            self.walk(decorator)
        self.function.append(node.name.value)
        params = tuple(p.name.value for p in (*node.params.posonly_params, *node.params.params))
        decorators = tuple(
            self.facts.qualify(dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)) or ""
            for d in node.decorators
        )
        self.facts.functions[self.scope] = FunctionInfo(self.scope, node, params, decorators)
        saved = (self.conditions, self.loops, self.suite_exits, self.caught)
        self.conditions, self.loops, self.suite_exits, self.caught = [], [], [], frozenset()
        self.walk(node.params)
        self.walk(node.body)
        self.conditions, self.loops, self.suite_exits, self.caught = saved
        self.function.pop()
        return False

    # -- control flow ----------------------------------------------------------------

    def visit_If(self, node: cst.If) -> bool:
        self.walk(node.test)
        if not self.function and _is_main_block(node.test):
            self.facts.is_script = True
        self.conditions.append(Condition(node.test, False))
        self.walk(node.body)
        self.conditions.pop()
        if node.orelse is not None:
            self.conditions.append(Condition(node.test, True))
            self.walk(node.orelse)
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
        for part in (*node.handlers, node.orelse, node.finalbody):
            if part is not None:
                self.walk(part)
        return False

    def visit_With(self, node: cst.With) -> bool | None:
        body = node.body.body
        idle = len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and all(
            isinstance(small, cst.Pass) for small in body[0].body
        )
        if idle:
            self.facts.idle_with_calls.update(id(item.item) for item in node.items)
        if not any(isinstance(i.item, cst.Call) and self.facts.callee(i.item) in FILE_LOCKS for i in node.items):
            return None
        for item in node.items:
            self.walk(item)
        self.locks += 1
        self.walk(node.body)
        self.locks -= 1
        return False

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
        self.loops.append(node)
        self.walk(node.body)
        self.loops.pop()
        if node.orelse is not None:
            self.walk(node.orelse)
        return False

    def visit_While(self, node: cst.While) -> bool:
        self.walk(node.test)
        self.loops.append(node)
        self.walk(node.body)
        self.loops.pop()
        if node.orelse is not None:
            self.walk(node.orelse)
        return False

    # -- events ----------------------------------------------------------------------

    def visit_Return(self, node: cst.Return) -> None:
        info = self.facts.functions.get(self.scope)
        if info is not None and node.value is not None:
            info.returns.append(node.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if len(node.value) < 32:  # `for v in ("LOCAL_RANK", "SLURM_LOCALID"): os.environ[v]`
            value = node.evaluated_value
            if isinstance(value, str) and value in ENV_KINDS:
                self.facts.env_names.add(value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.facts.attributes.add(node.attr.value)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        env = self.facts.env_read(node)
        if env is not None and id(node) not in self.env_targets:
            self.facts.env_reads.add(env)

    def visit_Call(self, node: cst.Call) -> None:
        env = self.facts.env_read(node)
        if env is not None:
            self.facts.env_reads.add(env)
        name = self.facts.qualify(dotted(node.func))
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        self.facts.calls.append(
            CallSite(node, name, method, self.scope, self._next(), tuple(self.conditions), tuple(self.loops),
                     self.caught, self.locks > 0)
        )

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._assign(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assign(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        name = dotted(node.target)
        if name is not None:
            self.facts.assignments.append(
                Assignment(name, node.value, self.scope, self._next(), tuple(self.conditions), tuple(self.loops))
            )

    def _assign(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
            if len(target.elements) == len(value.elements):
                for t, v in zip(target.elements, value.elements):
                    self._assign(t.value, v.value)
            return
        env = self.facts.env_read(target) if isinstance(target, cst.Subscript) else None
        if env is not None:
            self.env_targets.add(id(target))  # `os.environ["RANK"] = "0"` sets it, reads nothing
            self.facts.env_writes[env] = Assignment(
                env, value, self.scope, self._next(), tuple(self.conditions), tuple(self.loops)
            )
            return
        name = dotted(target)
        if name is not None:
            self.facts.assignments.append(
                Assignment(name, value, self.scope, self._next(), tuple(self.conditions), tuple(self.loops))
            )


def _exception_names(expr: cst.BaseExpression | None) -> set[str]:
    """`except (OSError, ValueError)` -> {"OSError", "ValueError"}; a bare except catches everything."""
    if expr is None:
        return {"BaseException"}
    if isinstance(expr, cst.Tuple):
        return {n for e in expr.elements for n in _exception_names(e.value)}
    name = dotted(expr)
    return {name.rsplit(".", 1)[-1]} if name else set()


def _is_main_block(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    sides = {dotted(test.left), string_value(test.comparisons[0].comparator),
             dotted(test.comparisons[0].comparator), string_value(test.left)}
    return "__name__" in sides and "__main__" in sides


def _exits(body: cst.BaseSuite) -> bool:
    """The block always leaves the enclosing block: return, continue, break, raise, sys.exit."""
    statements = body.body
    if not statements:
        return False
    last = statements[-1]
    small = last.body if isinstance(last, cst.SimpleStatementLine) else None
    if isinstance(body, cst.SimpleStatementSuite):
        small = body.body
    if not small:
        return False
    final = small[-1]
    if isinstance(final, (cst.Return, cst.Continue, cst.Break, cst.Raise)):
        return True
    if isinstance(final, cst.Expr) and isinstance(final.value, cst.Call):
        return dotted(final.value.func) in {"sys.exit", "exit", "quit", "os._exit"}
    return False


def spawn_targets(facts: ModuleFacts) -> set[str]:
    """Functions started by mp.spawn: their first parameter is the local process index."""
    targets = set()
    for call in facts.calls:
        if call.name in SPAWN:
            fn = arg(call.node, 0, "fn")
            name = dotted(fn) if fn is not None else None
            if name is not None:
                targets.add(name)
    return targets


def _infer_name_kinds(facts: ModuleFacts) -> None:
    for target in spawn_targets(facts):
        info = facts.functions.get(target)
        if info is not None and info.params:
            facts.name_kinds[(target, info.params[0])] = "local"
    for _ in range(2):  # a second round lets kinds flow through one more assignment
        for a in facts.assignments:
            kind = facts.kind_of(a.value, a.function)
            if kind is None:
                continue
            scope = "*" if "." in a.target else a.function
            facts.name_kinds[(scope, a.target)] = kind


def _detect_framework(facts: ModuleFacts) -> str | None:
    for module in facts.imported_modules:
        head = module.lstrip(".").split(".")[0]
        if not module.startswith(".") and head in FRAMEWORK_IMPORTS:
            return FRAMEWORK_IMPORTS[head]
        if module.startswith(FRAMEWORK_MODULES):
            return "torch testing harness"
    for call in facts.calls:
        if call.name in FRAMEWORK_CALLS:
            return FRAMEWORK_CALLS[call.name]
    return None


def _detect_distributed(facts: ModuleFacts) -> bool:
    inits = facts.calls_to(f"{DIST}.init_process_group")
    if inits and all(single_process_init(site.node) for site in inits):
        return False
    for call in facts.calls:
        name = call.name or ""
        if _distributed_call(name) or name in SPAWN or name in {DDP, "torch.utils.data.DistributedSampler"}:
            return True
        if call.method == "add_argument" and string_value(arg(call.node, 0, None)) in {"--local_rank", "--local-rank"}:
            return True
    if facts.env_reads & ENV_KINDS.keys():
        return True
    return any(kind in {"local", "global"} for (scope, _), kind in facts.name_kinds.items())


def _distributed_call(name: str) -> bool:
    return name.startswith(DIST + ".") and not name.startswith(NOT_DISTRIBUTED)


def single_process_init(init: cst.Call) -> bool:
    """A process group only one process can join: the "fake" backend (tracing, compiling ahead
    of time) or a literal world_size=1 (a unit test that needs an initialized group)."""
    return string_value(arg(init, 0, "backend")) == "fake" or int_value(arg(init, None, "world_size")) == 1


def _rpc_only(facts: ModuleFacts) -> bool:
    names = [call.name or "" for call in facts.calls]
    distributed = [n for n in names if _distributed_call(n)]
    return any(n.startswith(RPC) for n in distributed) and all(n.startswith(RPC) for n in distributed) \
        and DDP not in names


def collect(module: cst.Module) -> ModuleFacts:
    facts = ModuleFacts()
    _Collector(facts).walk(module)
    _infer_name_kinds(facts)
    facts.framework = _detect_framework(facts)
    facts.is_distributed = _detect_distributed(facts)
    facts.rpc_only = _rpc_only(facts)
    return facts
