"""A read-only walk over a libcst tree, in source order.

libcst's `node.visit(visitor)` rebuilds every node it passes through (it is built for
transformers), which costs more than the parse itself. The facts pass only reads, so it walks
the syntactic fields directly and skips the whitespace and punctuation nodes. The visitor keeps
libcst's shape: `visit_<Node>` (return False to skip the children) and `leave_<Node>`.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

# Fields that hold only whitespace, comments or punctuation.
_SKIPPED = frozenset(
    {
        "lpar",
        "rpar",
        "lbrace",
        "rbrace",
        "lbracket",
        "rbracket",
        "comma",
        "equal",
        "dot",
        "colon",
        "semicolon",
        "leading_lines",
        "lines_after_decorators",
        "header",
        "footer",
        "indent",
        "trailing_whitespace",
        "asynchronous",
        "encoding",
        "default_indent",
        "default_newline",
        "has_trailing_newline",
        "star",
    }
)
# Where the dataclass field order is not the source order.
_ORDER: dict[type, tuple[str, ...]] = {
    cst.ClassDef: ("decorators", "name", "bases", "keywords", "body"),
    cst.FunctionDef: ("decorators", "name", "params", "returns", "body"),
}
_fields: dict[type, tuple[str, ...]] = {}


def field_names(kind: type) -> tuple[str, ...]:
    names = _fields.get(kind)
    if names is None:
        names = _ORDER.get(kind) or tuple(
            f.name for f in dataclasses.fields(kind) if f.name not in _SKIPPED and not f.name.startswith("whitespace")
        )
        _fields[kind] = names
    return names


# Per class of a field's value: 1 a node, 2 a sequence, 0 anything else. isinstance against
# CSTNode, an ABC, runs Python code on every miss; the walk asks for every field of every node.
_kinds: dict[type, int] = {}


def node_kind(value: object) -> int:
    """1 for a node, 2 for a sequence (of nodes), 0 for anything else."""
    kind = type(value)
    found = _kinds.get(kind)
    if found is None:
        found = _kinds[kind] = 1 if issubclass(kind, cst.CSTNode) else 2 if issubclass(kind, (list, tuple)) else 0
    return found


_handlers: dict[tuple[type, type], tuple] = {}


class Walker:
    """Base of read-only visitors: `self.walk(node)` dispatches on the node's class name."""

    def walk(self, node: cst.CSTNode) -> None:
        # The hottest loop of the analysis: the children are read inline (no generator), and
        # per (visitor, node class) the handlers and the fields to read are looked up once.
        key = (type(self), type(node))
        handlers = _handlers.get(key)
        if handlers is None:
            name = type(node).__name__
            handlers = _handlers[key] = (
                getattr(type(self), f"visit_{name}", None),
                getattr(type(self), f"leave_{name}", None),
                field_names(type(node)),
            )
        visit, leave, fields = handlers
        if visit is None or visit(self, node) is not False:
            for field in fields:
                value = getattr(node, field)
                kind = _kinds.get(type(value))
                if kind is None:
                    kind = node_kind(value)
                if kind == 1:
                    self.walk(value)
                elif kind == 2:
                    for item in value:
                        if _kinds.get(type(item)) == 1 or node_kind(item) == 1:
                            self.walk(item)
        if leave is not None:
            leave(self, node)
