"""[tool.ddplint] in pyproject.toml, command-line overrides, and `# noqa` suppressions."""

import textwrap

import pytest
from conftest import run_cli

from ddplint import config as config_mod
from ddplint.lint import engine
from ddplint.lint.rules import KNOWN_RULES, RULES_BY_CODE

SCRIPT = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    a = torch.zeros(1).to("cuda:0")
    b = torch.zeros(1).to("cuda:1")  # noqa: DDP101
    c = torch.zeros(1).to("cuda:2")  # noqa
    d = torch.zeros(1).to("cuda:3")  # noqa: DDP102, DDP103
    e = torch.zeros(1).to("cuda:4")  # NOQA:DDP101,DDP103
    dist.destroy_process_group()
    """
)


def write_project(tmp_path, table: str):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.ddplint]\n" + textwrap.dedent(table))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(SCRIPT)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "old.py").write_text(SCRIPT)
    return tmp_path


def findings(proc):
    return [
        line.split(": ", 1)[1].split()[0] + "@" + line.split(":")[0].rsplit("/", 1)[-1] + ":" + line.split(":")[1]
        for line in proc.stdout.splitlines()
        if ": DDP" in line
    ]


def test_noqa_forms(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    got = findings(run_cli(str(tmp_path / "train.py")))
    assert got == ["DDP101@train.py:5", "DDP101@train.py:8"]


def test_config_select_ignore_and_per_file_ignores(tmp_path):
    write_project(
        tmp_path,
        """\
        select = ["DDP1"]
        ignore = ["DDP103"]
        per-file-ignores = { "scripts/*" = ["DDP101"] }
    """,
    )
    got = findings(run_cli(".", cwd=tmp_path))
    assert got == ["DDP101@train.py:5", "DDP101@train.py:8"]


def test_cli_flags_override_config(tmp_path):
    write_project(tmp_path, 'ignore = ["DDP101"]\n')
    got = findings(run_cli("--ignore", "DDP103", ".", cwd=tmp_path))
    assert got and all(g.startswith("DDP101") for g in got)


def test_exclude_and_force_exclude(tmp_path):
    write_project(tmp_path, 'extend-exclude = ["scripts"]\n')
    assert {g.split("@")[1].split(":")[0] for g in findings(run_cli(".", cwd=tmp_path))} == {"train.py"}
    # named explicitly, an excluded file is linted unless --force-exclude (what pre-commit passes)
    assert findings(run_cli("scripts/old.py", cwd=tmp_path))
    proc = run_cli("--force-exclude", "scripts/old.py", cwd=tmp_path)
    assert proc.returncode == 0 and not findings(proc)


def test_config_is_found_upward_from_the_linted_path(tmp_path):
    write_project(tmp_path, 'ignore = ["DDP103"]\n')
    got = findings(run_cli(str(tmp_path / "src" / "train.py")))
    assert "DDP103@train.py:4" not in got and got


@pytest.mark.parametrize(
    "table,message",
    [
        ('select = ["DDP77"]\n', "unknown rule selector 'DDP77'"),
        ('per-file-ignores = { "a.py" = ["XYZ1"] }\n', "unknown rule selector 'XYZ1'"),
        ('selct = ["DDP1"]\n', "unknown option 'selct'"),
        ('ignore = "DDP101"\n', "`ignore` must be a list of strings"),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path, table, message):
    write_project(tmp_path, table)
    proc = run_cli(".", cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_broken_toml_is_a_usage_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ddplint\n")
    (tmp_path / "t.py").write_text(SCRIPT)
    proc = run_cli("t.py", cwd=tmp_path)
    assert proc.returncode == 2 and "cannot read" in proc.stderr


def test_rule_crash_is_reported_with_file_and_rule_and_others_continue(tmp_path, monkeypatch):
    crashing, fine = tmp_path / "a.py", tmp_path / "b.py"
    unbound = (
        'import torch\nimport torch.distributed as dist\ndist.init_process_group("nccl")\n'
        "x = torch.zeros(1).cuda()\ndist.destroy_process_group()\n"
    )  # DDP102 and DDP103
    crashing.write_text(unbound)
    fine.write_text(unbound)
    original = RULES_BY_CODE["DDP103"].check

    def check(self, ctx):
        if ctx.path.name == "a.py":
            raise ValueError("boom")
        return original(self, ctx)

    monkeypatch.setattr(RULES_BY_CODE["DDP103"], "check", check)
    config = config_mod.Config(root=tmp_path, rules=KNOWN_RULES)
    result = engine.lint_paths([crashing, fine], config, jobs=1)
    assert [(e.path, e.message) for e in result.internal_errors] == [
        (str(crashing), "internal error in DDP103: ValueError: boom")
    ]
    codes = {(d.path, d.code) for d in result.diagnostics}
    assert (str(crashing), "DDP102") in codes and (str(fine), "DDP103") in codes


def test_parallel_and_serial_runs_agree(tmp_path, monkeypatch):
    for i in range(20):
        (tmp_path / f"t{i}.py").write_text(SCRIPT)
    monkeypatch.setattr(engine, "BYTES_PER_WORKER", 1)  # workers for these few bytes too
    config = config_mod.Config(root=tmp_path, rules=KNOWN_RULES)
    serial = engine.lint_paths([tmp_path], config, jobs=1)
    parallel = engine.lint_paths([tmp_path], config, jobs=2)
    assert serial.diagnostics == parallel.diagnostics and serial.files == parallel.files == 20
