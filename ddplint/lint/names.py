"""Small helpers to read names and literals out of libcst expressions.

These replace libcst's QualifiedNameProvider/ScopeProvider, which cost 5-10x the parse: the
few distributed APIs that matter are resolved with the module's own import table instead.
"""

from __future__ import annotations

import re

import libcst as cst

from ddplint.lint.vocabulary import LOADER, LOADER_SUBCLASSES
from ddplint.lint.walk import Walker


def dotted(expr: cst.BaseExpression | None) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None (also for no expression)."""
    parts: list[str] = []
    while type(expr) is cst.Attribute:
        parts.append(expr.attr.value)
        expr = expr.value
    if type(expr) is not cst.Name:
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def callee_text(call: cst.Call) -> str:
    """How a message names what a call calls: `a.b.c`, and for a callee that is no dotted name,
    its shape (`super().__init__`, `self.hooks[...].run`, `(...)`)."""

    def text(expr: cst.BaseExpression) -> str:
        if type(expr) is cst.Name:
            return expr.value
        if type(expr) is cst.Attribute:
            return f"{text(expr.value)}.{expr.attr.value}"
        if type(expr) is cst.Call:
            return f"{text(expr.func)}()"
        if type(expr) is cst.Subscript:
            return f"{text(expr.value)}[...]"
        return "(...)"

    return text(call.func)


def data_name(name: str | None) -> str | None:
    """torch.utils.data.sampler.RandomSampler -> torch.utils.data.RandomSampler: the data
    classes are re-exported from their submodules under one public name. PyTorch Geometric's
    DataLoader is torch's with a collate function of its own (same first three parameters,
    the sampler by keyword): it is a DataLoader."""
    if name in LOADER_SUBCLASSES:
        return LOADER
    if name and name.startswith("torch.utils.data."):
        return "torch.utils.data." + name.rsplit(".", 1)[-1]
    return name


def reference(expr: cst.BaseExpression) -> str | None:
    """A dotted name for what an expression refers to, reading constant keys as attributes:
    `args.gpu`, `opt["rank"]` -> "opt.rank", `cfg["train"].rank` -> "cfg.train.rank",
    `getattr(opts, "ddp.rank", 0)` -> "opts.ddp.rank"."""
    parts: list[str] = []
    while True:
        if type(expr) is cst.Call and dotted(expr.func) == "getattr" and len(expr.args) in (2, 3):
            key = string_value(expr.args[1].value)
            if key is None or not all(part.isidentifier() for part in key.split(".")):
                return None
            parts.extend(reversed(key.split(".")))
            expr = expr.args[0].value
        elif type(expr) is cst.Attribute:
            parts.append(expr.attr.value)
            expr = expr.value
        elif type(expr) is cst.Subscript and len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Index:
            key = string_value(expr.slice[0].slice.value)
            if key is None or not key.isidentifier():
                return None
            parts.append(key)
            expr = expr.value
        else:
            break
    if type(expr) is not cst.Name:
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


# A str literal whose value is its text between the quotes: no escape, no prefix but `u`.
_PLAIN_STRING = re.compile(r"[uU]?(\"\"\"|'''|\"|')([^\\\r]*)\1", re.DOTALL)


def string_value(expr: cst.BaseExpression | None) -> str | None:
    """The value of a plain (non-f) string literal, else None."""
    if type(expr) is cst.SimpleString:
        # Most literals need no evaluation: ast.literal_eval costs, and leaves a reference
        # cycle of its own closures behind on every call.
        plain = _PLAIN_STRING.fullmatch(expr.value)
        if plain is not None:
            return plain[2]
    if type(expr) is cst.SimpleString or type(expr) is cst.ConcatenatedString:
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def int_value(expr: cst.BaseExpression | None) -> int | None:
    if type(expr) is cst.Integer:
        return int(expr.value, 0)  # base 0: Python's own literal syntax (0x10, 1_000)
    return None


def is_constant(expr: cst.BaseExpression | None) -> bool:
    """A literal that cannot change from one run or loop iteration to the next."""
    if type(expr) in (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString):
        return True
    if type(expr) is cst.UnaryOperation:
        return is_constant(expr.expression)
    return type(expr) is cst.Name and expr.value in {"True", "False", "None"}


def arg(call: cst.Call, position: int | None, keyword: str | None) -> cst.BaseExpression | None:
    """The argument given by keyword, or at a position (counting positional arguments only).

    Positions after a `*args` are unknowable and give None.
    """
    index = 0
    for a in call.args:
        if a.keyword is not None:
            if keyword is not None and a.keyword.value == keyword:
                return a.value
        elif a.star:
            position = None
        elif position is not None:
            if index == position:
                return a.value
            index += 1
    return None


def has_keyword(call: cst.Call, keyword: str) -> bool:
    return any(a.keyword is not None and a.keyword.value == keyword for a in call.args)


def has_star_kwargs(call: cst.Call) -> bool:
    return any(a.star == "**" for a in call.args)


def names_in(expr: cst.CSTNode, keys: bool = False) -> set[str]:
    """Every dotted name (and its prefixes' full chains) mentioned in an expression; with
    `keys`, constant-key items as well (`self.state["out_dir"]` as "self.state.out_dir")."""
    found: set[str] = set()

    _NameCollector(found, keys).walk(expr)
    return found


class _NameCollector(Walker):
    def __init__(self, found: set[str], keys: bool) -> None:
        self.found = found
        self.keys = keys

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = dotted(node)
        if name:
            self.found.add(name)
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        self.found.add(node.value)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if self.keys and (name := reference(node)) is not None:
            self.found.add(name)


def with_argument(call: cst.Call, keyword: str, position: int, value: cst.BaseExpression) -> cst.Call:
    """`call` with the parameter (`keyword`, at `position`) set to `value`: replaced where the
    call passes it, by keyword or positionally, else appended as `keyword=value`."""
    args = list(call.args)
    positional = [i for i, a in enumerate(args) if a.keyword is None and not a.star]
    for i, a in enumerate(args):
        if (a.keyword is not None and a.keyword.value == keyword) or (
            a.keyword is None and len(positional) > position and i == positional[position]
        ):
            args[i] = a.with_changes(value=value)
            return call.with_changes(args=args)
    new = cst.Arg(
        keyword=cst.Name(keyword),
        value=value,
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    line_break = _line_break_before(call)  # one argument per line: the new one gets its own
    if type(last.comma) is cst.Comma:  # a trailing comma stays trailing
        after = last.comma.whitespace_after
        if line_break is not None and type(after) is cst.ParenthesizedWhitespace:
            # the last argument keeps its comment; the new one ends where the call's `)` begins
            args[-1] = last.with_changes(
                comma=last.comma.with_changes(whitespace_after=after.with_changes(last_line=line_break.last_line))
            )
            new = new.with_changes(
                comma=last.comma.with_changes(
                    whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
                )
            )
        else:  # `f(a, b,)`
            args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=cst.SimpleWhitespace(" ")))
            new = new.with_changes(comma=last.comma)
        return call.with_changes(args=[*args, new])
    closing = last.whitespace_after_arg  # what stands before `)`: a line break, comments
    between = line_break if line_break is not None and type(closing) is cst.ParenthesizedWhitespace else cst.SimpleWhitespace(" ")
    args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=between), whitespace_after_arg=cst.SimpleWhitespace(""))
    return call.with_changes(args=[*args, new.with_changes(whitespace_after_arg=closing)])


def _line_break_before(call: cst.Call) -> cst.ParenthesizedWhitespace | None:
    """The line break and indentation before the first argument, where each stands on its own line."""
    if type(call.whitespace_before_args) is cst.ParenthesizedWhitespace:
        return call.whitespace_before_args
    return None


def call_parameters(call: cst.Call, definition: cst.FunctionDef) -> list[cst.Param]:
    """The positional parameters as the call fills them: without `self`/`cls` for a method
    called through an object, for a constructor (`Logger(...)` runs `__init__`) and for an
    instance called itself (`checkpoint(step, model)` runs `__call__`)."""
    params = [*definition.params.posonly_params, *definition.params.params]
    bound = type(call.func) is cst.Attribute or definition.name.value in {"__init__", "__call__"}
    if params and params[0].name.value in {"self", "cls"} and bound:
        return params[1:]
    return params


def enters(call: cst.Call, definition: cst.FunctionDef) -> bool:
    """The call can enter the function: it gives every parameter without a default a value, and
    every keyword it passes is a parameter (False: Python raises TypeError before the body runs,
    so the call is not the one the author meant). True where it cannot be told: `*args`/`**kwargs`
    at the call, or a decorated function, whose wrapper may take other arguments."""
    if definition.decorators or any(a.star for a in call.args):
        return True
    positional = sum(1 for a in call.args if a.keyword is None)
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    params = call_parameters(call, definition)
    required = [p.name.value for i, p in enumerate(params) if p.default is None and i >= positional]
    required += [p.name.value for p in definition.params.kwonly_params if p.default is None]
    if type(definition.params.star_kwarg) is not cst.Param:
        named = {p.name.value for p in (*params, *definition.params.kwonly_params)}
        if keywords - named:
            return False
    return all(name in keywords for name in required)


def parameter_for(call: cst.Call, definition: cst.FunctionDef, argument: cst.Arg) -> str | None:
    """The parameter of the function it calls that one argument of a call fills (the reverse of
    argument_for); None past the positional parameters."""
    if argument.keyword is not None:
        return argument.keyword.value
    params = [p.name.value for p in call_parameters(call, definition)]
    index = next(i for i, a in enumerate(call.args) if a is argument)  # positional arguments come first
    return params[index] if index < len(params) else None


def argument_for(call: cst.Call, definition: cst.FunctionDef, param: str) -> cst.BaseExpression | None:
    """What a call passes for one parameter of the function it calls (by keyword or position);
    None where it passes nothing for it, or passes `*args`/`**kwargs` that may hold it."""
    if any(a.star for a in call.args):
        return None
    for a in call.args:
        if a.keyword is not None and a.keyword.value == param:
            return a.value
    positional = [a.value for a in call.args if a.keyword is None]
    names = [p.name.value for p in call_parameters(call, definition)]
    return positional[names.index(param)] if param in names and names.index(param) < len(positional) else None


def format_call(expr: cst.BaseExpression) -> bool:
    """`"cuda:{}".format(...)`: a string literal's format method."""
    return (
        type(expr) is cst.Call
        and type(expr.func) is cst.Attribute
        and expr.func.attr.value == "format"
        and string_value(expr.func.value) is not None
    )


def getattr_call(expr: cst.BaseExpression) -> tuple[str, str] | None:
    """`getattr(module, "init_dist_%s" % x)` or `getattr(module, f"init_dist_{x}")`: the dotted
    name it reads from, and the constant start of the attribute's name (None without one)."""
    if type(expr) is not cst.Call or dotted(expr.func) != "getattr" or len(expr.args) < 2:
        return None
    holder, attribute = dotted(expr.args[0].value), expr.args[1].value
    prefix = None
    if type(attribute) is cst.BinaryOperation and type(attribute.operator) in (cst.Modulo, cst.Add):
        left = string_value(attribute.left)
        prefix = left.partition("%")[0] if left is not None and type(attribute.operator) is cst.Modulo else left
    elif type(attribute) is cst.FormattedString and attribute.parts and type(attribute.parts[0]) is cst.FormattedStringText:
        prefix = attribute.parts[0].value
    return (holder, prefix) if holder and prefix else None


def other_device_type(expr: cst.BaseExpression | None) -> bool:
    """A device string, or the type of a `torch.device`, of an accelerator other than CUDA:
    `"npu"`, `f"xpu:{rank}"`. Its index names no GPU, whatever value it holds."""
    if type(expr) is cst.FormattedString:
        first = expr.parts[0] if expr.parts else None
        text = first.value if type(first) is cst.FormattedStringText else ""
        return text.endswith(":") and text[:-1].isalpha() and text != "cuda:"
    value = string_value(expr)
    return value is not None and value.isalpha() and value != "cuda"


def computed_test(value: cst.BaseExpression) -> bool:
    """`ddp and batch >= n`, `world > 1`, `not single`: a value that is itself a test."""
    return type(value) in (cst.BooleanOperation, cst.Comparison) or (
        type(value) is cst.UnaryOperation and type(value.operator) is cst.Not
    )


def over_range(iterated: cst.BaseExpression) -> bool:
    """`range(...)`, `trange(...)`, or either in a `tqdm(...)`: it yields ints."""
    while type(iterated) is cst.Call and dotted(iterated.func) in {"tqdm", "tqdm.tqdm"} and iterated.args:
        iterated = iterated.args[0].value
    return type(iterated) is cst.Call and dotted(iterated.func) in {"range", "trange", "tqdm.trange"}
