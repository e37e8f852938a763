"""How a report is written, beyond its format: what the command line asked for."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportOptions:
    color: bool = False  # ANSI colours (text format)
    show_source: bool = False  # the source line and a caret under each finding (text format)
    show_fixes: bool = False  # each fixable finding's fix, under it (text format)
    quiet: bool = False  # findings only: no summary line (text format)
    unsafe_fixes: bool = False  # unsafe fixes count as fixable
    baselined: int = 0  # findings left out because the baseline records them


def fixable(fix, options: ReportOptions) -> bool:
    return fix is not None and (fix.safe or options.unsafe_fixes)


DEFAULTS = ReportOptions()
