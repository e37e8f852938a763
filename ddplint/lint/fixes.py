"""Safe autofixes (`--fix`, `--diff`).

A rule offers a fix as a CST replacement for the node it reports. Here the edits of one file
are applied to its text, the file is linted again until no fix is left (a fix can make
another finding visible), and the result must parse before anything is written. Writing goes
through a temporary file in the same directory and `os.replace`, so a file is either the old
one or the whole new one, in its original encoding, BOM and line endings, with its owner,
group and mode. A file with other hard links is not rewritten (a swap would split them), and
the temporary file of a run that was killed is removed by the next run that fixes beside it.
Notebooks are linted but never rewritten.
"""

from __future__ import annotations

import io
import os
import re
import signal
import sys
import tempfile
import tokenize
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ddplint.config import Config
from ddplint.diagnostics import Diagnostic, Edit, FileError
from ddplint.lint.analysis import parse_newer
from ddplint.lint.discovery import discover
from ddplint.lint.engine import enabled_rules, lint_text, python_syntax_error
from ddplint.lint.notebook import is_notebook
from ddplint.lint.project import ProjectIndex
from ddplint.lint.source import NEWLINE, SourceError, decode_source, read_bytes

MAX_PASSES = 5  # a fix that keeps producing new fixes is a bug; stop rather than loop
TEMP_SUFFIX = ".ddplint-fix"  # .NAME.PID.RANDOM.ddplint-fix beside the file being fixed


@dataclass
class FixedFile:
    path: Path
    before: str
    after: str
    fixed: int  # findings fixed
    codes: dict[str, int] = field(default_factory=dict)  # findings fixed, by rule


@dataclass
class FixReport:
    files: list[FixedFile] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)

    @property
    def fixed(self) -> int:
        return sum(f.fixed for f in self.files)


def fix_paths(paths: list[Path], config: Config, write: bool, unsafe: bool = False) -> FixReport:
    """Apply every safe fix under `paths` (and the unsafe ones too with `unsafe`); with
    write=False only compute the new texts."""
    files, errors = discover(paths, config)
    report = FixReport(errors=errors)
    rules = enabled_rules(config)
    project = ProjectIndex()
    for path in files:
        if is_notebook(path.name):
            continue
        try:
            data = read_bytes(path)
            before = decode_source(data)
        except SourceError:
            continue  # the lint run that follows reports it
        after, codes, error = _fixed_text(path, before, config, rules, project, unsafe)
        fixed = sum(codes.values())
        if error is not None:
            report.errors.append(FileError(str(path), error))
        if fixed:
            if write:
                try:
                    replace_file(path, after, encoding_of(data), data)
                except OSError as exc:
                    report.errors.append(FileError(str(path), f"cannot write the fix: {exc.strerror or exc}"))
                    continue
                except Refused as exc:
                    report.errors.append(FileError(str(path), str(exc)))
                    continue
            report.files.append(FixedFile(path, before, after, fixed, dict(codes)))
    return report


def _fixed_text(
    path: Path,
    text: str,
    config: Config,
    rules,
    project: ProjectIndex,
    unsafe: bool,
) -> tuple[str, Counter[str], str | None]:
    """Lint and fix until nothing fixable is left. A fix that would leave the file unparseable
    is left out (and named in the error), not the other fixes of the file."""
    fixed: Counter[str] = Counter()
    broken: dict[tuple[str, str, int, str], Diagnostic] = {}
    # a file of newer syntax than this Python reads (libcst read it) is checked by libcst's parser
    parses = _parses if _parses(text, path) else _libcst_parses
    for _ in range(MAX_PASSES):
        fixable = [
            d
            for d in lint_text(path, text, config, rules, project).diagnostics
            if d.fix is not None and (d.fix.safe or unsafe) and _identity(d) not in broken
        ]
        if not fixable:
            break
        new_text, applied = _apply(text, fixable)
        if not parses(new_text, path):
            alone = [d for d in applied if not parses(_apply(text, [d])[0], path)]
            broken.update((_identity(d), d) for d in alone)
            # the rest parse one by one; if only together they do not, take one per pass
            rest = [d for d in applied if d not in alone]
            new_text, applied = _apply(text, rest)
            if not parses(new_text, path):
                new_text, applied = _apply(text, rest[:1])
        text = new_text
        fixed.update(d.code for d in applied)
    error = None
    if broken:
        where = ", ".join(f"{d.code} (line {d.line})" for d in broken.values())
        error = f"internal error: the fix for {where} would not parse; left unapplied"
    return text, fixed, error


def _identity(d: Diagnostic) -> tuple[str, str, int, str]:
    """The same fix from one pass to the next, where earlier fixes may have moved its line."""
    assert d.fix is not None
    return d.code, d.source_line.strip(), d.col, "".join(e.text for e in d.fix.edits)


def _parses(text: str, path: Path) -> bool:
    return python_syntax_error(text, str(path)) is None


def _libcst_parses(text: str, path: Path) -> bool:
    return parse_newer(text) is not None


def _apply(text: str, diagnostics: list[Diagnostic]) -> tuple[str, list[Diagnostic]]:
    """Apply the fixes whose edits do not overlap an earlier one's; the rest wait for the next pass."""
    starts = [0] + [m.end() for m in NEWLINE.finditer(text)]

    def offset(position: tuple[int, int]) -> int:
        line, column = position
        return starts[line - 1] + column - 1

    taken: list[tuple[int, int]] = []
    chosen: list[tuple[int, int, Edit]] = []
    applied: list[Diagnostic] = []
    for d in diagnostics:
        if d.fix is None:
            continue
        spans = [(offset(e.start), offset(e.end), e) for e in d.fix.edits]
        if any(s < end and start < e for s, e, _ in spans for start, end in taken):
            continue
        taken.extend((s, e) for s, e, _ in spans)
        chosen.extend(spans)
        applied.append(d)
    # from the end backwards; two insertions at one place keep the order of their findings
    for _, (start, end, edit) in sorted(enumerate(chosen), key=lambda item: (item[1][0], item[0]), reverse=True):
        text = text[:start] + edit.text + text[end:]
    return text, applied


def encoding_of(data: bytes) -> str:
    try:
        return tokenize.detect_encoding(io.BytesIO(data).readline)[0]  # "utf-8-sig" keeps a BOM
    except SyntaxError:
        return "utf-8"


class Refused(Exception):
    """The file is left as it is; the message is one line for the user."""


def replace_file(path: Path, text: str, encoding: str, original: bytes) -> None:
    """Write the whole new file next to the old one, then swap it in: never half-written, and
    only while the file still holds `original`, what the new text was computed from (an edit
    saved meanwhile is kept, and the file left for the next run)."""
    data = text.encode(encoding)
    target = Path(os.path.realpath(path))  # a symlink keeps pointing at the fixed file
    info = os.stat(target)
    if info.st_nlink > 1:
        raise Refused(f"not fixed: the file has {info.st_nlink} hard links, and rewriting it would split them")
    remove_stale_temporaries(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=TEMP_SUFFIX, dir=target.parent)
    try:
        with _terminate_as_exit(), os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(out.fileno(), info.st_uid, info.st_gid)
                except PermissionError:
                    raise Refused("not fixed: the rewritten file could not keep its owner and group") from None
            os.fchmod(out.fileno(), info.st_mode & 0o7777)
            os.fsync(out.fileno())
            if _current(target) != original:
                raise Refused("not fixed: the file changed while it was being fixed; run --fix again")
            os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _current(path: Path) -> bytes | None:
    try:
        return read_bytes(path)
    except SourceError:
        return None


def remove_stale_temporaries(target: Path) -> None:
    """Remove `target`'s temporary files left by a run that was killed (its process is gone)."""
    for stale in target.parent.glob(f".{glob_escape(target.name)}.*{TEMP_SUFFIX}"):
        pid = stale.name[len(target.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                stale.unlink()
            except OSError:
                pass


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM while a temporary file exists: unwind (and remove it) instead of dying on the spot."""
    try:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
