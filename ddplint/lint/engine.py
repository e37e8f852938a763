"""paths -> files -> parse once -> facts -> rules -> diagnostics."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ddplint.config import Config
from ddplint.diagnostics import Diagnostic, Edit, FileError, Fix, Severity
from ddplint.lint import facts as facts_mod
from ddplint.lint.context import LintContext
from ddplint.lint.project import ProjectIndex
from ddplint.lint.rules import ALL_RULES
from ddplint.lint.rules.base import Rule
from ddplint.lint.source import SourceError, read_source

SYNTAX_ERROR = "DDP001"
# Every rule needs a distributed script, and every distributed script says one of these
# (`dist` also for scripts whose process group starts in a helper such as dist_util.setup_dist).
MIGHT_BE_DISTRIBUTED = re.compile(r"torch|RANK|local_rank|local-rank|cuda|dist")
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE)
PARALLEL_THRESHOLD = 16  # below this many files a worker pool costs more than it saves


@dataclass
class LintResult:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)  # files that could not be linted
    internal_errors: list[FileError] = field(default_factory=list)  # a rule crashed
    files: int = 0

    def extend(self, other: LintResult) -> None:
        self.diagnostics.extend(other.diagnostics)
        self.errors.extend(other.errors)
        self.internal_errors.extend(other.internal_errors)
        self.files += other.files


def discover(paths: Sequence[Path], config: Config) -> tuple[list[Path], list[FileError]]:
    """The .py/.pyi files named or found under `paths`, in a stable order."""
    files: list[Path] = []
    errors: list[FileError] = []
    for path in paths:
        try:
            is_dir, is_file = path.is_dir(), path.is_file()
        except OSError as exc:  # e.g. a symlink loop
            errors.append(FileError(str(path), f"cannot access: {exc.strerror or exc}"))
            continue
        if is_dir:
            if config.is_excluded(path) and os.path.realpath(path) != os.path.realpath(config.root):
                continue
            files.extend(_walk(path, config, errors))
        elif is_file:
            if config.force_exclude and config.is_excluded(path):
                continue
            files.append(path)
        elif path.is_symlink():
            errors.append(FileError(str(path), "broken symbolic link or symlink loop"))
        else:
            errors.append(FileError(str(path), "no such file or directory"))
    unique = list(dict.fromkeys(files))
    return unique, errors


def _walk(root: Path, config: Config, errors: list[FileError]) -> Iterable[Path]:
    def on_error(exc: OSError) -> None:
        errors.append(FileError(exc.filename or str(root), f"cannot list directory: {exc.strerror}"))

    for directory, dirnames, filenames in os.walk(root, onerror=on_error):
        base = Path(directory)
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and not config.is_excluded(base / d)
        )
        for name in sorted(filenames):
            if name.endswith((".py", ".pyi")) and not config.is_excluded(base / name):
                yield base / name


def lint_paths(paths: Sequence[Path], config: Config, jobs: int = 0) -> LintResult:
    files, errors = discover(paths, config)
    result = LintResult(errors=errors)
    workers = jobs or min(os.cpu_count() or 1, 8)
    if workers > 1 and len(files) >= PARALLEL_THRESHOLD:
        size = -(-len(files) // workers)  # contiguous blocks: a directory's helpers stay in one worker
        chunks = [files[i:i + size] for i in range(0, len(files), size)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for part in pool.map(_lint_files, chunks, [config] * workers):
                result.extend(part)
    else:
        result.extend(_lint_files(files, config))
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result


def enabled_rules(config: Config) -> list[Rule]:
    return [rule() for rule in ALL_RULES if config.enabled(rule.code)]


def _lint_files(files: list[Path], config: Config) -> LintResult:
    project = ProjectIndex()  # one cache of helper modules per worker
    rules = enabled_rules(config)
    result = LintResult()
    for path in files:
        result.extend(lint_file(path, config, rules, project))
    return result


def lint_file(path: Path, config: Config, rules: list[Rule], project: ProjectIndex) -> LintResult:
    result = LintResult(files=1)
    try:
        text = read_source(path)
    except SourceError as exc:
        result.errors.append(FileError(str(path), str(exc)))
        return result
    return lint_text(path, text, config, rules, project)


def lint_text(path: Path, text: str, config: Config, rules: list[Rule], project: ProjectIndex) -> LintResult:
    result = LintResult(files=1)
    lines = text.splitlines()
    if not MIGHT_BE_DISTRIBUTED.search(text):
        syntax = python_syntax_error(text, str(path))
        if syntax is not None:
            result.diagnostics.append(_syntax_diagnostic(path, syntax, lines))
        return result
    cached = project.parsed(path, text)  # a helper module another script imported
    if cached is not None:
        module, facts = cached
    else:
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            syntax = python_syntax_error(text, str(path)) or (exc.raw_line, exc.raw_column + 1, exc.message)
            result.diagnostics.append(_syntax_diagnostic(path, syntax, lines))
            return result
        except RecursionError:
            result.errors.append(FileError(str(path), "nested too deeply to parse"))
            return result
        facts = facts_mod.collect(module)
        project.remember(path, text, module, facts)
    ctx = LintContext(path, module, facts, project, config)
    ignored = config.ignored_in(path)
    found: list[tuple[Rule, object]] = []
    for rule in rules:
        if rule.code in ignored:
            continue
        if not rule.applies(ctx):
            continue
        try:
            found.extend((rule, finding) for finding in rule.check(ctx))
        except Exception as exc:  # one rule's bug must not stop the run
            result.internal_errors.append(
                FileError(str(path), f"internal error in {rule.code}: {type(exc).__name__}: {exc}")
            )
    if found:
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        seen = set()  # one node can match a rule twice (`device=torch.device("cuda")`)
        for rule, finding in found:
            diagnostic = _diagnostic(path, rule, finding, positions, module, lines)
            where = (diagnostic.code, diagnostic.line, diagnostic.col, diagnostic.end_line, diagnostic.end_col)
            if where not in seen and not _suppressed(diagnostic, lines):
                seen.add(where)
                result.diagnostics.append(diagnostic)
    return result


def _diagnostic(path, rule, finding, positions, module, lines) -> Diagnostic:
    where = positions[finding.node]
    start, end = where.start, where.end
    fix = None
    if finding.replacement is not None:
        edit = Edit((start.line, start.column + 1), (end.line, end.column + 1), module.code_for_node(finding.replacement))
        fix = Fix(finding.fix_description, (edit,))
    return Diagnostic(
        path=str(path),
        line=start.line,
        col=start.column + 1,
        end_line=end.line,
        end_col=end.column + 1,
        code=rule.code,
        message=finding.message,
        severity=rule.severity,
        fix=fix,
        source_line=lines[start.line - 1] if 0 < start.line <= len(lines) else "",
    )


def _suppressed(diagnostic: Diagnostic, lines: list[str]) -> bool:
    if not 0 < diagnostic.line <= len(lines):
        return False
    match = NOQA.search(lines[diagnostic.line - 1])
    if match is None:
        return False
    codes = match.group("codes")
    if codes is None:
        return True
    return diagnostic.code in {c.strip().upper() for c in codes.split(",")}


def python_syntax_error(text: str, filename: str) -> tuple[int, int, str] | None:
    try:
        compile(text, filename, "exec", dont_inherit=True, flags=0x400)  # ast.PyCF_ONLY_AST
    except SyntaxError as exc:
        return exc.lineno or 1, exc.offset or 1, exc.msg
    except (ValueError, RecursionError, MemoryError) as exc:
        return 1, 1, str(exc)
    return None


def _syntax_diagnostic(path: Path, syntax: tuple[int, int, str], lines: list[str]) -> Diagnostic:
    line, col, message = syntax
    return Diagnostic(
        path=str(path), line=line, col=col, end_line=line, end_col=col, code=SYNTAX_ERROR,
        message=f"syntax error: {message}", severity=Severity.ERROR,
        source_line=lines[line - 1] if 0 < line <= len(lines) else "",
    )
