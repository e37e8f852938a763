"""Results of earlier runs, in `.ddplint_cache/` at the project root.

A file's findings are reused only when everything they were computed from is unchanged:
its bytes, the content of every project helper module its analysis read, the absence of every
module file its imports looked for and did not find (a helper written since is read), the effective
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
FORMAT = 2
STALE_SECONDS = 30 * 24 * 3600  # cache files of other configurations or versions, unused this long
PACKAGE = Path(__file__).resolve().parent.parent
MAX_CACHE_BYTES = 256 * 1024 * 1024  # a larger cache file is not read (the run lints, and rewrites it)


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
    rows = _read_json(path)
    if isinstance(rows, list) and all(
        isinstance(row, list) and len(row) == 3 and all(isinstance(x, str) for x in row) for row in rows
    ):
        try:
            return tuple(RuleInfo(code, name, Severity(level)) for code, name, level in rows)
        except ValueError:
            pass
    from ddplint.lint.rules import KNOWN_RULES

    try:
        _prepare(path.parent)
        _write_atomically(path, json.dumps([[r.code, r.name, r.severity.value] for r in KNOWN_RULES]))
    except OSError:
        pass
    return KNOWN_RULES


def _read_json(path: Path) -> object:
    """The JSON in a cache file, or None: a regular file of bounded size only (a FIFO there
    would block the run, a symlink to /dev/zero never end it)."""
    try:
        return json.loads(read_bytes(path, MAX_CACHE_BYTES))
    except (SourceError, ValueError, RecursionError):
        return None


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
        sorted(config.enabled_codes()),
        config.per_file_ignores,
        str(os.path.realpath(config.root)),
        config.main_process_predicates,
        config.main_process_helpers,
        sorted(config.codes),
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
        self._presence: dict[Path, bool] = {}

    def _load(self) -> dict[str, dict]:
        data = _read_json(self.file)
        return data if isinstance(data, dict) else {}

    def _helper_digest(self, path: Path) -> str | None:
        if path not in self._helper_digests:
            self._helper_digests[path] = _digest(path)
        return self._helper_digests[path]

    def _present(self, path: Path) -> bool:
        if path not in self._presence:
            self._presence[path] = path.exists()  # a module file, or a package directory created since
        return self._presence[path]

    def get(self, path: Path) -> LintResult | None:
        entry = self.entries.get(os.path.realpath(path))
        if not isinstance(entry, dict) or entry.get("digest") != _digest(path):
            return None
        try:
            if any(self._helper_digest(Path(helper)) != digest for helper, digest in entry["helpers"]):
                return None
            if any(self._present(Path(module)) for module in entry["missing"]):
                return None  # an import would find a module now that it did not find then
            result = LintResult(
                diagnostics=[_diagnostic(d, str(path)) for d in entry["diagnostics"]],
                warnings=[_warning(w, str(path)) for w in entry["warnings"]],
                files=1,
            )
        except (KeyError, TypeError, ValueError):  # another layout, or edited: lint again
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
            "missing": [str(m) for m in outcome.missing],
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
    """A cached finding, every field of the type it is written with (TypeError otherwise)."""
    fix = data["fix"]
    d = Diagnostic(
        **{
            **data,
            "path": path,
            "severity": Severity(data["severity"]),
            "related": tuple(Related(**r) for r in data["related"]),
            "fix": None
            if fix is None
            else Fix(
                fix["description"],
                tuple(Edit(tuple(e["start"]), tuple(e["end"]), e["text"]) for e in fix["edits"]),
                fix["safe"],
            ),
        }
    )
    fixes = [d.fix] if d.fix is not None else []
    edits = [e for f in fixes for e in f.edits]
    numbers = [
        d.line,
        d.col,
        d.end_line,
        d.end_col,
        *[d.cell] * (d.cell is not None),
        *(n for r in d.related for n in (r.line, r.col)),
        *(n for e in edits for n in (*e.start, *e.end)),
    ]
    texts = [
        d.code,
        d.message,
        d.source_line,
        *(t for r in d.related for t in (r.path, r.message)),
        *(e.text for e in edits),
        *(f.description for f in fixes),
    ]
    if (
        any(type(n) is not int for n in numbers)
        or any(not isinstance(t, str) for t in texts)
        or any(len(e.start) != 2 or len(e.end) != 2 for e in edits)
        or any(not isinstance(f.safe, bool) for f in fixes)
    ):
        raise TypeError("a cached finding of another shape")
    return d


def _warning(data: dict, path: str) -> FileError:
    warning = FileError(path, data["message"], data["line"])
    if not isinstance(warning.message, str) or not (warning.line is None or type(warning.line) is int):
        raise TypeError("a cached warning of another shape")
    return warning
