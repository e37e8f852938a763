"""SARIF 2.1.0 for GitHub code scanning, built with the sarif-om object model.

What code scanning reads: the rules with their documentation (the same rules/*.md text as
`--explain`), results located by repository-relative URIs under %SRCROOT%, and our own
`partialFingerprints` so an alert survives edits elsewhere in the file. Files that could
not be read or parsed are tool notifications, not results: they are not mistakes in the
user's training code, and code scanning lists notifications on its tool status page.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Callable
from pathlib import Path

import sarif_om as om

from ddplint import __version__
from ddplint.catalog import doc
from ddplint.config import Config
from ddplint.diagnostics import Diagnostic, Severity
from ddplint.lint.engine import SYNTAX_ERROR
from ddplint.lint.fingerprints import fingerprints
from ddplint.lint.result import LintResult
from ddplint.lint.rules import CATALOG
from ddplint.report.locations import printable, relative_to, repository_root, uri_path
from ddplint.report.options import DEFAULTS, ReportOptions, fixable
from ddplint.report.sarif_json import to_json

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/ddplint/ddplint"
SRCROOT = "%SRCROOT%"
FINGERPRINT_KEY = "ddplint/v1"
# GitHub rejects a run past these (docs: "SARIF support for code scanning", upload limits).
MAX_RESULTS = 25_000
MAX_COMPRESSED_BYTES = 10 * 1024 * 1024
MAX_DESCRIPTION = 1024  # GitHub cuts fullDescription here
SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def render(result: LintResult, config: Config, options: ReportOptions = DEFAULTS) -> str:
    root = repository_root()
    findings = [d for d in result.diagnostics if d.code != SYNTAX_ERROR]
    unparsable = [d for d in result.diagnostics if d.code == SYNTAX_ERROR]
    prints = fingerprints(findings)
    kept = _most_severe(findings, MAX_RESULTS)
    while True:
        text = _serialize(result, config, root, findings, prints, kept, unparsable, options)
        size = len(gzip.compress(text.encode("utf-8"), compresslevel=6))  # the upload's zlib default
        if size <= MAX_COMPRESSED_BYTES or not kept:
            break
        kept = _most_severe(findings, min(len(kept) - 1, int(len(kept) * MAX_COMPRESSED_BYTES / size * 0.95)))
    if len(kept) < len(findings):
        print(
            f"ddplint: warning: {len(findings)} findings exceed GitHub code scanning's limits "
            f"({MAX_RESULTS} results, {MAX_COMPRESSED_BYTES // (1024 * 1024)} MB compressed per run); "
            f"the SARIF keeps the {len(kept)} most severe",
            file=sys.stderr,
        )
    return text


def _most_severe(findings: list[Diagnostic], limit: int) -> set[int]:
    order = sorted(range(len(findings)), key=lambda i: -findings[i].severity.rank)
    return set(order[: max(limit, 0)])


def _serialize(result, config, root, findings, prints, kept, unparsable, options: ReportOptions) -> str:
    used = {d.code for d in findings}
    rules = [r for r in CATALOG if r.code != SYNTAX_ERROR and (config.enabled(r.code) or r.code in used)]
    index = {rule.code: i for i, rule in enumerate(rules)}
    artifacts: dict[str, om.ArtifactLocation] = {}

    def artifact(path: str) -> om.ArtifactLocation:
        if path not in artifacts:
            artifacts[path] = _artifact(path, root)
        return artifacts[path]

    results = [_result(d, index[d.code], prints[i], artifact, options) for i, d in enumerate(findings) if i in kept]
    notifications = [
        *(_notification(d.path, d.message, artifact(d.path), d) for d in unparsable),
        *(_notification(e.path, e.message, artifact(e.path)) for e in result.errors),
        *(_notification(e.path, e.message, artifact(e.path)) for e in result.internal_errors),
    ]
    run = om.Run(
        tool=om.Tool(
            driver=om.ToolComponent(
                name="ddplint",
                version=__version__,
                semantic_version=__version__,
                information_uri=INFORMATION_URI,
                rules=[_rule(rule) for rule in rules],
            )
        ),
        invocations=[
            om.Invocation(
                execution_successful=not (result.errors or result.internal_errors),
                tool_execution_notifications=notifications or None,
            )
        ],
        original_uri_base_ids={SRCROOT: om.ArtifactLocation(uri=root.as_uri().rstrip("/") + "/")},
        column_kind="unicodeCodePoints",
        results=results,
    )
    log = to_json(om.SarifLog(version="2.1.0", schema_uri=SCHEMA_URI, runs=[run]))
    header = {"$schema": log.pop("$schema"), "version": log.pop("version")}  # first, where people look
    # Compact: with `indent` json falls back to its pure-Python encoder, 10x slower on big runs.
    return json.dumps({**header, **log}, ensure_ascii=False, separators=(",", ":")) + "\n"


def _rule(rule) -> om.ReportingDescriptor:
    rule_doc = doc(rule.code)
    summary = rule_doc.summary
    if len(summary) > MAX_DESCRIPTION:
        summary = summary[: MAX_DESCRIPTION - 1].rsplit(" ", 1)[0] + "…"
    return om.ReportingDescriptor(
        id=rule.code,
        name=rule.name,
        short_description=om.MultiformatMessageString(text=summary),
        full_description=om.MultiformatMessageString(text=summary),
        help=om.MultiformatMessageString(text=rule_doc.markdown, markdown=rule_doc.markdown),
        default_configuration=om.ReportingConfiguration(level=SARIF_LEVEL[rule.severity]),
        properties={"tags": list(rule.tags), "precision": rule.precision},
    )


def _artifact(path: str, root: Path) -> om.ArtifactLocation:
    relative = relative_to(path, root)
    if relative is None:  # outside the repository: only an absolute URI can name it
        return om.ArtifactLocation(uri=Path(path).resolve().as_uri())
    return om.ArtifactLocation(uri=uri_path(relative), uri_base_id=SRCROOT)


def _region(line: int, col: int, end_line: int, end_col: int) -> om.Region:
    return om.Region(start_line=line, start_column=col, end_line=end_line, end_column=end_col)


def _result(
    d: Diagnostic, rule_index: int, fingerprint: str, artifact_of: Callable[[str], om.ArtifactLocation], options: ReportOptions
) -> om.Result:
    artifact = artifact_of(d.path)
    fixes = None
    if d.fix is not None and fixable(d.fix, options):  # an unsafe one only with --unsafe-fixes
        fixes = [
            om.Fix(
                description=om.Message(text=d.fix.description),
                artifact_changes=[
                    om.ArtifactChange(
                        artifact_location=artifact,
                        replacements=[
                            om.Replacement(
                                deleted_region=_region(*edit.start, *edit.end),
                                inserted_content=om.ArtifactContent(text=edit.text),
                            )
                            for edit in d.fix.edits
                        ],
                    )
                ],
            )
        ]
    return om.Result(
        rule_id=d.code,
        rule_index=rule_index,
        level=SARIF_LEVEL[d.severity],
        message=om.Message(text=d.message),
        locations=[_location(d, artifact)],
        related_locations=[
            om.Location(
                id=i,
                message=om.Message(text=r.message),
                physical_location=om.PhysicalLocation(
                    artifact_location=artifact_of(r.path), region=om.Region(start_line=r.line, start_column=r.col)
                ),
            )
            for i, r in enumerate(d.related)
        ]
        or None,
        partial_fingerprints={FINGERPRINT_KEY: fingerprint},
        fixes=fixes,
    )


def _location(d: Diagnostic, artifact: om.ArtifactLocation) -> om.Location:
    """A notebook finding names its cell: a region would be read as lines of the .ipynb JSON."""
    if d.cell is None:
        return om.Location(
            physical_location=om.PhysicalLocation(
                artifact_location=artifact,
                region=_region(d.line, d.col, d.end_line, d.end_col),
            )
        )
    return om.Location(
        physical_location=om.PhysicalLocation(artifact_location=artifact),
        logical_locations=[om.LogicalLocation(name=f"cell {d.cell}", kind="module")],
        properties={
            "notebookCell": d.cell,
            "cellLine": d.line,
            "cellColumn": d.col,
            "cellEndLine": d.end_line,
            "cellEndColumn": d.end_col,
        },
    )


def _notification(
    path: str,
    message: str,
    artifact: om.ArtifactLocation,
    where: Diagnostic | None = None,
) -> om.Notification:
    region = None if where is None or where.cell is not None else _region(where.line, where.col, where.end_line, where.end_col)
    return om.Notification(
        level="error",
        message=om.Message(text=f"{printable(path)}: {message}"),
        locations=[
            om.Location(
                physical_location=om.PhysicalLocation(
                    artifact_location=artifact,
                    region=region,
                )
            )
        ],
    )
