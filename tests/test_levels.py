"""Rule levels, the default selection, selection by name and --fail-on, from the real command line."""

from __future__ import annotations

import textwrap

import pytest
from conftest import run_cli

from ddplint.diagnostics import Severity
from ddplint.lint.rules import CATALOG

# DDP101 (error) twice, DDP302 (warning), DDP304 (error, fixable), DDP402 (info: never destroyed)
SCRIPT = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    log = open("log.txt", "w")
    x = torch.zeros(1).to("cuda:0")
    y = torch.zeros(1).to("cuda:0")
    os.makedirs("out")
    """)
# only a warning (DDP302) and the info rule (DDP402)
WARNING_ONLY = textwrap.dedent("""\
    import torch.distributed as dist

    dist.init_process_group("gloo")
    log = open("log.txt", "w")
    """)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "warn.py").write_text(WARNING_ONLY)
    return tmp_path


def codes(proc) -> list[str]:
    return [line.split(": ", 1)[1].split()[0] for line in proc.stdout.splitlines() if ": DDP" in line]


def one_line_error(proc, text: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and text in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_rule_states_its_level_in_its_own_class():
    for rule in CATALOG:
        assert isinstance(vars(rule).get("severity"), Severity), rule.code
    levels = {rule.code: rule.severity for rule in CATALOG}
    assert levels["DDP402"] is Severity.INFO and levels["DDP101"] is Severity.ERROR
    assert levels["DDP202"] is Severity.WARNING


def test_list_rules_shows_each_level_and_whether_it_is_on_by_default():
    proc = run_cli("--list-rules")
    assert proc.returncode == 0
    rows = {line.split()[0]: line.split()[1:4] for line in proc.stdout.splitlines()}
    assert list(rows) == [rule.code for rule in CATALOG]
    for rule in CATALOG:
        default = "default" if rule.severity is not Severity.INFO else "opt-in"
        assert rows[rule.code] == [rule.name, rule.severity.value, default], rule.code


def test_the_default_selection_leaves_out_info_rules(project):
    assert codes(run_cli("train.py", cwd=project)) == ["DDP302", "DDP101", "DDP101", "DDP304"]
    assert codes(run_cli("--extend-select", "DDP402", "train.py", cwd=project))[0] == "DDP402"
    assert codes(run_cli("--select", "ALL", "train.py", cwd=project)).count("DDP402") == 1
    assert codes(run_cli("--select", "DDP4", "train.py", cwd=project)) == ["DDP402"]


def test_an_ignore_of_any_width_beats_the_default_selection(project):
    assert codes(run_cli("--ignore", "DDP3", "train.py", cwd=project)) == ["DDP101", "DDP101"]
    assert codes(run_cli("--ignore", "DDP", "--extend-select", "DDP402", "train.py", cwd=project)) == ["DDP402"]


def test_rules_are_selected_by_name_as_well_as_code(project):
    assert codes(run_cli("--select", "hard-coded-cuda-index", "train.py", cwd=project)) == ["DDP101", "DDP101"]
    assert codes(run_cli("--select", "Makedirs-Race,DDP302", "train.py", cwd=project)) == ["DDP302", "DDP304"]
    assert codes(run_cli("--ignore", "unguarded-log-writer,makedirs-race", "train.py", cwd=project)) == ["DDP101", "DDP101"]
    (project / "pyproject.toml").write_text(
        '[tool.ddplint]\nextend-select = ["missing-destroy-process-group"]\n'
        'per-file-ignores = { "train.py" = ["hard-coded-cuda-index"] }\n'
    )
    assert codes(run_cli("train.py", cwd=project)) == ["DDP402", "DDP302", "DDP304"]


def test_an_unknown_rule_name_is_one_line_and_exit_2(project):
    one_line_error(
        run_cli("--select", "hard-coded-cuda", "train.py", cwd=project), "unknown rule selector 'hard-coded-cuda' in --select"
    )
    (project / "pyproject.toml").write_text('[tool.ddplint]\nignore = ["no-such-rule"]\n')
    one_line_error(run_cli("train.py", cwd=project), "unknown rule selector 'no-such-rule'")


def test_fail_on_sets_the_exit_threshold_and_keeps_the_report(project):
    default = run_cli("warn.py", cwd=project)  # any reported finding fails by default
    assert default.returncode == 1 and codes(default) == ["DDP302"]
    relaxed = run_cli("--fail-on", "error", "warn.py", cwd=project)
    assert relaxed.returncode == 0 and relaxed.stdout == default.stdout
    assert run_cli("--fail-on", "warning", "warn.py", cwd=project).returncode == 1
    assert run_cli("--fail-on", "ERROR", "train.py", cwd=project).returncode == 1
    info = run_cli("--select", "DDP402", "--fail-on", "warning", "warn.py", cwd=project)
    assert info.returncode == 0 and codes(info) == ["DDP402"]
    assert run_cli("--select", "DDP402", "warn.py", cwd=project).returncode == 1


def test_fail_on_from_the_configuration_and_the_command_line_wins(project):
    (project / "pyproject.toml").write_text('[tool.ddplint]\nfail-on = "error"\n')
    assert run_cli("warn.py", cwd=project).returncode == 0
    assert run_cli("train.py", cwd=project).returncode == 1
    assert run_cli("--fail-on", "info", "warn.py", cwd=project).returncode == 1


@pytest.mark.parametrize("value", ['"fatal"', "2", '["error"]'])
def test_a_bad_fail_on_in_the_configuration_is_one_line_and_exit_2(project, value):
    (project / "pyproject.toml").write_text(f"[tool.ddplint]\nfail-on = {value}\n")
    one_line_error(run_cli("warn.py", cwd=project), "unknown level")


def test_an_unknown_level_on_the_command_line_is_one_line_and_exit_2(project):
    one_line_error(
        run_cli("--fail-on", "fatal", "warn.py", cwd=project), "unknown level 'fatal' in --fail-on (one of error, warning, info)"
    )


def test_exit_zero_still_exits_0(project):
    assert run_cli("--exit-zero", "--fail-on", "info", "train.py", cwd=project).returncode == 0
