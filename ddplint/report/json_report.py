"""The stable JSON schema documented in docs/json-format.md (version 1)."""

from __future__ import annotations

import json

from ddplint import __version__
from ddplint.config import Config
from ddplint.diagnostics import Diagnostic
from ddplint.lint.result import LintResult
from ddplint.report.locations import printable
from ddplint.report.options import DEFAULTS, ReportOptions, fixable

SCHEMA_VERSION = 1


def _diagnostic(d: Diagnostic, options: ReportOptions) -> dict:
    # Imported on use: the text format never imports the rules (and libcst with them).
    from ddplint.lint.rules import RULES_BY_CODE

    fix = None
    if d.fix is not None:
        fix = {
            "description": d.fix.description,
            "applicability": "safe" if d.fix.safe else "unsafe",
            "edits": [
                {
                    "start": {"line": e.start[0], "column": e.start[1]},
                    "end": {"line": e.end[0], "column": e.end[1]},
                    "text": e.text,
                }
                for e in d.fix.edits
            ],
        }
    return {
        "path": printable(d.path),
        "cell": d.cell,
        "line": d.line,
        "column": d.col,
        "end_line": d.end_line,
        "end_column": d.end_col,
        "code": d.code,
        "name": RULES_BY_CODE[d.code].name,
        "severity": d.severity.value,
        "message": d.message,
        "fix": fix,
        "fixable": fixable(d.fix, options),
        "related": [{"path": printable(r.path), "line": r.line, "column": r.col, "message": r.message} for r in d.related],
    }


def render(result: LintResult, config: Config, options: ReportOptions = DEFAULTS) -> str:
    payload = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "ddplint", "version": __version__},
        "diagnostics": [_diagnostic(d, options) for d in result.diagnostics],
        "errors": [{"path": printable(e.path), "message": e.message} for e in [*result.errors, *result.internal_errors]],
        "warnings": [{"path": printable(w.path), "line": w.line, "message": w.message} for w in result.warnings],
        "summary": {
            "files": result.files,
            "problems": len(result.diagnostics),
            "errors": len(result.errors) + len(result.internal_errors),
            "fixable": sum(fixable(d.fix, options) for d in result.diagnostics),
            "baselined": options.baselined,
        },
    }
    return json.dumps(payload, indent=2) + "\n"
