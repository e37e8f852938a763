"""Safe autofixes (`--fix`, `--diff`).

A rule offers a fix as a CST replacement for the node it reports. Here the edits of one file
are applied to its text, the file is linted again until no fix is left (a fix can make
another finding visible), and the result must parse before anything is written. Writing goes
through a temporary file in the same directory and `os.replace`, so a file is either the old
one or the whole new one, in its original encoding, BOM and line endings.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from ddplint.config import Config
from ddplint.diagnostics import Diagnostic, Edit, FileError
from ddplint.lint.engine import discover, enabled_rules, lint_text, python_syntax_error
from ddplint.lint.project import ProjectIndex
from ddplint.lint.source import SourceError, decode_source

MAX_PASSES = 5  # a fix that keeps producing new fixes is a bug; stop rather than loop
NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass
class FixedFile:
    path: Path
    before: str
    after: str
    fixed: int  # findings fixed


@dataclass
class FixReport:
    files: list[FixedFile] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)

    @property
    def fixed(self) -> int:
        return sum(f.fixed for f in self.files)


def fix_paths(paths: list[Path], config: Config, write: bool) -> FixReport:
    """Apply every safe fix under `paths`; with write=False only compute the new texts."""
    files, errors = discover(paths, config)
    report = FixReport(errors=errors)
    rules = enabled_rules(config)
    project = ProjectIndex()
    for path in files:
        try:
            data = path.read_bytes()
            before = decode_source(data)
        except (OSError, SourceError):
            continue  # the lint run that follows reports it
        after, fixed, error = _fixed_text(path, before, config, rules, project)
        if error is not None:
            report.errors.append(FileError(str(path), error))
        if fixed:
            if write:
                try:
                    _replace(path, after, _encoding(data))
                except OSError as exc:
                    report.errors.append(FileError(str(path), f"cannot write the fix: {exc.strerror or exc}"))
                    continue
            report.files.append(FixedFile(path, before, after, fixed))
    return report


def _fixed_text(path: Path, text: str, config: Config, rules, project: ProjectIndex) -> tuple[str, int, str | None]:
    fixed = 0
    for _ in range(MAX_PASSES):
        fixable = [d for d in lint_text(path, text, config, rules, project).diagnostics if d.fix is not None]
        if not fixable:
            return text, fixed, None
        new_text, applied = _apply(text, fixable)
        if python_syntax_error(new_text, str(path)) is not None:
            codes = ", ".join(sorted({d.code for d in fixable}))
            return text, fixed, f"internal error: the fix for {codes} would not parse; file left unchanged by it"
        text, fixed = new_text, fixed + applied
    return text, fixed, None


def _apply(text: str, diagnostics: list[Diagnostic]) -> tuple[str, int]:
    """Apply the fixes whose edits do not overlap an earlier one's; the rest wait for the next pass."""
    starts = [0] + [m.end() for m in NEWLINE.finditer(text)]

    def offset(position: tuple[int, int]) -> int:
        line, column = position
        return starts[line - 1] + column - 1

    taken: list[tuple[int, int]] = []
    chosen: list[tuple[int, int, Edit]] = []
    applied = 0
    for d in diagnostics:
        spans = [(offset(e.start), offset(e.end), e) for e in d.fix.edits]
        if any(s < end and start < e for s, e, _ in spans for start, end in taken):
            continue
        taken.extend((s, e) for s, e, _ in spans)
        chosen.extend(spans)
        applied += 1
    for start, end, edit in sorted(chosen, key=lambda span: span[0], reverse=True):
        text = text[:start] + edit.text + text[end:]
    return text, applied


def _encoding(data: bytes) -> str:
    try:
        return tokenize.detect_encoding(io.BytesIO(data).readline)[0]  # "utf-8-sig" keeps a BOM
    except SyntaxError:
        return "utf-8"


def _replace(path: Path, text: str, encoding: str) -> None:
    """Write the whole new file next to the old one, then swap it in: never half-written."""
    data = text.encode(encoding)
    target = Path(os.path.realpath(path))  # a symlink keeps pointing at the fixed file
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".ddplint-fix", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
