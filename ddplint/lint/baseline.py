"""Baselines: adopt ddplint on an existing code base in one commit.

`--write-baseline FILE` records today's findings; `--baseline FILE` (or `baseline = "FILE"`
in the configuration) reports only findings that are not recorded there. A finding is
recorded by its file (relative to the baseline's directory), its rule and the fingerprint
that SARIF carries as `partialFingerprints`: no line number goes in, so code added or
removed elsewhere in the file keeps old findings matched, while a new instance of the same
mistake, even on an identical line, is new.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ddplint.diagnostics import Diagnostic
from ddplint.lint.fingerprints import fingerprints
from ddplint.lint.source import NotRegular, TooLarge, not_regular, read_regular

FORMAT = 1
MAX_BYTES = 64 * 1024 * 1024  # about 300,000 findings


class BaselineError(Exception):
    """The baseline cannot be read or written; the message is one line for the user."""


@dataclass(frozen=True)
class Entry:
    path: str  # POSIX, relative to the baseline's directory
    code: str
    fingerprint: str


def _entries(diagnostics: list[Diagnostic], base: Path) -> list[tuple[Entry, Diagnostic]]:
    out = []
    for d, fingerprint in zip(diagnostics, fingerprints(diagnostics), strict=True):
        relative = Path(os.path.relpath(os.path.realpath(d.path), os.path.realpath(base))).as_posix()
        out.append((Entry(relative, d.code, fingerprint), d))
    return out


def write(path: Path, diagnostics: list[Diagnostic]) -> int:
    """Record the findings in `path`; returns how many."""
    entries = _entries(diagnostics, path.parent)
    payload = {
        "ddplint_baseline": FORMAT,
        "findings": [
            {"path": e.path, "code": e.code, "fingerprint": e.fingerprint, "line": d.line, "message": d.message}
            for e, d in entries
        ],
    }
    try:
        _write_atomically(Path(os.path.realpath(path)), json.dumps(payload, indent=1) + "\n")
    except OSError as exc:
        raise BaselineError(f"cannot write baseline {path}: {exc.strerror or exc}") from None
    except NotRegular as exc:
        raise BaselineError(f"cannot write baseline {path}: {exc}, not a regular file") from None
    return len(entries)


def _write_atomically(target: Path, text: str) -> None:
    """Write a temporary file beside `target` and swap it in: a symlink keeps pointing at the
    new file, an existing file keeps its permission bits, and a FIFO or a device is refused
    (the swap would replace it with a regular file)."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = stat.S_IFREG | (0o666 & ~umask)
    kind = not_regular(mode)
    if kind is not None:
        raise NotRegular(kind)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            os.fchmod(out.fileno(), stat.S_IMODE(mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read(path: Path) -> frozenset[Entry]:
    try:
        data = json.loads(read_regular(path, MAX_BYTES))  # a FIFO would block, /dev/zero never end
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    except NotRegular as exc:
        raise BaselineError(f"cannot read baseline {path}: {exc}, not a regular file") from None
    except TooLarge as exc:
        raise BaselineError(
            f"baseline {path} is {exc.args[0] // 2**20} MiB, larger than the {MAX_BYTES // 2**20} MiB ddplint reads"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise BaselineError(f"baseline {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("ddplint_baseline") != FORMAT or not isinstance(data.get("findings"), list):
        raise BaselineError(f"{path} is not a ddplint baseline (write one with --write-baseline)")
    try:
        return frozenset(Entry(f["path"], f["code"], f["fingerprint"]) for f in data["findings"])
    except (KeyError, TypeError) as exc:
        raise BaselineError(f"baseline {path}: malformed entry ({exc})") from None


def new_findings(diagnostics: list[Diagnostic], path: Path) -> tuple[list[Diagnostic], int]:
    """The findings not recorded in the baseline at `path`, and how many were recorded ones."""
    known = read(path)
    kept = [d for e, d in _entries(diagnostics, path.parent) if e not in known]
    return kept, len(diagnostics) - len(kept)
