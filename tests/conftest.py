import inspect
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddplint import config as config_mod
from ddplint.lint.engine import LintResult, lint_text
from ddplint.lint.project import ProjectIndex
from ddplint.lint.rules import ALL_RULES, KNOWN_RULES

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# The official SARIF 2.1.0 JSON schema (OASIS), kept with the tests so they run on any clone.
SARIF_SCHEMA = ROOT / "tests" / "data" / "sarif-schema-2.1.0.json"


def lint_source(source: str, tmp_path: Path, name: str = "train.py") -> LintResult:
    """Lint a snippet as a file on disk (so helper modules beside it resolve), in-process."""
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    config = config_mod.Config(root=tmp_path, rules=KNOWN_RULES)
    return lint_text(path, source, config, [rule() for rule in ALL_RULES], ProjectIndex())


def rank_records(plain: dict[int, dict]):
    """Rank records as the audit reads them, from plain records keyed by rank (the probe's form)."""
    from ddplint.runtime.records import RankRecord  # (the runtime extra)

    return {rank: RankRecord.from_plain({"rank": rank, **record}) for rank, record in plain.items()}


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddplint", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def wait_for_readings(sampling, count: int, limit_s: float = 120) -> None:
    """Until the GPU sampler's thread has taken `count` readings (a wide limit: a loaded host)."""
    deadline = time.monotonic() + limit_s
    while len(sampling.samples) < count:
        assert time.monotonic() < deadline, f"the sampler took {len(sampling.samples)} readings in {limit_s} s"
        time.sleep(0.002)


@pytest.fixture
def lint(tmp_path):
    def _lint(source: str, name: str = "train.py") -> list[str]:
        return [d.code for d in lint_source(source, tmp_path, name).diagnostics]

    return _lint


# -- the fast lane ---------------------------------------------------------------------------
# `pytest -m "not slow"` leaves out every test that starts a process (the CLI, torchrun, git,
# pip): tests marked by hand, and those whose code, fixtures or module helpers (two calls deep)
# use subprocess. What stays is the in-process rule-author and report loop.

STARTS_PROCESSES = frozenset({"subprocess", "Popen"})


def _names(code) -> set[str]:
    """The global and attribute names a function uses, its nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _names(const)
    return names


def _starts_processes(fn, depth: int = 2) -> bool:
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    names = _names(code)
    if names & STARTS_PROCESSES:
        return True
    module_globals = getattr(fn, "__globals__", {})
    return depth > 0 and any(
        _starts_processes(module_globals[n], depth - 1) for n in names if inspect.isfunction(module_globals.get(n))
    )


def pytest_collection_modifyitems(items):
    for item in items:
        fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        functions = [getattr(item, "function", None)] + [d.func for defs in fixtures.values() for d in defs]
        if any(_starts_processes(f) for f in functions if f is not None):
            item.add_marker(pytest.mark.slow)
