"""Bounds on the work one file may cost, so that no input crashes, hangs or stalls a run.

libcst's native parser recurses once per nesting level and overflows the C stack (a
segfault, the whole run lost) a few thousand levels down: `x = ---…-1`, a long `a and b
and …` chain, a long dotted import. Python's own parser refuses the deepest of these first,
so a file is compiled to an AST (a tenth of a libcst parse) and its nesting measured there,
counting the constructs that libcst nests but the AST keeps flat. A file past MAX_DEPTH is
skipped with a reason, before libcst sees it. Past that, a CPU-time limit per file stops
any input that is slow for another reason.
"""

from __future__ import annotations

import ast
import gc
import signal
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# Deeper than this, libcst's Python side (and the analysis) exceed the interpreter's
# recursion limit anyway; real code stays far below (measured: under 60 in every fixture).
MAX_DEPTH = 400
CPU_SECONDS = 10.0  # per file: a backstop; the slowest shape measured at the size cap takes about 5 s


class TooComplex(Exception):
    """The file is skipped; the message is one line for the user."""


class OutOfTime(BaseException):
    """Raised by the CPU-time alarm. A BaseException, so that no `except Exception` in a rule swallows it."""


def parse_python(text: str, filename: str) -> ast.Module:
    """Python's own parse, with no warning turned into an error (`PYTHONWARNINGS=error` and `"\\d"`).

    Raises SyntaxError for a syntax error and TooComplex for input Python's parser gives up on.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = compile(text, filename, "exec", dont_inherit=True, flags=ast.PyCF_ONLY_AST)
        except (RecursionError, MemoryError):
            raise TooComplex("nested too deeply for Python's own parser; skipped") from None
        except ValueError as exc:  # e.g. a NUL in the source
            raise SyntaxError(str(exc)) from None
    assert isinstance(tree, ast.Module)
    return tree


def newer_python(text: str) -> bool:
    """The running Python refused the text but libcst's grammar, which knows newer syntax (PEP
    701 f-strings with nested quotes, `type` statements), accepts it. The nesting is bounded
    first, by brackets and runs of unary operators, since the AST cannot measure it here."""
    depth = deepest = run = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
        if char in "-+~":
            run += 1
            deepest = max(deepest, run)
        elif not char.isspace():
            run = 0
    if deepest > MAX_DEPTH:
        return False
    import libcst as cst  # only for the rare file Python refuses

    try:
        cst.parse_module(text)
    except (cst.ParserSyntaxError, RecursionError):
        return False
    return True


def check_depth(tree: ast.AST) -> None:
    """TooComplex when the tree libcst would build is nested deeper than MAX_DEPTH."""
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        depth += 1 + _flat_in_ast(node)
        if depth > MAX_DEPTH:
            raise TooComplex(f"nested more than {MAX_DEPTH} levels deep (line {getattr(node, 'lineno', 1)}); skipped")
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))


def _flat_in_ast(node: ast.AST) -> int:
    """Levels libcst adds where the AST keeps a flat list."""
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.alias):
        return node.name.count(".")
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").count(".")
    if isinstance(node, ast.JoinedStr):
        return len(node.values) // 2
    return 0


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector while one file is analysed. A libcst tree is hundreds of
    thousands of objects without cycles; each collection pass walks them all, which made the
    cost grow faster than the file (positions of a 10,000-line script: 4.8 s, 2.6 s paused).
    Whatever cycles the file left are collected when it resumes."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def cpu_time_limit(seconds: float = CPU_SECONDS) -> Iterator[None]:
    """Raise OutOfTime in the block after `seconds` of CPU time (not wall time: a loaded machine
    does not make a file fail). Only in the main thread, where signals are delivered."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise OutOfTime

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@contextmanager
def own_budget(seconds: float = CPU_SECONDS) -> Iterator[None]:
    """Run the block on a CPU budget of its own, with the enclosing file's limit paused and then
    resumed where it was: a project module parsed once for the whole run (a helper many scripts
    import) is not charged to the file that happened to ask first."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    remaining, _ = signal.setitimer(signal.ITIMER_PROF, 0)  # pause; returns what was left
    try:
        with cpu_time_limit(seconds):
            yield
    finally:
        if remaining > 0:
            signal.setitimer(signal.ITIMER_PROF, remaining)
