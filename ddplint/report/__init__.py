"""Output formats: each turns a LintResult into the text written to stdout or --output."""

from __future__ import annotations

import importlib
from collections.abc import Callable

Renderer = Callable[..., str]  # (LintResult, Config, ReportOptions = ReportOptions()) -> str


def _on_use(module: str, function: str) -> Renderer:
    """A renderer whose module is imported when it is first called: a lint pays for one format's
    imports (sarif-om alone ~50 ms, the XML and JSON writers a few ms each), at every start-up."""

    def render(*args, **kwargs) -> str:
        return getattr(importlib.import_module(f"ddplint.report.{module}"), function)(*args, **kwargs)

    return render


FORMATS: dict[str, Renderer] = {
    "text": _on_use("text", "render"),
    "concise": _on_use("text", "render_concise"),
    "json": _on_use("json_report", "render"),
    "sarif": _on_use("sarif", "render"),
    "github": _on_use("github", "render"),
    "gitlab": _on_use("gitlab", "render"),
    "junit": _on_use("junit", "render"),
}
