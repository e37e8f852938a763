"""The stable JSON schema documented in docs/json-format.md (version 1)."""

from __future__ import annotations

import json

from ddplint import __version__
from ddplint.config import Config
from ddplint.diagnostics import Diagnostic
from ddplint.lint.engine import LintResult
from ddplint.lint.rules import RULES_BY_CODE

SCHEMA_VERSION = 1


def _diagnostic(d: Diagnostic) -> dict:
    fix = None
    if d.fix is not None:
        fix = {
            "description": d.fix.description,
            "edits": [
                {"start": {"line": e.start[0], "column": e.start[1]}, "end": {"line": e.end[0], "column": e.end[1]},
                 "text": e.text}
                for e in d.fix.edits
            ],
        }
    return {
        "path": d.path,
        "line": d.line,
        "column": d.col,
        "end_line": d.end_line,
        "end_column": d.end_col,
        "code": d.code,
        "name": RULES_BY_CODE[d.code].name,
        "severity": d.severity.value,
        "message": d.message,
        "fix": fix,
    }


def render(result: LintResult, config: Config) -> str:
    payload = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "ddplint", "version": __version__},
        "diagnostics": [_diagnostic(d) for d in result.diagnostics],
        "errors": [{"path": e.path, "message": e.message} for e in [*result.errors, *result.internal_errors]],
        "summary": {
            "files": result.files,
            "problems": len(result.diagnostics),
            "errors": len(result.errors) + len(result.internal_errors),
        },
    }
    return json.dumps(payload, indent=2) + "\n"
