"""Output formats: each turns a LintResult into the text written to stdout or --output."""

from __future__ import annotations

from collections.abc import Callable

from ddplint.config import Config
from ddplint.lint.engine import LintResult
from ddplint.report import json_report, text

Renderer = Callable[[LintResult, Config], str]

FORMATS: dict[str, Renderer] = {
    "text": text.render,
    "json": json_report.render,
}
