"""DDP001: the file does not parse (reported by the engine, listed here for the catalog)."""

from ddplint.diagnostics import Severity
from ddplint.lint.rules.base import Rule


class SyntaxErrorRule(Rule):
    """Finds a file that does not parse as Python: the engine reports it when parsing fails; it has no check of its own."""

    code = "DDP001"
    severity = Severity.ERROR
    tags = ("syntax",)
    precision = "very-high"
    needs_distributed = False
