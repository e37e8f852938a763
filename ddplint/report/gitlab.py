"""GitLab Code Quality: the JSON list of issues that a merge request's widget and diff show.

Each finding is an issue with GitLab's required fields: description, check_name, a
fingerprint unique to it (the baseline/SARIF fingerprint, which survives edits above it, with
its path), severity (error -> major, warning -> minor, info -> info) and location.path
(repository-relative) with location.lines.begin. A notebook finding names its cell in the
description and points at the notebook's first line. A file that could not be linted is not
an issue in the code: stderr and the exit status (2) say so.
"""

from __future__ import annotations

import hashlib
import json

from ddplint.config import Config
from ddplint.diagnostics import Severity
from ddplint.lint.fingerprints import fingerprints
from ddplint.lint.result import LintResult
from ddplint.report.locations import relative_to, repository_root
from ddplint.report.options import DEFAULTS, ReportOptions

GITLAB_SEVERITY = {Severity.ERROR: "major", Severity.WARNING: "minor", Severity.INFO: "info"}


def render(result: LintResult, config: Config, options: ReportOptions = DEFAULTS) -> str:
    root = repository_root()
    issues = []
    for d, printed in zip(result.diagnostics, fingerprints(result.diagnostics), strict=True):
        path = relative_to(d.path, root) or d.path
        where = "" if d.cell is None else f"cell {d.cell}, line {d.line}: "
        issues.append(
            {
                "description": f"{where}{d.code} {d.message}",
                "check_name": d.code,
                "fingerprint": hashlib.sha256(f"{path}\0{printed}".encode("utf-8", "replace")).hexdigest(),
                "severity": GITLAB_SEVERITY[d.severity],
                "location": {"path": path, "lines": {"begin": d.line if d.cell is None else 1}},
            }
        )
    return json.dumps(issues, indent=2) + "\n"
