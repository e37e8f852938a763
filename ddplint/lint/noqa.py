"""Suppression comments, as flake8 and ruff read them.

`# noqa` / `# noqa: DDP101, DDP301` at the end of a finding's first line suppresses it there;
`# ddplint: noqa` on a line of its own exempts the whole file, and `# ddplint: noqa: DDP101`
one rule in it (ruff's `# ruff: noqa`). Codes of other tools (`E501`) are left to them; a
ddplint code that does not exist is a typo that suppresses nothing, so it is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ddplint.diagnostics import FileError

_CODES = r"(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)"
NOQA = re.compile(rf"#\s*noqa(?::\s*{_CODES})?", re.IGNORECASE)
FILE_NOQA = re.compile(rf"^\s*#\s*ddplint:\s*noqa(?::\s*{_CODES})?\s*$", re.IGNORECASE)
OUR_CODE = re.compile(r"DDP[0-9]+")


def codes_of(match: re.Match[str]) -> list[str] | None:
    """The codes a noqa comment names; None for a bare one (every rule)."""
    codes = match.group("codes")
    return None if codes is None else [c.strip().upper() for c in codes.split(",")]


def line_suppresses(line: str, code: str) -> bool:
    match = NOQA.search(line)
    if match is None:
        return False
    codes = codes_of(match)
    return codes is None or code in codes


@dataclass(frozen=True)
class FileExemption:
    """What `# ddplint: noqa` comments exempt in one file: all of it, or some rules."""

    whole: bool = False
    codes: frozenset[str] = frozenset()


def file_exemption(lines: list[str]) -> FileExemption:
    whole = False
    codes: set[str] = set()
    for line in lines:
        match = FILE_NOQA.match(line)
        if match is None:
            continue
        named = codes_of(match)
        if named is None:
            whole = True
        else:
            codes.update(named)
    return FileExemption(whole, frozenset(codes))


def unknown_codes(path: Path, lines: list[str], known: frozenset[str]) -> list[FileError]:
    """`# noqa: DDP999` or `# ddplint: noqa: DDP999`: warnings, one per unknown ddplint code."""
    out = []
    for number, line in enumerate(lines, start=1):
        match = FILE_NOQA.match(line) or NOQA.search(line)
        for code in (match and codes_of(match)) or ():
            if OUR_CODE.fullmatch(code) and code not in known:
                out.append(FileError(str(path), f"`# noqa` names unknown rule {code}", line=number))
    return out
