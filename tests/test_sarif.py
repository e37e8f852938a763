"""`--format sarif`: schema-valid SARIF 2.1.0 that a real consumer (sarif-tools) reads back."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from conftest import ROOT, SARIF_SCHEMA, run_cli

from ddplint import __version__, catalog
from ddplint import config as config_mod
from ddplint.diagnostics import Diagnostic, Edit, Fix, Severity
from ddplint.lint.engine import LintResult, lint_paths
from ddplint.lint.rules import CATALOG, KNOWN_RULES, RULES_BY_CODE
from ddplint.report import FORMATS, sarif

SARIF_CLI = shutil.which("sarif", path=str(Path(sys.executable).parent)) or "sarif"  # sarif-tools

# Tests that track one finding select DDP101 alone, so rules added later cannot move them.
BAD = """\
import os
import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
model = torch.nn.Linear(10, 10).to("cuda:0")
"""
CLEAN = "print('no distributed training here')\n"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


def sarif_of(*args: str, cwd: Path, expect_rc: int = 1) -> dict:
    proc = run_cli("--format", "sarif", *args, cwd=cwd)
    assert proc.returncode == expect_rc, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    """One SARIF run and one JSON run over all lint fixtures, from the repository root."""
    out = tmp_path_factory.mktemp("sarif") / "ddplint.sarif"
    proc = run_cli("--format", "sarif", "--output", str(out), "fixtures/lint", cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    reference = json.loads(run_cli("--format", "json", "fixtures/lint", cwd=ROOT).stdout)
    return out, json.loads(out.read_text(encoding="utf-8")), reference


def test_fixture_run_is_valid_and_carries_the_rule_docs(fixture_run, validator):
    _, log, _ = fixture_run
    validator.validate(log)
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert (driver["name"], driver["semanticVersion"]) == ("ddplint", __version__)
    assert driver["informationUri"].startswith("https://")
    # every rule of the default selection is listed (the info rules are opt-in); syntax errors are notifications
    assert [r["id"] for r in driver["rules"]] == [r.code for r in CATALOG if r.code != "DDP001" and r.severity.on_by_default]
    for descriptor in driver["rules"]:
        rule, rule_doc = RULES_BY_CODE[descriptor["id"]], catalog.doc(descriptor["id"])
        assert descriptor["name"] == rule.name
        assert descriptor["help"] == {"text": rule_doc.markdown, "markdown": rule_doc.markdown}
        assert descriptor["fullDescription"]["text"] == rule_doc.summary
        assert len(descriptor["fullDescription"]["text"]) <= 1024
        assert descriptor["shortDescription"]["text"]
        assert descriptor["defaultConfiguration"]["level"] == rule.severity.value
        assert descriptor["properties"] == {"tags": list(rule.tags), "precision": rule.precision}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == ROOT.as_uri() + "/"
    assert run["invocations"] == [{"executionSuccessful": True}]


def test_a_finding_through_a_helper_carries_the_place_inside_it(fixture_run):
    _, log, _ = fixture_run
    call = "fixtures/lint/projects/unguarded_save_helper/train.py"
    (result,) = [
        r
        for r in log["runs"][0]["results"]
        if r["ruleId"] == "DDP301" and r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == call
    ]
    (inside,) = result["relatedLocations"]
    where = inside["physicalLocation"]
    assert where["artifactLocation"]["uri"] == "fixtures/lint/projects/unguarded_save_helper/checkpointing.py"
    assert (where["region"]["startLine"], where["region"]["startColumn"]) == (9, 5)
    assert inside["message"]["text"] == "torch.save() here, on every rank"


def test_results_match_the_json_report(fixture_run):
    _, log, reference = fixture_run
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert len(run["results"]) == len(reference["diagnostics"]) > 0
    for result, d in zip(run["results"], reference["diagnostics"], strict=True):
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == d["code"]
        assert result["level"] == d["severity"]
        assert result["message"]["text"] == d["message"]
        (location,) = result["locations"]
        artifact = location["physicalLocation"]["artifactLocation"]
        assert artifact == {"uri": d["path"], "uriBaseId": "%SRCROOT%"}
        assert (ROOT / artifact["uri"]).is_file()
        assert location["physicalLocation"]["region"] == {
            "startLine": d["line"],
            "startColumn": d["column"],
            "endLine": d["end_line"],
            "endColumn": d["end_column"],
        }
        assert set(result["partialFingerprints"]) == {"ddplint/v1"}
    fingerprints = [
        (r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["partialFingerprints"]["ddplint/v1"])
        for r in run["results"]
    ]
    assert len(set(fingerprints)) == len(fingerprints)


def test_sarif_tools_reads_the_same_counts(fixture_run, tmp_path):
    path, _, reference = fixture_run
    summary = subprocess.run([str(SARIF_CLI), "summary", str(path)], capture_output=True, text=True, check=True)
    counts = {level: int(n) for level, n in re.findall(r"^(error|warning|note): (\d+)$", summary.stdout, re.MULTILINE)}
    expected = Counter(d["severity"] for d in reference["diagnostics"])
    assert counts == {"error": expected["error"], "warning": expected["warning"], "note": 0}

    table = tmp_path / "results.csv"
    subprocess.run([str(SARIF_CLI), "csv", "--output", str(table), str(path)], capture_output=True, check=True)
    with table.open(newline="", encoding="utf-8") as f:
        rows = Counter((r["Severity"], r["Code"], r["Location"], int(r["Line"])) for r in csv.DictReader(f))
    assert rows == Counter((d["severity"], d["code"], d["path"], d["line"]) for d in reference["diagnostics"])


def test_clean_run_is_a_valid_log_with_empty_results(tmp_path, validator):
    (tmp_path / "ok.py").write_text(CLEAN, encoding="utf-8")
    log = sarif_of("ok.py", cwd=tmp_path, expect_rc=0)
    validator.validate(log)
    run = log["runs"][0]
    assert run["results"] == []
    assert run["invocations"] == [{"executionSuccessful": True}]


def test_unparsable_and_unreadable_files_are_notifications(tmp_path, validator):
    (tmp_path / "broken.py").write_text("import torch\ndef f(:\n", encoding="utf-8")
    (tmp_path / "latin.py").write_bytes(b"import torch\nx = '\xe9'\n")
    (tmp_path / "bad.py").write_text(BAD, encoding="utf-8")
    log = sarif_of("--select", "DDP101", ".", cwd=tmp_path, expect_rc=2)
    validator.validate(log)
    run = log["runs"][0]
    assert [r["ruleId"] for r in run["results"]] == ["DDP101"]
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    notes = {
        n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]: n for n in invocation["toolExecutionNotifications"]
    }
    assert set(notes) == {"broken.py", "latin.py"}
    assert all(n["level"] == "error" for n in notes.values())
    assert "syntax error" in notes["broken.py"]["message"]["text"]
    assert notes["broken.py"]["locations"][0]["physicalLocation"]["region"]["startLine"] == 2
    assert "not valid utf-8" in notes["latin.py"]["message"]["text"]


def test_a_syntax_error_alone_is_a_successful_run(tmp_path, validator):
    (tmp_path / "broken.py").write_text("def f(:\n", encoding="utf-8")
    log = sarif_of("broken.py", cwd=tmp_path)
    validator.validate(log)
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is True
    assert log["runs"][0]["results"] == []
    assert len(invocation["toolExecutionNotifications"]) == 1


def test_noqa_findings_are_left_out(tmp_path):
    (tmp_path / "train.py").write_text(
        BAD.replace('"cuda:0")', '"cuda:0")  # noqa: DDP101') + 'other = torch.zeros(1).to("cuda:1")\n', encoding="utf-8"
    )
    results = sarif_of("--select", "DDP101", "train.py", cwd=tmp_path)["runs"][0]["results"]
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in results] == [8]


def test_only_selected_rules_are_described(tmp_path):
    (tmp_path / "train.py").write_text(BAD, encoding="utf-8")
    log = sarif_of("--select", "DDP101,DDP104", "train.py", cwd=tmp_path)
    assert [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]] == ["DDP101", "DDP104"]
    assert [r["ruleIndex"] for r in log["runs"][0]["results"]] == [0]


# --- fingerprints -------------------------------------------------------------------------


def fingerprint_map(tmp_path: Path, source: str) -> dict[int, str]:
    (tmp_path / "train.py").write_text(source, encoding="utf-8")
    config = config_mod.Config(root=tmp_path, rules=KNOWN_RULES, select=("DDP101",))
    log = json.loads(FORMATS["sarif"](lint_paths([tmp_path / "train.py"], config, jobs=1), config))
    return {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]: r["partialFingerprints"]["ddplint/v1"]
        for r in log["runs"][0]["results"]
    }


def test_fingerprints_survive_code_inserted_above_and_change_with_the_line(tmp_path):
    before = fingerprint_map(tmp_path, BAD)
    moved = BAD.replace("\nmodel", "\n\n\n\ndef helper(x):\n    return x + 1\n\n\nmodel")
    after = fingerprint_map(tmp_path, moved)
    assert list(before) == [7] and list(after) == [14]
    assert after[14] == before[7]
    reindented = fingerprint_map(tmp_path, BAD.replace("Linear(10, 10)", "Linear(10,  10)"))
    assert reindented[7] == before[7]  # whitespace inside the line is not a change
    edited = fingerprint_map(tmp_path, BAD.replace("Linear(10, 10)", "Linear(10, 20)"))
    assert edited[7] != before[7]


def test_repeated_identical_lines_get_distinct_fingerprints(tmp_path):
    line = 'x = torch.zeros(1).to("cuda:0")\n'
    prints = fingerprint_map(tmp_path, BAD + line + line)
    assert len(prints) == 3 and len(set(prints.values())) == 3
    # the first copy keeps its fingerprint when a third one is appended
    assert fingerprint_map(tmp_path, BAD + line + line + line)[8] == prints[8]


# --- paths --------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "src" / "my pkg").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "src" / "my pkg" / "train.py").write_text(BAD, encoding="utf-8")
    return root


def uris(log: dict) -> list[str]:
    return [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]]


def test_uris_are_relative_to_the_git_root_from_a_subdirectory(repo):
    sub = repo / "src"
    assert uris(sarif_of("--select", "DDP101", "my pkg/train.py", cwd=sub)) == ["src/my%20pkg/train.py"]
    log = sarif_of("--select", "DDP101", str(sub / "my pkg" / "train.py"), cwd=sub / "my pkg")
    assert uris(log) == ["src/my%20pkg/train.py"]
    assert log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.resolve().as_uri() + "/"


def test_uris_are_relative_to_the_working_directory_outside_git(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "train.py").write_text(BAD, encoding="utf-8")
    assert uris(sarif_of("--select", "DDP101", str(tmp_path / "a" / "train.py"), cwd=tmp_path)) == ["a/train.py"]
    # a file outside the root can only be named by an absolute URI, without %SRCROOT%
    (tmp_path / "b").mkdir()
    log = sarif_of("--select", "DDP101", "../a/train.py", cwd=tmp_path / "b")
    artifact = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": (tmp_path / "a" / "train.py").resolve().as_uri()}


# --- renderer details that no current rule exercises from the command line -----------------


def diagnostic(path: str, line: int, severity: Severity, fix: Fix | None = None) -> Diagnostic:
    return Diagnostic(
        path=path,
        line=line,
        col=1,
        end_line=line,
        end_col=5,
        code="DDP101",
        message="m",
        severity=severity,
        fix=fix,
        source_line=f"line {line}",
    )


def test_fixes_become_replacements(tmp_path, monkeypatch, validator):
    monkeypatch.chdir(tmp_path)
    fix = Fix("use the local rank", (Edit((3, 5), (3, 13), "f'cuda:{local_rank}'"),))
    result = LintResult(diagnostics=[diagnostic("t.py", 3, Severity.ERROR, fix)], files=1)
    log = json.loads(FORMATS["sarif"](result, config_mod.Config(root=tmp_path)))
    validator.validate(log)
    (result_fix,) = log["runs"][0]["results"][0]["fixes"]
    assert result_fix["description"] == {"text": "use the local rank"}
    (change,) = result_fix["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "t.py", "uriBaseId": "%SRCROOT%"}
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 3, "startColumn": 5, "endLine": 3, "endColumn": 13},
            "insertedContent": {"text": "f'cuda:{local_rank}'"},
        }
    ]


def test_past_the_result_limit_the_most_severe_are_kept(tmp_path, monkeypatch, capsys, validator):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sarif, "MAX_RESULTS", 3)
    levels = [Severity.WARNING, Severity.ERROR, Severity.WARNING, Severity.ERROR, Severity.ERROR]
    result = LintResult(diagnostics=[diagnostic("t.py", i + 1, s) for i, s in enumerate(levels)], files=1)
    log = json.loads(FORMATS["sarif"](result, config_mod.Config(root=tmp_path)))
    validator.validate(log)
    kept = [(r["level"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in log["runs"][0]["results"]]
    assert kept == [("error", 2), ("error", 4), ("error", 5)]
    assert "5 findings exceed" in capsys.readouterr().err


def test_past_the_size_limit_results_are_dropped_until_it_fits(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = config_mod.Config(root=tmp_path, select=("ALL",))
    empty = len(gzip.compress(FORMATS["sarif"](LintResult(files=1), config).encode()))
    monkeypatch.setattr(sarif, "MAX_COMPRESSED_BYTES", empty + 1500)
    result = LintResult(
        diagnostics=[
            Diagnostic(
                path=f"m{i}.py",
                line=i + 1,
                col=1,
                end_line=i + 1,
                end_col=2,
                code="DDP101",
                message=f"finding {i} " + "x" * (i % 97),
                source_line=str(i),
            )
            for i in range(400)
        ],
        files=400,
    )
    text = FORMATS["sarif"](result, config)
    assert len(gzip.compress(text.encode())) <= empty + 1500
    assert 0 < len(json.loads(text)["runs"][0]["results"]) < 400
    assert "400 findings exceed" in capsys.readouterr().err


def test_other_formats_do_not_import_sarif_om():
    code = "import sys, ddplint.cli, ddplint.report; print('sarif_om' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"
