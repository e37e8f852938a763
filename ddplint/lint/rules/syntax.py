"""DDP001: the file does not parse, so nothing else in it can be checked."""

from ddplint.lint.rules.base import Rule


class SyntaxErrorRule(Rule):
    """Reported by the engine itself when parsing fails; it has no check of its own."""

    code = "DDP001"
    name = "syntax-error"
    tags = ("syntax",)
    precision = "very-high"
    needs_distributed = False
