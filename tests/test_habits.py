"""ruff's habits on the command line: --exclude/--extend-exclude, file-level noqa, --statistics order."""

from __future__ import annotations

import textwrap

import pytest
from conftest import run_cli

DIST = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    x = torch.zeros(1).to("cuda:0")
    os.makedirs("out")
    """)


def linted(proc) -> set[str]:
    return {line.split(":")[0] for line in proc.stdout.splitlines() if ": DDP" in line}


def codes(proc) -> list[str]:
    return [line.split(": ", 1)[1].split()[0] for line in proc.stdout.splitlines() if ": DDP" in line]


@pytest.fixture
def tree(tmp_path):
    for rel in ("src/train.py", "legacy/old.py", "build/gen.py", "src/vendor/lib.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(DIST)
    return tmp_path


def test_extend_exclude_adds_to_the_default_excludes(tree):
    proc = run_cli("--extend-exclude", "legacy,vendor", cwd=tree)
    assert linted(proc) == {"src/train.py"}
    proc = run_cli("--extend-exclude", "legacy", "--extend-exclude", "src/vendor/*.py", cwd=tree)
    assert linted(proc) == {"src/train.py"}


def test_exclude_replaces_the_excludes_default_ones_included(tree):
    assert linted(run_cli(".", cwd=tree)) == {"src/train.py", "legacy/old.py", "src/vendor/lib.py"}
    assert linted(run_cli("--exclude", "legacy", ".", cwd=tree)) == {"src/train.py", "build/gen.py", "src/vendor/lib.py"}


def test_command_line_excludes_add_to_the_configurations(tree):
    (tree / "pyproject.toml").write_text('[tool.ddplint]\nextend-exclude = ["legacy"]\n')
    assert linted(run_cli("--extend-exclude", "vendor", cwd=tree)) == {"src/train.py"}


def test_a_file_named_on_the_command_line_is_linted_unless_force_exclude(tree):
    assert linted(run_cli("--exclude", "legacy", "legacy/old.py", cwd=tree)) == {"legacy/old.py"}
    proc = run_cli("--exclude", "legacy", "--force-exclude", "legacy/old.py", cwd=tree)
    assert proc.returncode == 0 and linted(proc) == set()


def test_file_level_noqa_skips_the_file(tmp_path):
    (tmp_path / "a.py").write_text("# ddplint: noqa\n" + DIST)
    (tmp_path / "b.py").write_text(DIST + "    # DDPLINT: NOQA   \n")
    (tmp_path / "broken.py").write_text("# ddplint: noqa\ndef f(:\n")
    proc = run_cli(".", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "All checks passed (3 files).\n"


def test_file_level_noqa_with_codes_turns_those_rules_off_for_the_file(tmp_path):
    (tmp_path / "train.py").write_text("# ddplint: noqa: DDP101\n" + DIST)
    assert codes(run_cli("train.py", cwd=tmp_path)) == ["DDP304"]
    (tmp_path / "train.py").write_text(DIST + "# ddplint: noqa: DDP304, DDP101\n")
    assert run_cli("train.py", cwd=tmp_path).returncode == 0


def test_file_level_noqa_must_be_a_comment_line_of_its_own(tmp_path):
    (tmp_path / "train.py").write_text(DIST + 'note = "# ddplint: noqa"\nz = 1  # ddplint: noqa\n')
    assert codes(run_cli("train.py", cwd=tmp_path)) == ["DDP101", "DDP304"]


def test_file_level_noqa_naming_an_unknown_rule_is_a_warning(tmp_path):
    (tmp_path / "train.py").write_text("# ddplint: noqa: DDP999\n" + DIST)
    proc = run_cli("train.py", cwd=tmp_path)
    assert codes(proc) == ["DDP101", "DDP304"]
    assert "ddplint: warning: train.py:1: `# noqa` names unknown rule DDP999" in proc.stderr


def test_statistics_are_sorted_by_count_then_code(tmp_path):
    (tmp_path / "train.py").write_text(
        DIST + 'open("log.txt", "w")\ny = torch.zeros(1).to("cuda:0")\nos.makedirs("b")\nos.makedirs("c")\n'
    )
    proc = run_cli("--statistics", "--extend-select", "DDP402", "train.py", cwd=tmp_path)
    rows = [line.split()[:2] for line in proc.stdout.splitlines()[:-1]]
    assert rows == [["3", "DDP304"], ["2", "DDP101"], ["1", "DDP302"], ["1", "DDP402"]]
    assert proc.stdout.splitlines()[-1] == "Found 7 problems."


def test_help_documents_the_new_options_and_formats():
    out = run_cli("--help").stdout
    for text in (
        "--fail-on",
        "--exclude",
        "--extend-exclude",
        "--add-noqa",
        "concise",
        "gitlab",
        "junit",
        "lint the working directory",
        "at or above --fail-on",
    ):
        assert text in out, text
