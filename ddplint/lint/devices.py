"""Where a script places tensors and models on a device, what device each place names, and
whether the process is bound to its GPU on every path to it.

Shared by the device-binding rules (DDP101-DDP105): they differ only in which kind of
device expression they report. A device held in a variable is followed to the values that
reach the use (`device = "cuda:0"`, then `model.to(device)`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import libcst as cst

from ddplint.lint import constants
from ddplint.lint.context import LintContext
from ddplint.lint.facts import Assignment, CallSite, Condition, ModuleFacts, names_read
from ddplint.lint.guards import DIST, SINGLE_WORLD
from ddplint.lint.handed_objects import set_by_helper
from ddplint.lint.launch import complement_key, test_key
from ddplint.lint.names import (
    arg,
    argument_for,
    call_parameters,
    dotted,
    format_call,
    has_keyword,
    int_value,
    names_in,
    parameter_for,
    reference,
    string_value,
)
from ddplint.lint.paths import Event, joined
from ddplint.lint.resolver import Resolved
from ddplint.lint.roles import PER_NODE, RANK_CALLS, DeviceKind, Role
from ddplint.lint.summaries import Effect, per_process_visible_devices
from ddplint.lint.vocabulary import BINDING_METHODS, CURRENT_DEVICE_CALLS, DDP, DEVICE_CONTEXTS, INIT_PG, SET_DEVICE_CALLS

CUDA_INDEX = re.compile(r"^cuda:(\d+)$")
FOLLOW = 6  # how many variables deep a device value is followed
HAND_ON = 2  # how many project calls deep a parameter handed on is followed to its placement
# When the two sides of `a if cond else b` differ, the one to report.
_WORST_FIRST = (DeviceKind.INDEX, DeviceKind.GLOBAL, DeviceKind.BARE, DeviceKind.LOCAL, DeviceKind.OTHER)


@dataclass(frozen=True)
class Device:
    kind: DeviceKind
    index: int | None = None
    origin: cst.BaseExpression | None = None  # the literal a variable got its value from


@dataclass(frozen=True)
class DeviceUse:
    site: CallSite
    # the node to report: the literal behind a hard-coded index or the expression a global-rank
    # device was built from (`device = f"cuda:{rank}"`), else the use
    expr: cst.BaseExpression
    kind: DeviceKind
    index: int | None = None
    placement: bool = True  # moves data or binds a device (not just builds a torch.device)


def classify(ctx: LintContext, expr: cst.BaseExpression | None, site: Event, int_is_index: bool, depth: int = FOLLOW) -> Device:
    """What device an expression names at `site` (a call, or the binding it is the value of)."""
    facts, function = ctx.facts, site.function
    if expr is None:
        return Device(DeviceKind.BARE)
    text = string_value(expr)
    if text is not None:
        match = CUDA_INDEX.match(text)
        if match:
            return Device(DeviceKind.INDEX, int(match.group(1)), expr)
        return Device(DeviceKind.BARE) if text == "cuda" else Device(DeviceKind.OTHER)
    number = int_value(expr)
    if number is not None:
        return Device(DeviceKind.INDEX, number, expr) if int_is_index else Device(DeviceKind.OTHER)
    if type(expr) is cst.IfExp:
        # `f"cuda:{local_rank}" if distributed else args.device`: a side only one process takes
        # names no rank's device
        true, false = ctx.guards.worlds(expr.test, facts, ctx.path, function)
        taken = [e for e, where in ((expr.body, true), (expr.orelse, false)) if where != {SINGLE_WORLD}]
        sides = [classify(ctx, e, site, int_is_index, depth) for e in taken or (expr.body, expr.orelse)]
        return min(sides, key=lambda d: _WORST_FIRST.index(d.kind))
    if type(expr) is cst.Dict:  # map_location={"cuda:0": f"cuda:{rank}"}: the values say where tensors go
        targets = [e.value for e in expr.elements if type(e) is cst.DictElement]
        mapped = [(classify(ctx, target, site, int_is_index, depth), target) for target in targets]
        if not mapped:
            return Device(DeviceKind.OTHER)
        device, target = min(mapped, key=lambda pair: _WORST_FIRST.index(pair[0].kind))
        return device if device.origin is not None else replace(device, origin=target)
    if type(expr) is cst.Call:
        callee = facts.callee(expr)
        if callee == "torch.device":
            return _torch_device(ctx, expr, site, depth)
        if callee in CURRENT_DEVICE_CALLS:
            return Device(DeviceKind.BARE)
        if depth > 0 and (through := _through_helper(ctx, expr, site, int_is_index, depth - 1)) is not None:
            return through
    role = facts.role_of(expr, function)
    if role in PER_NODE and _global_where_used(ctx, expr, site):
        role = Role.GLOBAL_RANK
    if role in PER_NODE:
        return Device(DeviceKind.LOCAL)
    if role is Role.GLOBAL_RANK and not _built_without_rank(ctx, expr, site):
        return Device(DeviceKind.GLOBAL, origin=_device_built(ctx, expr, site, depth))
    if type(expr) is cst.FormattedString and depth > 0:
        return _formatted_index(ctx, expr, site, depth - 1)
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute, cst.Subscript) else None
    if name is None or depth == 0:
        return Device(DeviceKind.OTHER)
    return _classify_name(ctx, name, site, int_is_index, depth - 1)


def _global_where_used(ctx: LintContext, expr: cst.BaseExpression, site: Event) -> bool:
    """A name taken as the local rank (it holds it on the other paths) that only bindings of the
    global rank in the same function reach here: `args.local_rank = dist.get_rank()`, then
    `torch.device("cuda", args.local_rank)` in the same branch (a parameter is the caller's)."""
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute) else None
    reaching = ctx.facts.reaching(name, site.function, site.order, site.blocks) if name else []
    return bool(reaching) and all(
        b.function == site.function and not b.element and ctx.facts.role_of(b.value, b.function) is Role.GLOBAL_RANK
        for b in reaching
    )


def _built_without_rank(ctx: LintContext, expr: cst.BaseExpression, site: Event) -> bool:
    """A name that holds the global rank's device on another path of its function, but here only
    devices built without it (`device = torch.device(f"npu:{rank}")` in the other branch of
    `if torch.cuda.is_available():`): what reaches the use decides, not the name."""
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute, cst.Subscript) else None
    reaching = ctx.facts.reaching(name, site.function, site.order, site.blocks) if name else []
    return bool(reaching) and all(
        not b.element
        and (type(b.value) is cst.SimpleString or builds_device(ctx.facts, b.value))
        and ctx.facts.role_of(b.value, b.function) is None
        for b in reaching
    )


def builds_device(facts: ModuleFacts, expr: cst.BaseExpression) -> bool:
    """`f"cuda:{rank}"`, `"cuda:{}".format(rank)`, `"cuda:%d" % rank` or `torch.device(...)`: a
    device expression built here."""
    if type(expr) is cst.BinaryOperation:
        return type(expr.operator) is cst.Modulo and string_value(expr.left) is not None
    return (
        type(expr) is cst.FormattedString or format_call(expr) or type(expr) is cst.Call and facts.callee(expr) == "torch.device"
    )


def _formatted_index(ctx: LintContext, expr: cst.FormattedString, site: Event, depth: int) -> Device:
    """`f"cuda:{config.rank}"` whose index is a parameter or a name the value flow follows to a
    rank (`train(cfg)` after `cfg.rank = int(os.environ["RANK"])`): that rank's device."""
    values = [p.expression for p in expr.parts if type(p) is cst.FormattedStringExpression]
    text = "".join(p.value for p in expr.parts if type(p) is cst.FormattedStringText)
    if len(values) != 1 or text != "cuda:":
        return Device(DeviceKind.OTHER)
    index = classify(ctx, values[0], site, True, depth)
    if index.kind is DeviceKind.GLOBAL:
        return Device(DeviceKind.GLOBAL, origin=expr)
    return Device(DeviceKind.LOCAL) if index.kind is DeviceKind.LOCAL else Device(DeviceKind.OTHER)


def _through_helper(ctx: LintContext, call: cst.Call, site: Event, int_is_index: bool, depth: int) -> Device | None:
    """`select_device(f"cuda:{rank}")`, where the project's helper makes a device of one of its
    parameters and returns it (`return torch.device(device)`; other returns naming the CPU or
    MPS): the device is the one the call hands it, reported where the call builds it."""
    resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.facts.callee(call))
    if resolved is None:
        return None
    helper, function = resolved.facts, resolved.function
    info = helper.functions[function]
    passed = {_returned_parameter(helper, function, r, parameter_names(info.node)) for r in info.returns}
    passed.discard("")
    if len(passed) != 1 or None in passed:
        return None
    argument = argument_for(call, info.node, passed.pop() or "")
    if argument is None:
        return None
    device = classify(ctx, argument, site, int_is_index, depth)
    if device.kind is DeviceKind.GLOBAL and device.origin is None:
        return replace(device, origin=argument)
    return device


def _returned_parameter(
    helper: ModuleFacts, function: str, value: cst.BaseExpression, params: set[str], seen: frozenset[str] = frozenset()
) -> str | None:
    """The parameter a helper's returned value makes its device of (`device`, or
    `torch.device(device)`, or a name bound to either in the helper: in `device =
    torch.device(device)` the right side is the parameter); "" for a device that is no GPU
    (`torch.device("cpu")`, `"mps"`), None for anything else."""
    if type(value) is cst.Call and helper.callee(value) == "torch.device" and len(value.args) == 1:
        value = value.args[0].value
    text = string_value(value)
    if text is not None:
        return None if text.startswith("cuda") else ""
    if type(value) is not cst.Name:
        return None
    bound = [a.value for a in helper.assignments if a.function == function and a.target == value.value]
    if not bound or value.value in seen:
        return value.value if value.value in params else None
    found = {_returned_parameter(helper, function, b, params, seen | {value.value}) for b in bound}
    found.discard("")
    return found.pop() if len(found) == 1 else None if found else ""


def _device_built(ctx: LintContext, expr: cst.BaseExpression, site: Event, depth: int) -> cst.BaseExpression | None:
    """The device expression built from the global rank that a variable holds at `site`
    (`device = f"cuda:{rank}"`, `torch.device("cuda", rank)`), where one such binding reaches it
    (beside others: `else: device = "cuda"`); not the rank itself. A parameter the function never
    binds holds what its callers built, where they all hand it the same one (`train(model,
    device)` after `device = f"cuda:{rank}"`): one device, reported once, where it is built."""
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute, cst.Subscript) else None
    if name is None:
        return None
    reaching = ctx.facts.reaching(name, site.function, site.order, site.blocks)
    info = ctx.facts.functions.get(site.function)
    if not reaching and info is not None and name in parameter_names(info.node) and depth > 0:
        callers = _arguments_for(ctx, info.node, site.function, name)
        given = {id(b): b for b in (_device_built(ctx, argument, caller, depth - 1) for caller, argument in callers)}
        return given.popitem()[1] if len(given) == 1 else None
    built: dict[int, cst.BaseExpression] = {}
    for b in reaching:
        if b.element:
            continue
        value = b.value
        if type(value) is cst.Call and ctx.facts.callee(value) == "torch.device" and len(value.args) == 1:
            value = value.args[0].value  # `device = torch.device(device)` wraps what it is given
        # a copy (`args.device = device`) holds the device its value was built as
        found = _device_built(ctx, value, b, depth - 1) if type(value) in (cst.Name, cst.Attribute) and depth > 0 else None
        if found is None and ctx.facts.role_of(b.value, b.function) is Role.GLOBAL_RANK:
            if builds_device(ctx.facts, b.value):
                found = b.value
        if found is not None:
            built[id(found)] = found
    return built.popitem()[1] if len(built) == 1 else None


def _classify_name(ctx: LintContext, name: str, site: Event, int_is_index: bool, depth: int) -> Device:
    """What a named value holds at `site`: the bindings that reach it there; for a parameter of
    the enclosing function, the arguments of its calls in this module (or its default); for an
    argparse option that nothing assigns, its default."""
    facts = ctx.facts
    reaching = facts.reaching(name, site.function, site.order, site.blocks)
    # a binding that only one process makes (`else: device = "cuda:0"` of the launch test) names
    # that process's own GPU
    everywhere = [a for a in reaching if not ctx.guards.one_process(a)]
    if reaching and not everywhere:
        return Device(DeviceKind.OTHER)
    # a binding in another function (`self.device = device` in `__init__`) is read where it is made
    values = [
        Device(DeviceKind.OTHER)
        if a.element
        else classify(ctx, a.value, site if a.function == site.function else a, int_is_index, depth)
        for a in everywhere
    ]
    head, _, rest = name.partition(".")
    if not values and rest and set_by_helper(ctx, head, rest, site):
        return Device(DeviceKind.OTHER)  # what the helper sets is not followed
    info = facts.functions.get(site.function)
    if not values and info is not None and head in parameter_names(info.node) and depth > 0:
        for caller, argument in _arguments_for(ctx, info.node, site.function, head):
            if not rest:
                values.append(classify(ctx, argument, caller, int_is_index, depth - 1))
            elif (outer := reference(argument)) is not None:
                values.append(_classify_name(ctx, f"{outer}.{rest}", caller, int_is_index, depth - 1))
    if not values and (default := _option_default(ctx, name, site)) is not None:
        if _joins_the_group_with(ctx, name):  # each process is given its own: its default is no device
            return Device(DeviceKind.OTHER)
        values.append(classify(ctx, default, site, int_is_index, depth))
    return min(values, key=lambda d: _WORST_FIRST.index(d.kind)) if values else Device(DeviceKind.OTHER)


def option_default(ctx: LintContext, value: cst.BaseExpression, site: Event) -> cst.BaseExpression | None:
    """The argparse default that `value` holds at `site` (`args.backend` of `add_argument(
    "--backend", default="nccl")`), where nothing in the script assigns that option."""
    name = reference(value)
    if name is None or ctx.facts.reaching(name, site.function, site.order, site.blocks):
        return None
    return _option_default(ctx, name, site)


def _option_default(ctx: LintContext, name: str, site: Event) -> cst.BaseExpression | None:
    head, _, rest = name.partition(".")
    if rest in ctx.facts.options and "." not in rest and parsed_arguments(ctx, head, site):
        return ctx.facts.options[rest]
    return None


def _joins_the_group_with(ctx: LintContext, name: str) -> bool:
    """An option handed to the call that joins the process group (`init_process_group(...,
    rank=args.rank)`, `init_distributed(args.rank, num_gpus)`): a value the launcher sets apart
    for each process, not the default every process would share."""
    return any(
        any(reference(a.value) == name for a in site.node.args) and Effect.INIT_GROUP in ctx.summaries.effects(site)
        for site in ctx.facts.calls
    )


def parameter_names(definition: cst.FunctionDef) -> set[str]:
    params = definition.params
    return {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}


def _arguments_for(
    ctx: LintContext, definition: cst.FunctionDef, function: str, parameter: str
) -> Iterator[tuple[CallSite, cst.BaseExpression]]:
    """(call, the expression it passes for `parameter`, else the parameter's default) per call;
    not the calls only one process makes (`train_loop(0, cfg)` on the single-GPU side)."""
    params = definition.params
    default = next(
        (p.default for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == parameter), None
    )
    for caller in ctx.guards.callers(ctx.facts).get(function, []):
        if any(a.star for a in caller.node.args) or _starts_no_group(ctx, caller, definition, function):
            continue
        if ctx.guards.one_process(caller):
            continue
        argument = argument_for(caller.node, definition, parameter) or default
        if argument is not None:
            yield caller, argument


def _starts_no_group(ctx: LintContext, call: CallSite, definition: cst.FunctionDef, function: str) -> bool:
    """The call turns off the process group of the function it calls: it passes False (or None)
    for the parameter that the function's init_process_group runs under (`run(0, 1, hps,
    use_ddp=False)` for `if use_ddp: dist.init_process_group(...)`). That run is one process."""
    for start in ctx.facts.calls_in(function):
        if start.name != INIT_PG:
            continue
        for condition in start.conditions:
            if condition.negated or type(condition.test) is not cst.Name:
                continue
            given = argument_for(call.node, definition, condition.test.value)
            if given is not None and type(given) is cst.Name and given.value in {"False", "None"}:
                return True
    return False


def parsed_arguments(ctx: LintContext, name: str, site: Event) -> bool:
    """`name` holds the result of argparse's parse_args() (here, at module level, or passed in)."""
    info = ctx.facts.functions.get(site.function)
    parameter = info is not None and name in parameter_names(info.node)
    bindings = ctx.facts.reaching(name, site.function, site.order, site.blocks)
    if parameter:  # a parameter shadows the module's global of that name
        bindings = [b for b in bindings if b.function == site.function]
    if any(holds_parsed_arguments(ctx, b.value) for b in bindings):
        return True
    return (
        info is not None
        and parameter
        and any(
            _parses_arguments(argument) or (outer := reference(argument)) is not None and parsed_arguments(ctx, outer, caller)
            for caller, argument in _arguments_for(ctx, info.node, site.function, name)
        )
    )


def holds_parsed_arguments(ctx: LintContext, value: cst.BaseExpression) -> bool:
    """`parser.parse_args()`, or a call of a function of this module that returns it."""
    return _parses_arguments(value) or _returns_parsed_arguments(ctx, value)


def _returns_parsed_arguments(ctx: LintContext, value: cst.BaseExpression) -> bool:
    """`args = get_args()` where get_args, in this module, returns parser.parse_args(), directly
    or through a name it binds to it (`args = parser.parse_args(); return args`)."""
    function = dotted(value.func) or "" if type(value) is cst.Call else ""
    info = ctx.facts.functions.get(function)
    if info is None:
        return False
    names = {r.value for r in info.returns if type(r) is cst.Name}
    return any(_parses_arguments(r) for r in info.returns) or any(
        a.target in names and _parses_arguments(a.value) for a in ctx.facts.assignments if a.function == function
    )


def _parses_arguments(expr: cst.BaseExpression) -> bool:
    return (
        type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in {"parse_args", "parse_known_args"}
    )


def _torch_device(ctx: LintContext, call: cst.Call, site: Event, depth: int) -> Device:
    """`torch.device("cuda", 0)` or `torch.device("cuda:0")`; a literal index is reported on the
    whole `torch.device(...)` expression."""
    first = arg(call, 0, "type")
    index = arg(call, 1, "index")
    if index is None:
        device = classify(ctx, first, site, True, depth)
    elif string_value(first) != "cuda":
        return Device(DeviceKind.OTHER)
    else:
        device = classify(ctx, index, site, True, depth)
    if device.origin is not None and device.origin in (first, index):
        return replace(device, origin=call)
    return device


def device_uses(ctx: LintContext) -> Iterator[DeviceUse]:
    for site in ctx.facts.calls:
        if next(_device_arguments(site, False), None) is None:
            continue  # names no device (asked first: the guards below are the costly question)
        if site.in_default and not _default_used(ctx, site) or ctx.guards.one_process(site):
            continue  # one process alone (single-process run, main rank) uses its own GPU 0
        # only calls with a device= need to know whether they bind (it follows the call into helpers)
        binder = has_keyword(site.node, "device") and (
            Effect.BINDS_DEVICE in ctx.summaries.effects(site) or _names_no_gpu(ctx, site)
        )
        for target, int_is_index, placement in _device_arguments(site, binder):
            device = classify(ctx, target, site, int_is_index)
            followed = device.kind in {DeviceKind.INDEX, DeviceKind.GLOBAL} and device.origin is not None
            report = device.origin if followed else target
            yield DeviceUse(site, report if report is not None else site.node, device.kind, device.index, placement)


def _names_no_gpu(ctx: LintContext, site: CallSite) -> bool:
    """The project function or class the call names places nothing by its `device` parameter:
    it reads it only as the type of a device whose index it takes elsewhere
    (`torch.device(self.device, self.local_rank)`), or only tests it (`if device == 0:` choosing
    the process that writes). `NERModel(local_rank=local_rank, device="cuda")` and
    `split_indexes(seed, device=rank)` name no GPU themselves. A helper that hands the value on
    in any other way (a call, a local name, a return) may place by it."""
    resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
    if resolved is None:
        return False
    facts, _, function = resolved
    info = facts.functions[function]
    if "device" not in info.params:
        return False
    bindings = [a for a in facts.assignments_within(function) if "device" in names_in(a.value)]
    if any(not a.target.startswith("self.") for a in bindings) or any("device" in names_in(r) for r in info.returns):
        return False
    held = {"device"} | {a.target for a in bindings}
    scope = function.rpartition(".")[0] if bindings else function  # a class reads what it keeps in any method
    calls = facts.calls_within(scope)
    typed = {
        id(call.node)
        for call in calls
        if call.name == "torch.device"
        and (kind := arg(call.node, 0, "type")) is not None
        and reference(kind) in held
        and arg(call.node, 1, "index") is not None
    }
    # any other call given the value, or something built from it, may place by it
    return not any(
        id(call.node) not in typed and any(id(a.value) not in typed and names_in(a.value) & held for a in call.node.args)
        for call in calls
    )


def _device_arguments(site: CallSite, binder: bool) -> Iterator[tuple[cst.BaseExpression | None, bool, bool]]:
    """(device expression, whether a bare int is an index, whether it places or binds) per call.

    A helper that binds the device itself (`utils.get_device(device="cuda")` choosing the local
    rank's GPU) takes its `device=` as a device type to resolve, not as a place to put tensors.
    """
    call = site.node
    if site.name == "torch.device":
        if arg(call, 1, "index") is not None or string_value(arg(call, 0, "type")) is not None:
            yield call, True, False
        return
    if site.name in SET_DEVICE_CALLS or site.method in BINDING_METHODS:
        target = arg(call, 0, "device")
        if target is not None:
            yield target, True, True
        return
    if site.method == "cuda":
        yield arg(call, 0, "device"), True, True
    elif site.method == "to":
        target = arg(call, 0, "device")
        if target is not None and (type(target) is not cst.Call or _names_device(target)):
            yield target, True, True
    if site.name == DDP:
        ids = arg(call, None, "device_ids")
        # `device_ids=[rank] if torch.cuda.is_available() else None`: the list on its GPU side
        for side in (ids.body, ids.orelse) if type(ids) is cst.IfExp else (ids,):
            if type(side) is cst.List and len(side.elements) == 1:
                yield side.elements[0].value, True, True
    for keyword in ("device", "map_location"):
        target = arg(call, None, keyword)
        if target is None or site.method == "to" and keyword == "device" or binder and keyword == "device":
            continue
        if keyword == "map_location" and string_value(target) == "cuda":
            continue  # map_location="cuda" maps onto the current device
        yield target, False, True


def replaced_before_read(facts: ModuleFacts, node: cst.CSTNode) -> bool:
    """A device built only to be held under a name that nothing reads (`dev = torch.device("cuda")`
    left at module level), or that a later binding replaces on every path before anything reads
    it (`device = torch.device("cuda")`, then, once the group is up, `device =
    f"cuda:{local_rank}"`): it never reaches a tensor."""
    bindings = facts.bindings_of(node)
    for binding in bindings:
        target, function = binding.target, binding.function
        later = [
            a.order
            for a in facts.assigned(target)
            if a.function == function
            and a.order > binding.order
            and not a.element
            and binding.blocks[: len(a.blocks)] == a.blocks
            and len(a.loops) == len(binding.loops)
        ]
        if binding.element or "." in target:
            return False
        # a module-level name can be read by any function; a local one only after its binding
        everywhere = function == "" and not later
        events: list[CallSite | Assignment] = [
            *(facts.calls if everywhere else facts.calls_in(function)),
            *(a for a in facts.assignments if everywhere or a.function == function),
        ]
        until = min(later) if later else None
        between = [e for e in events if everywhere or binding.order < e.order and (until is None or e.order < until)]
        info = facts.functions.get(function)
        returned = set().union(*(names_in(r) for r in info.returns)) if info is not None and not later else set()
        if any(_mentions(target, names) for names in (returned, *(names_read(e, binding.conditions) for e in between))):
            return False
    return bool(bindings)


def _mentions(name: str, names: set[str]) -> bool:
    return any(n == name or n.startswith(f"{name}.") for n in names)


def parameter_as_device(facts: ModuleFacts, function: str, param: str) -> CallSite | None:
    """The first call of `function` that places or binds on its parameter `param` taken as a GPU
    (`torch.cuda.set_device(rank)`, `.to(rank)`, `device_ids=[rank]`), itself or a name the
    function copies it to (`device = rank`, `device = f"cuda:{rank}"`, `torch.device("cuda",
    rank)`); None where the function rebinds the parameter (`rank = rank % n`)."""
    if any(a.target == param for a in facts.assignments if a.function == function):
        return None
    names = {param}
    for a in sorted((a for a in facts.assignments if a.function == function and not a.element), key=lambda a: a.order):
        if _as_device(facts, a.value, names):
            names.add(a.target)
    calls = facts.calls_within(function)
    cls, _, method = function.rpartition(".")
    kept = {n for n in names if n.startswith("self.")}
    kept -= {a.target for a in facts.assignments if a.function.startswith(f"{cls}.") and a.function != function}
    if method == "__init__" and kept:  # `self.device = torch.device(f"cuda:{rank}")`, used by the other methods
        calls = [*calls, *(c for c in facts.calls if c.function.startswith(f"{cls}.") and c.function != function)]
    for site in calls:
        for target, int_is_index, placement in _device_arguments(site, False):
            if (
                target is not None
                and placement
                and int_is_index
                and _as_device(facts, target, names if site.function == function else kept)
            ):
                return site
    return None


def placed_by_helper(ctx: LintContext, site: CallSite, given: list[cst.Arg]) -> tuple[cst.Arg, Path, CallSite] | None:
    """The first of the arguments `given` to a function of another project module that fills a
    parameter the function places on as its GPU (`build_model(cfg, gpu)` with `.cuda(gpu)` inside,
    `train(rank)` with `torch.cuda.set_device(rank)`), itself or in the project functions it hands
    that parameter on to: the argument, and the module and call that place on it."""
    resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site)) if given else None
    if resolved is None or resolved.facts is ctx.facts:
        return None
    for argument in given:
        found = _placed_on(ctx, site, argument, resolved, HAND_ON)
        if found is not None:
            return argument, *found
    return None


def _placed_on(
    ctx: LintContext, site: CallSite, argument: cst.Arg, resolved: Resolved, hops: int
) -> tuple[Path, CallSite] | None:
    inner_facts, inner_path, function = resolved
    param = parameter_for(site.node, inner_facts.functions[function].node, argument)
    if not param:
        return None
    use = parameter_as_device(inner_facts, function, param)
    if use is not None:
        return inner_path, use
    for inner in inner_facts.calls_within(function) if hops > 0 else ():
        for handed in (a for a in inner.node.args if not a.star and reference(a.value) == param):
            onward = ctx.resolve_function(inner_facts, inner_path, ctx.method_target(inner_facts, inner))
            found = _placed_on(ctx, inner, handed, onward, hops - 1) if onward is not None else None
            if found is not None:
                return found
    return None


def _as_device(facts: ModuleFacts, expr: cst.BaseExpression, names: set[str]) -> bool:
    """`rank`, `f"cuda:{rank}"` or `torch.device("cuda", rank)` for a name in `names`."""
    if type(expr) is cst.Name:
        return expr.value in names
    if type(expr) is cst.FormattedString:
        parts = [p for p in expr.parts if type(p) is cst.FormattedStringExpression]
        return len(parts) == 1 and type(parts[0].expression) is cst.Name and parts[0].expression.value in names
    if type(expr) is cst.Call and facts.callee(expr) == "torch.device":
        index = arg(expr, 1, "index")
        if index is None:  # torch.device(f"cuda:{rank}")
            return (first := arg(expr, 0, "type")) is not None and _as_device(facts, first, names)
        return type(index) is cst.Name and index.value in names
    if type(expr) is cst.Attribute:  # `self.device`, kept by the constructor
        return reference(expr) in names
    return False


def _names_device(call: cst.Call) -> bool:
    """`torch.device(...)`, the current accelerator, a device string formatted (`"cuda:{}".format(i)`),
    or a rank taken as the device index (`y.to(dist.get_rank())`)."""
    if format_call(call):
        return True
    name = reference(call.func)
    return name is not None and name.rsplit(".", 1)[-1] in {"device", "current_accelerator", *RANK_CALLS}


def _default_used(ctx: LintContext, site: CallSite) -> bool:
    """A device built in a parameter's default matters only if some call leaves the parameter out."""
    info = ctx.facts.functions.get(site.function)
    if info is None:
        return True
    params = [*info.node.params.posonly_params, *info.node.params.params, *info.node.params.kwonly_params]
    owner = next((p for p in params if p.default is not None and contains(p.default, site.node)), None)
    callers = ctx.guards.callers(ctx.facts).get(site.function, [])
    if owner is None or not callers:
        return True
    name = owner.name.value
    for caller in callers:
        call = caller.node
        if any(a.star for a in call.args):
            continue
        positional = [p.name.value for p in call_parameters(call, info.node)]
        given = {a.keyword.value for a in call.args if a.keyword is not None}
        given |= set(positional[: sum(1 for a in call.args if a.keyword is None)])
        if name not in given:
            return True
    return False


def contains(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    return tree is node or any(contains(child, node) for child in tree.children)


def binding_sites(ctx: LintContext) -> list[CallSite]:
    """Calls that bind the process to its GPU: set_device, directly or inside a project helper."""
    contexts = [s for s in ctx.facts.calls if s.name in DEVICE_CONTEXTS]  # bind inside their block
    return ctx.summaries.sites_with(Effect.BINDS_DEVICE) + contexts


def bound_before(ctx: LintContext, use: CallSite, bindings: list[CallSite]) -> bool:
    """A binding happens on every path to `use`: earlier in its function, or before every call
    of that function in this module. A function nothing here calls is started from elsewhere;
    a binding in another function of the module that nothing here calls may run first, and is
    taken to."""
    key = ("bindings by function", id(bindings))
    if key not in ctx.memo:
        calls = ctx.guards.callers(ctx.facts)
        by_function: dict[str, list[CallSite]] = {}
        for b in bindings:
            by_function.setdefault(b.function, []).append(b)
        ctx.memo[key] = (by_function, {b.function for b in bindings if not calls.get(b.function)}, bindings)
    by_function, uncalled, _ = ctx.memo[key]
    return _bound_before(ctx, use, by_function, uncalled, frozenset())


def _bound_before(
    ctx: LintContext, use: CallSite, by_function: dict[str, list[CallSite]], uncalled: set[str], chain: frozenset[str]
) -> bool:
    here = by_function.get(use.function, [])
    if joined(here, use, ctx.facts) or any(_dominates_when_distributed(ctx, b, use) for b in here):
        return True
    chain = chain | {use.function}
    callers = [c for c in ctx.guards.callers(ctx.facts).get(use.function, []) if c.function not in chain]
    if callers:
        # a call that its own tests give to one process (the single-process side of the launch
        # test, or the main rank) needs no binding: its GPU 0 is its own; the use's tests on
        # module globals hold at the call too (`if args.cuda: data.cuda()` in a function that
        # `main()` calls after `if args.cuda: set_device(local_rank)`)
        carried = _global_conditions(ctx.facts, use)
        return all(
            _bound_before(ctx, replace(c, conditions=(*c.conditions, *carried)), by_function, uncalled, chain)
            for c in callers
            if not ctx.guards.own_guards(c, ctx.facts, ctx.path)
        )
    # A binding inside a function that this module calls is judged at those calls (they are
    # bindings too); one in a function started from elsewhere may run first.
    return bool(uncalled - chain)


def _global_conditions(facts: ModuleFacts, use: CallSite) -> tuple[Condition, ...]:
    """The tests around `use` that read only names its function neither binds nor takes as
    parameters: module globals, the same in its callers."""
    info = facts.functions.get(use.function)
    if info is None:
        return ()
    own = set(info.params) | {a.target.split(".")[0] for a in facts.assignments_within(use.function)}
    return tuple(c for c in use.conditions if not {n.split(".")[0] for n in names_in(c.test)} & own)


def on_local_rank_zero(ctx: LintContext, site: CallSite) -> bool:
    """A test around the site lets only local rank 0 in (`if args.gpu: ... else:` of a local rank,
    `if local_rank == 0:`): there the current device, GPU 0, is that process's own. A local rank
    the tests leave falsy is 0 (or None: no distribution)."""
    known = constants.branch_facts(site.conditions)
    return any(not value and ctx.facts.role_of_name(name, site.function) is Role.LOCAL_RANK for name, value in known.items())


def bound_where_cuda(ctx: LintContext, use: DeviceUse, bindings: list[CallSite]) -> bool:
    """The device is CUDA exactly where an earlier binding runs: `device = "cuda" if args.cuda
    else "cpu"` after `if args.cuda: torch.cuda.set_device(local_rank)`; without CUDA there is
    no GPU to land on."""
    tests = cuda_tests(ctx, use.expr, use.site)
    return bool(tests) and any(_dominates_when_distributed(ctx, b, use.site, tests) for b in bindings)


def bound_before_cuda_named(ctx: LintContext, use: DeviceUse, bindings: list[CallSite]) -> bool:
    """The device is a local name that is a bare CUDA device only in branches that bind the
    process to its GPU before the use: `if torch.cuda.is_available(): set_device(local_rank);
    device = torch.device("cuda")`, `else: device = torch.device("cpu")`. Each binding of the
    name to CUDA has a set_device on every path to it, or after it in its own block and before
    the use; wherever the use sees "cuda", the process was bound first."""
    name = reference(use.expr) if type(use.expr) is cst.Name else None
    if name is None:
        return False
    site = use.site
    reaching = [b for b in ctx.facts.reaching(name, site.function, site.order, site.blocks) if not b.element]
    cuda = [b for b in reaching if classify(ctx, b.value, site, True).kind is DeviceKind.BARE]

    def bound(b: Event) -> bool:
        here = [s for s in bindings if s.function == b.function]
        return joined(here, b, ctx.facts) or any(
            s.blocks == b.blocks and b.order < s.order < site.order and s.function == site.function for s in here
        )

    return bool(cuda) and all(bound(b) for b in cuda)


def cuda_tests(ctx: LintContext, expr: cst.BaseExpression, site: CallSite, depth: int = FOLLOW) -> frozenset[str]:
    """The tests (as `test_key`s) that a device expression is CUDA under and only under: the
    test of `"cuda" if test else "cpu"`, through the names and torch.device() that hold it."""
    if type(expr) is cst.IfExp:
        body, orelse = (classify(ctx, e, site, True).kind is DeviceKind.OTHER for e in (expr.body, expr.orelse))
        if orelse and not body:
            return frozenset({test_key(expr.test)})
        flipped = complement_key(expr.test) if body and not orelse else None
        return frozenset({flipped}) if flipped is not None else frozenset()
    if type(expr) is cst.Call and ctx.facts.callee(expr) == "torch.device" and expr.args:
        return cuda_tests(ctx, expr.args[0].value, site, depth)
    name = reference(expr) if type(expr) in (cst.Name, cst.Attribute) else None
    if name is None or depth == 0:
        return frozenset()
    # a name: every binding of it that reaches here (an attribute: every binding of it in the
    # module, `args.device = ...` in the function that parses the arguments)
    facts = ctx.facts
    bindings = facts.assigned(name) if "." in name else facts.reaching(name, site.function, site.order, site.blocks)
    bindings = [b for b in bindings if not b.element]
    found = [cuda_tests(ctx, b.value, site, depth - 1) for b in bindings]
    return (frozenset.intersection(*found) if found else frozenset()) or _branch_tests(ctx, bindings, site)


def _branch_tests(ctx: LintContext, bindings: list[Assignment], site: CallSite) -> frozenset[str]:
    """`if args.no_cuda: device = torch.device("cpu")`, `else: device = torch.device("cuda")`:
    the tests of the branches that make the name CUDA, where every other binding makes it
    something else."""
    kinds = [classify(ctx, b.value, site, True).kind for b in bindings]
    if set(kinds) != {DeviceKind.BARE, DeviceKind.OTHER}:
        return frozenset()
    cuda = [b for b, kind in zip(bindings, kinds, strict=True) if kind is DeviceKind.BARE]
    return frozenset.intersection(*(frozenset(_side_key(c) for c in b.conditions) for b in cuda))


def _side_key(condition: Condition) -> str:
    """The key of the test that holds inside the condition's branch."""
    if not condition.negated:
        return test_key(condition.test)
    return complement_key(condition.test) or test_key(cst.UnaryOperation(operator=cst.Not(), expression=condition.test))


def _dominates_when_distributed(ctx: LintContext, binding: CallSite, use: CallSite, also: frozenset[str] = frozenset()) -> bool:
    """The binding sits in branches that every distributed run takes (`if args.distributed:`),
    or that the use's own device needs (`also`: tests it is CUDA under; `if
    torch.cuda.is_available():`), earlier in the same block as the use: only a single-process
    run, or one without CUDA, can skip it.

    A test with the binding on one side and the use on the other side, where that side is
    distributed too (`if args.gpu is not None: set_device(...) else: model.cuda(); model =
    DDP(model)`), splits the distributed runs: the use's side runs distributed, unbound."""
    if binding.function != use.function or binding.order >= use.order:
        return False
    shared = 0
    while shared < min(len(binding.blocks), len(use.blocks)) and binding.blocks[shared] == use.blocks[shared]:
        shared += 1
    if shared == len(binding.blocks):
        return True
    extra = [c for c in binding.conditions if not any(c is u for u in use.conditions)]
    if len(extra) != len(binding.blocks) - shared:
        return False
    facts, path, function = ctx.facts, ctx.path, binding.function
    return all(
        ctx.guards.condition_kind(c, facts, path, function) == DIST
        and not any(
            _other_side(facts, function, c, u, binding.order, use.order)
            and not ctx.guards.one_process_branch(u, facts, path, function)
            for u in use.conditions
        )
        or not c.negated
        and (test_key(c.test) in also or _asks_for_cuda(facts, c.test, also))
        # the use runs only where the binding's own test holds again
        or any(_same_side(facts, function, c, u, binding.order, use.order) for u in use.conditions)
        for c in extra
    )


def _other_side(facts: ModuleFacts, function: str, first: Condition, then: Condition, start: int, end: int) -> bool:
    """`then` holds where `first` does not: the other branch of the same `if`, or the same test
    reached again later in `function` with nothing rebinding its names in between (`if args.gpu
    is not None: set_device(args.gpu)` at the group's start, then `if args.gpu is not None: ...
    else: model.cuda()` where the model is wrapped)."""
    return _same_test(facts, function, first, then, start, end) is False


def _same_side(facts: ModuleFacts, function: str, first: Condition, then: Condition, start: int, end: int) -> bool:
    """`then` holds exactly where `first` does: the same test reached again on the same side
    (`if args.cuda: set_device(local_rank)`, later `if args.cuda: model.cuda()`)."""
    return _same_test(facts, function, first, then, start, end) is True


def _same_test(facts: ModuleFacts, function: str, first: Condition, then: Condition, start: int, end: int) -> bool | None:
    """Whether `then` holds where `first` holds (True) or where it does not (False), the same
    test read again with nothing rebinding its names in between; None where they are unrelated."""
    if then.test is first.test:
        return then.negated == first.negated
    key = test_key(first.test)
    if test_key(then.test) == key:
        same = then.negated == first.negated
    elif complement_key(then.test) == key:
        same = then.negated != first.negated
    else:
        return None
    tested = set(names_in(first.test))  # `args.gpu`: rebinding `args` or `args.gpu` changes it
    rebound = any(
        start < a.order < end and any(t == a.target or t.startswith(a.target + ".") for t in tested)
        for a in facts.assignments_within(function)
    )
    return None if rebound else same


def _asks_for_cuda(facts: ModuleFacts, test: cst.BaseExpression, also: frozenset[str] = frozenset()) -> bool:
    """`if torch.cuda.is_available():`: every run with a GPU to land on takes the branch; so
    does a flag that only joins that with the tests the use's device is CUDA under (`args.cuda
    = not args.no_cuda and torch.cuda.is_available()`, the device CUDA where `not args.no_cuda`)."""
    if type(test) is cst.Call:
        return facts.callee(test) == "torch.cuda.is_available"
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return all(_asks_for_cuda(facts, side, also) or test_key(side) in also for side in (test.left, test.right))
    name = reference(test) if type(test) in (cst.Name, cst.Attribute) else None
    bindings = facts.assigned(name) if name is not None and also else []
    return bool(bindings) and all(
        not b.element and type(b.value) is cst.BooleanOperation and _asks_for_cuda(facts, b.value, also) for b in bindings
    )


def visible_devices_per_rank(ctx: LintContext) -> bool:
    """The script, or a project helper it calls, narrows CUDA_VISIBLE_DEVICES per process: then
    "cuda:0" is that rank's GPU. Library code (no `__main__` block) that imports the project
    module doing so runs under the scripts that call it."""
    if per_process_visible_devices(ctx.facts) or ctx.summaries.sites_with(Effect.OWN_GPU_ONLY):
        return True
    return not ctx.facts.is_script and any(per_process_visible_devices(m) for m in ctx.imported_project_modules())
