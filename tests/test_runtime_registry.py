"""The runtime checks' registry against the code, the docs and the report.

Every check id lives in ddplint/runtime/registry.py; the code names it through the constants,
`CheckResult` refuses an id (or a rule) the registry does not know, and the check tables of
docs/runtime-audit.md and docs/runtime-checks.md, and the per-check `data` of
docs/runtime-json.md, document exactly the registered checks.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import get_args

import pytest

from ddplint.lint.rules import RULES_BY_CODE
from ddplint.runtime import registry, report
from ddplint.runtime.registry import AUDIT_DOC, CHECKS, CHECKS_DOC, ids
from ddplint.runtime.verdict import BY_SEVERITY, CheckResult, Status, worst

ROOT = Path(__file__).resolve().parents[1]
ID = re.compile(r"^[a-z]+\.[a-z_]+$")  # the pattern of `check` in the report's JSON Schema


def table_rows(doc: str) -> list[tuple[str, int]]:
    """(check id, line number) of every row of the tables whose first column is "check"."""
    rows, in_checks = [], False
    for number, line in enumerate((ROOT / doc).read_text().splitlines(), 1):
        if not line.startswith("|"):
            in_checks = False
            continue
        first = line.split("|")[1].strip()
        assert in_checks or first == "check" or not ID.match(first.strip("`")), (
            f"{doc}:{number}: a check row outside a table with a header"
        )
        if first == "check":
            in_checks = True
        elif in_checks and not set(first) <= set("-: "):
            m = re.fullmatch(r"`([^`]+)`", first)
            assert m, f"{doc}:{number}: a check row must start with the id in backquotes: {first!r}"
            rows.append((m.group(1), number))
    return rows


def json_doc_checks() -> tuple[list[str], list[str]]:
    """The ids of docs/runtime-json.md's per-check `data` list, and the ids and `group.*`
    named in its closing "Machine checks (...)" sentence."""
    text = (ROOT / "docs" / "runtime-json.md").read_text()
    section = text[text.index("## `checks[]`") :]
    section = section[: section.index("\n## ", 1)]
    listed = re.findall(r"^- `([^`]+)` — ", section, re.M)
    machine = section[section.index("Machine checks (") :]
    machine = machine[: machine.index(")")]
    return listed, re.findall(r"`([^`]+)`", machine)


# -- the registry ------------------------------------------------------------------------------


def test_registry_entries_are_well_formed():
    assert CHECKS
    phases = set(get_args(registry.Phase))
    for check_id, spec in CHECKS.items():
        assert spec.id == check_id
        assert ID.match(check_id), check_id
        assert spec.phase in phases, spec
        assert spec.doc in (AUDIT_DOC, CHECKS_DOC), spec
        assert all(code in RULES_BY_CODE for code in spec.rules), spec
        assert spec.rule == (spec.rules[0] if spec.rules else None)


def test_every_constant_names_its_registered_check():
    constants = {
        name: value for name, value in vars(registry).items() if name.isupper() and isinstance(value, str) and ID.match(value)
    }
    assert sorted(constants.values()) == sorted(CHECKS)
    for name, value in constants.items():
        assert name == value.replace(".", "_").upper(), name


def test_the_phase_tuples_are_the_reports_order():
    pytest.importorskip("numpy")  # (checks.data)
    from ddplint.runtime.checks.data import DATA_CHECKS, data_checks
    from ddplint.runtime.checks.perf import PERF_CHECKS

    assert [c.check for c in data_checks({}, 2, str(ROOT), 3)] == list(DATA_CHECKS) == list(ids("data"))
    assert PERF_CHECKS == (registry.CKPT_RESUME, registry.CKPT_RESTART, registry.PERF_STEPS, registry.PERF_SCALING)


def test_check_result_refuses_an_unregistered_id_or_rule():
    with pytest.raises(ValueError, match="not a check"):
        CheckResult("data.disjointed", Status.PASS, "typo")
    with pytest.raises(ValueError, match="not linked to DDP202"):
        CheckResult(registry.DATA_DISJOINT, Status.FAIL, "x", rule="DDP202")
    assert CheckResult(registry.DATA_SET_EPOCH, Status.FAIL, "x", rule="DDP204").rule == "DDP204"


def test_no_module_spells_a_check_id_itself():
    """Outside registry.py, ids reach strings through the constants (f"see {RUN_HANG}"), so a
    renamed check cannot leave a stale id behind. Docstrings and comments may name them."""
    word = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, CHECKS)) + r")(?![\w])")
    found = []
    for path in sorted((ROOT / "ddplint").rglob("*.py")):
        if path.name == "registry.py" and path.parent.name == "runtime":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {m}" for m in word.findall(node.value)]
    assert not found, "\n".join(found)


# -- the docs ----------------------------------------------------------------------------------


def test_every_registered_check_has_a_row_in_its_doc_and_every_row_is_registered():
    for doc in (AUDIT_DOC, CHECKS_DOC):
        rows = table_rows(doc)
        documented = [check_id for check_id, _ in rows]
        assert len(documented) == len(set(documented)), f"{doc}: a check with two rows"
        for check_id, number in rows:
            assert check_id in CHECKS, f"{doc}:{number}: {check_id} is not registered"
            assert CHECKS[check_id].doc == doc, f"{doc}:{number}: {check_id} is registered under {CHECKS[check_id].doc}"
        assert sorted(documented) == sorted(c for c, spec in CHECKS.items() if spec.doc == doc), doc


def test_the_json_doc_names_only_registered_checks_and_covers_them_all():
    listed, machine = json_doc_checks()
    groups = {name[:-2] for name in machine if name.endswith(".*")}
    named = [name for name in machine if not name.endswith(".*")]
    assert listed and groups
    for check_id in listed + named:
        assert check_id in CHECKS, f"docs/runtime-json.md names {check_id}, which is not registered"
    for group in groups:
        assert any(c.startswith(group + ".") for c in CHECKS), f"docs/runtime-json.md: no check in {group}.*"
    uncovered = [c for c in CHECKS if c not in listed and c not in named and c.split(".")[0] not in groups]
    assert not uncovered, f"not in docs/runtime-json.md's checks[] section: {uncovered}"


def test_the_json_doc_lists_the_rules_a_check_can_name():
    text = (ROOT / "docs" / "runtime-json.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `rule` |"))
    assert set(re.findall(r"`(DDP\d+)`", row)) == {code for spec in CHECKS.values() for code in spec.rules}


def test_the_json_schema_accepts_every_registered_id():
    text = (ROOT / "docs" / "runtime-json.md").read_text()
    schema = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    pattern = schema["properties"]["checks"]["items"]["properties"]["check"]["pattern"]
    assert all(re.match(pattern, c) for c in CHECKS)


# -- one Status order ----------------------------------------------------------------------------


def test_status_severity_is_one_total_order():
    assert [s.value for s in BY_SEVERITY] == ["FAIL", "WARN", "INFO", "PASS", "SKIP"]
    assert worst([Status.PASS, Status.INFO]) is Status.INFO
    assert worst([Status.SKIP, Status.PASS]) is Status.PASS
    assert worst([Status.WARN, Status.FAIL, Status.INFO]) is Status.FAIL
    assert worst([]) is Status.SKIP
    assert worst([], default=Status.PASS) is Status.PASS
    assert [s.value for s in Status] == ["PASS", "WARN", "FAIL", "SKIP", "INFO"]  # the JSON counts' order


def test_text_report_shows_fail_then_warn_then_the_rest_in_check_order():
    statuses = [
        (registry.DATA_DISJOINT, Status.PASS),
        (registry.DATA_DUPLICATES, Status.WARN),
        (registry.DATA_COVERAGE, Status.INFO),
        (registry.DATA_CONTENT, Status.FAIL),
        (registry.DATA_SET_EPOCH, Status.SKIP),
        (registry.IO_SINGLE_WRITER, Status.WARN),
        (registry.RUN_FAILURE, Status.PASS),
        (registry.RUN_HANG, Status.FAIL),
    ]
    checks = [CheckResult(c, s, f"{c} says {s.value}", [f"evidence of {c}"], fix=f"fix {c}") for c, s in statuses]
    launch = {"nnodes": 1, "world_size": 2, "backend": "gloo", "epochs": 2, "steps": 3}
    built = report.build(checks, script="train.py", script_args=(), launch=launch, elapsed_s=1.0, ranks=[], loaders=[], writes=[])
    assert list(built["counts"]) == ["PASS", "WARN", "FAIL", "SKIP", "INFO"]
    lines = report.to_text(built).splitlines()
    heads = [line.split()[:2] for line in lines[2:] if line[:4] in ("PASS", "WARN", "FAIL", "SKIP", "INFO")]
    assert heads == [
        ["FAIL", "data.content"],
        ["FAIL", "run.hang"],
        ["WARN", "data.duplicates"],
        ["WARN", "io.single_writer"],
        ["PASS", "data.disjoint"],
        ["INFO", "data.coverage"],
        ["SKIP", "data.set_epoch"],
        ["PASS", "run.failure"],
    ]
    shown = [line.strip() for line in lines]
    assert "evidence of data.content" in shown and "fix: fix io.single_writer" in shown
    assert "evidence of data.disjoint" not in shown and "fix: fix data.coverage" not in shown
    assert lines[-1] == "2 FAIL, 2 WARN, 1 INFO, 2 PASS, 1 SKIP"
    quiet = report.to_text(built, quiet=True)
    assert "data.disjoint" not in quiet and "data.coverage" in quiet


def test_a_group_of_checks_that_raises_becomes_one_warn_line_of_its_own():
    from ddplint.runtime.audit import _checks_of

    def boom(*args):
        raise RuntimeError("no NVML today")

    [line] = _checks_of(registry.HOST_CHECKS, boom, 1, 2)
    assert (line.check, line.status, line.summary) == (
        "host.checks",
        Status.WARN,
        "the host checks could not run: RuntimeError: no NVML today",
    )
    [line] = _checks_of(registry.RANK_CHECKS, boom)
    assert line.summary.startswith("the rank checks could not run")
    ok = CheckResult(registry.ENV_PORT, Status.PASS, "free")
    assert _checks_of(registry.HOST_CHECKS, lambda: iter([ok])) == [ok]
