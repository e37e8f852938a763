"""What a lint run found: plain data shared by the engine, the analysis, the cache and the reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddplint.diagnostics import Diagnostic, FileError


@dataclass
class LintResult:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)  # files that could not be linted
    internal_errors: list[FileError] = field(default_factory=list)  # a rule crashed
    warnings: list[FileError] = field(default_factory=list)  # reported, exit status unchanged
    files: int = 0

    def extend(self, other: LintResult) -> None:
        self.diagnostics.extend(other.diagnostics)
        self.errors.extend(other.errors)
        self.internal_errors.extend(other.internal_errors)
        self.warnings.extend(other.warnings)
        self.files += other.files
