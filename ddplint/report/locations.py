"""Paths as CI systems want them: relative to the repository root, with forward slashes.

Code scanning and Actions annotations both resolve a path against the checkout, so a run
started from a subdirectory or given absolute paths must still name `src/train.py`.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote


def printable(path: str) -> str:
    """A file name as valid Unicode. Linux allows any byte in a name; Python keeps one that is not
    UTF-8 as a lone surrogate (PEP 383), which no UTF-8 output can hold: it is written `\\xNN`."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def uri_path(path: str) -> str:
    """A relative path as a URI reference: its bytes percent-encoded (RFC 3986), not-UTF-8 ones too."""
    return quote(path.encode("utf-8", "surrogateescape"))


def repository_root(cwd: Path | None = None) -> Path:
    """The git work tree around the working directory (`.git` is a file in worktrees), else the directory."""
    start = (cwd or Path.cwd()).resolve()
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return start


def relative_to(path: str, root: Path) -> str | None:
    """`path` below `root` in POSIX form, or None when it lies outside."""
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return None
