"""`--format github`: workflow-command annotations, escaped as the Actions runner decodes them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

from conftest import ROOT, run_cli

from ddplint import config as config_mod
from ddplint.diagnostics import Diagnostic, FileError, Severity
from ddplint.lint.engine import LintResult
from ddplint.report import FORMATS

COMMAND = re.compile(r"^::(error|warning) (?P<props>[^:]*)::(?P<message>.*)$")


def unescape(text: str) -> str:
    """The runner's decoding (the inverse of the escaping under test)."""
    for encoded, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(encoded, char)
    return text


def parse(line: str) -> tuple[str, dict[str, str], str]:
    match = COMMAND.match(line)
    assert match, line
    props = dict(item.split("=", 1) for item in match["props"].split(","))
    return match[1], {key: unescape(value) for key, value in props.items()}, unescape(match["message"])


def test_special_characters_are_escaped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = Diagnostic(
        path="dir,1/a:b.py",
        line=3,
        col=7,
        end_line=4,
        end_col=2,
        code="DDP105",
        message="100% wrong\r\nrank: 8, node: 1",
        severity=Severity.WARNING,
    )
    out = FORMATS["github"](LintResult(diagnostics=[d], files=1), config_mod.Config(root=tmp_path))
    assert out == (
        "::warning file=dir%2C1/a%3Ab.py,line=3,col=7,endLine=4,endColumn=2,"
        "title=DDP105 device-from-global-rank::100%25 wrong%0D%0Arank: 8, node: 1\n"
    )
    assert parse(out.rstrip("\n")) == (
        "warning",
        {
            "file": "dir,1/a:b.py",
            "line": "3",
            "col": "7",
            "endLine": "4",
            "endColumn": "2",
            "title": "DDP105 device-from-global-rank",
        },
        "100% wrong\r\nrank: 8, node: 1",
    )


def test_one_annotation_per_finding_with_repository_relative_paths(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    shutil.copytree(ROOT / "fixtures" / "lint" / "device", tmp_path / "scripts")
    (tmp_path / "ci").mkdir()
    proc = run_cli("--format", "github", "../scripts", cwd=tmp_path / "ci")
    assert proc.returncode == 1, proc.stderr
    reference = json.loads(run_cli("--format", "json", "scripts", cwd=tmp_path).stdout)["diagnostics"]
    annotations = [parse(line) for line in proc.stdout.splitlines()]
    assert len(annotations) == len(reference) > 0
    for (level, props, message), d in zip(annotations, reference, strict=True):
        assert level == d["severity"]
        assert props == {
            "file": d["path"],
            "line": str(d["line"]),
            "col": str(d["column"]),
            "endLine": str(d["end_line"]),
            "endColumn": str(d["end_column"]),
            "title": f"{d['code']} {d['name']}",
        }
        assert message == d["message"]


def test_unreadable_files_are_error_annotations(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "latin.py").write_bytes(b"import torch\nx = '\xe9'\n")
    proc = run_cli("--format", "github", "latin.py", cwd=tmp_path / "src")
    assert proc.returncode == 2
    ((level, props, message),) = [parse(line) for line in proc.stdout.splitlines()]
    assert (level, props["file"], props["title"]) == ("error", "src/latin.py", "ddplint")
    assert "not valid utf-8" in message
    assert proc.stderr.startswith("ddplint: error: latin.py:")


def test_no_findings_no_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = LintResult(errors=[], files=3)
    assert FORMATS["github"](result, config_mod.Config(root=tmp_path)) == ""
    result.errors.append(FileError("gone.py", "no such file or directory"))
    assert FORMATS["github"](result, config_mod.Config(root=tmp_path)) == (
        "::error file=gone.py,title=ddplint::no such file or directory\n"
    )
