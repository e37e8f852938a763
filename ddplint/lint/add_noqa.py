"""`--add-noqa`: a `# noqa: CODE` on the first line of every finding, as ruff adds them, so a
code base can adopt ddplint today and fix its findings one at a time.

A comment already on the line is kept: the codes join a `# noqa:` it has, or a new `# noqa:`
follows it. A line that cannot end in a comment (it ends inside a multi-line string, or is
continued by a backslash) is left alone and reported. The new text must parse and suppress
what it names before anything is written, and it is written whole, as --fix writes
(fixes.replace_file). Notebooks are not rewritten.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from ddplint.config import Config
from ddplint.diagnostics import FileError
from ddplint.lint.discovery import discover
from ddplint.lint.engine import (
    SYNTAX_ERROR,
    enabled_rules,
    lint_text,
    python_syntax_error,
)
from ddplint.lint.fixes import Refused, encoding_of, replace_file
from ddplint.lint.noqa import NOQA, codes_of, line_suppresses
from ddplint.lint.notebook import is_notebook
from ddplint.lint.project import ProjectIndex
from ddplint.lint.source import SourceError, decode_source, read_bytes

LINE_BREAK = re.compile(r"(\r\n|\r|\n)")
SPACE = " \t\f"


@dataclass
class NoqaReport:
    files: list[Path] = field(default_factory=list)  # files rewritten
    lines: int = 0  # lines that got a comment or more codes in one
    skipped: list[FileError] = field(default_factory=list)  # lines that cannot take a comment
    errors: list[FileError] = field(default_factory=list)


def add_noqa_paths(paths: list[Path], config: Config) -> NoqaReport:
    files, errors = discover(paths, config)
    report = NoqaReport(errors=list(errors))
    rules = enabled_rules(config)
    project = ProjectIndex()
    for path in files:
        if is_notebook(path.name):
            continue
        try:
            data = read_bytes(path)
            text = decode_source(data)
        except SourceError as exc:
            report.errors.append(FileError(str(path), str(exc)))
            continue
        result = lint_text(path, text, config, rules, project)
        report.errors.extend([*result.errors, *result.internal_errors])
        wanted: dict[int, list[str]] = {}
        for d in sorted(result.diagnostics, key=lambda d: d.code):
            if d.code != SYNTAX_ERROR and d.code not in wanted.setdefault(d.line, []):
                wanted[d.line].append(d.code)
        if not wanted:
            continue
        try:
            new_text, changed, skipped = with_noqa(text, wanted)
        except (tokenize.TokenError, SyntaxError) as exc:
            report.errors.append(FileError(str(path), f"cannot read its comments ({exc}); left unchanged"))
            continue
        report.skipped.extend(FileError(str(path), reason, line) for line, reason in skipped)
        if not changed:
            continue
        if python_syntax_error(new_text, str(path)) is not None:
            report.errors.append(FileError(str(path), "internal error: the noqa comments would not parse; left unchanged"))
            continue
        try:
            replace_file(path, new_text, encoding_of(data), data)
        except OSError as exc:
            report.errors.append(FileError(str(path), f"cannot write: {exc.strerror or exc}"))
            continue
        except Refused as exc:
            report.errors.append(FileError(str(path), str(exc).replace("not fixed", "no noqa added")))
            continue
        report.files.append(path)
        report.lines += changed
    return report


def with_noqa(text: str, wanted: dict[int, list[str]]) -> tuple[str, int, list[tuple[int, str]]]:
    """`text` with the codes of `wanted` (line -> codes) in a noqa comment on each line; also
    how many lines changed and the lines left alone, with why."""
    comments: dict[int, int] = {}  # line -> column where its comment starts
    inside: set[int] = set()  # lines whose end lies inside a token (a multi-line string)
    for token in tokenize.generate_tokens(io.StringIO(text, newline=None).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.start[1]
        elif token.start[0] < token.end[0] and token.type not in (tokenize.NEWLINE, tokenize.NL):
            inside.update(range(token.start[0], token.end[0]))
    parts = LINE_BREAK.split(text)  # line, break, line, break, ..., last line
    changed, skipped = 0, []
    for number, codes in sorted(wanted.items()):
        index = 2 * (number - 1)
        if index >= len(parts):
            continue
        line = parts[index]
        if number in inside:
            skipped.append((number, "cannot add `# noqa`: the line ends inside a multi-line string"))
            continue
        new = _commented(line, comments.get(number), codes)
        if new is None:
            skipped.append((number, "cannot add `# noqa`: the line is continued by a backslash"))
        elif new != line:
            if not all(line_suppresses(new, code) for code in codes):
                skipped.append((number, "cannot add `# noqa`: an earlier `noqa` on the line would hide it"))
                continue
            parts[index] = new
            changed += 1
    return "".join(parts), changed, skipped


def _commented(line: str, comment_at: int | None, codes: list[str]) -> str | None:
    """The line with `codes` in its noqa comment; None when no comment can end it."""
    appended = f"{line.rstrip(SPACE)}  # noqa: {', '.join(codes)}"
    if comment_at is None:
        return None if line.rstrip(SPACE).endswith("\\") else appended
    match = NOQA.search(line[comment_at:])
    if match is None:
        return appended
    present = codes_of(match)
    if present is None:  # a bare noqa comment suppresses every rule already
        return line
    missing = [code for code in codes if code not in present]
    if not missing:
        return line
    end = comment_at + match.end("codes")
    return f"{line[:end]}, {', '.join(missing)}{line[end:]}"
