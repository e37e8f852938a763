import subprocess
import sys
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


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddplint", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def lint(tmp_path):
    def _lint(source: str, name: str = "train.py") -> list[str]:
        return [d.code for d in lint_source(source, tmp_path, name).diagnostics]

    return _lint
