"""`path:line:col: DDP101 message`, one finding per line, then a one-line summary."""

from __future__ import annotations

from ddplint.config import Config
from ddplint.lint.engine import LintResult


def render(result: LintResult, config: Config) -> str:
    lines = [f"{d.path}:{d.line}:{d.col}: {d.code} {d.message}" for d in result.diagnostics]
    problems = len(result.diagnostics)
    files = len({d.path for d in result.diagnostics})
    if problems:
        lines.append(f"Found {problems} problem{'s' * (problems != 1)} in {files} file{'s' * (files != 1)}.")
    elif not result.errors and not result.internal_errors:
        lines.append(f"All checks passed ({result.files} file{'s' * (result.files != 1)}).")
    return "\n".join(lines) + "\n"
