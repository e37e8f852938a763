"""The directories a module puts on `sys.path` before its imports run.

Research code often imports its helpers from a directory beside the script that is no package
(`lib/`, `src/`): the script, or a module it imports first for that purpose only (`import
_init_paths`), does `sys.path.insert(0, osp.join(osp.dirname(__file__), "lib"))`. Those imports
are the project's, and resolve there. Only what can be read without running anything counts:
module-level calls of `sys.path.insert`/`append` (or of a function of the module that passes one
of its parameters to them), with a directory built from `__file__`, string literals, module-level
names bound once, `os.path` functions and `pathlib.Path` (`.parent`, `.parents[n]`, `/`). A
relative directory is taken from the script's own directory, where such scripts are run from.
"""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst

from ddplint.lint.facts import ModuleFacts
from ddplint.lint.names import argument_for, dotted, int_value, string_value

EDITS = {"sys.path.insert": 1, "sys.path.append": 0}  # the position of the directory argument
_JOINED = {"os.path.join", "pathlib.Path", "pathlib.PurePath"}
_UNCHANGED = {"os.path.abspath", "os.path.realpath", "os.path.normpath", "str", "os.fspath"}
DEPTH = 8  # names followed through their bindings


def added_dirs(facts: ModuleFacts, path: Path) -> tuple[list[Path], list[Path]]:
    """(the directories the module inserts at the front of sys.path, those it appends)."""
    front: list[Path] = []
    back: list[Path] = []
    for site in facts.calls:
        if site.function or site.loops:
            continue  # module-level code that runs once, as the module is imported
        position = EDITS.get(site.name or "")
        if position is not None:
            directory = _directory(facts, path, _argument(site.node, position), DEPTH)
        else:
            directory, position = _through_helper(facts, path, site.node)
        if directory is not None:
            (front if position else back).append(directory)
    return front, back


def _argument(call: cst.Call, position: int) -> cst.BaseExpression | None:
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return positional[position] if position < len(positional) else None


def _through_helper(facts: ModuleFacts, path: Path, call: cst.Call) -> tuple[Path | None, int]:
    """`add_path(lib_path)` where the module's `def add_path(p)` puts `p` on sys.path: the
    directory, and the position of the edit's directory argument (1: inserted, 0: appended)."""
    info = facts.functions.get(dotted(call.func) or "")
    if info is None:
        return None, 0
    for inner in facts.calls_within(info.name):
        position = EDITS.get(inner.name or "")
        held = _argument(inner.node, position) if position is not None else None
        if position is not None and type(held) is cst.Name and held.value in info.params:
            return _directory(facts, path, argument_for(call, info.node, held.value), DEPTH), position
    return None, 0


def _directory(facts: ModuleFacts, path: Path, expr: cst.BaseExpression | None, depth: int) -> Path | None:
    value = _value(facts, path, expr, depth)
    if value is None:
        return None
    found = Path(value) if os.path.isabs(value) else path.parent / value
    return Path(os.path.normpath(found))


def _value(facts: ModuleFacts, path: Path, expr: cst.BaseExpression | None, depth: int) -> str | None:
    """The path an expression names, as a string, or None where it cannot be read."""
    if expr is None or depth <= 0:
        return None
    text = string_value(expr)
    if text is not None:
        return text
    if type(expr) is cst.Name:
        if expr.value == "__file__":
            return str(path)
        bound = [a for a in facts.assigned(expr.value) if not a.function]
        return _value(facts, path, bound[0].value, depth - 1) if len(bound) == 1 and not bound[0].element else None
    if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Divide:  # Path / "lib"
        left, right = _value(facts, path, expr.left, depth - 1), _value(facts, path, expr.right, depth - 1)
        return os.path.join(left, right) if left is not None and right is not None else None
    if type(expr) is cst.Attribute and expr.attr.value == "parent":  # Path(__file__).parent
        inner = _value(facts, path, expr.value, depth - 1)
        return os.path.dirname(inner) if inner is not None else None
    if type(expr) is cst.Subscript and type(expr.value) is cst.Attribute and expr.value.attr.value == "parents":
        # Path(__file__).resolve().parents[1]: the directory two levels up
        item = expr.slice[0].slice if len(expr.slice) == 1 else None
        levels = int_value(item.value) if type(item) is cst.Index else None
        inner = _value(facts, path, expr.value.value, depth - 1)
        if levels is None or levels < 0 or inner is None:
            return None
        for _ in range(levels + 1):
            inner = os.path.dirname(inner)
        return inner
    if type(expr) is not cst.Call:
        return None
    if type(expr.func) is cst.Attribute and expr.func.attr.value in ("resolve", "absolute") and not expr.args:
        return _value(facts, path, expr.func.value, depth - 1)  # Path(...).resolve()
    callee = facts.qualify(dotted(expr.func))
    read = [_value(facts, path, a.value, depth - 1) for a in expr.args if not a.star and a.keyword is None]
    parts = [part for part in read if part is not None]
    if not parts or len(parts) != len(expr.args):
        return None
    if callee in _JOINED:
        return os.path.join(*parts)
    if callee == "os.path.dirname" and len(parts) == 1:
        return os.path.dirname(parts[0])
    if callee in _UNCHANGED and len(parts) == 1:
        return parts[0]
    return None
