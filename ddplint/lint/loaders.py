"""DataLoaders and samplers: which loader trains, whether a sampler shards the data by rank,
and where the epoch loop is. Shared by the data rules (DDP201-DDP205).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from pathlib import Path

import libcst as cst

from ddplint.lint import constants
from ddplint.lint.context import LintContext
from ddplint.lint.facts import Assignment, CallSite, Loop, ModuleFacts
from ddplint.lint.names import (
    arg,
    call_parameters,
    data_name,
    dotted,
    enters,
    has_keyword,
    names_in,
    over_range,
    reference,
    string_value,
)
from ddplint.lint.resolver import Resolved
from ddplint.lint.roles import RANK_CALLS, RANKS
from ddplint.lint.vocabulary import BATCH_SAMPLER, LOADER, NO_GRAD, PLAIN_SAMPLERS, SAMPLER

YES, NO, UNKNOWN = "yes", "no", "unknown"
# Python's builtins that look at an object without iterating it (`len(loader)` in a progress line)
INSPECTING_BUILTINS = frozenset({"len", "print", "repr", "str", "type", "id", "isinstance", "hasattr"})
EVAL_WORDS = re.compile(r"val|test|eval|dev\b|holdout", re.IGNORECASE)
SHARD_WORDS = re.compile(r"shard|split_by_node|split_dataset_by_node|nodesplitter|rank", re.IGNORECASE)


def loaders(facts: ModuleFacts) -> list[CallSite]:
    return facts.by_data_name.get(LOADER, [])


def samplers(facts: ModuleFacts) -> list[CallSite]:
    return [c for c in facts.calls if is_sampler(facts, c.name)]


def is_sampler(facts: ModuleFacts, name: str | None) -> bool:
    """torch's DistributedSampler, or a class of the module that extends it (`class
    StatefulSampler(DistributedSampler)`): it shards and shuffles by the epoch it is given."""
    seen: set[str] = set()
    while name is not None and name not in seen:
        if data_name(name) == SAMPLER:
            return True
        seen.add(name)
        name = next((b for b in facts.bases.get(name, ()) if data_name(b) == SAMPLER or b in facts.bases), None)
    return False


def bound_names(facts: ModuleFacts, node: cst.CSTNode) -> list[str]:
    """Names a value is assigned to: `train_loader = DataLoader(...)` -> ["train_loader"]."""
    return [a.target for a in facts.bindings_of(node)]


def loader_argument(facts: ModuleFacts, site: CallSite, position: int, keyword: str) -> cst.BaseExpression | None:
    """A DataLoader's argument, given at its position or by keyword, or held under that key by a
    `**kwargs` dict of the call (`kwargs = dict(shuffle=True)`; `kwargs["sampler"] = sampler`)."""
    given = arg(site.node, position, keyword)
    if given is not None:
        return given
    for argument in site.node.args:
        name = reference(argument.value) if argument.star == "**" else None
        for binding in facts.reaching(f"{name}.{keyword}", site.function, site.order, site.blocks) if name else ():
            return binding.value
    return None


def options_known(facts: ModuleFacts, site: CallSite) -> bool:
    """Every `**options` of the call is a dict whose keys are all known where the call reads it:
    one literal (`{"batch_size": 8, "shuffle": True}`, `dict(batch_size=8)`) reaches it, and nothing
    else touches the dict (no `.update()`, no key computed at run time, not handed to a call but
    spread into one, which copies it).
    Its constant keys assigned later (`options["sampler"] = s`) are read by loader_argument."""
    for argument in site.node.args:
        if argument.star == "*":
            return False
        if argument.star != "**":
            continue
        name = reference(argument.value)
        bound = facts.reaching(name, site.function, site.order, site.blocks) if name else []
        if len(bound) != 1 or not _literal_options(facts, bound[0].value):
            return False
        if any(s.container == name for s in facts.item_stores) or any(
            name in {reference(a.value) for a in c.node.args if not a.star} | {(c.name or "").rpartition(".")[0]}
            for c in facts.calls
        ):
            return False
    return True


def _literal_options(facts: ModuleFacts, value: cst.BaseExpression) -> bool:
    """`{"batch_size": 8, "shuffle": True}` or `dict(batch_size=8, shuffle=True)`: every key known."""
    if type(value) is cst.Dict:
        return all(type(e) is cst.DictElement and string_value(e.key) is not None for e in value.elements)
    return (
        type(value) is cst.Call
        and facts.callee(value) == "dict"
        and all(a.keyword is not None and not a.star for a in value.args)
    )


def given_sampler(facts: ModuleFacts, site: CallSite) -> cst.BaseExpression | None:
    """The `sampler=` a DataLoader call is given."""
    return loader_argument(facts, site, 3, "sampler")


def chosen_sampler(facts: ModuleFacts, site: CallSite) -> cst.BaseExpression | None:
    """What decides a DataLoader's order: its `batch_sampler=`, else its `sampler=`."""
    return loader_argument(facts, site, 4, "batch_sampler") or given_sampler(facts, site)


def loaders_given(facts: ModuleFacts, names: Collection[str], sampler: cst.CSTNode | None = None) -> set[str]:
    """The names of the loaders a sampler (the call `sampler`, or one of `names` bound to it) is
    given to: `loader = DataLoader(ds, 8, False, sampler)` -> {"loader"}, also inside the batch
    sampler it is given (`batch_sampler=BatchSampler(sampler, 1, drop_last=True)`)."""
    return {name for loader in loader_calls_given(facts, names, sampler) for name in bound_names(facts, loader.node)}


def loader_calls_given(facts: ModuleFacts, names: Collection[str], sampler: cst.CSTNode | None = None) -> list[CallSite]:
    """The DataLoader calls of the module given the sampler (the call, or a name bound to it)."""
    every = loaders(facts)
    if facts.loaders_by_sampler is None:  # built once per module: a module may hold hundreds of each
        facts.loaders_by_sampler = {}
        for position, loader in enumerate(every):
            for given in _samplers_in(facts, loader):
                name = reference(given)
                for key in (id(given), name) if name is not None else (id(given),):
                    facts.loaders_by_sampler.setdefault(key, []).append(position)
    keys: list[int | str] = [*names, id(sampler)] if sampler is not None else [*names]
    return [every[p] for p in sorted({p for key in keys for p in facts.loaders_by_sampler.get(key, ())})]


def _samplers_in(facts: ModuleFacts, loader: CallSite) -> list[cst.BaseExpression]:
    """The sampler a DataLoader is given, and the one inside its batch sampler (the call, or the
    one binding of the name it is given)."""
    given = chosen_sampler(facts, loader)
    if given is None:
        return []
    batch = given
    if type(batch) is not cst.Call and (name := reference(batch)) is not None:
        bound = [a.value for a in facts.by_scope.get((loader.function, name), ())]
        batch = bound[0] if len(bound) == 1 else batch
    inner = arg(batch, 0, "sampler") if type(batch) is cst.Call and data_name(facts.callee(batch)) == BATCH_SAMPLER else None
    return [given] if inner is None else [given, inner]


def helper_calls(ctx: LintContext, given_to_loaders: bool = False) -> Iterator[tuple[CallSite, Resolved]]:
    """The calls of this module, their result bound to a name (or, with `given_to_loaders`,
    given as a DataLoader's sampler: `sampler=data_sampler(ds, shuffle=True)`), of a function of
    another project module (not torch's DataLoader or DistributedSampler themselves)."""
    facts = ctx.facts
    samplers = {id(given_sampler(facts, s)) for s in loaders(facts)} if given_to_loaders else set()
    for site in facts.calls:
        if not (bound_names(facts, site.node) or id(site.node) in samplers) or data_name(site.name) in {LOADER, SAMPLER}:
            continue
        resolved = ctx.resolve_function(facts, ctx.path, ctx.method_target(facts, site))
        if (
            resolved is not None
            and resolved.facts is not facts
            and enters(site.node, resolved.facts.functions[resolved.function].node)
        ):
            yield site, resolved


def returned_loader(facts: ModuleFacts, function: str, returned: cst.BaseExpression) -> CallSite | None:
    """The (first) DataLoader call of `function` that its `return` hands back as `returned`."""
    return next(iter(returned_loaders(facts, function, returned)), None)


def returned_loaders(facts: ModuleFacts, function: str, returned: cst.BaseExpression) -> list[CallSite]:
    """The DataLoader calls of `function` that its `return` may hand back as `returned`: the
    call itself, or every call bound to that name (`loader = DataLoader(...)` in each branch)."""
    return [
        c
        for c in facts.calls_within(function)
        if data_name(c.name) == LOADER and (c.node is returned or reference(returned) in bound_names(facts, c.node))
    ]


def whole_loaders_of_helper(ctx: LintContext, site: CallSite, resolved: Resolved) -> list[tuple[str, CallSite]]:
    """The DataLoaders that the helper `site` calls builds and returns (its one `return`, or an
    element of the tuple it returns: `train_data, test_data, classes = load_dataset(bs)`), by
    the name the call binds each to, when nothing in them splits the data by rank: they are
    given no sampler, or one that is None on every path there (`sampler = None`, a
    DistributedSampler left commented out), and their dataset does not shard itself. Where the
    helper builds a different loader in each branch, each of them must be whole."""
    facts, path, function = resolved
    returns = facts.functions[function].returns
    bindings = ctx.facts.bindings_of(site.node)
    if len(returns) != 1:
        return []
    found = []
    for binding in bindings:
        value: cst.BaseExpression = returns[0]
        if binding.position is not None:
            if type(value) is not cst.Tuple or binding.position >= len(value.elements):
                continue
            if any(type(e) is cst.StarredElement for e in value.elements):
                continue
            value = value.elements[binding.position].value
        elif len(bindings) != 1:
            continue
        built = _loaders_returned_through(facts, function, value)
        known = constants.bind_call(site.node, facts, function, {})
        if built and all(_whole(ctx, loader, facts, path, known if loader.function == function else {}) for loader in built):
            found.append((binding.target, built[0]))
    return found


def _loaders_returned_through(facts: ModuleFacts, function: str, returned: cst.BaseExpression, hops: int = 2) -> list[CallSite]:
    """`returned_loaders`, and where `returned` is a name the function binds once to a call of
    another function of its module with one `return` (`train_dl = prepare_data(x, y, bs)`),
    the loaders that one returns."""
    built = returned_loaders(facts, function, returned)
    name = reference(returned) if type(returned) is cst.Name else None
    if built or name is None or hops == 0:
        return built
    bound = [a for a in facts.assignments_within(function) if a.target == name]
    value = bound[0].value if len(bound) == 1 and not bound[0].element and bound[0].position is None else None
    callee = dotted(value.func) if type(value) is cst.Call else None
    inner = facts.functions.get(callee) if callee is not None and "." not in callee else None
    if inner is None or len(inner.returns) != 1:
        return []
    return _loaders_returned_through(facts, inner.name, inner.returns[0], hops - 1)


def _whole(ctx: LintContext, loader: CallSite, facts: ModuleFacts, path: Path, known: constants.Bindings) -> bool:
    if any(a.star for a in loader.node.args):
        return False
    chosen = chosen_sampler(facts, loader)
    if chosen is not None and sharding(chosen, facts, loader, known=known) != NO:
        return False
    return not dataset_shards(ctx, arg(loader.node, 0, "dataset"), loader, facts, path)


def sharding(
    expr: cst.BaseExpression | None, facts: ModuleFacts, site: CallSite, depth: int = 3, known: constants.Bindings | None = None
) -> str:
    """Whether a sampler expression splits the data by rank: YES, NO, or UNKNOWN. `known`: the
    constant arguments of the call into the function that builds it, which decide its tests
    (`DistributedSampler(ds) if validation else None` where the call leaves `validation=False`)."""
    if expr is None or type(expr) is cst.Name and expr.value == "None":
        return NO
    if type(expr) is cst.IfExp:
        taken = constants.truth(expr.test, known or {})
        if taken is not None:
            return sharding(expr.body if taken else expr.orelse, facts, site, depth, known)
        return _either(sharding(expr.body, facts, site, depth, known), sharding(expr.orelse, facts, site, depth, known))
    if type(expr) is cst.Call:
        callee = data_name(facts.callee(expr)) or ""
        if is_sampler(facts, callee) or "Distributed" in callee.rsplit(".", 1)[-1]:
            return YES
        if has_keyword(expr, "num_replicas") or has_keyword(expr, "rank"):
            return YES
        if callee in PLAIN_SAMPLERS:
            return NO
        if callee == BATCH_SAMPLER:
            return sharding(arg(expr, 0, "sampler"), facts, site, depth, known)
        return UNKNOWN
    name = dotted(expr)
    if name is None or depth == 0:
        return UNKNOWN
    reaching = facts.reaching(name, site.function, site.order, site.blocks)
    values = [a.value for a in reaching if not constants.dark(a.conditions, known or {})]
    if not values:
        return UNKNOWN
    verdict = NO
    for value in values:
        verdict = _either(verdict, sharding(value, facts, site, depth - 1, known))
    return verdict


def _either(a: str, b: str) -> str:
    if YES in (a, b):
        return YES
    return UNKNOWN if UNKNOWN in (a, b) else NO


def dataset_shards(
    ctx: LintContext, expr: cst.BaseExpression | None, site: CallSite, facts: ModuleFacts | None = None, path: Path | None = None
) -> bool:
    """The dataset splits itself by rank: a sharded stream, or a dataset class that reads the
    rank (`site` of the linted module, or of `facts` at `path`)."""
    if expr is None:
        return True
    facts, path = facts or ctx.facts, path or ctx.path
    return (
        _shards(ctx, expr, site, facts, path, WRAPPERS_FOLLOWED)
        or _given_the_rank(facts, expr, site)
        or _built_from_a_rank(facts, expr, site)
    )


RANK_HOPS = 4  # names followed back from a dataset's arguments to a rank
WRAPPERS_FOLLOWED = 2  # `HFIterable(dataset)` after `dataset = split_dataset_by_node(...)`, wrapped once more


def _shards(ctx: LintContext, expr: cst.BaseExpression, site: CallSite, facts: ModuleFacts, path: Path, depth: int) -> bool:
    exprs = [expr]
    name = dotted(expr)
    if name is not None:
        exprs += [a.value for a in facts.reaching(name, site.function, site.order, site.blocks)]
    for e in exprs:
        if _names_a_shard(e):
            return True
        if _built_by_rank_reading_class(ctx, e, facts, path):
            return True
        if type(e) is cst.Call and depth and _returns_a_shard(ctx, e, facts, path, depth - 1):
            return True
        # a wrapper (a project class, a transform) keeps the sharding of the dataset it is given
        wrapped = arg(e, 0, "dataset") if type(e) is cst.Call and depth else None
        if wrapped is not None and dotted(wrapped) is not None and _shards(ctx, wrapped, site, facts, path, depth - 1):
            return True
    return False


def _names_a_shard(expr: cst.BaseExpression) -> bool:
    """The value is made by a call that shards a stream (`split_dataset_by_node(...)`, `.shard(...)`)
    or reads the rank."""
    return any(SHARD_WORDS.search(n.rsplit(".", 1)[-1]) for n in names_in(expr))


def _returns_a_shard(ctx: LintContext, call: cst.Call, facts: ModuleFacts, path: Path, depth: int) -> bool:
    """A function of the project whose result is a sharded dataset: `train_data =
    to_torch(stream)` where `to_torch` ends with `split_dataset_by_node(data, rank, world)`."""
    resolved = ctx.resolve_function(facts, path, facts.callee(call))
    if resolved is None:
        return False
    inner, inner_path, function = resolved
    for returned in inner.functions[function].returns:
        name = dotted(returned)
        values = (
            [returned, *(a.value for a in inner.assigned(name) if a.function == function and not a.element)]
            if name
            else [returned]
        )
        if any(_names_a_shard(value) for value in values):
            return True
    return False


def _built_from_a_rank(facts: ModuleFacts, expr: cst.BaseExpression, site: CallSite) -> bool:
    """The dataset is built or sliced with a per-rank value, so each rank holds its own part:
    `DatasetSplit(train, parts[user_idx])` with `user_idx = local_rank + node * n`,
    `samples[rank::world_size]`."""
    name = dotted(expr)
    built = [a.value for a in facts.reaching(name, site.function, site.order, site.blocks)] if name else []
    pending: list[cst.CSTNode] = [e for e in [expr, *built] if type(e) in (cst.Call, cst.Subscript)]
    followed: set[str] = {name} if name else set()  # names whose values are read in turn, RANK_HOPS of them
    while pending:
        node = pending.pop()
        if node is not expr and isinstance(node, (cst.Name, cst.Attribute)) and facts.holds_rank(node, site.function):
            return True
        if type(node) is cst.Name and node.value not in followed and len(followed) < RANK_HOPS:
            # `indices = pickle.load(f)` with `f = open(f"client_{rank}.pkl")`: read from a per-rank file
            followed.add(node.value)
            pending += [a.value for a in facts.reaching(node.value, site.function, site.order, site.blocks)]
            continue
        if type(node) is cst.Attribute:
            pending.append(node.value)  # `cfg.rank_file`'s attribute is no value of its own
        elif type(node) is cst.Arg:
            pending.append(node.value)  # nor a keyword (`rank=0`)
        else:
            pending.extend(node.children)
    return False


def _given_the_rank(facts: ModuleFacts, expr: cst.BaseExpression, site: CallSite) -> bool:
    """A method of the dataset (or of each dataset in the container it comes from) is called
    with the rank in the loader's function: `for data in split_data.values(): data.select(rank)`."""
    roots = {name.split(".")[0] for name in names_in(expr)}
    elements = [a for a in facts.assignments_within(site.function) if a.element]
    receivers = roots | {a.target for a in elements if roots & {n.split(".")[0] for n in names_in(a.value)}}
    return any(
        c.name is not None
        and c.name.rpartition(".")[0] in receivers
        and any(facts.holds_rank(a.value, c.function) for a in c.node.args)
        for c in facts.calls_in(site.function)
    )


def _built_by_rank_reading_class(ctx: LintContext, e: cst.BaseExpression, facts: ModuleFacts, path: Path, depth: int = 4) -> bool:
    """The value comes from a class that reads the rank: constructed directly, through a project
    factory that returns the class (`create_dataset(cfg)(split="train")`), from a method of such
    an object (`.get_data()`), or taken from what one yields (`next(...)`)."""
    if depth == 0 or type(e) is not cst.Call:
        return False
    callee = facts.callee(e)
    if _class_reads_rank(ctx, callee, facts, path):
        return True
    if callee in {"next", "iter"} and e.args:
        return _built_by_rank_reading_class(ctx, e.args[0].value, facts, path, depth - 1)
    if type(e.func) is cst.Call:  # a factory's result called: the class it returned, constructed
        resolved = ctx.resolve_function(facts, path, facts.callee(e.func))
        if resolved is not None:
            inner, inner_path, function = resolved
            returned = [dotted(r) for r in inner.functions[function].returns]
            if any(_class_reads_rank(ctx, inner.qualify(r) or r, inner, inner_path) for r in returned if r):
                return True
        return _built_by_rank_reading_class(ctx, e.func, facts, path, depth - 1)
    if type(e.func) is cst.Attribute:  # a method of an object built here
        return _built_by_rank_reading_class(ctx, e.func.value, facts, path, depth - 1)
    return False


def _class_reads_rank(ctx: LintContext, name: str | None, facts: ModuleFacts, path: Path) -> bool:
    if not name:
        return False
    found = (facts, name) if facts.has_members(name) else None
    if found is None:
        resolved = ctx.project.resolve(path, name)
        if resolved is None or not resolved.attr:
            return False
        found = (resolved.facts, resolved.attr)
    facts, cls = found
    prefix = cls + "."
    for site in facts.calls_within(cls):
        if (site.name or "").rsplit(".", 1)[-1] in RANK_CALLS:
            return True
    for a in facts.assignments_within(cls):
        if facts.role_of(a.value, a.function) in RANKS:
            return True
    return any(
        {"rank", "num_replicas", "world_size"} & set(info.params)
        for fname, info in facts.functions.items()
        if fname.startswith(prefix)
    )


def is_training(facts: ModuleFacts, site: CallSite, dataset: cst.BaseExpression | None, backward: bool) -> bool:
    shuffle = arg(site.node, 2, "shuffle")
    if type(shuffle) is cst.Name and shuffle.value == "True":
        return True
    words = " ".join([*bound_names(facts, site.node), *(names_in(dataset) if dataset is not None else ())])
    if is_false(shuffle) and EVAL_WORDS.search(words):
        return False  # an unshuffled evaluation pass, also over training data (`trainval`, `train_eval`)
    if "train" in words.lower():
        return True
    if EVAL_WORDS.search(words):
        return False
    return backward  # the module trains: a loader with no name to say otherwise feeds it


def evaluation_only(ctx: LintContext, site: CallSite) -> bool:
    """Every loop that reads the loader computes no gradient: it runs in a function that turns
    gradients off or puts a model in eval mode, and nothing in it runs backward() or an optimizer
    step. An evaluation loader, however it shuffles. Followed through the functions of this
    module it is handed to, the callers it is returned to and the names it is wrapped under
    (`pbar = tqdm(loader)`); a use this cannot follow keeps it training."""
    return _evaluation_loops(ctx, readers(ctx, site))


def read_by_one_process(ctx: LintContext, site: CallSite) -> bool:
    """Every loop that reads the loader runs under a test that one process passes (`if
    dist.get_rank() == 3:` around the test loop, or a single-process run's branch): no rank
    reads what another reads."""
    found = readers(ctx, site)
    return bool(found) and all(_under_one_process(ctx, loop) for loop in found or ())


def _under_one_process(ctx: LintContext, loop: Loop) -> bool:
    """The tests around the loop, as its `for` target's binding records them, let one process in."""
    if type(loop.node) is not cst.For:
        return False
    header = [a for a in ctx.facts.bindings_of(loop.node.iter) if a.element and a.function == loop.function]
    return bool(header) and any(
        ctx.guards.one_process_branch(c, ctx.facts, ctx.path, loop.function) for c in header[0].conditions
    )


def read_one_batch(ctx: LintContext, site: CallSite) -> bool:
    """Every loop that reads the loader stops after its first batch (a `break` at the end of its
    body, a sanity check that plots a sample) and trains nothing: no pass over the data."""
    found = readers(ctx, site)
    return bool(found) and all(_stops_after_one(loop.node) and not _loop_trains(ctx, loop) for loop in found or ())


def _stops_after_one(loop: cst.For | cst.While) -> bool:
    body = loop.body
    statements = body.body if type(body) is cst.IndentedBlock else ()
    return any(
        type(statement) is cst.SimpleStatementLine and any(type(small) is cst.Break for small in statement.body)
        for statement in statements
    )


def read_for_evaluation(ctx: LintContext, name: str, function: str) -> bool:
    """The loader held under `name` in `function` (`loader, _, sampler = build(cfg, "test")`) is
    read only by evaluation loops, followed as evaluation_only follows a DataLoader's names."""
    return _evaluation_loops(ctx, _readers(ctx, [(name, function)], 4))


def _evaluation_loops(ctx: LintContext, found: list[Loop] | None) -> bool:
    return bool(found) and all(_evaluates(ctx, loop.function) and not _loop_trains(ctx, loop) for loop in found or ())


def trained_on(ctx: LintContext, site: CallSite, name: str | None = None) -> bool:
    """A loop that this analysis follows reads the loader (the one the call binds to `name`,
    else any it binds) and runs backward() or a step."""
    found = readers(ctx, site) if name is None else _readers(ctx, [(name, site.function)], 4)
    return any(_loop_trains(ctx, loop) for loop in found or ())


def beside_a_split_loader(site: CallSite, facts: ModuleFacts) -> bool:
    """Another loader built in the same function is given a sampler that splits (or may split)
    its data by rank: the script chose to leave this one whole."""
    for other in loaders(facts):
        chosen = chosen_sampler(facts, other)
        if other is not site and other.function == site.function and chosen is not None and sharding(chosen, facts, other) != NO:
            return True
    return False


def readers(ctx: LintContext, site: CallSite) -> list[Loop] | None:
    """The loops that read the loader a DataLoader call builds, followed as `_readers` does; None
    where it goes somewhere this cannot follow. A loader returned as it is built (`def
    prepare_val_loader(...): return DataLoader(...)`) is read under the names its callers bind."""
    facts = ctx.facts
    held = [(name, site.function) for name in bound_names(facts, site.node)]
    info = facts.functions.get(site.function)
    if not held and info is not None and any(r is site.node for r in info.returns):
        callers = ctx.guards.callers(facts).get(site.function, [])
        held = [(a.target, c.function) for c in callers for a in facts.by_value.get(id(c.node), []) if not a.element]
    return _readers(ctx, held, 4)


def _peeked(facts: ModuleFacts, call: CallSite) -> bool:
    """`next(iter(loader))`: one batch read to look at it (its size, its shape), no pass over the data."""
    return call.name == "iter" and any(
        outer.name == "next" and outer.node.args and outer.node.args[0].value is call.node
        for outer in facts.calls_in(call.function)
        if id(outer.node) in call.within_calls
    )


def _evaluates(ctx: LintContext, function: str) -> bool:
    """The function turns gradients off (`with torch.no_grad():`, `@torch.inference_mode()`) or
    puts a model in eval mode."""
    info = ctx.facts.functions.get(function)
    if info is not None and NO_GRAD & set(info.decorators):
        return True
    return any(c.name in NO_GRAD or c.method == "eval" for c in ctx.facts.calls_within(function))


def drawn_batch(facts: ModuleFacts, binding: Assignment) -> bool:
    """A `for` loop binds the name to the data it draws (not the counter `enumerate` adds) and
    places that data on a device in its body (`images = batch["image"].to(device)`), or it
    iterates what such a loop drew (`for sample_id in batch_ids.tolist():`): a batch of the
    loader the rank reads, so what it names (its samples' names, ids) differs between ranks
    whose loaders split the data. A loader that does not is DDP201's finding."""
    loop = next((lp for lp in facts.loops if type(lp.node) is cst.For and lp.node.iter is binding.value), None)
    if not binding.element or loop is None or binding.target not in _drawn_targets(loop):
        return False
    if _placed_data(facts, loop) is not None:
        return True
    iterated = _roots(binding.value)
    return any(
        outer is not loop and any(o is outer.node for o in binding.loops) and iterated & (_placed_data(facts, outer) or set())
        for outer in facts.loops
    )


def _drawn_targets(loop: Loop) -> set[str]:
    """The names a `for` loop binds to what it iterates, without the counter of `enumerate`."""
    node = loop.node
    if type(node) is not cst.For:
        return set()
    target, iterated = node.target, node.iter
    if type(iterated) is cst.Call and dotted(iterated.func) == "enumerate" and isinstance(target, (cst.Tuple, cst.List)):
        if len(target.elements) != 2:
            return set()
        return names_in(target.elements[1].value)
    return names_in(target)


def _placed_data(facts: ModuleFacts, loop: Loop) -> set[str] | None:
    """The names that hold a `for` loop's data in its body, when the body places some of it on
    a device (`.to(device)`, `.cuda()`); None when it places none."""
    if type(loop.node) is not cst.For:
        return None
    drawn = _drawn_targets(loop)
    inside = [a for a in facts.assignments_within(loop.function) if any(outer is loop.node for outer in a.loops)]
    for a in sorted(inside, key=lambda a: a.order):  # `images = batch["image"]`, then `images.to(device)`
        if not a.element and _roots(a.value) & drawn:
            drawn.add(a.target)
    placed = any(
        call.method in {"to", "cuda"} and type(call.node.func) is cst.Attribute and _roots(call.node.func.value) & drawn
        for call in calls_in_loop(facts, loop)
    )
    return drawn if placed else None


def _roots(expr: cst.BaseExpression) -> set[str]:
    return {name.split(".")[0] for name in names_in(expr)}


def calls_in_loop(facts: ModuleFacts, loop: Loop) -> Iterator[CallSite]:
    """The calls inside a loop's body (and the loops nested in it), also at module level."""
    calls = facts.calls_within(loop.function) if loop.function else facts.calls_in("")
    return (call for call in calls if any(outer is loop.node for outer in call.loops))


def updates_weights(call: CallSite) -> bool:
    """`loss.backward()`, `optimizer.step()` (or with its closure), `scheduler.step()`; not a
    metric's `step(pred, target)`."""
    return call.method == "backward" or call.method == "step" and len(call.node.args) <= 1


def _loop_trains(ctx: LintContext, loop: Loop) -> bool:
    """The loop's body, or a function of this module it calls, runs backward() or an optimizer step()."""
    for call in calls_in_loop(ctx.facts, loop):
        if updates_weights(call):
            return True
        callee = ctx.method_target(ctx.facts, call)
        if callee in ctx.facts.functions and callee != loop.function and _trains(ctx, callee, 1):
            return True
    return False


def _trains(ctx: LintContext, function: str, depth: int) -> bool:
    """The function, or one of this module it calls, runs backward() or an optimizer step()."""
    for call in ctx.facts.calls_within(function):
        if updates_weights(call):
            return True
        callee = ctx.method_target(ctx.facts, call)
        if depth > 0 and callee in ctx.facts.functions and callee != function and _trains(ctx, callee, depth - 1):
            return True
    return False


def _readers(ctx: LintContext, held: list[tuple[str, str]], depth: int) -> list[Loop] | None:
    """The loops that iterate the loader held under these (name, function) pairs; None where it
    goes somewhere this cannot follow."""
    facts, readers = ctx.facts, []
    for name, function in held:
        if "." in name or depth == 0:
            return None
        found, wrappers = False, set()
        # a module-level loader is also read where the module's functions read it as a global
        scopes = {function} | ({f for f in facts.functions if facts.reads_global(name, f)} if not function else set())
        for loop in facts.loops:
            if loop.function in scopes and type(loop.node) is cst.For and name in _iterated(loop.node.iter):
                readers.append(loop)
                found = True
                wrappers |= _wrapping_calls(loop.node.iter)
        for call in (c for scope in scopes for c in facts.calls_in(scope)):
            given = [a for a in call.node.args if reference(a.value) == name]
            if not given or id(call.node) in wrappers or call.name in INSPECTING_BUILTINS or _peeked(facts, call):
                continue
            wrapped = _wrapped_loops(facts, call, name)
            if wrapped:  # `pbar = tqdm(loader)`, then `for x in pbar:`
                readers += wrapped
                found = True
                continue
            # (the call graph knows the methods of instances built here: `trainer.fit(loader)`)
            info = facts.functions.get(ctx.guards.callee(call, facts) or ctx.method_target(facts, call) or "")
            if info is None or any(a.star for a in call.node.args):
                return None
            params = [p.name.value for p in call_parameters(call.node, info.node)]
            inner = [
                (a.keyword.value if a.keyword is not None else params[call.node.args.index(a)], info.name)
                for a in given
                if a.keyword is not None or call.node.args.index(a) < len(params)
            ]
            deeper = _readers(ctx, inner, depth - 1)
            if deeper is None:
                return None
            readers += deeper
            found = True
        info = facts.functions.get(function)
        for value in info.returns if info is not None else ():
            if name not in names_in(value):
                continue
            if type(value) is not cst.Tuple or not any(reference(e.value) == name for e in value.elements):
                return None
            position = next(i for i, e in enumerate(value.elements) if reference(e.value) == name)
            for caller in ctx.guards.callers(facts).get(function, []):
                targets = [a.target for a in facts.by_value.get(id(caller.node), []) if a.element]
                if len(targets) != len(value.elements):
                    return None
                deeper = _readers(ctx, [(targets[position], caller.function)], depth - 1)
                if deeper is None:
                    return None
                readers += deeper
                found = True
        for kept in _kept_by_constructor(facts, name, function):
            loops = [loop for loop in facts.loops if loop.function.startswith(function.rpartition(".")[0] + ".")]
            loops = [loop for loop in loops if type(loop.node) is cst.For and kept in _iterated(loop.node.iter)]
            if not loops:
                return None
            readers += loops
            found = True
        if not found:
            return None
    return readers


def _kept_by_constructor(facts: ModuleFacts, name: str, function: str) -> list[str]:
    """The attributes an `__init__` keeps its parameter under (`self.train_data = train_data`):
    the class's methods read it there."""
    if not function.endswith(".__init__"):
        return []
    return [
        a.target
        for a in facts.assignments_within(function)
        if a.function == function and a.target.count(".") == 1 and a.target.startswith("self.") and reference(a.value) == name
    ]


def _wrapped_loops(facts: ModuleFacts, call: CallSite, name: str) -> list[Loop]:
    """The loops over the one name a call wrapping the loader is bound to (`pbar = tqdm(loader)`,
    its first argument), where that binding is the one the loop reads."""
    first = call.node.args[0] if call.node.args else None
    bindings = facts.bindings_of(call.node)
    if first is None or first.keyword is not None or reference(first.value) != name or len(bindings) != 1:
        return []
    bound = bindings[0]
    if bound.element or "." in bound.target:
        return []
    return [
        loop
        for loop in facts.loops
        if loop.function == call.function
        and type(loop.node) is cst.For
        and bound.target in _iterated(loop.node.iter)
        and any(b is bound for b in facts.reaching(bound.target, loop.function, loop.order, loop.blocks))
    ]


def _wrapping_calls(expr: cst.BaseExpression) -> set[int]:
    """id() of the calls around what a `for` loop reads: `enumerate(tqdm(loader))`."""
    found = set()
    while type(expr) is cst.Call and expr.args:
        found.add(id(expr))
        expr = expr.args[0].value
    return found


def _iterated(expr: cst.BaseExpression) -> set[str]:
    """The name a `for` loop reads: `loader`, `enumerate(loader)`, `tqdm(loader)`."""
    while type(expr) is cst.Call and expr.args:
        expr = expr.args[0].value
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute) else None
    return {name} if name else set()


def epoch_loops(facts: ModuleFacts, function: str, after: int = 0) -> list[Loop]:
    """The epoch loops of a function (after a position in it)."""
    return [loop for loop in facts.loops if loop.function == function and loop.order > after and epoch_loop(loop.node)]


def is_false(expr: cst.BaseExpression | None) -> bool:
    return type(expr) is cst.Name and expr.value == "False"


def epoch_loop(loop: cst.For | cst.While) -> bool:
    """A loop that can run once per epoch: `while`, `for ... in range(...)`, or an `epoch` target.

    `for sampler in samplers: sampler.set_epoch(2)` is setting up, not training.
    """
    if not isinstance(loop, cst.For):  # a while loop
        return True
    if any("epoch" in n.lower() for n in names_in(loop.target)):
        return True
    iterated = loop.iter
    if type(iterated) is cst.Call and dotted(iterated.func) == "enumerate" and iterated.args:
        iterated = iterated.args[0].value
    return over_range(iterated)
