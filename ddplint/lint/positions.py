"""Positions of the few nodes a file's findings point at, without libcst's PositionProvider.

PositionProvider generates the code of the whole module and records a range for every node,
which cost about twice the parse; a file has a handful of findings. Here only the code of the
statement that holds a node is generated, from the line and column Python's parser gives that
statement (see _from_statements); where that cannot be done, the code is generated from the
start of the module up to the end of the last node asked for. Either way nothing is recorded
for the other nodes, and the recorded token counts become lines and columns once at the end.
The ranges are exactly PositionProvider's: the same codegen hooks (`record_syntactic_position`,
with its positions hoisted from child nodes, else the whitespace-inclusive range of
`before/after_codegen`) and the same line counting (each token on its own: a "\\r" token
followed by a "\\n" token is two lines, as libcst counts it)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from itertools import accumulate

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst._position import CodePosition, CodeRange

from ddplint.lint import limits
from ddplint.lint.source import source_lines
from ddplint.lint.walk import field_names, node_kind


class _Done(Exception):
    """Every node asked for has its range: stop generating code."""


class _Nothing:
    """The context manager of a node whose position nobody asked for."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOTHING = _Nothing()


class _Syntactic:
    __slots__ = ("end_node", "node", "start", "start_node", "state")

    def __init__(self, state: _State, node: cst.CSTNode, start_node, end_node) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)

    def __exit__(self, kind, value, traceback) -> None:
        state = self.state
        start = state.ranges[id(self.start_node)][0] if self.start_node is not None else self.start
        end = state.ranges[id(self.end_node)][1] if self.end_node is not None else len(state.tokens)
        state.ranges[id(self.node)] = (start, end)  # the syntactic range wins, as in PositionProvider


class _State(CodegenState):
    """Codegen that notes, as token counts, the ranges of the wanted nodes only."""

    def __init__(self, module: cst.Module, wanted: set[int]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = set(wanted)  # grows by the children a wanted range is hoisted from
        self.pending = set(wanted)
        self.opened: dict[int, int] = {}
        self.ranges: dict[int, tuple[int, int]] = {}

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self.opened[id(node)] = len(self.tokens)

    def after_codegen(self, node: cst.CSTNode) -> None:
        key = id(node)
        if key in self.wanted:
            start = self.opened.pop(key)
            if key not in self.ranges:
                self.ranges[key] = (start, len(self.tokens))
            self.pending.discard(key)
            if not self.pending:
                raise _Done

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        if id(node) not in self.wanted:
            return _NOTHING
        for child in (start_node, end_node):
            if child is not None:
                self.wanted.add(id(child))
        return _Syntactic(self, node, start_node, end_node)

    def pop_trailing_newline(self) -> None:
        pass  # the end of the module: the tokens counted so far stay as they are


def ranges(module: cst.Module, nodes: Iterable[cst.CSTNode], text: str | None = None) -> dict[int, CodeRange]:
    """The CodeRange (as PositionProvider gives it) of each node found in `module`, by id(node).

    With the module's `text`, each node is placed from the statement that holds it (see
    _from_statements); what that cannot place is generated from the start of the module.
    """
    wanted = {id(node) for node in nodes}
    if not wanted:
        return {}
    found = _from_statements(module, wanted, text) if text is not None else {}
    rest = wanted - found.keys()
    if rest:
        found.update(_from_module_start(module, rest))
    return found


def _from_module_start(module: cst.Module, wanted: set[int]) -> dict[int, CodeRange]:
    state = _State(module, wanted)
    try:
        module._codegen(state)
    except _Done:
        pass
    return _positions(state, wanted, 1, 0)


def _positions(state: _State, wanted: set[int], line: int, column: int) -> dict[int, CodeRange]:
    """The ranges of the recorded nodes, from token counts, with the first token at (line, column)."""
    marks = sorted({mark for key in wanted if key in state.ranges for mark in state.ranges[key]})
    tokens = state.tokens
    # Every token followed by a NUL (no source holds one): two tokens never join into one line break.
    text = "\x00".join(tokens) + "\x00"
    lengths = [0, *accumulate(map(len, tokens))]  # token i starts at lengths[i] + i in `text`
    at: dict[int, CodePosition] = {}
    offset = 0
    for mark in marks:
        stop = lengths[mark] + mark
        chunk = text[offset:stop]
        # libcst's line breaks: \r\n, \r or \n (metadata.position_provider.NEWLINE_RE)
        breaks = chunk.count("\n") + chunk.count("\r") - chunk.count("\r\n")
        if breaks:
            line += breaks
            tail = chunk[max(chunk.rfind("\n"), chunk.rfind("\r")) + 1 :]
            column = len(tail) - tail.count("\x00")
        else:
            column += len(chunk) - chunk.count("\x00")
        at[mark] = CodePosition(line, column)
        offset = stop
    return {key: CodeRange(at[state.ranges[key][0]], at[state.ranges[key][1]]) for key in wanted if key in state.ranges}


# -- from the statement that holds each node ---------------------------------------------
#
# Generating the code from the start of the module costs about half a parse when a finding
# sits near the end of a file. Python's own parser gives every statement its line and column
# for a tenth of that; libcst's statements and Python's, in source order, are the same list
# (a libcst line of `a; b` is two statements, as in Python). So each node's statement is found
# in one walk, matched by its place in that order, and only that statement's code is
# generated, from where Python says it starts.

# Python's statement classes by libcst's names (one class for both spellings of async ones).
_PYTHON_NAMES = {"AsyncFunctionDef": "FunctionDef", "AsyncFor": "For", "AsyncWith": "With", "Delete": "Del"}
_STATEMENT_KINDS: dict[type, int] = {}  # 0 not a statement, 1 small, 2 compound


def _statement_kind(node: cst.CSTNode) -> int:
    kind = _STATEMENT_KINDS.get(type(node))
    if kind is None:
        kind = _STATEMENT_KINDS[type(node)] = (
            1 if isinstance(node, cst.BaseSmallStatement) else 2 if isinstance(node, cst.BaseCompoundStatement) else 0
        )
    return kind


class _AllFound(Exception):
    """Every wanted node has its statement: the rest of the module need not be walked."""


class _Holders:
    """Per wanted node, the innermost statement that holds it: (its place in source order, the
    statement, whether it is an `elif`); and the class names of the statements met until the
    last wanted node, in source order."""

    def __init__(self, wanted: set[int]) -> None:
        self.pending = set(wanted)
        self.found: dict[int, tuple[int, cst.CSTNode, bool]] = {}
        self.kinds: list[str] = []

    def find(self, module: cst.Module) -> None:
        try:
            self._visit(module, None, False)
        except _AllFound:
            pass

    def _visit(self, node: cst.CSTNode, holder: tuple[int, cst.CSTNode, bool] | None, is_elif: bool) -> None:
        # Walker.walk's loop, without dispatch: it runs over most of a module with a finding.
        if _statement_kind(node):
            holder = (len(self.kinds), node, is_elif)
            self.kinds.append(type(node).__name__)
        key = id(node)
        if key in self.pending and holder is not None:
            self.found[key] = holder
            self.pending.discard(key)
            if not self.pending:
                raise _AllFound
        orelse = node.orelse if type(node) is cst.If else None
        for field in field_names(type(node)):
            value = getattr(node, field)
            kind = node_kind(value)
            if kind == 1:
                self._visit(value, holder, value is orelse)
            elif kind == 2:
                for item in value:
                    if node_kind(item) == 1:
                        self._visit(item, holder, False)


def _python_statements(tree: ast.Module) -> list[ast.stmt]:
    """Python's statements in source order (each before the statements in its blocks)."""
    found: list[ast.stmt] = []
    pending: list[Iterator[ast.stmt]] = [iter(tree.body)]
    while pending:
        statement = next(pending[-1], None)
        if statement is None:
            pending.pop()
            continue
        found.append(statement)
        inner: list[ast.stmt] = []
        for name in ("body", "handlers", "orelse", "finalbody", "cases"):
            for part in getattr(statement, name, ()):
                inner.extend(part.body if isinstance(part, (ast.ExceptHandler, ast.match_case)) else [part])
        pending.append(iter(inner))
    return found


def _from_statements(module: cst.Module, wanted: set[int], text: str) -> dict[int, CodeRange]:
    search = _Holders(wanted)
    search.find(module)
    holders = search.found
    if not holders:
        return {}
    try:
        tree = limits.parse_python(text, "<positions>")
    except (SyntaxError, limits.TooComplex):  # newer syntax than this Python's
        return {}
    python = _python_statements(tree)
    if [_PYTHON_NAMES.get(name, name) for name in map(_class_name, python[: len(search.kinds)])] != search.kinds:
        return {}  # the two lists do not match after all: nothing is placed this way
    lines = source_lines(text)
    groups: dict[int, set[int]] = {}
    for key, (place, _, _) in holders.items():
        groups.setdefault(place, set()).add(key)
    found: dict[int, CodeRange] = {}
    for place, keys in groups.items():
        _, statement, is_elif = holders[next(iter(keys))]
        anchor = python[place]
        found.update(_within(module, statement, is_elif, anchor, keys, lines))
    return found


def _within(
    module: cst.Module, statement: cst.CSTNode, is_elif: bool, anchor: ast.stmt, wanted: set[int], lines: list[str]
) -> dict[int, CodeRange]:
    """The ranges of the wanted nodes of one statement, from its code alone."""
    state = _State(module, wanted)
    if _statement_kind(statement) == 1:  # from its first token: Python's line and column
        line = anchor.lineno
        generated = statement
    else:  # a compound statement starts its line (its decorators': Python gives the `def`'s)
        decorators = getattr(statement, "decorators", ())
        if decorators and decorators[0].leading_lines:
            return {}
        line = min([anchor.lineno, *(d.lineno for d in getattr(anchor, "decorator_list", ()))])
        generated = statement.with_changes(leading_lines=())  # the same children: their ids hold
    line_text = lines[line - 1] if line <= len(lines) else ""
    indent = line_text[: len(line_text) - len(line_text.lstrip(" \t\f"))]
    # the block's indentation, which libcst adds to the line and to continuation lines in brackets
    state.indent_tokens = [indent] if indent else []
    origin = (line, _characters(line_text, anchor.col_offset)) if generated is statement else (line, 0)
    try:
        if is_elif:
            generated._codegen(state, is_elif=True)
        else:
            generated._codegen(state)
    except _Done:
        pass
    return _positions(state, wanted, *origin)


def _class_name(node: object) -> str:
    return type(node).__name__


def _characters(line: str, byte_offset: int) -> int:
    """Python's column (UTF-8 bytes) as libcst's (characters)."""
    if line.isascii():
        return byte_offset
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))
