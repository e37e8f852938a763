"""`path:line:col: DDP101 message`, one finding per line, then a one-line summary.

A finding at a call of a project helper ends with where the mistake is inside it:
`(at utils.py:12:5)`.
A fixable finding is marked `[*]`. On a terminal (or with --show-source) the source line
and a caret under the reported span follow each finding; in a notebook the position reads
`path:cell N, line L, col C`. The concise format is this one, never with source or fixes.
"""

from __future__ import annotations

from dataclasses import replace

from ddplint.config import Config
from ddplint.diagnostics import Diagnostic, Severity
from ddplint.lint.result import LintResult
from ddplint.report.locations import printable
from ddplint.report.options import DEFAULTS, ReportOptions, fixable

RESET, BOLD, RED, YELLOW, CYAN, BLUE = "\033[0m", "\033[1m", "\033[31m", "\033[33m", "\033[36m", "\033[34m"
LEVEL_COLOR = {Severity.ERROR: RED, Severity.WARNING: YELLOW, Severity.INFO: BLUE}


def position(d: Diagnostic) -> str:
    path = printable(d.path)
    if d.cell is not None:
        return f"{path}:cell {d.cell}, line {d.line}, col {d.col}"
    return f"{path}:{d.line}:{d.col}"


def render(result: LintResult, config: Config, options: ReportOptions = DEFAULTS) -> str:
    def paint(text: str, *styles: str) -> str:
        return "".join(styles) + text + RESET if options.color else text

    lines = []
    for d in result.diagnostics:
        mark = "[*] " if fixable(d.fix, options) else ""
        code = paint(d.code, BOLD, LEVEL_COLOR[d.severity])
        inside = "".join(f" (at {printable(r.path)}:{r.line}:{r.col})" for r in d.related)  # the helper's own line
        lines.append(f"{paint(position(d), BOLD)}: {code} {paint(mark, CYAN) if mark else ''}{d.message}{inside}")
        if options.show_source and d.source_line:
            lines.extend(_snippet(d, paint))
        if options.show_fixes and d.fix is not None and mark:
            lines.append(f"    {paint('fix:', CYAN)} {d.fix.description}")
    if options.quiet:
        return "".join(line + "\n" for line in lines)
    problems = len(result.diagnostics)
    files = len({d.path for d in result.diagnostics})
    if problems:
        lines.append(f"Found {problems} problem{'s' * (problems != 1)} in {files} file{'s' * (files != 1)}.")
        fixes = sum(fixable(d.fix, options) for d in result.diagnostics)
        if fixes:
            lines.append(f"[*] {fixes} fixable with --fix{' --unsafe-fixes' * options.unsafe_fixes}.")
        hidden = sum(d.fix is not None and not fixable(d.fix, options) for d in result.diagnostics)
        if hidden:
            lines.append(f"({hidden} more fix{'es' * (hidden != 1)} available with --fix --unsafe-fixes.)")
    elif not result.errors and not result.internal_errors:
        lines.append(f"All checks passed ({result.files} file{'s' * (result.files != 1)}).")
    if options.baselined:
        lines.append(f"{options.baselined} known problem{'s' * (options.baselined != 1)} not shown (recorded in the baseline).")
    return "\n".join(lines) + "\n"


def _snippet(d: Diagnostic, paint) -> list[str]:
    source = d.source_line.expandtabs(1)  # one column per character, as the caret counts
    gutter = f"{d.line} | "
    width = (d.end_col - d.col) if d.end_line == d.line else len(source) - d.col + 1
    caret = " " * (len(gutter) + d.col - 1) + "^" * max(1, width)
    return [f"{paint(gutter, BLUE)}{source}", paint(caret, LEVEL_COLOR[d.severity])]


def render_concise(result: LintResult, config: Config, options: ReportOptions = DEFAULTS) -> str:
    return render(result, config, replace(options, show_source=False, show_fixes=False))
