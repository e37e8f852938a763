"""File writes that every rank performs when one should (DDP301, DDP302, DDP304).

Every rank runs the whole script. A write that is meant to happen once (a checkpoint, a log,
an output directory) must sit behind a main-process guard (guards.py), or be harmless to
repeat. A write inside a helper of the project (`save_checkpoint(...)` in utils.py) is
reported at the call in the script when the helper itself does not guard it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path

import libcst as cst

from ddplint.lint import constants
from ddplint.lint.caller_state import Handed, built_objects, gated_at_call, handed_state
from ddplint.lint.context import LintContext
from ddplint.lint.facts import Assignment, CallSite, Condition, ModuleFacts, in_main_block, names_read, starts_own_workers
from ddplint.lint.guards import NOT_MAIN_WORLD
from ddplint.lint.launch import test_key
from ddplint.lint.loaders import bound_names, drawn_batch
from ddplint.lint.names import (
    arg,
    argument_for,
    callee_text,
    data_name,
    dotted,
    has_keyword,
    has_star_kwargs,
    names_in,
    parameter_for,
    reference,
    string_value,
)
from ddplint.lint.paths import on_the_way_to_a_failure
from ddplint.lint.resolver import Resolved
from ddplint.lint.roles import RANK_CALLS, RANKS
from ddplint.lint.rules.base import Inside
from ddplint.lint.vocabulary import (
    ACCELERATE,
    CHECKPOINT_WRITERS,
    DATASETS,
    DEEPSPEED,
    EXISTENCE_CHECKS,
    LOADER,
    LOG_WRITERS,
    NETWORK_READS,
    OUTPUT_METHODS,
    OUTPUT_WRITERS,
    TRAINER,
    WRAPPERS,
)


class WriteKind(str, Enum):
    """The once-only writes that every rank must not make: DDP301, DDP302, DDP304."""

    CHECKPOINT = "checkpoint"
    LOG = "log"
    MKDIR = "mkdir"


CHECKPOINT, LOG, MKDIR = WriteKind.CHECKPOINT, WriteKind.LOG, WriteKind.MKDIR
WRITE_MODES = set("wax")
# Catching one of these around a makedirs call handles the race.
EXISTS_HANDLED = {"FileExistsError", "OSError", "IOError", "EnvironmentError", "Exception", "BaseException"}
MODE = re.compile(r"^[rwaxbt+]{1,3}$")
# For a call of a function of another module: the argument it returns unchanged, if any.
HandedBack = Callable[[cst.Call], cst.BaseExpression | None]
# The attributes of `self` a caller handed over (caller_state.handed_state), with the call that
# handed them and that call's module: read in its terms in the methods called on `self`.
Carried = tuple[Handed, CallSite, ModuleFacts, Path]


def effect_of(site: CallSite, facts: ModuleFacts, bindings: constants.Bindings | None = None) -> WriteKind | None:
    """What kind of once-only write a call is, if any (per-rank paths and buffers are not).

    `bindings` are the constant arguments of the helper the site is in: `open(name, file_mode)`
    writes when the caller passed file_mode="a".
    """
    call, name = site.node, site.name or ""
    if site.method == "save_pretrained" and _saves_a_download(site, facts):
        return None
    if name in CHECKPOINT_WRITERS or site.method == "save_pretrained":
        target = arg(call, 1, "f") if name == "torch.save" else arg(call, 0, None)
        if name == "torch.save" and _is_buffer(target, facts):
            return None
        return None if _per_rank(target, facts, site.function) else CHECKPOINT
    if name in LOG_WRITERS or name == "wandb.init" and _imported(site, facts) and not has_keyword(call, "group"):
        if name == "wandb.init" and string_value(arg(call, None, "mode")) == "disabled":
            return None  # a disabled run logs nothing (the usual choice on the other ranks)
        return None if _per_rank_call(call, facts, site.function) else LOG
    if name in {"open", "io.open"} or site.method == "open" and name not in {"os.open", "gzip.open"}:
        if site.method == "open":
            mode = arg(call, 0, "mode")
            target = call.func.value if type(call.func) is cst.Attribute else None
        else:
            mode, target = arg(call, 1, "mode"), arg(call, 0, "file")
        text = string_value(mode)
        bound = (bindings or {}).get(mode.value) if text is None and type(mode) is cst.Name else None
        if isinstance(bound, str):
            text = bound
        elif text is None and type(mode) is cst.Name:
            text = _held_mode(facts, site, mode.value)
        elif text is None and type(mode) is cst.IfExp:  # `open(log, "a" if resume else "w")`
            text = _writing_mode([mode.body, mode.orelse])
        if text is None or not MODE.match(text) or not WRITE_MODES & set(text) or _per_rank(target, facts, site.function):
            return None
        if _holds_a_save(site, facts):
            return None  # `with open(path, "wb") as f: torch.save(state, f)`: the save is reported
        if id(call) in facts.download_items or _fills_with_a_download(site, facts):
            return None  # `with urlopen(url) as source, open(target, "wb") as output:` fills a download cache
        return None if _is_devnull(target, facts) or _is_descriptor(target) else LOG
    if name in OUTPUT_WRITERS or site.method in OUTPUT_METHODS:
        target = arg(call, OUTPUT_WRITERS.get(name, 0), None)
        if target is None or _is_buffer(target, facts) or _per_rank(target, facts, site.function):
            return None  # `cfg.to_json()` returns a string; a buffer or a per-rank path is no race
        if name.startswith("shutil.") and _copies_a_save(site, facts):
            return None  # `model_best.pth` copied from the checkpoint just saved: that save's finding
        return LOG
    if site.method in {"write_text", "write_bytes"} and type(call.func) is cst.Attribute:
        return None if _per_rank(call.func.value, facts, site.function) else LOG
    if name == "logging.basicConfig" and has_keyword(call, "filename"):
        return None if _per_rank(arg(call, None, "filename"), facts, site.function) else LOG
    if site.caught & EXISTS_HANDLED and (name in {"os.makedirs", "os.mkdir"} or site.method == "mkdir"):
        return None
    if name == "os.makedirs" and not has_star_kwargs(call):
        exist_ok = arg(call, 2, "exist_ok")
        if exist_ok is not None and not (type(exist_ok) is cst.Name and exist_ok.value == "False"):
            return None
        return None if _per_rank(arg(call, 0, "name"), facts, site.function) else MKDIR
    path_mkdir = site.method == "mkdir" and name.split(".")[0] not in facts.imports and not has_star_kwargs(call)
    if name == "os.mkdir" or path_mkdir:
        if name != "os.mkdir" and has_keyword(call, "exist_ok"):
            exist_ok = arg(call, None, "exist_ok")
            if not (type(exist_ok) is cst.Name and exist_ok.value == "False"):
                return None
        target = arg(call, 0, "path") if name == "os.mkdir" else getattr(call.func, "value", None)
        return None if _per_rank(target, facts, site.function) else MKDIR
    return None


# The Hugging Face Trainer saves its own checkpoints on the right rank, and a DeepSpeed engine
# its own (`engine.save_checkpoint`, which every rank calls); what the script writes or loads
# around them runs on every rank the launcher started.
OUTSIDE_TRAINER = frozenset({TRAINER, ACCELERATE, DEEPSPEED})


# Values that differ between processes as a rank does: a fresh temporary name, the pid.
UNIQUE_PER_PROCESS = {
    "uuid.uuid4",
    "uuid.uuid1",
    "os.getpid",
    "tempfile.mktemp",
    "tempfile.mkstemp",
    "tempfile.NamedTemporaryFile",
    "tempfile.mkdtemp",
    "tempfile.TemporaryDirectory",
    "tempfile.TemporaryFile",
    "tempfile.SpooledTemporaryFile",
    "tempfile._get_candidate_names",  # the generator of those names, reseeded in every process
}
# Calls and methods that build a string or a path from their arguments.
TEXT_BUILDERS = frozenset({"str", "int", "repr", "os.fspath", "Path"})
TEXT_METHODS = frozenset(
    {"format", "join", "joinpath", "replace", "with_name", "with_stem", "with_suffix", "resolve", "absolute", "expanduser"}
)
DEVICE_TEMPLATE = re.compile(r"[a-z]+:(?:\{[^}]*\}|%[a-z])")
FOLLOW = 3  # how many variables deep a path is followed to a rank or a fresh temporary name


def _per_rank(
    expr: cst.BaseExpression | None, facts: ModuleFacts, function: str, depth: int = FOLLOW, handed_back: HandedBack | None = None
) -> bool:
    """The path names the rank, a name unique to the process or a sample of the batch the rank
    drew (`batch["name"][n]`, loaders.drawn_batch), itself or through the variables it reads
    (`tmp = tempfile.mkdtemp()`, then `os.path.join(tmp, "ckpt.pt")`).
    `handed_back` answers, for a call of another module, the argument it returns unchanged."""
    if expr is None:
        return False
    for name in names_in(expr):
        last = name.rsplit(".", 1)[-1]
        if last in RANK_CALLS or facts.role_of_name(name, function) in RANKS:
            return True
        if last in {"process_index", "gpu", "gpu_id"} or _rank_word(last):
            return True
        if facts.qualify(name) in UNIQUE_PER_PROCESS:
            return True
    if depth == 0:
        return False
    read = _read_names(expr)
    return any(
        a.value is not expr
        and not _placed(a.value, facts)
        and (drawn_batch(facts, a) or _per_rank(_text_of(a.value, facts, handed_back), facts, a.function, depth - 1, handed_back))
        for name in read
        for a in facts.visible(name, function)  # a local of another function is another variable
    ) or any(  # a function of the module that builds the path: `LOG_FILE = get_log_file()`
        facts.functions[name].returns
        and all(
            _per_rank(_text_of(value, facts, handed_back), facts, name, depth - 1, handed_back)
            for value in facts.functions[name].returns
        )
        for name in read
        if name in facts.functions
    )


def _text_of(value: cst.BaseExpression, facts: ModuleFacts, handed_back: HandedBack | None = None) -> cst.BaseExpression:
    """What of a variable's value can end up in a path: all of a string or path being built
    (`os.path.join(out, f"rank{rank}")`), the argument that a function hands back unchanged
    (`make_dir(os.path.join(out, f"buffer{rank}"))` returning its `path`), only the callee of any
    other call, an item `next()` draws from what it is given. The result of
    `evaluate(model, loader, gpu)` is no per-rank name because the rank was one argument."""
    if type(value) is not cst.Call:
        return value
    if type(value.func) is cst.Attribute and value.func.attr.value in TEXT_METHODS:
        return value
    callee = facts.callee(value) or ""
    if callee in TEXT_BUILDERS or callee.startswith(("os.path.", "pathlib.")):
        return value
    if callee == "next" and value.args:  # `next(tempfile._get_candidate_names())`: one of its names
        return value.args[0].value
    given = returned_argument(value, facts, callee) if callee in facts.functions else handed_back(value) if handed_back else None
    return given if given is not None else value.func


def returned_argument(call: cst.Call, facts: ModuleFacts, function: str) -> cst.BaseExpression | None:
    """What `call` passes for the parameter that `function` (of `facts`) returns unchanged on
    every path and never rebinds (`def make_dir(path): os.makedirs(path, exist_ok=True); return
    path`)."""
    info = facts.functions.get(function)
    returned = {reference(r) for r in info.returns} if info is not None else set()
    if info is None or len(returned) != 1 or (param := returned.pop()) is None or "." in param:
        return None
    if any(a.target == param for a in facts.assignments if a.function == function):
        return None
    return argument_for(call, info.node, param)


def _placed(value: cst.BaseExpression, facts: ModuleFacts) -> bool:
    """`net = DDP(net, device_ids=[local_rank])`, `model = model.to(device)`: the object placed on
    the rank's GPU is the same object; the device names no path (`f"{net.name}_ckpt.pth"`), nor
    does a device string itself (`args.device = f"cuda:{local_rank}"`)."""
    if _device_string(value, facts):
        return True
    if type(value) is not cst.Call:
        return False
    method = value.func.attr.value if type(value.func) is cst.Attribute else None
    return method in {"to", "cuda"} or facts.callee(value) in WRAPPERS


def _device_string(value: cst.BaseExpression, facts: ModuleFacts) -> bool:
    """`torch.device("cuda", rank)`, or a string of a device type and one index: `f"cuda:{rank}"`,
    `"cuda:{}".format(rank)`, `"cuda:%d" % rank`."""
    if type(value) is cst.Call and facts.callee(value) == "torch.device":
        return True
    template = None
    if type(value) is cst.FormattedString:
        template = "".join(p.value if type(p) is cst.FormattedStringText else "{}" for p in value.parts)
    elif type(value) is cst.Call and type(value.func) is cst.Attribute and value.func.attr.value == "format":
        template = string_value(value.func.value)
    elif type(value) is cst.BinaryOperation and type(value.operator) is cst.Modulo:
        template = string_value(value.left)
    return template is not None and DEVICE_TEMPLATE.fullmatch(template) is not None


def _read_names(expr: cst.BaseExpression) -> set[str]:
    """The variables an expression reads, an attribute's object included (`f.name` reads `f`), and
    the items it reads by a constant key (`self.meta["dir"]`, bound elsewhere as "self.meta.dir")."""
    return {part for name in names_in(expr, keys=True) for part in (name, name.split(".")[0])}


def _rank_word(name: str) -> bool:
    """`rank`, `local_rank`, `dist_rank`, `rank_id`: one value per process (not `node_rank`, `ranks`)."""
    lowered = name.lower()
    return "rank" in lowered and not any(word in lowered for word in ("node", "world", "ranks", "num_"))


def _per_rank_call(call: cst.Call, facts: ModuleFacts, function: str) -> bool:
    return any(_per_rank(a.value, facts, function) for a in call.args)


def _fills_with_a_download(site: CallSite, facts: ModuleFacts) -> bool:
    """`open(target, "wb").write(response.content)`, or `with open(target, "wb") as f:
    f.write(response.content)`, where `response = requests.get(url)`, or `for chunk in
    response.iter_content(4096): f.write(chunk)`: every write into the file is what a remote read
    returned, a download cache, as `facts.download_items`."""
    handles = {a.target for a in facts.bindings_of(site.node)}
    writes = [
        c
        for c in facts.calls_in(site.function)
        if c.method == "write"
        and type(c.node.func) is cst.Attribute
        and (c.node.func.value is site.node or dotted(c.node.func.value) in handles)
    ]

    def downloaded(write: CallSite) -> bool:
        if not write.node.args:
            return False
        roots = {name.split(".")[0] for name in names_in(write.node.args[0].value)}
        return bool(roots) and all(_from_a_download(root, write, facts, depth=2) for root in roots)

    return bool(writes) and all(downloaded(w) for w in writes)


def _from_a_download(name: str, use: CallSite | Assignment, facts: ModuleFacts, depth: int) -> bool:
    """Every binding of `name` that reaches `use` is a remote read (`requests.get(url)`), or, at
    most `depth` steps away, a part of one: its attribute or what a method of it returns
    (`response.content`, `response.iter_content(4096)`, each chunk of that in a `for`)."""
    bindings = facts.reaching(name, use.function, use.order, use.blocks)
    if not bindings:
        return False
    for b in bindings:
        if type(b.value) is cst.Call and facts.callee(b.value) in NETWORK_READS:
            continue
        head = _head(b.value)
        if depth == 0 or head is None or head == name or not _from_a_download(head, b, facts, depth - 1):
            return False
    return True


def _head(expr: cst.BaseExpression) -> str | None:
    """The name an attribute chain or a method call starts from: `reply.raw.read(n)` -> "reply"."""
    while True:
        if type(expr) is cst.Call:
            expr = expr.func
        elif type(expr) is cst.Attribute:
            expr = expr.value
        else:
            return expr.value if type(expr) is cst.Name else None


def _saves_a_download(site: CallSite, facts: ModuleFacts) -> bool:
    """`encoder = BertModel.from_pretrained(name)`, then `encoder.save_pretrained(local_dir)` with
    nothing read from `encoder` in between: the weights as downloaded, the same bytes on every
    rank, a cache of the download (as DDP302 leaves a file a remote read fills), not the run's
    checkpoint."""
    func = site.node.func
    held = dotted(func.value) if type(func) is cst.Attribute else None
    reaching = facts.reaching(held, site.function, site.order, site.blocks) if held else []
    loaded = bool(reaching) and all(
        type(a.value) is cst.Call and type(a.value.func) is cst.Attribute and a.value.func.attr.value == "from_pretrained"
        for a in reaching
    )
    first = min((a.order for a in reaching), default=site.order)
    used = any(
        first < call.order < site.order and call.method != "save_pretrained" and held in names_read(call)
        for call in facts.calls_in(site.function)
    )
    changed = any(  # `encoder.pooler = None`, or handed on: `model = Wrapper(encoder)`
        first < a.order < site.order and (a.target.startswith(f"{held}.") or held in names_read(a))
        for a in facts.assignments_within(site.function)
    )
    return loaded and not used and not changed


def _copies_a_save(site: CallSite, facts: ModuleFacts) -> bool:
    """A copy made after a checkpoint save of the same function that runs wherever the copy
    does (`torch.save(state, f)`, then `if is_best: shutil.copyfile(f, best)`): part of that save."""
    return any(
        other.order < site.order
        and effect_of(other, facts) == CHECKPOINT
        and all(any(c is mine for mine in site.conditions) for c in other.conditions)
        for other in facts.calls_in(site.function)
    )


def _is_buffer(target: cst.BaseExpression | None, facts: ModuleFacts) -> bool:
    if type(target) is cst.Call:
        return facts.callee(target) in {"io.BytesIO", "io.StringIO"}
    name = dotted(target) if target is not None else None
    return name is not None and any(
        type(a.value) is cst.Call and facts.callee(a.value) in {"io.BytesIO", "io.StringIO"} for a in facts.assigned(name)
    )


def _holds_a_save(site: CallSite, facts: ModuleFacts) -> bool:
    """The opened file is the one a checkpoint save of the same function writes into."""
    handles = {a.target for a in facts.bindings_of(site.node)}
    return bool(handles) and any(
        c.name == "torch.save" and reference(arg(c.node, 1, "f") or c.node) in handles for c in facts.calls_in(site.function)
    )


def _is_devnull(target: cst.BaseExpression | None, facts: ModuleFacts) -> bool:
    return target is not None and facts.qualify(dotted(target)) == "os.devnull"


def _held_mode(facts: ModuleFacts, site: CallSite, name: str) -> str | None:
    """A file mode kept in a local name whose every binding reaching the call is a literal, or a
    choice of literals (`mode = "a" if resume else "w"`): a writing mode among them."""
    values: list[cst.BaseExpression] = []
    for binding in facts.reaching(name, site.function, site.order, site.blocks):
        value = binding.value
        values += [value.body, value.orelse] if type(value) is cst.IfExp else [value]
    return _writing_mode(values)


def _writing_mode(values: list[cst.BaseExpression]) -> str | None:
    """A writing mode among literal file modes (all of them literals), else None."""
    modes = [string_value(v) for v in values]
    if not modes or None in modes:
        return None
    return next((m for m in modes if m is not None and MODE.match(m) and WRITE_MODES & set(m)), None)


def _is_descriptor(target: cst.BaseExpression | None) -> bool:
    """`open(sys.stdout.fileno(), "w", buffering=1)`, `open(2, "w")`: a descriptor the process
    already holds (its own stdout), no file of the disk."""
    if type(target) is cst.Integer:
        return True
    return type(target) is cst.Call and type(target.func) is cst.Attribute and target.func.attr.value == "fileno"


def unguarded_writes(ctx: LintContext, kind: WriteKind) -> Iterator[tuple[CallSite, tuple[Inside, ...]]]:
    """Sites of this module that every rank reaches and that write `kind`.

    Yields the site and, for a call into another module of the project, the chain inside it:
    the calls it goes through, then the write (empty for a write of this module). Once per such
    write, at the call that reaches it first in a run (a `log()` helper called fifty times is one
    mistake, in the helper; so is its write reached again through another helper).
    """
    guards = ctx.guards
    reported: set[object] = set()  # the helpers (or their writes) already reported
    for site in sorted(ctx.facts.calls, key=lambda s: guards.run_order(ctx.facts, s)):
        if guards.safe_helper(site) or kind != MKDIR and prepares_data(ctx.facts, site.function):
            continue
        inside: tuple[Inside, ...] | None = ()
        keys: set[object] = set()  # the helper, and the write it reaches
        if effect_of(site, ctx.facts) != kind:
            inside = _helper_writes(ctx, site, kind, ctx.facts, ctx.path, top=True)
            if inside is None or _per_rank_path_argument(ctx, site, kind):
                continue  # (a helper given a per-rank path writes per rank)
            resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
            if kind != MKDIR and resolved is not None and _builds_data(ctx, site, resolved):
                continue
            # one mistake per helper, whichever of its writes a call reaches (`Logger(path)` and
            # `Logger(path, resume=True)` open the same log in two branches), and per write, through
            # whichever helper (`train_one_epoch()` calling the `write_text()` the script also calls)
            keys = {id(inside[-1].node)}
            if resolved is not None:
                keys.add((resolved.path, resolved.function))
            keys |= _object_file_inside(ctx, inside[-1])
        elif own := _object_file(site, ctx.facts):
            keys = own
        elif site.conditions and (target := write_path(site, ctx.facts)) is not None:
            # the two sides of one test writing the same path (`if hasattr(model, "module"):
            # torch.save(model.module.state_dict(), p)` / `else: torch.save(model.state_dict(), p)`)
            tests = tuple(id(c.test) for c in site.conditions)
            keys = {("alternatives", site.function, tests, ctx.module.code_for_node(target))}
        # rank 0 first, the others after it (a cache): not concurrent, but a second makedirs still raises
        if keys & reported:
            continue
        if ctx.runs_nowhere(site) or on_the_way_to_a_failure(ctx.facts, site):
            continue  # a branch value flow rules out (the `else:` of `if multi_gpu:` after `multi_gpu = True`)
        if (
            not guards.main_only(site, main_first=kind != MKDIR)
            and not guards.untrained_mode(site, ctx.facts, ctx.path)
            and not _undecided(ctx, site, ctx.facts, ctx.path)
            and not _settled_by_the_launcher(ctx.facts, site)
        ):
            reported |= keys
            yield site, inside or ()


def prepares_data(facts: ModuleFacts, function: str) -> bool:
    """A method of a dataset class (a subclass of torch's Dataset, or of such a class of the same
    module): what it writes is its own cache of prepared data, the same on every rank, neither a
    checkpoint nor a log of the run. Its directories still race (DDP304)."""
    cls = function.rpartition(".")[0]
    seen: set[str] = set()
    while cls and cls not in seen:
        seen.add(cls)
        bases = [data_name(b) or b for b in facts.bases.get(cls, ())]
        if DATASETS & set(bases):
            return True
        cls = next((b for b in bases if b in facts.bases), "")
    return False


def _builds_data(ctx: LintContext, site: CallSite, resolved: Resolved) -> bool:
    """The helper's result is the data the script's loaders read: it returns DataLoaders it
    builds (`train_loader, val_loader = get_dataloaders(cfg)`), or what it returns is handed to
    a DataLoader here, or to a project function that builds one (`graphs = load_graphs(path)`,
    then `make_loader(graphs)`). What it writes on the way is prepared data, the same on every
    rank, like a dataset class's cache."""
    if _returns_loaders(resolved):
        return True
    facts = ctx.facts
    names = set(bound_names(facts, site.node))
    kept = {n for n in names if "." in n}  # an attribute (`self.data`) is read by other methods too
    # data itself, never an object whose attributes the script reads (`opt.name`, `logger.info`)
    plain = {n for n in names if not _read_as_object(facts, site.function, n)}
    return bool(names) and any(
        _fed_to_a_loader(ctx, c, names, plain) if c.function == site.function else _fed_to_a_loader(ctx, c, kept, kept & plain)
        for c in facts.calls
    )


def _read_as_object(facts: ModuleFacts, function: str, name: str) -> bool:
    """The function reads an attribute of `name` or calls a method of it (`opt.batch_size`)."""
    prefix = f"{name}."
    exprs: list[cst.CSTNode] = [c.node for c in facts.calls_in(function)]
    own = facts.assignments_within(function) if function else facts.assignments
    exprs += [a.value for a in own if a.function == function]
    return any(n.startswith(prefix) for expr in exprs for n in names_in(expr))


def _fed_to_a_loader(ctx: LintContext, call: CallSite, names: set[str], plain: set[str]) -> bool:
    """The call is a DataLoader given one of `names` as its dataset, or a project function that
    builds and returns a DataLoader of the parameter it fills with one (`def make_loader(graphs,
    batch_size): return DataLoader(graphs, ...)`); also of a dataset built there of what `plain`
    holds (`ds = NewsDataset(cand, hist, labels)`, then `DataLoader(ds, ...)`). Only the value
    itself counts: a logger or the options handed to a dataset builder are no data."""
    if data_name(call.name) == LOADER:
        return _holds_data(ctx.facts, call.function, arg(call.node, 0, "dataset"), names, plain)
    given = [a for a in call.node.args if not a.star and reference(a.value) in names]
    callee = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, call)) if given else None
    if callee is None or not _returns_loaders(callee):
        return False
    inner, _, function = callee
    definition = inner.functions[function].node
    params = {p for a in given if (p := parameter_for(call.node, definition, a)) is not None}
    data = {p for a in given if reference(a.value) in plain and (p := parameter_for(call.node, definition, a)) is not None}
    datasets = [arg(c.node, 0, "dataset") for c in inner.calls_within(function) if data_name(c.name) == LOADER]
    return any(_holds_data(inner, function, d, params, data) for d in datasets)


def _holds_data(facts: ModuleFacts, function: str, dataset: cst.BaseExpression | None, names: set[str], plain: set[str]) -> bool:
    """The loader's dataset is one of `names`, or a name the function binds, on every binding,
    to an object built of one of `plain` (`ds = NewsDataset(cand, hist, labels)`)."""
    held = reference(dataset) if dataset is not None else None
    if held is None or held in names:
        return held is not None
    bound = facts.by_scope.get((function, held), [])
    return bool(bound) and all(
        type(b.value) is cst.Call and any(reference(a.value) in plain for a in b.value.args) for b in bound
    )


def _returns_loaders(resolved: Resolved, hops: int = 1) -> bool:
    """The function returns a DataLoader it builds, or a tuple holding one; or one that a function
    of its module it calls returns (`train_dl = prepare_data(x, y)`, then `return train_dl, valid_dl`)."""
    facts, path, function = resolved
    built = [
        c
        for c in facts.calls_within(function)
        if data_name(c.name) == LOADER
        or hops > 0
        and c.name in facts.functions
        and c.name != function
        and _returns_loaders(Resolved(facts, path, c.name), hops - 1)
    ]
    held = {n for c in built for n in bound_names(facts, c.node)}
    nodes = {id(c.node) for c in built}
    return bool(built) and any(id(r) in nodes or names_in(r) & held for r in facts.functions[function].returns)


def called_from(ctx: LintContext, site: CallSite) -> tuple[Inside, ...]:
    """For a write inside a function of the linted module: the first call of that function that
    every rank makes (`save_checkpoint(...)` in the epoch loop), named beside the write."""
    callers = [c for c in ctx.guards.callers(ctx.facts).get(site.function, []) if not ctx.guards.main_only(c)]
    if not callers:
        return ()
    first = min([c for c in callers if c.function != site.function] or callers, key=lambda c: c.order)  # not its own recursion
    return (Inside(ctx.path, first.node, f"{callee_text(first.node)}() called here, on every rank"),)


def _helper_writes(
    ctx: LintContext,
    site: CallSite,
    kind: WriteKind,
    facts: ModuleFacts,
    path: Path,
    top: bool = False,
    first: bool = False,
    carried: Carried | None = None,
) -> tuple[Inside, ...] | None:
    """The unguarded write of `kind` in the function of another project module that the site
    calls, followed through the helpers it calls: the calls on the way, then the write
    (memoised per function and arguments; a recursive call adds nothing). A project class
    constructed inside a helper is followed into its `__init__` only where a helper the linted
    module calls (`first`) returns it (`def make_recorder(d): return Recorder(d)`): the caller
    builds that object. Deeper, logging libraries build per-rank file objects the rank check
    cannot see. `carried`: the attributes of `self` that the first call's caller handed over,
    with that call, still the same object in the methods it calls on `self`."""
    around = facts.functions.get(site.function) if first else None
    returned = around is not None and any(r is site.node for r in around.returns)
    resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, site), constructors=True if returned else None)
    if resolved is None or resolved.facts is ctx.facts and top:
        return None  # functions of the linted module are judged where they write
    inner_facts, inner_path, function = resolved
    definition = inner_facts.functions[function].node
    # `setup_logging()` leaves log_path=None: its `if log_path:` block stays dark
    bindings = constants.bind_call(site.node, inner_facts, function, built_objects(ctx, site, facts, path))
    off = _main_only_arguments(ctx, site, definition, facts, path)
    # `save_model(..., log)` with `log = GpuLogger(dist_id=rank)`: `if log.dist_id == 0:` there
    handed = handed_state(ctx, site, facts, path, inner_facts, function)
    state = tuple(sorted((name, id(value)) for name, value in handed.items()))
    own = {name: value for name, value in handed.items() if name.startswith("self.")}
    onward = (own, site, facts, path) if own else carried  # for the methods it calls on `self`
    kept = tuple(sorted((name, id(value)) for name, value in carried[0].items())) if carried else ()
    key = (id(inner_facts), function, "writes", kind, off, constants.key(bindings), state, kept, top)
    cache = ctx.memo
    if key not in cache:
        cache[key] = None  # recursion guard
        cache[key] = next(
            (
                found
                for inner in inner_facts.calls_within(function)
                if not ctx.guards.guarded_here(inner, inner_facts, inner_path)
                and not _nested_not_run(ctx, inner, function, inner_facts, inner_path)
                and not (inner.locked and kind != MKDIR)
                and not (kind != MKDIR and prepares_data(inner_facts, inner.function))
                and not constants.dark(inner.conditions, bindings)
                and not on_the_way_to_a_failure(inner_facts, inner)
                and not any(_given(c) in off for c in inner.conditions)
                and not (kind == MKDIR and _made_by_the_caller(ctx, inner, inner_facts, function, site, facts, path))
                and not (handed and any(gated_at_call(ctx, c, handed, site, facts, path) for c in inner.conditions))
                and not (carried and any(gated_at_call(ctx, c, carried[0], *carried[1:]) for c in inner.conditions))
                and (
                    found := (Inside(inner_path, inner.node, f"{callee_text(inner.node)}() here, on every rank"),)
                    if effect_of(inner, inner_facts, bindings) == kind
                    else _onward(ctx, inner, kind, inner_facts, inner_path, top, onward if _on_self(inner) else None)
                )
                is not None
                and not _undecided(ctx, inner, inner_facts, inner_path)
            ),
            None,
        )
    return cache[key]


def _made_by_the_caller(
    ctx: LintContext, inner: CallSite, inner_facts: ModuleFacts, function: str, site: CallSite, facts: ModuleFacts, path: Path
) -> bool:
    """The helper makes a directory it is handed only when it is missing (`if not
    os.path.exists(save_dir): os.makedirs(save_dir)`, also of a name it binds from a parameter,
    `exp_dir = args.log_dir`), and the caller made that directory before the call on every path
    to it: itself (`os.makedirs(out, exist_ok=True)`, also behind its own existence check, `if not
    os.path.exists(out):`), or through an earlier call of a project helper that makes it
    whenever it runs (`set_log_dir(args)` making `args.log_dir`; `log = Log(root)` whose
    `__init__` makes `self.metadata_dir`, then `save_args(args, log.metadata_dir)`): the helper
    finds it and makes nothing."""
    made_there = _made_dir(inner)
    local = reference(made_there) if made_there is not None else None
    if made_there is None or local is None:
        return False
    if not any(_existence_test(c.test, local, inner_facts) == (True, True) for c in inner.conditions):
        return False
    name = _in_callers_terms(made_there, inner_facts, function, site.node, None)
    if name is None:
        return False
    for made in facts.calls_in(site.function):
        if made.order >= site.order or made.in_handler or site.loops[: len(made.loops)] != made.loops:
            continue  # (made later, only when something failed, or in a loop the call is not in)
        own = [c for c in made.conditions if not any(c.test is s.test and c.negated == s.negated for s in site.conditions)]
        if not all(_existence_test(c.test, name, facts)[0] for c in own):
            continue
        target = _made_dir(made)
        if target is not None and reference(target) == name or name in _made_by_helper(ctx, made, facts, path):
            return True
    return False


def _settled_by_the_launcher(facts: ModuleFacts, site: CallSite) -> bool:
    """Module-level code in the branch of `if not os.path.exists(d):` that makes `d`, in a script
    that starts its own workers (mp.spawn, Process): the launching process takes the branch before
    any worker exists, and a worker that imports the module again finds `d` and skips it (`if not
    os.path.exists(d): os.makedirs(d)`, then the header of `open(f"{d}/log.csv", "a")`)."""
    if site.function or in_main_block(site) or not starts_own_workers(facts):
        return False
    for made in facts.calls_in(""):
        target = _made_dir(made)
        if target is None:
            continue
        name = reference(target) or test_key(target)  # also `"logs"`, f"logs/{run}"
        for c in made.conditions:
            same_branch = any(c.test is s.test and c.negated == s.negated for s in site.conditions)
            if same_branch and _existence_test(c.test, name, facts) == (True, True):
                return True
    return False


def _made_by_helper(ctx: LintContext, call: CallSite, facts: ModuleFacts, path: Path) -> set[str]:
    """The directories, in the caller's terms, that the project helper a call runs makes
    whenever it runs (unconditionally, or only when missing): `set_log_dir(args)` with
    `os.makedirs(args.log_dir, exist_ok=True)` makes `args.log_dir`; `log = Log(root)` whose
    `__init__` makes `self.metadata_dir` makes `log.metadata_dir`."""
    resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, call), constructors=True)
    if resolved is None or resolved.facts is facts and resolved.function not in facts.functions:
        return set()
    inner_facts, _, function = resolved
    built = [b.target for b in facts.bindings_of(call.node) if b.value is call.node and not b.element]
    receiver = built[0] if function.endswith(".__init__") and len(built) == 1 else None
    made = set()
    for inner in inner_facts.calls_in(function):
        target = _made_dir(inner)
        local = reference(target) if target is not None else None
        if target is None or local is None:
            continue
        if not all(_existence_test(c.test, local, inner_facts) == (True, True) for c in inner.conditions):
            continue
        found = _in_callers_terms(target, inner_facts, function, call.node, receiver)
        if found is not None:
            made.add(found)
    return made


def _in_callers_terms(
    expr: cst.BaseExpression, facts: ModuleFacts, function: str, call: cst.Call, receiver: str | None, hops: int = 2
) -> str | None:
    """The path a helper's expression names, as the caller of `call` spells it: a parameter the
    helper keeps as it is handed (`save_dir` -> the caller's `out`), an attribute of one
    (`args.log_dir`), `self.X` of the object a constructor builds (`log.X` where the caller binds
    it to `log`), or a name the helper binds once from one of those (`exp_dir = args.log_dir`)."""
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute) else None
    if name is None:
        return None
    head, dot, rest = name.partition(".")
    info = facts.functions[function]
    if head == "self" and receiver is not None and rest:
        return f"{receiver}.{rest}"
    bound = [a for a in facts.by_scope.get((function, head), ()) if a.function == function]
    if head in info.params and not bound:
        given = argument_for(call, info.node, head)
        held = reference(given) if given is not None and type(given) in (cst.Name, cst.Attribute) else None
        return f"{held}{dot}{rest}" if held is not None else None
    if not rest and len(bound) == 1 and not bound[0].element and hops > 0:
        return _in_callers_terms(bound[0].value, facts, function, call, receiver, hops - 1)
    return None


def _made_dir(site: CallSite) -> cst.BaseExpression | None:
    """The directory `os.makedirs(d)`, `os.mkdir(d)` or `Path(d).mkdir()` makes."""
    if site.name in {"os.makedirs", "os.mkdir"}:
        return arg(site.node, 0, "name" if site.name == "os.makedirs" else "path")
    func = site.node.func
    return func.value if site.method == "mkdir" and type(func) is cst.Attribute else None


def _existence_test(test: cst.BaseExpression, name: str, facts: ModuleFacts) -> tuple[bool, bool]:
    """(every part of the test is about the path `name`: its truth or whether it exists; some part
    asks whether it exists): `out and not os.path.exists(out)` -> (True, True)."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return _existence_test(test.expression, name, facts)
    if type(test) is cst.BooleanOperation:
        left, right = _existence_test(test.left, name, facts), _existence_test(test.right, name, facts)
        return left[0] and right[0], left[1] or right[1]
    if type(test) is cst.Call:
        asks = facts.callee(test) in EXISTENCE_CHECKS and test.args and _names_path(test.args[0].value, name)
        func = test.func
        asks = asks or type(func) is cst.Attribute and func.attr.value in {"exists", "is_dir"} and _names_path(func.value, name)
        return bool(asks), bool(asks)
    return reference(test) == name, False


def _names_path(expr: cst.BaseExpression, name: str) -> bool:
    """`expr` is the path `name`: a reference to it, or the same expression written out."""
    return reference(expr) == name or test_key(expr) == name


def _on_self(call: CallSite) -> bool:
    """`self._save_config(...)`, `super().__init__(...)` in a method: a method of the same object."""
    func = call.node.func
    if type(func) is not cst.Attribute:
        return False
    receiver = func.value
    if type(receiver) is cst.Call:
        return dotted(receiver.func) == "super"
    return type(receiver) is cst.Name and receiver.value == "self"


def _nested_not_run(ctx: LintContext, site: CallSite, function: str, facts: ModuleFacts, path: Path) -> bool:
    """The site is in a function nested in `function` that `function` does not run on every rank:
    it calls it only on the main process (`if rank == 0: def save_script(name): shutil.copy(...)`
    then `save_script("train")`), or never (`self.print = prin`: it runs where that is called)."""
    if not site.function.startswith(function + "."):
        return False
    nested = site.function[len(function) + 1 :].split(".")[0]
    calls = [c for c in facts.calls_in(function) if c.name == nested]
    return all(ctx.guards.guarded_here(c, facts, path) for c in calls)


def _onward(
    ctx: LintContext,
    call: CallSite,
    kind: WriteKind,
    facts: ModuleFacts,
    path: Path,
    first: bool = False,
    carried: Carried | None = None,
) -> tuple[Inside, ...] | None:
    """The chain to a write through a helper that a helper calls; none when it hands that helper
    a per-rank path (`_cached_log_stream(filename)` where `filename` ends in the rank)."""
    chain = _through(call, path, _helper_writes(ctx, call, kind, facts, path, first=first, carried=carried))
    return None if chain is None or _per_rank_path_argument(ctx, call, kind, facts, path) else chain


def _object_file(site: CallSite, facts: ModuleFacts) -> set[object]:
    """The file an object keeps as an attribute, when a method writes to it (`open(self.log_file,
    "a")`): every method that writes it, on every rank, is one mistake (the logger), told at
    the first write a run reaches."""
    target = write_path(site, facts) if "." in site.function else None
    name = reference(target) if target is not None else None
    if name is None or not name.startswith("self.") or name.count(".") != 1:
        return set()
    return {("object file", id(facts), site.function.split(".")[0], name)}


def _object_file_inside(ctx: LintContext, write: Inside) -> set[object]:
    """_object_file of the write a helper chain ends at."""
    facts = ctx.project.facts_for(write.path)
    site = next((c for c in facts.calls if c.node is write.node), None) if facts is not None else None
    return _object_file(site, facts) if site is not None and facts is not None else set()


def _through(call: CallSite, path: Path, chain: tuple[Inside, ...] | None) -> tuple[Inside, ...] | None:
    """A helper's call that leads on to a write: its place first, then the rest of the chain."""
    if chain is None:
        return None
    return (Inside(path, call.node, f"{callee_text(call.node)}() called here"), *chain)


def _undecided(ctx: LintContext, site: CallSite, facts: ModuleFacts, path: Path) -> bool:
    """Under a test whose other side writes only on the main process (`if hasattr(args,
    "distributed"): <guarded write> else: <write>`): the test tells the runs apart in a way the
    analysis cannot read, and the write is given the benefit of the doubt."""
    kind = effect_of(site, facts)
    for condition in site.conditions:
        if ctx.guards.condition_kind(condition, facts, path, site.function) is not None:
            continue
        other = [
            s
            for s in facts.calls_in(site.function)
            if s is not site and any(c.test is condition.test and c.negated != condition.negated for c in s.conditions)
        ]
        if any(effect_of(s, facts) == kind and ctx.guards.guarded_here(s, facts, path) for s in other):
            return True
    return False


def _imported(site: CallSite, facts: ModuleFacts) -> bool:
    """The call's receiver is a module the file imports: `wandb.init()` after `import wandb`, not
    the `init()` of a project object that a variable named `wandb` holds."""
    head = (dotted(site.node.func) or "").split(".")[0]
    rebound = [a for a in facts.by_scope.get((site.function, head), ()) if site.function or a.order < site.order]
    return (head in facts.imports or head in facts.aliases) and not rebound


def _per_rank_path_argument(
    ctx: LintContext, site: CallSite, kind: WriteKind, facts: ModuleFacts | None = None, path: Path | None = None
) -> bool:
    """The call (of the linted module, or of `facts` at `path`) hands the helper a per-rank value
    for a parameter that its write's path uses (`save_checkpoint(state, f"ckpt_{rank}.pt")`); a
    model placed on the rank's GPU is no path."""
    facts, path = facts or ctx.facts, path or ctx.path
    resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, site))
    if resolved is None or any(a.star for a in site.node.args):
        return _per_rank_call(site.node, facts, site.function)
    inner_facts, inner_path, function = resolved
    definition = inner_facts.functions[function].node
    used = _path_names(ctx, inner_facts, inner_path, function, kind, PATH_HELPERS)
    if _per_rank_for(ctx, facts, path, site, site.node, definition, used):
        return True
    # `logger.log(...)` where `logger = CSVLogger(f"log_{rank}.csv")`: the constructor stored it
    receiver = site.name.rpartition(".")[0] if site.name else ""
    init = f"{function.rpartition('.')[0]}.__init__"
    if not receiver or init not in inner_facts.functions:
        return False
    constructions = [b.value for b in facts.reaching(receiver, site.function, site.order, site.blocks)]
    return bool(constructions) and all(
        type(call) is cst.Call and _per_rank_for(ctx, facts, path, site, call, inner_facts.functions[init].node, used)
        for call in constructions
    )


PATH_HELPERS = 2  # how many helpers deep a path argument is followed to the write that uses it


def _path_names(ctx: LintContext, facts: ModuleFacts, path: Path, function: str, kind: WriteKind, depth: int) -> set[str]:
    """The names that the paths of the function's writes of `kind` read: its own writes', and
    the arguments it hands a helper for a parameter that the helper's writes use (not the model
    or the device it hands `super().__init__` beside them); through the function's own bindings
    (`self.fname = fname`, then open(self.fname)). Memoised."""
    key = (id(facts), function, "path names", kind, depth)
    if key in ctx.memo:
        return ctx.memo[key]
    ctx.memo[key] = set()  # a recursive helper adds nothing
    used: set[str] = set()
    for inner in facts.calls_within(function):
        if effect_of(inner, facts) == kind:
            used |= names_in(write_path(inner, facts) or inner.node)
            continue
        callee = ctx.resolve_function(facts, path, ctx.method_target(facts, inner))
        if callee is None:
            continue
        if depth == 0 or any(a.star for a in inner.node.args):
            used |= {n for a in inner.node.args for n in names_in(a.value)}  # handed on, unread
            continue
        deeper = _path_names(ctx, callee.facts, callee.path, callee.function, kind, depth - 1)
        definition = callee.facts.functions[callee.function].node
        used |= {n for a in inner.node.args if parameter_for(inner.node, definition, a) in deeper for n in names_in(a.value)}
    pending = list(used)
    while pending:
        for binding in facts.assigned(pending.pop()):
            for name in names_in(binding.value) - used:
                used.add(name)
                pending.append(name)
    ctx.memo[key] = used
    return used


def _per_rank_for(
    ctx: LintContext, facts: ModuleFacts, path: Path, site: CallSite, call: cst.Call, definition: cst.FunctionDef, used: set[str]
) -> bool:
    """`call` (of `site`, in `facts`) gives a parameter of `definition` that the write's path uses a per-rank value."""

    def handed_back(inner: cst.Call) -> cst.BaseExpression | None:
        resolved = ctx.resolve_function(facts, path, facts.callee(inner))
        return returned_argument(inner, resolved.facts, resolved.function) if resolved is not None else None

    if any(a.star for a in call.args):
        return False
    given = [(p, a.value) for a in call.args if (p := parameter_for(call, definition, a)) is not None]
    return any(param in used and _per_rank(value, facts, site.function, handed_back=handed_back) for param, value in given)


def write_path(site: CallSite, facts: ModuleFacts) -> cst.BaseExpression | None:
    """The path a writing call writes to, where one argument names it."""
    call, name = site.node, site.name or ""
    if name == "torch.save":
        return arg(call, 1, "f")
    if name in OUTPUT_WRITERS:
        return arg(call, OUTPUT_WRITERS[name], None)
    if name in {"open", "io.open"} or name in CHECKPOINT_WRITERS or site.method in OUTPUT_METHODS | {"save_pretrained"}:
        return arg(call, 0, None)
    if site.method in {"open", "write_text", "write_bytes", "mkdir"} and type(call.func) is cst.Attribute:
        return call.func.value
    if name in {"os.makedirs", "os.mkdir"}:
        return arg(call, 0, None)
    return None


def _main_only_arguments(
    ctx: LintContext, site: CallSite, definition: cst.FunctionDef, facts: ModuleFacts, path: Path
) -> frozenset[str]:
    """Parameters given a value that exists only on the main process (None elsewhere), or that
    is true there only (a main-process test).

    `args.log_path = None; if is_master(args): args.log_path = ...; setup_logging(args.log_path)`
    """
    off = set()
    for a in site.node.args:
        if a.star:
            break
        param = parameter_for(site.node, definition, a)
        name = dotted(a.value)
        if param and name and ctx.guards.set_on_main_only(name, facts, path, site.function, 2):
            off.add(param)
        elif param:  # `parse(print_options=(rank == 0))`, `setup(is_master)`: true on the main process only
            # `Logger(log_dir if is_main else None)`: a value on the main process, None elsewhere
            choice = a.value if type(a.value) is cst.IfExp and dotted(a.value.orelse) == "None" else None
            true, _ = ctx.guards.worlds(choice.test if choice is not None else a.value, facts, path, site.function)
            if true and NOT_MAIN_WORLD not in true:
                off.add(param)
    return frozenset(off)


def _given(condition: Condition) -> str | None:
    """The name a branch needs to hold a value: `if log_dir:`, `if log_dir is not None:`, the
    `else:` of `if log_dir is None:`."""
    test = condition.test
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and dotted(test.comparisons[0].comparator) == "None":
        present = type(test.comparisons[0].operator) in (cst.IsNot, cst.NotEqual)
        return dotted(test.left) if present != condition.negated else None
    return None if condition.negated else dotted(test)
