"""Which top-level functions and classes of a script ever run, and which statements cannot.

A script runs its module-level code (its `__main__` block included) and what that code names,
and what those name in turn. A function or class that nothing live names (`train_mp` left
beside the `train` that `mp.spawn` starts, and the model class only `train_mp` builds) is
left-over code: what it would do is no finding. Decorated definitions count as live (a
decorator may register them), and so does everything of a module that other modules import.
A method of a class without base classes that nothing in the script names (`def test(self):`
whose one call, `trainer.test()`, is commented out) never runs either: no library calls it by
name.

Statements that follow a `return`, `raise`, `continue` or `break` in the same block never run
either, in any module (a training loop left below the `return` of the one that replaced it).
"""

from __future__ import annotations

import libcst as cst

from ddplint.lint.walk import Walker


class _Names(Walker):
    """The names a node reads (bare names, and strings for `getattr(obj, "name")`) and, apart,
    the members it reads (`model.train()` names a method `train`, not a function `train`)."""

    def __init__(self) -> None:
        self.found: set[str] = set()
        self.members: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.found.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self.walk(node.value)
        self.members.add(node.attr.value)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for part in (*node.decorators, node.params, node.body):  # not its own name
            self.walk(part)
        if node.returns is not None:
            self.walk(node.returns)
        return False

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.found.add(node.evaluated_value if isinstance(node.evaluated_value, str) else "")  # getattr(obj, "name")


def _names(node: cst.CSTNode, members: bool = False) -> set[str]:
    collector = _Names()
    collector.walk(node)
    return collector.found | collector.members if members else collector.found


def dead_definitions(module: cst.Module) -> list[cst.FunctionDef]:
    """The undecorated top-level functions, and the methods of the undecorated top-level classes,
    that the module's own code never reaches. (A class body's own statements run where the class
    is defined: only its methods wait to be called.)"""
    definitions: dict[str, list[cst.FunctionDef]] = {}
    roots: set[str] = set()
    for statement in module.body:
        if type(statement) is cst.FunctionDef and not statement.decorators:
            definitions[statement.name.value] = [statement]
        elif type(statement) is cst.ClassDef and not statement.decorators:
            members = statement.body.body if type(statement.body) is cst.IndentedBlock else ()
            methods = [m for m in members if type(m) is cst.FunctionDef]
            definitions[statement.name.value] = methods
            roots |= {n for m in members if type(m) is not cst.FunctionDef for n in _names(m)}
            roots |= {n for base in statement.bases for n in _names(base)}
        else:
            roots |= _names(statement)
    live: set[str] = set()
    pending = [name for name in roots if name in definitions]
    while pending:
        name = pending.pop()
        if name in live:
            continue
        live.add(name)
        pending.extend(n for node in definitions[name] for n in _names(node) if n in definitions and n not in live)
    dead = [node for name, nodes in definitions.items() if name not in live for node in nodes]
    named = _names(module, members=True)
    return dead + [method for method in _plain_methods(module) if method.name.value not in named and method not in dead]


def _plain_methods(module: cst.Module) -> list[cst.FunctionDef]:
    """The undecorated methods, other than dunders, of the top-level classes with no base class
    and no decorator: only the script's own code can call them, and only by their name."""
    found = []
    for statement in module.body:
        if type(statement) is not cst.ClassDef or statement.decorators or statement.bases or statement.keywords:
            continue
        members = statement.body.body if type(statement.body) is cst.IndentedBlock else ()
        found += [m for m in members if type(m) is cst.FunctionDef and not m.decorators and not m.name.value.startswith("__")]
    return found


_EXITS = (cst.Return, cst.Raise, cst.Continue, cst.Break)


class _Unreachable(Walker):
    def __init__(self) -> None:
        self.found: list[cst.BaseStatement] = []

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        for i, statement in enumerate(node.body):
            if type(statement) is cst.SimpleStatementLine and type(statement.body[-1]) in _EXITS:
                self.found.extend(node.body[i + 1 :])
                return


def unreachable_statements(module: cst.Module) -> list[cst.BaseStatement]:
    """The statements that follow a `return`, `raise`, `continue` or `break` in their block."""
    collector = _Unreachable()
    collector.walk(module)
    return collector.found
