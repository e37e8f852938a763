"""Everything a rule may read about the module being linted."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import libcst as cst

from ddplint.config import Config
from ddplint.lint import constants
from ddplint.lint.facts import (
    CallSite,
    ModuleFacts,
    constructed_method,
    entry_points,
    group_call,
    imported_constructed_method,
    passed,
    process_targets,
    spawn_targets,
    spawning_parameters,
    starts_workers,
    super_method,
)
from ddplint.lint.guards import Guards
from ddplint.lint.names import arg, dotted, reference
from ddplint.lint.paths import never_runs
from ddplint.lint.project import Located, ProjectIndex
from ddplint.lint.resolver import Resolved
from ddplint.lint.summaries import Effect, Summaries
from ddplint.lint.vocabulary import ACCELERATE, DEEPSPEED, FRAMEWORK_RUNNERS, INIT_PG, MODULE_RETURNS_ITSELF, TRAINER, WRAPPERS
from ddplint.lint.walk import Walker

REEXPORT_HOPS = 2  # a class found through at most this many re-exporting modules


@dataclass
class LintContext:
    path: Path
    module: cst.Module
    facts: ModuleFacts
    project: ProjectIndex
    config: Config
    _resolve_cache: dict = field(default_factory=dict)
    memo: dict = field(default_factory=dict)  # answers a rule computes once per module and reuses

    @cached_property
    def framework(self) -> str | None:
        """The framework that runs the distributed training (facts.framework), unless the module
        starts the process group itself, directly or through a project helper (`fsdp_utils.setup()`
        calling init_process_group): then an import of the framework's utilities (`from
        accelerate import init_empty_weights`), with none of its runners built (FRAMEWORK_RUNNERS),
        leaves the script its own."""
        framework = self.facts.framework
        if framework in (None, TRAINER) or self._builds_runner:
            return framework
        return None if self.summaries.sites_with(Effect.STARTS_GROUP) else framework

    @cached_property
    def _builds_runner(self) -> bool:
        """The module builds a framework's runner (an `Accelerator`, a Lightning `Trainer`)."""
        return any(site.name in FRAMEWORK_RUNNERS for site in self.facts.calls)

    @cached_property
    def is_distributed(self) -> bool:
        """By its own code, or a module (a script, or a trainer module a script imports) whose
        process group starts in a project helper (`dist_util.setup_dist()`) without the module
        naming torch.distributed itself. A script
        that never touches a process group (no torch.distributed call, DDP/FSDP wrap,
        DistributedSampler or worker start, in itself or in a project helper it calls) runs in
        one process, whatever launcher flag or rank variable it declares."""
        if not self.facts.is_script:  # a trainer module: its own code, or a group it starts through a helper
            return self.facts.is_distributed or any(
                site.name != INIT_PG for site in self.summaries.sites_with(Effect.STARTS_GROUP)
            )
        if self.facts.is_distributed:
            return self._touches_process_group()
        if self.framework in (ACCELERATE, DEEPSPEED) and self._builds_runner:
            return True  # `accelerate launch` or `deepspeed` runs the script that builds the runner on every process
        return any(site.name != INIT_PG for site in self.summaries.sites_with(Effect.STARTS_GROUP))

    def _touches_process_group(self) -> bool:
        if self.framework is not None:  # the framework (the HF Trainer, Lightning) starts it
            return True
        facts = self.facts
        if any((group_call(site) or starts_workers(facts, site)) and self._runs(site) for site in facts.calls):
            return True
        return any(
            self._runs(site)
            for effect in (Effect.STARTS_GROUP, Effect.COLLECTIVE, Effect.DATA_PARALLEL)
            for site in self.summaries.sites_with(effect)
        )

    def _runs(self, site: CallSite) -> bool:
        """The script's run can reach the site: not where value flow rules it out, nor in a
        function or class of the script that nothing in it names (`def setup(rank, world):`
        left from an earlier version, its call commented out)."""
        if self.runs_nowhere(site):
            return False
        top = site.function.split(".")[0]
        if not site.function or self.guards.callers(self.facts).get(top):
            return True  # (the walk below only for a function nothing here calls)
        if "names used" not in self.memo:
            self.memo["names used"] = _names_used(self.module)
        return top in self.memo["names used"]

    def runs_nowhere(self, site: CallSite) -> bool:
        """The site of the linted module never runs: in a branch that value flow rules out
        (paths.never_runs), or in a top-level function whose every call is in one and that is
        never handed on, bound to a name or decorated (`reduce_mean()` called only under `if
        args.distributed:` after `args.distributed = False`)."""
        facts = self.facts
        if never_runs(facts, site):
            return True
        top = site.function.split(".")[0]
        key = ("dead function", top)
        if key not in self.memo:
            calls = self._only_calls(top)
            self.memo[key] = bool(calls) and all(c.function.split(".")[0] != top and never_runs(facts, c) for c in calls)
        if self.memo[key]:
            return True
        # every call passes constants that rule the branch out: `load_data(rank, kind="stream")`
        # never reaches `if kind == "files":`
        calls = self._only_calls(site.function) if site.conditions and site.function == top else []
        return bool(calls) and all(constants.dark(site.conditions, constants.bind_call(c.node, facts, top, {})) for c in calls)

    def _only_calls(self, name: str) -> list[CallSite]:
        """The calls in this module of one of its top-level functions, when nothing else can run
        it: not decorated, not spawned, never handed on or bound to a name."""
        facts = self.facts
        info = facts.functions.get(name)
        if not name or info is None or info.decorators or name in self.spawn_targets(facts):
            return []
        key = ("only calls", name)
        if key not in self.memo:
            self.memo[key] = [] if name in self._handed_or_bound else self.guards.callers(facts).get(name, [])
        return self.memo[key]

    @cached_property
    def _handed_or_bound(self) -> frozenset[str | None]:
        """The names the module hands to a call as an argument or binds to another name, read
        once (asked for every function: a scan per function grew with the square of the file)."""
        facts = self.facts
        handed = {reference(a.value) for c in facts.calls for a in c.node.args}
        return frozenset(handed | {reference(a.value) for a in facts.assignments})

    def resolve_function(
        self, facts: ModuleFacts, path: Path, name: str | None, hops: int = 2, constructors: bool | None = None
    ) -> Resolved | None:
        """The (facts, path, function name) that a callee names, in this module or the project.

        Follows re-exports (`from .distributed import is_primary` in a package's __init__.py).
        """
        if name is None:
            return None
        key = ("function", id(facts), name, hops, constructors)  # asked once per call site and rule
        if key not in self._resolve_cache:
            self._resolve_cache[key] = self._resolve_function(facts, path, name, hops, constructors)
        return self._resolve_cache[key]

    def _resolve_function(
        self, facts: ModuleFacts, path: Path, name: str, hops: int, constructors: bool | None
    ) -> Resolved | None:
        if name in facts.functions:
            return Resolved(facts, path, name)
        # Constructing a project class runs its __init__. Followed only for a call of the linted
        # module (through the re-exports it names it by): deeper, logging libraries build
        # per-rank file objects that the rank check cannot see.
        constructors = facts is self.facts if constructors is None else constructors
        if constructors and f"{name}.__init__" in facts.functions:
            return Resolved(facts, path, f"{name}.__init__")
        if constructors and name in facts.bases:  # a class that inherits its __init__
            return self._inherited(facts, path, f"{name}.__init__", hops)
        if name.rpartition(".")[0] in facts.bases:  # a method a class of this module inherits
            return self._inherited(facts, path, name, hops)
        if name.startswith("torch.") or name.split(".")[0] in {"os", "sys", "torch"}:
            return None
        receiver, _, member = name.rpartition(".")
        # `from mpu import MPU` names mpu.MPU, even beside a variable `mpu = MPU(...)`
        imported = name in facts.imports.values()
        cls = self.class_of(facts, path, receiver) if receiver and not imported else None
        # `env.primary` where `env = Env(...)`; not the class itself in `trainer = trainer.Trainer()`
        if cls is not None and cls not in (receiver, name):
            return self.resolve_function(facts, path, f"{facts.qualify(cls) or cls}.{member}", hops)
        instance = self.class_of(facts, path, name) if not imported else None
        if instance is not None and instance != name:  # `stopper(loss)` where `stopper = EarlyStopping()`
            return self.resolve_function(facts, path, f"{facts.qualify(instance) or instance}.__call__", hops)
        key = (id(facts), name, hops, constructors)
        if key not in self._resolve_cache:
            self._resolve_cache[key] = self._resolve_in_project(facts, path, name, hops, constructors)
        return self._resolve_cache[key]

    def class_of(self, facts: ModuleFacts, path: Path, name: str) -> str | None:
        """The class an instance name holds, when every binding of it constructs the same class
        of the project (`env = Env(cfg)`, `self.tracker = MetricTracker(out)`; a class of the
        module at `path`, or one it imports from the project)."""
        key = (id(facts), "class of", name)
        if key not in self._resolve_cache:
            self._resolve_cache[key] = self._class_of(facts, path, name)
        return self._resolve_cache[key]

    def _class_of(self, facts: ModuleFacts, path: Path, name: str) -> str | None:
        classes = set()
        for binding in facts.assigned(name):
            value = binding.value
            # `Trainer(cfg).cuda()`: a module's `.cuda()`, `.to(...)`, `.train()` return the module
            while (receiver := _module_returned(value)) is not None:
                value = receiver
            if type(value) is not cst.Call or (callee := dotted(value.func)) is None:
                return None
            if binding.element and (binding.position is None or callee not in facts.functions):
                return None  # `for x in make()`, `a, b = make()` of another module: what each holds is unknown
            if callee in facts.functions and (callee := _built_by_factory(facts, callee, binding.position)) is None:
                return None  # `trainer = get_trainer(cfg)`: the class that function builds and returns
            if facts.qualify(callee) in WRAPPERS and value.args and dotted(value.args[0].value) == name:
                continue  # `model = DDP(model)`: the script still calls its own class's methods on it
            classes.add(callee)
        if len(classes) != 1:
            return None
        cls = classes.pop()
        if facts.has_members(cls):
            return cls
        chain = self.through_reexports(path, facts.qualify(cls) or cls)  # `from .trainer import Trainer`
        return cls if any(found.attr and found.facts.has_members(found.attr) for found in chain) else None

    def _resolve_in_project(self, facts: ModuleFacts, path: Path, name: str, hops: int, constructors: bool) -> Resolved | None:
        if not facts.may_name_a_module(name):
            return None
        found = self.project.resolve(path, name)
        if found is None:
            return None
        module_path, module_facts, attr = found
        package, _, last = name.rpartition(".")
        if not attr and package and hops > 0:
            # `dist.launch` where distributed/__init__.py does `from .launch import launch`: the
            # package's attribute is the function it re-exports, not the submodule of that name
            parent = self.project.resolve(path, package)
            if parent is not None and not parent.attr and last in parent.facts.imports:
                return self.resolve_function(parent.facts, parent.path, parent.facts.qualify(last), hops - 1)
        if attr and attr in module_facts.functions:
            return Resolved(module_facts, module_path, attr)
        if constructors and attr and f"{attr}.__init__" in module_facts.functions:
            return Resolved(module_facts, module_path, f"{attr}.__init__")
        if constructors and attr in module_facts.bases:  # `DDPTrainer(args)` runs its base's __init__
            return self._inherited(module_facts, module_path, f"{attr}.__init__", hops)
        inherited = self._inherited(module_facts, module_path, attr, hops)
        if inherited is not None:
            return inherited
        # re-exported: `from .distributed import is_primary`, or a module imported under a name
        # (`import megatron.core.parallel_state as mpu`, then `mpu.get_data_parallel_rank`)
        head = attr.partition(".")[0]
        named = head in module_facts.imports or head in module_facts.aliases
        if head and named and hops > 0 and module_facts is not facts:
            return self.resolve_function(module_facts, module_path, module_facts.qualify(attr), hops - 1, constructors)
        return None

    def _inherited(self, facts: ModuleFacts, path: Path, attr: str, hops: int) -> Resolved | None:
        """`Class.method` that the class of the project does not define itself: its bases' (the
        first that does), in this module or the project."""
        cls, _, member = attr.rpartition(".")
        if not cls or not member or hops <= 0:
            return None
        for base in facts.bases.get(cls, ()):
            if f"{base}.{member}" in facts.functions:
                return Resolved(facts, path, f"{base}.{member}")
            found = self.resolve_function(facts, path, f"{base}.{member}", hops - 1)
            if found is not None:
                return found
        return None

    @staticmethod
    def method_target(facts: ModuleFacts, site: CallSite) -> str | None:
        """`self._save(...)` inside a method names `Class._save`, `Trainer(cfg).fit()` names
        `Trainer.fit` (`experiments.option.Options.parse` for an imported class),
        `super().__init__(...)` its base class's; other names stay as they are."""
        key = id(site.node)
        if key in facts.method_targets:  # asked again by every rule and helper chain
            return facts.method_targets[key]
        if site.name is None:
            node = site.node
            found = constructed_method(facts, node) or super_method(facts, site) or imported_constructed_method(facts, node)
        else:
            found = _constructed_here(facts, site) or LintContext.member_name(facts, site.name, site.function)
        facts.method_targets[key] = found
        return found

    @staticmethod
    def member_name(facts: ModuleFacts, name: str | None, function: str) -> str | None:
        """`self.x` read inside a method of `Class` names `Class.x` when the class defines it."""
        if name and name.startswith("self.") and name.count(".") == 1 and "." in function:
            candidate = f"{function.split('.')[0]}.{name[5:]}"
            if candidate in facts.functions:
                return candidate
        return name

    def module_named(self, facts: ModuleFacts, path: Path, name: str) -> tuple[ModuleFacts, Path] | None:
        """The project module a name of the module at `path` stands for (`import common_utils`)."""
        found = self.project.resolve(path, facts.qualify(name) or name)
        return (found.facts, found.path) if found is not None and not found.attr else None

    def of_module(self, path: Path, facts: ModuleFacts) -> LintContext | None:
        """The same questions about another project module (one a call here resolved into)."""
        if facts is self.facts:
            return self
        key = ("context", self.project.real(path))
        if key not in self._resolve_cache:
            module = self.project.module_for(path)
            self._resolve_cache[key] = None if module is None else LintContext(path, module, facts, self.project, self.config)
        return self._resolve_cache[key]

    def callee_module(self, site: CallSite) -> tuple[LintContext, Resolved] | None:
        """The context of the other project module whose function `site` enters, and that
        function: a script asks there what the helper's own lint would find."""
        resolved = self.resolve_function(self.facts, self.path, self.method_target(self.facts, site))
        if resolved is None or resolved.facts is self.facts:
            return None
        helper = self.of_module(resolved.path, resolved.facts)
        return None if helper is None else (helper, resolved)

    def reached_from(self, function: str) -> set[str]:
        """The functions of the module that `function` runs: itself, what it calls, and the
        workers it spawns (`mp.spawn(_worker, ...)`), followed through the module's call graph."""
        facts, reached, pending = self.facts, {function}, [function]
        while pending:
            for call in facts.calls_within(pending.pop()):
                callee = self.guards.callee(call, facts)
                started = arg(call.node, None, "target") or arg(call.node, 0, "fn") if starts_workers(facts, call) else None
                spawned = reference(started) if started is not None else None
                for name in (callee, spawned):
                    if name in facts.functions and name not in reached:
                        reached.add(name)
                        pending.append(name)
        return reached

    def imported_project_modules(self, depth: int = 1) -> list[ModuleFacts]:
        """Facts of the project modules this file imports (found on disk beside it).

        With depth 2, also the project modules those import (a package __init__ re-exporting
        its submodules).
        """
        return [facts for _, facts in self.imported_project_files(depth)]

    def imported_project_files(self, depth: int = 1) -> list[tuple[Path, ModuleFacts]]:
        """(path, facts) of the project modules this file imports, `depth` imports deep."""
        key = ("imported project files", depth)
        if key not in self._resolve_cache:
            self._resolve_cache[key] = self._imported_project_files(depth)
        return self._resolve_cache[key]

    def _imported_project_files(self, depth: int) -> list[tuple[Path, ModuleFacts]]:
        found: dict[Path, ModuleFacts] = {}
        frontier = [(self.path, self.facts)]
        for _ in range(depth):
            following = []
            for importer, facts in frontier:
                for qualified in facts.imports.values():
                    for located in self.through_reexports(importer, qualified):
                        if located.path != self.project.real(self.path) and located.path not in found:
                            found[located.path] = located.facts
                            following.append((located.path, located.facts))
            frontier = following
        return list(found.items())

    def through_reexports(self, importer: Path, qualified: str) -> list[Located]:
        """The module an import names and, where a package only re-exports the name (`from
        .trainer import Trainer` in its `__init__`), the modules it passes through to the one
        that defines it, at most REEXPORT_HOPS further: a re-export is no level of depth."""
        chain: list[Located] = []
        found = self.project.resolve(importer, qualified)
        while found is not None and len(chain) <= REEXPORT_HOPS and all(c.path != found.path for c in chain):
            chain.append(found)
            head = found.attr.partition(".")[0]
            onward = found.facts.qualify(found.attr) if head in found.facts.imports else None
            found = self.project.resolve(found.path, onward) if onward else None
        return chain

    # The parts hold this context by a weak reference: with a strong one each context would be
    # a reference cycle, and its module's whole tree would live on until the cycle collector
    # ran (a few percent of a run's time, and its memory in between).
    @cached_property
    def guards(self) -> Guards:
        return Guards(weakref.proxy(self), self.summaries)

    @cached_property
    def summaries(self) -> Summaries:
        return Summaries(weakref.proxy(self))

    def spawn_targets(self, facts: ModuleFacts) -> set[str]:
        """Functions that every rank starts in: what mp.spawn or a worker Process starts, and what a
        command-line runner (`absl.app.run(main)`, `fire.Fire(main)`) calls in each process. In the linted
        module, also what it hands to a project helper that passes it on to mp.spawn
        (`launch(main, n_gpu)` where `def launch(fn, n): mp.spawn(fn, nprocs=n)`)."""
        key = (id(facts), "spawn")
        if key not in self._resolve_cache:
            found = spawn_targets(facts) | entry_points(facts) | process_targets(facts)
            if facts is self.facts:
                found |= self.spawned_through_helpers()
            self._resolve_cache[key] = {target for target in found if not _started_nowhere(facts, target)}
        return self._resolve_cache[key]

    def spawned_through_helpers(self) -> set[str]:
        """The functions of the linted module it hands to a project helper that passes them on
        to mp.spawn: each runs in a spawned process, its first parameter the process index."""
        key = "spawned through helpers"
        if key not in self._resolve_cache:
            self._resolve_cache[key] = self._spawned_through_helpers()
        return self._resolve_cache[key]

    def _spawned_through_helpers(self) -> set[str]:
        found = set()
        for site in self.facts.calls:
            resolved = self.resolve_function(self.facts, self.path, site.name)
            if resolved is None or resolved.facts is self.facts:
                continue
            inner_facts, _, function = resolved
            key = (id(inner_facts), "spawning parameters")
            if key not in self._resolve_cache:
                self._resolve_cache[key] = spawning_parameters(inner_facts)
            params = inner_facts.functions[function].params
            for param in self._resolve_cache[key].get(function, ()):
                name = dotted(passed(site.node, params, param))
                if name in self.facts.functions:
                    found.add(name)
        return found


def _names_used(module: cst.Module) -> frozenset[str]:
    """Every name the module reads or binds, other than in the name of a `def` or `class`."""

    class Names(Walker):
        def __init__(self) -> None:
            self.found: set[str] = set()

        def visit_Name(self, node: cst.Name) -> None:
            self.found.add(node.value)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            for part in (node.params, node.body, *node.decorators):
                self.walk(part)
            if node.returns is not None:
                self.walk(node.returns)
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            for part in (node.body, *node.bases, *node.keywords, *node.decorators):
                self.walk(part)
            return False

    names = Names()
    names.walk(module)
    return frozenset(names.found)


def _module_returned(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` of `x.cuda()`, `x.to(device)`, `x.train()`: a module's methods that return it."""
    if type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value in MODULE_RETURNS_ITSELF:
        return value.func.value
    return None


def _built_by_factory(facts: ModuleFacts, function: str, position: int | None) -> str | None:
    """The one class a function of the module constructs and returns on every path, directly
    (`return Trainer(...)`) or through a name bound to it there (`trainer = Trainer(...)`,
    `return trainer`); with `position`, as that element of the tuple it returns (`return args,
    helper, writer`, unpacked by the caller)."""
    classes = set()
    for returned in facts.functions[function].returns:
        if position is not None:
            elements = returned.elements if type(returned) is cst.Tuple else ()
            if position >= len(elements) or any(type(e) is cst.StarredElement for e in elements):
                return None
            returned = elements[position].value
        bound = facts.by_scope.get((function, returned.value), []) if type(returned) is cst.Name else []
        for value in [a.value for a in bound] or [returned]:
            classes.add(dotted(value.func) if type(value) is cst.Call else None)
    cls = classes.pop() if len(classes) == 1 else None
    return cls if cls is not None and cls not in facts.functions else None


def _started_nowhere(facts: ModuleFacts, target: str) -> bool:
    """Every call that hands the function on to be started (`mp.spawn(main_worker, ...)`) sits in
    a branch value flow rules out (`if args.distributed:` after `args.distributed = False`)."""
    handing = [c for c in facts.calls if any(reference(a.value) == target for a in c.node.args)]
    return bool(handing) and all(never_runs(facts, c) for c in handing)


def _constructed_here(facts: ModuleFacts, site: CallSite) -> str | None:
    """`runner.main()` where the name is bound to instances of several classes over the function
    (`runner = TrainDDP(args)` under `if args.ddp:`, `runner = Train(args)` in the else) but only
    one construction reaches this call: that class's method."""
    func = site.node.func
    if type(func) is not cst.Attribute or type(func.value) is not cst.Name:
        return None
    receiver, member = func.value.value, func.attr.value
    built = {
        dotted(b.value.func) if type(b.value) is cst.Call else None
        for b in facts.assigned(receiver)
        if b.function == site.function
    }
    if len(built) < 2:
        return None  # one class over the whole function: class_of answers for every call
    reaching = {
        dotted(b.value.func) if type(b.value) is cst.Call else None
        for b in facts.reaching(receiver, site.function, site.order, site.blocks)
    }
    cls = reaching.pop() if len(reaching) == 1 else None
    if cls is None:
        return None
    if facts.has_members(cls):
        return f"{cls}.{member}"
    qualified = facts.qualify(cls)
    return f"{qualified}.{member}" if qualified not in (None, cls) else None  # a class an import binds
