"""paths -> files -> parse once -> facts -> rules -> diagnostics.

Every file is linted on its own terms: whatever one file does (too large, too deep, too
slow, a rule's bug) becomes an error for that file, and the other files' findings stand.
The analysis itself (libcst, facts, rules) is in analysis.py and imported only when a file
has to be linted: a run served from the cache never pays for importing it.
"""

from __future__ import annotations

import ast
import hashlib
import multiprocessing
import os
import re
import signal
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ddplint.config import Config
from ddplint.diagnostics import Diagnostic, FileError, Severity
from ddplint.lint import limits
from ddplint.lint.discovery import SourceFile, discover, discover_sources
from ddplint.lint.noqa import FileExemption, file_exemption, unknown_codes
from ddplint.lint.notebook import is_notebook, notebook_source
from ddplint.lint.result import LintResult
from ddplint.lint.source import (
    MAX_BYTES,
    NOTEBOOK_MAX_BYTES,
    SourceError,
    decode_source,
    read_bytes,
    source_lines,
    too_large,
)

if TYPE_CHECKING:
    from ddplint.lint.project import ProjectIndex
    from ddplint.lint.rules.base import Rule

SYNTAX_ERROR = "DDP001"
# Every rule needs a distributed script, and every distributed module says one of these
# (`dist` also for scripts whose process group starts in a helper such as dist_util.setup_dist),
# or is a script (`__main__`) that may do all of it through the project's modules
# (`trainer = Trainer(config); trainer.run()`).
MIGHT_BE_DISTRIBUTED = re.compile(r"torch|RANK|local_rank|local-rank|cuda|dist|__main__")
# Source per worker process. Starting workers costs, and each parses the shared helpers again,
# so a run under this many bytes stays in this process (the -j 1 path exactly). Measured side
# by side with bench/parallel.py on pytorch/examples (93 files, 418 kB, 2 busy cores), 2
# workers took 0.9x to 1.09x the time of -j 1: no gain worth the risk; there it stays at -j 1.
BYTES_PER_WORKER = 256 * 1024
MAX_WORKERS = 8
__all__ = ["LintResult", "discover", "lint_paths", "lint_text"]


@dataclass
class FileOutcome:
    """One file's result, with what a cache entry for it needs."""

    path: Path
    result: LintResult
    digest: str | None = None  # sha256 of the bytes that were linted; None when unread
    helpers: tuple[Path, ...] = ()  # project modules the analysis read
    missing: tuple[Path, ...] = ()  # module files its imports looked for and did not find


def planned_workers(files: Sequence[SourceFile], jobs: int) -> int:
    """Workers by total bytes, never more than asked: small runs stay in this process."""
    limit = jobs or min(os.cpu_count() or 1, MAX_WORKERS)
    total = sum(f.size for f in files)
    return max(1, min(limit, total // BYTES_PER_WORKER, len(files)))


def lint_paths(paths: Sequence[Path], config: Config, jobs: int = 0, cache=None) -> LintResult:
    """Lint every file under `paths`; `cache` (a ResultCache) skips files linted before."""
    files, errors = discover_sources(paths, config)
    result = LintResult(errors=errors)
    todo = files
    if cache is not None:
        todo = []
        for source in files:
            hit = cache.get(source.path)
            if hit is None:
                todo.append(source)
            else:
                result.extend(hit)
    for outcome in _lint_all(todo, config, jobs):
        result.extend(outcome.result)
        if cache is not None:
            cache.put(outcome)
    if cache is not None:
        cache.save()
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result


def _lint_all(files: list[SourceFile], config: Config, jobs: int) -> list[FileOutcome]:
    if not files:  # all served from the cache: the analysis is not even imported
        return []
    workers = planned_workers(files, jobs)
    if workers == 1:
        return _lint_files([f.path for f in files], config)
    # Contiguous blocks of about equal bytes: a directory's helpers stay in one worker.
    share = sum(f.size for f in files) / workers
    chunks: list[list[Path]] = [[]]
    filled = 0
    for f in files:
        if filled >= share * len(chunks) and len(chunks) < workers:
            chunks.append([])
        chunks[-1].append(f.path)
        filled += f.size
    outcomes: list[FileOutcome] = []
    with ProcessPoolExecutor(max_workers=len(chunks), initializer=_leave_interrupts_to_the_parent) as pool:
        try:
            for part in pool.map(_lint_files, chunks, [config] * len(chunks)):
                outcomes.extend(part)
        except BaseException:  # Ctrl-C: stop the workers now instead of waiting for their chunks
            for worker in multiprocessing.active_children():
                worker.terminate()
            raise
    return outcomes


def _leave_interrupts_to_the_parent() -> None:
    """A worker ignores Ctrl-C, which reaches the whole process group: the parent stops it
    (a KeyboardInterrupt in each worker would print a traceback each)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def enabled_rules(config: Config) -> list[Rule]:
    from ddplint.lint.analysis import enabled_rules

    return enabled_rules(config)


def _parts(path: Path) -> tuple[str, ...]:
    return path.parts


def _lint_files(files: list[Path], config: Config) -> list[FileOutcome]:
    # The analysis leaves no reference cycles behind (a test holds it to that), so the cycle
    # collector would only walk the helper modules kept for the run, again and again. They are
    # freed (with the index, on return) before it runs again.
    with limits.no_cycle_collection():
        return _lint_each(files, config)


def _lint_each(files: list[Path], config: Config) -> list[FileOutcome]:
    from ddplint.lint.analysis import RecordingIndex

    project = RecordingIndex()  # one cache of helper modules per worker
    rules = enabled_rules(config)
    outcomes = []
    for path in files:
        project.read, project.missing = set(), set()
        outcome = lint_file(path, config, rules, project)
        # Path order is the order of their parts; comparing the tuples skips pathlib's __lt__.
        outcome.helpers = tuple(sorted(project.read - {Path(os.path.realpath(path))}, key=_parts))
        outcome.missing = tuple(sorted(project.missing, key=_parts))
        outcomes.append(outcome)
    return outcomes


def lint_file(path: Path, config: Config, rules: list[Rule], project: ProjectIndex) -> FileOutcome:
    limit = NOTEBOOK_MAX_BYTES if is_notebook(path.name) else MAX_BYTES
    try:
        data = read_bytes(path, limit)
        text = decode_source(data, limit)
    except SourceError as exc:
        return FileOutcome(path, LintResult(errors=[FileError(str(path), str(exc))], files=1))
    digest = hashlib.sha256(data).hexdigest()
    if not is_notebook(path.name):
        return FileOutcome(path, lint_text(path, text, config, rules, project), digest)
    try:
        notebook = notebook_source(text)
        if len(notebook.text.encode()) > MAX_BYTES:  # the cap is on code; outputs may be large
            raise SourceError(too_large("the notebook's code", len(notebook.text.encode())))
    except SourceError as exc:
        return FileOutcome(path, LintResult(errors=[FileError(str(path), str(exc))], files=1), digest)
    result = lint_text(path, notebook.text, config, rules, project)
    result.diagnostics = [notebook.map_diagnostic(d) for d in result.diagnostics]
    return FileOutcome(path, result, digest)


def lint_text(path: Path, text: str, config: Config, rules: list[Rule], project: ProjectIndex) -> LintResult:
    """The findings in one module's text. Never raises for anything the text holds."""
    result = LintResult(files=1)
    lines = source_lines(text)
    mentions_noqa = "noqa" in text.lower()
    exempt = file_exemption(lines) if mentions_noqa else FileExemption()
    if exempt.whole:  # `# ddplint: noqa`: the file is not linted at all
        return result
    distributed = MIGHT_BE_DISTRIBUTED.search(text) is not None
    # A distributed file whose tokens bound its nesting goes to libcst's parse alone; Python's
    # parse (for its verdict on the syntax, and the AST the exact bound is measured on) is
    # needed only where libcst refuses the file, or the tokens give no bound. One that another
    # file imported was read as a helper already, within both.
    helper = distributed and project.parsed(path, text) is not None
    first_libcst = helper or distributed and limits.within_bounds(text)
    tree: ast.Module | None = None
    refused: SyntaxError | None = None  # by this Python: a syntax error, or syntax newer than it reads
    if not first_libcst:
        try:
            tree = limits.parse_python(text, str(path))
        except SyntaxError as exc:
            refused = exc.with_traceback(None)  # its frames would hold the run's helper modules in a cycle
        except limits.TooComplex as exc:
            result.errors.append(FileError(str(path), str(exc)))
            return result
    unknown = unknown_codes(path, lines, config.codes) if config.codes and mentions_noqa else []
    if refused is None and not distributed:
        result.warnings.extend(unknown)
        return result
    # Imported before the clock starts: the first file would pay for it.
    from ddplint.lint import analysis

    try:
        # No warning becomes an error (PYTHONWARNINGS=error): libcst evaluates literals with ast.
        with limits.cpu_time_limit(), limits.no_cycle_collection(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = None
            if first_libcst and not helper:
                module = analysis.parse_newer(text)
                if module is None:  # libcst refuses it: Python's verdict, as on the exact way
                    try:
                        tree = limits.parse_python(text, str(path))
                    except SyntaxError as exc:
                        refused = exc.with_traceback(None)
            elif refused is not None and limits.may_be_newer_syntax(text):  # libcst's grammar is newer
                module = analysis.parse_newer(text)
            if refused is not None and module is None:
                syntax = (refused.lineno or 1, refused.offset or 1, refused.msg)
                result.diagnostics.append(_syntax_diagnostic(path, syntax, lines))
            else:
                result.warnings.extend(unknown)
                if distributed:
                    if tree is not None:
                        limits.check_depth(tree)
                    analysis.analyse(path, text, lines, config, rules, project, result, module)
    except limits.TooComplex as exc:
        result.errors.append(FileError(str(path), str(exc)))
    except RecursionError:
        result.errors.append(FileError(str(path), "nested too deeply to lint; skipped"))
    except limits.OutOfTime:
        result.errors.append(FileError(str(path), f"took more than {limits.CPU_SECONDS:g} s of CPU time to lint; skipped"))
    except MemoryError:
        result.errors.append(FileError(str(path), "ran out of memory while linting; skipped"))
    except Exception as exc:  # a bug in the analysis: this file's error, not the run's end
        result.internal_errors.append(FileError(str(path), f"internal error: {type(exc).__name__}: {exc}"))
        result.diagnostics.clear()
    if result.errors:
        result.diagnostics.clear()  # a file cut short reports no partial findings
    if exempt.codes:
        result.diagnostics = [d for d in result.diagnostics if d.code not in exempt.codes]
    return result


def python_syntax_error(text: str, filename: str) -> tuple[int, int, str] | None:
    try:
        limits.parse_python(text, filename)
    except SyntaxError as exc:
        return exc.lineno or 1, exc.offset or 1, exc.msg
    except limits.TooComplex as exc:
        return 1, 1, str(exc)
    return None


def _syntax_diagnostic(path: Path, syntax: tuple[int, int, str], lines: list[str]) -> Diagnostic:
    line, col, message = syntax
    return Diagnostic(
        path=str(path),
        line=line,
        col=col,
        end_line=line,
        end_col=col,
        code=SYNTAX_ERROR,
        message=f"syntax error: {message}",
        severity=Severity.ERROR,
        source_line=lines[line - 1] if 0 < line <= len(lines) else "",
    )
