"""Output formats: each turns a LintResult into the text written to stdout or --output."""

from __future__ import annotations

from collections.abc import Callable

from ddplint.config import Config
from ddplint.lint.result import LintResult
from ddplint.report import github, gitlab, json_report, junit, text
from ddplint.report.options import DEFAULTS, ReportOptions

Renderer = Callable[..., str]  # (LintResult, Config, ReportOptions = ReportOptions()) -> str


def _sarif(result: LintResult, config: Config, options: ReportOptions = DEFAULTS) -> str:
    """Imported on use: sarif-om would add ~50 ms to every lint's startup (pre-commit runs it often)."""
    from ddplint.report import sarif

    return sarif.render(result, config, options)


FORMATS: dict[str, Renderer] = {
    "text": text.render,
    "concise": text.render_concise,
    "json": json_report.render,
    "sarif": _sarif,
    "github": github.render,
    "gitlab": gitlab.render,
    "junit": junit.render,
}
