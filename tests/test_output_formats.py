"""The concise, junit and gitlab formats, and the info level in SARIF and GitHub annotations."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from conftest import SARIF_SCHEMA, run_cli

from ddplint import config as config_mod
from ddplint.diagnostics import Diagnostic, FileError
from ddplint.lint.engine import LintResult
from ddplint.report import FORMATS

SCRIPT = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    log = open("log.txt", "w")
    x = torch.zeros(1).to("cuda:0")
    os.makedirs("out")
    """)


@pytest.fixture
def project(tmp_path):
    (tmp_path / ".git").mkdir()  # the repository root that CI paths are relative to
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(SCRIPT)
    (tmp_path / "src" / "other.py").write_text(SCRIPT.replace('"cuda:0"', '"cuda:1"'))
    (tmp_path / "clean.py").write_text("x = 1\n")
    return tmp_path


def test_concise_is_one_line_per_finding_even_where_text_shows_source(project):
    concise = run_cli("--output-format", "concise", "--show-source", "--show-fixes", "src/train.py", cwd=project)
    text = run_cli("--show-source", "src/train.py", cwd=project)
    assert concise.returncode == text.returncode == 1
    lines = concise.stdout.splitlines()
    assert [line.split()[1] for line in lines[:3]] == ["DDP302", "DDP101", "DDP304"]
    assert all(line.startswith("src/train.py:") for line in lines[:3])
    assert lines[3:] == ["Found 3 problems in 1 file.", "[*] 1 fixable with --fix."]
    assert "^" in text.stdout and "^" not in concise.stdout and "fix:" not in concise.stdout
    assert run_cli("--format", "concise", "-q", "src/train.py", cwd=project).stdout.splitlines() == lines[:3]


def test_junit_is_xml_with_a_suite_per_file_and_a_failed_case_per_finding(project):
    proc = run_cli("--output-format", "junit", "src", cwd=project)
    assert proc.returncode == 1
    root = ET.fromstring(proc.stdout)
    assert root.tag == "testsuites" and root.get("tests") == "6" and root.get("failures") == "6"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["src/other.py", "src/train.py"]
    cases = suites[1].findall("testcase")
    assert [c.get("name") for c in cases] == [
        "DDP302 at src/train.py:6:7",
        "DDP101 at src/train.py:7:23",
        "DDP304 at src/train.py:8:1",
    ]
    failure = cases[1].find("failure")
    assert failure.get("type") == "DDP101" and failure.get("message").startswith("device index 0 is hard-coded")
    assert failure.text.startswith("src/train.py:7:23: DDP101 [error] ")
    assert cases[1].get("classname") == cases[1].get("file") == "src/train.py" and cases[1].get("line") == "7"


def test_junit_of_a_clean_run_has_one_passing_case_and_errors_are_errors(project):
    clean = ET.fromstring(run_cli("--format", "junit", "clean.py", cwd=project).stdout)
    (case,) = clean.iter("testcase")
    assert case.find("failure") is None and clean.get("failures") == "0"
    proc = run_cli("--format", "junit", "clean.py", "missing.py", cwd=project)
    assert proc.returncode == 2
    root = ET.fromstring(proc.stdout)
    (error,) = root.iter("error")
    assert root.get("errors") == "1" and error.get("message") == "no such file or directory"


def test_junit_stays_well_formed_with_characters_xml_cannot_carry(tmp_path):
    d = Diagnostic(path="a\x01b.py", line=1, col=1, end_line=1, end_col=2, code="DDP101", message="bad \x00 byte & <tag> \ud800")
    result = LintResult(diagnostics=[d], errors=[FileError("c.py", "odd \x1b[0m")], files=2)
    root = ET.fromstring(FORMATS["junit"](result, config_mod.Config(root=tmp_path)))
    assert root.find("testsuite/testcase/failure").get("message") == "bad \ufffd byte & <tag> \ufffd"


def test_gitlab_code_quality_fields(project):
    proc = run_cli("--output-format", "gitlab", "--extend-select", "DDP402", ".", cwd=project / "src")
    assert proc.returncode == 1
    issues = json.loads(proc.stdout)
    assert len(issues) == 8
    for issue in issues:
        assert set(issue) == {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["location"]["path"] in {"src/train.py", "src/other.py"}  # relative to the repository
        assert isinstance(issue["location"]["lines"]["begin"], int)
    assert len({i["fingerprint"] for i in issues}) == len(issues)
    first = next(i for i in issues if i["location"]["path"] == "src/train.py" and i["check_name"] == "DDP101")
    assert first["location"]["lines"]["begin"] == 7 and first["description"].startswith("DDP101 device index 0")
    severities = {i["check_name"]: i["severity"] for i in issues}
    assert severities == {"DDP101": "major", "DDP304": "major", "DDP302": "minor", "DDP402": "info"}


def test_gitlab_fingerprints_survive_code_added_above(project):
    before = json.loads(run_cli("--format", "gitlab", "src/train.py", cwd=project).stdout)
    path = project / "src" / "train.py"
    path.write_text("# a comment\n\n" + path.read_text())
    after = json.loads(run_cli("--format", "gitlab", "src/train.py", cwd=project).stdout)
    assert [i["fingerprint"] for i in before] == [i["fingerprint"] for i in after]
    assert [i["location"]["lines"]["begin"] + 2 for i in before] == [i["location"]["lines"]["begin"] for i in after]


def test_an_info_finding_is_a_sarif_note_and_a_github_notice(project):
    proc = run_cli("--format", "sarif", "--select", "DDP402,DDP101", "src/train.py", cwd=project)
    log = json.loads(proc.stdout)
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(log)
    run = log["runs"][0]
    assert {r["id"]: r["defaultConfiguration"]["level"] for r in run["tool"]["driver"]["rules"]} == {
        "DDP101": "error",
        "DDP402": "note",
    }
    assert {r["ruleId"]: r["level"] for r in run["results"]} == {"DDP101": "error", "DDP402": "note"}
    github = run_cli("--format", "github", "--select", "DDP402", "src/train.py", cwd=project).stdout
    assert github.startswith("::notice file=src/train.py,line=5,")
