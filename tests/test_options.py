"""The command-line conventions ruff users expect, each from the real command line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import run_cli

from ddplint import config as config_mod

SCRIPT = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    x = torch.zeros(1).to("cuda:0")
    os.makedirs("out")
    dist.destroy_process_group()
    """)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    return tmp_path


def codes(proc) -> list[str]:
    return [line.split(": ", 1)[1].split()[0] for line in proc.stdout.splitlines() if ": DDP" in line]


def test_output_format_and_its_format_alias(project):
    new = run_cli("--output-format", "json", "train.py", cwd=project)
    old = run_cli("--format", "json", "train.py", cwd=project)
    assert json.loads(new.stdout) == json.loads(old.stdout)


def test_extend_select_adds_to_select_from_cli_and_config(project):
    assert codes(run_cli("--select", "DDP304", "--extend-select", "DDP101", "train.py", cwd=project)) == ["DDP101", "DDP304"]
    (project / "pyproject.toml").write_text('[tool.ddplint]\nselect = ["DDP304"]\nextend-select = ["DDP101"]\n')
    assert codes(run_cli("train.py", cwd=project)) == ["DDP101", "DDP304"]
    proc = run_cli("--extend-select", "DDP9", "train.py", cwd=project)
    assert proc.returncode == 2 and "unknown rule selector 'DDP9' in --extend-select" in proc.stderr


def test_fixable_findings_are_marked_and_counted(project):
    proc = run_cli("train.py", cwd=project)
    lines = proc.stdout.splitlines()
    assert "train.py:7:1: DDP304 [*] " in proc.stdout
    assert not any("DDP101 [*]" in line for line in lines)
    assert lines[-1] == "[*] 1 fixable with --fix."


def test_show_fixes_prints_each_fix_and_what_fix_did(project):
    proc = run_cli("--show-fixes", "train.py", cwd=project)
    assert "    fix: pass exist_ok=True" in proc.stdout
    proc = run_cli("--fix", "--show-fixes", "train.py", cwd=project)
    assert "train.py: 1 × DDP304" in proc.stderr


def test_statistics(project):
    proc = run_cli("--statistics", "train.py", cwd=project)
    lines = proc.stdout.splitlines()
    assert "1  DDP304  [*] makedirs-race" in lines and "1  DDP101      hard-coded-cuda-index" in lines
    assert lines[-1].startswith("Found ")


def test_quiet_prints_findings_only_and_verbose_says_more(project):
    quiet = run_cli("-q", "train.py", cwd=project)
    assert quiet.stdout and all(": DDP" in line for line in quiet.stdout.splitlines())
    verbose = run_cli("-v", "train.py", cwd=project)
    assert "ddplint: configuration: defaults" in verbose.stderr and " file in " in verbose.stderr


def test_source_snippet_with_caret_and_color(project):
    proc = run_cli("--show-source", "--color", "never", "train.py", cwd=project)
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "DDP101" in line)
    assert lines[at + 1] == '6 | x = torch.zeros(1).to("cuda:0")'
    assert lines[at + 2] == "                          ^^^^^^^^"
    plain = run_cli("train.py", cwd=project).stdout  # not a terminal: one line per finding, no colour
    assert "\033[" not in plain and "^^^" not in plain
    colored = run_cli("--color", "always", "train.py", cwd=project).stdout
    assert "\033[1m" in colored and "\033[0m" in colored


def test_stdin_with_stdin_filename(project):
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint", "--stdin-filename", "src/train.py", "-"],
        input=SCRIPT,
        capture_output=True,
        text=True,
        cwd=project,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and "src/train.py:6:" in proc.stdout
    plain = subprocess.run(
        [sys.executable, "-m", "ddplint", "-"],
        input="x = 1\n",
        capture_output=True,
        text=True,
        cwd=project,
        timeout=120,
        check=False,
    )
    assert plain.returncode == 0
    proc = run_cli("--fix", "-", cwd=project)
    assert proc.returncode == 2 and "do not read standard input" in proc.stderr


def test_gitignore_is_respected_unless_told(project):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    subprocess.run([git, "init", "-q"], cwd=project, check=True)
    (project / ".gitignore").write_text("generated/\nscratch_*.py\n")
    for rel in ("generated/train.py", "scratch_1.py", "src/train.py"):
        (project / rel).parent.mkdir(exist_ok=True)
        (project / rel).write_text(SCRIPT)
    linted = {line.split(":")[0] for line in run_cli(".", cwd=project).stdout.splitlines() if ": DDP" in line}
    assert linted == {"train.py", "src/train.py"}
    linted = {
        line.split(":")[0] for line in run_cli("--no-respect-gitignore", ".", cwd=project).stdout.splitlines() if ": DDP" in line
    }
    assert linted == {"train.py", "src/train.py", "generated/train.py", "scratch_1.py"}
    assert "DDP101" in run_cli("scratch_1.py", cwd=project).stdout  # named on the command line: linted


def test_noqa_naming_an_unknown_code_is_reported(project):
    (project / "train.py").write_text(SCRIPT.replace('"cuda:0")', '"cuda:0")  # noqa: DDP1O1, E501'))
    proc = run_cli("train.py", cwd=project)
    assert "ddplint: warning: train.py:6: `# noqa` names unknown rule DDP1O1" not in proc.stderr  # not DDP+digits
    (project / "train.py").write_text(SCRIPT.replace('"cuda:0")', '"cuda:0")  # noqa: DDP110, E501'))
    proc = run_cli("train.py", cwd=project)
    assert proc.stderr == "ddplint: warning: train.py:6: `# noqa` names unknown rule DDP110\n"
    assert proc.returncode == 1  # a warning, not an error; E501 is another tool's code


@pytest.mark.parametrize("name", ["ddplint.toml", ".ddplint.toml"])
def test_standalone_config_file(project, name):
    (project / name).write_text('ignore = ["DDP101"]\n')
    assert codes(run_cli("train.py", cwd=project)) == ["DDP304"]
    (project / name).write_text("ignore = 3\n")
    proc = run_cli("train.py", cwd=project)
    assert proc.returncode == 2 and f"{name}: `ignore` must be a list of strings" in proc.stderr


def test_a_pyproject_without_a_ddplint_table_does_not_hide_a_config_above(project):
    (project / "ddplint.toml").write_text('ignore = ["DDP101"]\n')
    (project / "pkg").mkdir()
    (project / "pkg" / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    (project / "pkg" / "train.py").write_text(SCRIPT)
    assert codes(run_cli("pkg/train.py", cwd=project)) == ["DDP304"]


UNSAFE = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    model = torch.nn.Linear(2, 2).to("cuda:0")
    model.load_state_dict(torch.load("ckpt.pt"))
    dist.destroy_process_group()
    """)


def test_unsafe_fixes_are_offered_marked_and_applied_only_when_asked(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(UNSAFE)
    plain = run_cli("train.py", cwd=tmp_path)
    assert codes(plain) == ["DDP101", "DDP303"] and "[*]" not in plain.stdout
    assert "(2 more fixes available with --fix --unsafe-fixes.)" in plain.stdout
    marked = run_cli("--unsafe-fixes", "train.py", cwd=tmp_path)
    assert "train.py:7:34: DDP101 [*] device index 0" in marked.stdout
    assert "[*] 2 fixable with --fix --unsafe-fixes." in marked.stdout
    for flags, offered in (((), 0), (("--unsafe-fixes",), 2)):
        log = json.loads(run_cli("--output-format", "sarif", *flags, "train.py", cwd=tmp_path).stdout)
        assert sum("fixes" in r for r in log["runs"][0]["results"]) == offered
    safe_only = run_cli("--fix", "train.py", cwd=tmp_path)
    assert safe_only.returncode == 1 and script.read_text() == UNSAFE
    fixed = run_cli("--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert fixed.returncode == 0 and "Fixed 2 problems in 1 file." in fixed.stderr
    assert script.read_text() == UNSAFE.replace('"cuda:0"', 'f"cuda:{local_rank}"').replace(
        'torch.load("ckpt.pt")', 'torch.load("ckpt.pt", map_location="cpu")'
    )


def test_unsafe_fixes_are_marked_only_with_the_flag():
    from ddplint.diagnostics import Diagnostic, Edit, Fix
    from ddplint.lint.engine import LintResult
    from ddplint.report import text
    from ddplint.report.options import ReportOptions

    unsafe = Fix("guess the device", (Edit((1, 1), (1, 2), "y"),), safe=False)
    result = LintResult(diagnostics=[Diagnostic("t.py", 1, 1, 1, 2, "DDP101", "m", fix=unsafe)], files=1)
    config = config_mod.Config(root=".")
    assert "[*]" not in text.render(result, config, ReportOptions())
    out = text.render(result, config, ReportOptions(unsafe_fixes=True))
    assert "t.py:1:1: DDP101 [*] m" in out and "[*] 1 fixable with --fix --unsafe-fixes." in out
