"""Positions of the few nodes a file's findings point at, without libcst's PositionProvider.

PositionProvider generates the code of the whole module and records a range for every node,
which cost about twice the parse; a file has a handful of findings. This generates the code
only up to the end of the last node asked for, records nothing for the other nodes, and turns
the recorded token counts into lines and columns once at the end. The ranges are exactly
PositionProvider's: the same codegen hooks (`record_syntactic_position`, with its positions
hoisted from child nodes, else the whitespace-inclusive range of `before/after_codegen`) and
the same line counting (each token on its own: a "\\r" token followed by a "\\n" token is two
lines, as libcst counts it).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst._position import CodePosition, CodeRange


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


def ranges(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[int, CodeRange]:
    """The CodeRange (as PositionProvider gives it) of each node found in `module`, by id(node)."""
    wanted = {id(node) for node in nodes}
    if not wanted:
        return {}
    state = _State(module, wanted)
    try:
        module._codegen(state)
    except _Done:
        pass
    marks = sorted({mark for key in wanted if key in state.ranges for mark in state.ranges[key]})
    tokens = state.tokens
    # Every token followed by a NUL (no source holds one): two tokens never join into one line break.
    text = "\x00".join(tokens) + "\x00"
    lengths = [0, *accumulate(map(len, tokens))]  # token i starts at lengths[i] + i in `text`
    at: dict[int, CodePosition] = {}
    line, column, offset = 1, 0, 0
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
