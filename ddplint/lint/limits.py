"""Bounds on the work one file may cost, so that no input crashes, hangs or stalls a run.

libcst's native parser recurses once per nesting level and overflows the C stack (a
segfault, the whole run lost) a few thousand levels down: `x = ---…-1`, a long `a and b
and …` chain, a long dotted import. So before libcst sees a file its nesting is bounded from
its tokens (one linear scan, no parse): within MAX_DEPTH, libcst's parse is the file's only
one. Past it, or where the tokens say nothing, the file goes the exact way: Python's own
parser (which refuses the deepest of these first) compiles it to an AST, and its nesting is
measured there, counting the constructs that libcst nests but the AST keeps flat; a file that
Python refuses but libcst may read (newer syntax: `type X = int` on 3.11) is bounded by its
tokens alone. A file past MAX_DEPTH is skipped with a reason, before libcst sees it. Past
that, a CPU-time limit per file stops any input that is slow for another reason.
"""

from __future__ import annotations

import ast
import gc
import re
import signal
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# Deeper than this, libcst's Python side (and the analysis) exceed the interpreter's
# recursion limit anyway; real code stays far below (measured: under 60 in every fixture).
MAX_DEPTH = 400
MAX_BRACKETS = 200  # Python's tokenizer refuses more nested brackets (MAXLEVEL), in every version
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


# Python's tokens, as far as nesting goes, each with the blanks after it. A string is one token;
# an f-string's body is scanned again as code, since its replacement fields nest like any expression.
TOKEN = re.compile(
    r"""
    (?:(?P<string>(?P<prefix>[rRbBuUfF]{0,2})(?:
        '''(?P<long1>(?:\\.|[^\\])*?)''' | \"\"\"(?P<long2>(?:\\.|[^\\])*?)\"\"\"
      | '(?P<short1>(?:\\.|[^\\'\r\n])*)' | "(?P<short2>(?:\\.|[^\\"\r\n])*)"))
  | (?P<newline>\r\n|\r|\n)
  | (?P<open>[(\[{]) | (?P<close>[)\]}]) | (?P<comma>[,;])
  | (?P<skip>\#[^\r\n]* | \\(?:\r\n|\r|\n) | [ \t\f]+ | -> | :=)
  | (?P<number>\.?\d(?:[eE][-+]|[\w.])*)
  | (?P<word>\w+)
  | (?P<op>\*\*|//|<<|>>|==|[-+*/%@&|^~<>!]=?|\.)
  | (?P<other>.))[ \t\f]*
""",
    re.VERBOSE | re.DOTALL,
)
BODIES = ("long1", "long2", "short1", "short2")
# Words that make an expression one level deeper in libcst's tree (`and`, `not`, `lambda`, ...).
NESTING_WORDS = frozenset({"and", "or", "not", "if", "else", "lambda", "await", "in", "is"})


def may_be_newer_syntax(text: str) -> bool:
    """Whether libcst may be asked to read `text`, a file the running Python refused: False when
    it nests brackets deeper than any Python allows (a syntax error in every version), and
    TooComplex when the tree libcst would build may nest deeper than MAX_DEPTH.

    With no AST to measure, the depth is an upper bound read from the tokens: within a
    statement every operator, expression keyword, `.` and bracketed group is one more level,
    a `,` starts a sibling at its bracket's depth, and each indented block adds two. An
    f-string opens a group whose body is read again as code (its replacement fields nest like
    any expression) and whose end closes it. Linear in the text, and never raises for anything
    else. It runs on every linted file, so it is one loop with no generator in between.
    """
    indents = [0]
    frames: list[tuple[int, int]] = []  # per open bracket: the depth before it, and its elements' depth
    depth = line_begin = 0
    at_line_start = True
    scans: list[tuple[Iterator[re.Match[str]], int]] = [(TOKEN.finditer(text), -1)]  # and where each f-string ends
    while scans:
        scan, end = scans[-1]
        match = next(scan, None)
        if match is not None:
            kind = match.lastgroup
            if kind == "skip" or kind == "other":
                continue
            if kind == "newline":
                if not frames:
                    at_line_start, line_begin = True, match.end(kind)
                continue
            start = match.start()
        elif end < 0:
            return True
        else:  # an f-string's body is read: its end closes its group
            scans.pop()
            kind, start = "close", end
        if at_line_start:
            at_line_start = False
            column = start - line_begin
            while column < indents[-1]:
                indents.pop()
            if column > indents[-1]:
                indents.append(column)
            depth = 2 * (len(indents) - 1)
        if kind == "word":
            if match is not None and match[kind] in NESTING_WORDS:
                depth += 1
        elif kind == "op":
            depth += 1
        elif kind == "comma":
            depth = frames[-1][1] if frames else 2 * (len(indents) - 1)
        elif kind == "close":
            if frames:
                depth = frames.pop()[0] + 1
        elif kind == "open" or kind == "string" and match is not None and "f" in match["prefix"].lower():
            frames.append((depth, depth + 1))
            if len(frames) > MAX_BRACKETS:
                return False
            depth += 1
            if kind == "string" and match is not None:
                body = next(name for name in BODIES if match[name] is not None)
                scans.append((TOKEN.finditer(text, match.start(body), match.end(body)), match.end(body)))
        if depth > MAX_DEPTH:
            line = len(re.findall(r"\r\n|\r|\n", text[:start])) + 1
            raise TooComplex(f"nested more than {MAX_DEPTH} levels deep (line {line}); skipped")
    return True


def within_bounds(text: str) -> bool:
    """Whether libcst may be handed `text` without Python's parse first: its brackets nest no
    deeper than Python allows and the bound from its tokens (may_be_newer_syntax) is within
    MAX_DEPTH. False is no verdict: the file goes the exact way, Python's AST and check_depth."""
    try:
        return may_be_newer_syntax(text)
    except TooComplex:
        return False


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
