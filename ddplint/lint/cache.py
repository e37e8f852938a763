"""Results of earlier runs, in `.ddplint_cache/` at the project root.

A file's findings are reused only when everything they were computed from is unchanged:
its bytes, the content of every project helper module its analysis read, the effective
configuration, and ddplint itself (its version and a hash of its own analysis code, so an
edited checkout never serves results of the code it replaced). One JSON file per
configuration-and-ddplint fingerprint, loaded once and written once per run, atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict
from functools import cache
from pathlib import Path

from ddplint import __version__
from ddplint.config import Config
from ddplint.diagnostics import (
    Diagnostic,
    Edit,
    FileError,
    Fix,
    Related,
    RuleInfo,
    Severity,
)
from ddplint.lint.engine import FileOutcome, LintResult
from ddplint.lint.source import SourceError, read_bytes

DIRECTORY = ".ddplint_cache"
FORMAT = 1
STALE_SECONDS = 30 * 24 * 3600  # cache files of other configurations or versions, unused this long
PACKAGE = Path(__file__).resolve().parent.parent


@cache
def code_hash() -> str:
    """A hash of ddplint's static-analysis code (everything but the runtime audit)."""
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] != "runtime":
            digest.update(relative.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def known_rules(root: Path) -> tuple[RuleInfo, ...]:
    """The rules of this build (code, name, level), as `ddplint.lint.rules` lists them. Importing
    the rules costs libcst's import (a quarter of a second), so a run keeps them in the cache,
    keyed by ddplint's code hash, and a run served from the cache never imports them."""
    path = Path(root) / DIRECTORY / f"rules-{code_hash()[:32]}.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(rows, list) and all(
                isinstance(row, list) and len(row) == 3 and all(isinstance(x, str) for x in row) for row in rows):
            return tuple(RuleInfo(code, name, Severity(level)) for code, name, level in rows)
    except (OSError, ValueError):
        pass
    from ddplint.lint.rules import KNOWN_RULES

    try:
        _prepare(path.parent)
        _write_atomically(path, json.dumps([[r.code, r.name, r.severity.value] for r in KNOWN_RULES]))
    except OSError:
        pass
    return KNOWN_RULES


def _prepare(directory: Path) -> None:
    directory.mkdir(exist_ok=True)
    ignore = directory / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Created by ddplint automatically.\n*\n", encoding="utf-8")


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def config_fingerprint(config: Config) -> str:
    """What of the configuration changes a file's findings (not excludes: they pick the files)."""
    relevant = (
        sorted(config.enabled_codes()), config.per_file_ignores, str(os.path.realpath(config.root)),
        config.main_process_predicates, config.main_process_helpers, sorted(config.codes),
    )
    return hashlib.sha256(repr(relevant).encode()).hexdigest()


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()
    except SourceError:
        return None


class ResultCache:
    def __init__(self, config: Config) -> None:
        self.directory = Path(config.root) / DIRECTORY
        key = hashlib.sha256(f"{FORMAT}\0{code_hash()}\0{config_fingerprint(config)}".encode()).hexdigest()
        self.file = self.directory / f"{key[:32]}.json"
        self.entries: dict[str, dict] = self._load()
        self.changed = False
        self.hits = 0
        self._helper_digests: dict[Path, str | None] = {}

    def _load(self) -> dict[str, dict]:
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _helper_digest(self, path: Path) -> str | None:
        if path not in self._helper_digests:
            self._helper_digests[path] = _digest(path)
        return self._helper_digests[path]

    def get(self, path: Path) -> LintResult | None:
        entry = self.entries.get(os.path.realpath(path))
        if entry is None or entry.get("digest") != _digest(path):
            return None
        if any(self._helper_digest(Path(helper)) != digest for helper, digest in entry["helpers"]):
            return None
        try:
            result = LintResult(
                diagnostics=[_diagnostic(d, str(path)) for d in entry["diagnostics"]],
                warnings=[FileError(str(path), w["message"], w["line"]) for w in entry["warnings"]],
                files=1,
            )
        except (KeyError, TypeError, ValueError):  # written by a different layout: lint again
            return None
        self.hits += 1
        return result

    def put(self, outcome: FileOutcome) -> None:
        result = outcome.result
        if outcome.digest is None or result.errors or result.internal_errors:
            return  # only complete results are worth keeping
        self.entries[os.path.realpath(outcome.path)] = {
            "digest": outcome.digest,
            "helpers": [[str(h), self._helper_digest(h)] for h in outcome.helpers],
            "diagnostics": [{**asdict(d), "path": None} for d in result.diagnostics],
            "warnings": [{"message": w.message, "line": w.line} for w in result.warnings],
        }
        self.changed = True

    def save(self) -> None:
        """Write the entries whole (a temporary file swapped in); a cache that cannot be written is no error."""
        if not self.changed:
            return
        try:
            _prepare(self.directory)
            _write_atomically(self.file, json.dumps(self.entries, separators=(",", ":")))
            self._prune()
        except OSError:
            pass

    def _prune(self) -> None:
        now = time.time()
        for other in self.directory.glob("*.json"):  # results and code lists of other versions
            try:
                if other != self.file and now - other.stat().st_mtime > STALE_SECONDS:
                    other.unlink()
            except OSError:
                pass


def _diagnostic(data: dict, path: str) -> Diagnostic:
    fix = data["fix"]
    return Diagnostic(**{
        **data,
        "path": path,
        "severity": Severity(data["severity"]),
        "related": tuple(Related(**r) for r in data.get("related", ())),
        "fix": None if fix is None else Fix(
            fix["description"],
            tuple(Edit(tuple(e["start"]), tuple(e["end"]), e["text"]) for e in fix["edits"]),
            fix["safe"],
        ),
    })
