"""GitHub Actions workflow commands: one `::error`/`::warning` annotation per finding.

For repositories without code scanning: the runner turns these lines into annotations on
the pull request's diff. Paths are repository-relative, as the runner resolves them.
"""

from __future__ import annotations

from ddplint.config import Config
from ddplint.diagnostics import Severity
from ddplint.lint.result import LintResult
from ddplint.report.locations import printable, relative_to, repository_root
from ddplint.report.options import DEFAULTS, ReportOptions

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    """The message after `::`; the runner decodes these three."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A `key=value` property: also `:` and `,`, which would end the value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(level: str, message: str, **properties: object) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    return f"::{level} {props}::{escape_data(message)}"


def render(result: LintResult, config: Config, options: ReportOptions = DEFAULTS) -> str:
    # Imported on use: the text format never imports the rules (and libcst with them).
    from ddplint.lint.rules import RULES_BY_CODE

    root = repository_root()

    def file(path: str) -> str:
        return printable(relative_to(path, root) or path)

    lines = []
    for d in result.diagnostics:
        rule = RULES_BY_CODE.get(d.code)
        title = f"{d.code} {rule.name}" if rule else d.code
        if d.cell is not None:  # a notebook: the runner would place a line on the JSON, so name the cell
            lines.append(
                _command(COMMAND[d.severity], f"cell {d.cell}, line {d.line}: {d.message}", file=file(d.path), title=title)
            )
            continue
        lines.append(
            _command(
                COMMAND[d.severity],
                d.message,
                file=file(d.path),
                line=d.line,
                col=d.col,
                endLine=d.end_line,
                endColumn=d.end_col,
                title=title,
            )
        )
    for error in [*result.errors, *result.internal_errors]:
        lines.append(_command("error", error.message, file=file(error.path), title="ddplint"))
    return "".join(line + "\n" for line in lines)
