"""Inputs that once crashed, hung or stalled a run: each gives findings or a one-line error with
the right exit status within seconds, and the other files' findings are kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

from ddplint.lint import fixes as fixes_mod
from ddplint.lint import limits
from ddplint.lint.source import MAX_BYTES

BAD = FIXTURES / "lint" / "device" / "hardcoded_to_cuda0.py"
HEAD = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"
FIX_ME = HEAD + "import os\nos.makedirs('out')\n"
# Generous: the point is "seconds, not minutes or forever", on a loaded 2-core machine.
SECONDS = 60


def lint_with_bad(*paths: Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint", *map(str, paths), str(BAD)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SECONDS,
        check=False,
    )
    assert time.monotonic() - started < SECONDS
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert f"{BAD}:" in proc.stdout, proc.stdout  # the other file's findings are kept
    return proc


def one_error(proc: subprocess.CompletedProcess, path: Path, message: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"ddplint: error: {path}: {message}"]


@pytest.mark.parametrize(
    "body,message",
    [
        ("x = " + "-" * 50_000 + "1\n", "nested too deeply for Python's own parser; skipped"),  # was a segfault
        ("x = " + "not " * 20_000 + "1\n", "nested too deeply for Python's own parser; skipped"),  # was a segfault
        ("x = a" + " and a" * 10_000 + "\n", f"nested more than {limits.MAX_DEPTH} levels deep (line 4); skipped"),
        ("import a" + ".b" * 10_000 + "\n", f"nested more than {limits.MAX_DEPTH} levels deep (line 4); skipped"),
        ("x = " + "-" * 1_000 + "1\n", f"nested more than {limits.MAX_DEPTH} levels deep (line 4); skipped"),
        ("x = " + "-" * 5_000 + "1\n", "nested too deeply for Python's own parser; skipped"),
        ("x = a" + ".b" * 50_000 + "\n", "nested too deeply for Python's own parser; skipped"),
        ("x = 1" + " + 1" * 60_000 + "\n", "nested too deeply for Python's own parser; skipped"),
        ("x = (" + "'a' " * 1_000 + ")\n", "nested too deeply to lint; skipped"),
    ],
    ids=["minus-50k", "not-20k", "and-10k", "import-10k", "minus-1k", "minus-5k", "attribute-50k", "plus-60k", "strings-1k"],
)  # short ids: pytest puts the id in PYTEST_CURRENT_TEST, which each subprocess inherits
def test_deep_expressions_are_refused_per_file(tmp_path, body, message):
    path = tmp_path / "deep.py"
    path.write_text(HEAD + body)
    one_error(lint_with_bad(path), path, message)


# `type X = int` is Python 3.12 syntax: where the running Python refuses it, libcst still reads the
# file, and the AST that bounds every other file's nesting is not there to measure it.
NEWER = "type X = int\n" if sys.version_info < (3, 12) else "x = f'{\"a\"}'\ntype X = int\n"


@pytest.mark.parametrize(
    "body",
    [
        "x = a" + " and a" * 10_000 + "\n",  # was a segfault
        "x = " + "not " * 20_000 + "1\n",  # was a segfault
        "x = " + "lambda: " * 20_000 + "1\n",  # was a segfault
        "import a" + ".b" * 10_000 + "\n",  # was a segfault
        "x = f'{a" + " and a" * 10_000 + "}'\n",  # was a segfault
        "x = a" + ".b" * 5_000 + "\n",  # was 15 s of libcst
        "x = f" + "()" * 3_000 + "\n",  # was 6 s of libcst
        "x = " + "1 if a else " * 3_000 + "1\n",  # was 1.6 GB of memory
    ],
    ids=["and-10k", "not-20k", "lambda-20k", "import-10k", "fstring-10k", "attribute-5k", "call-3k", "ifexp-3k"],
)
def test_deep_expressions_in_newer_syntax_are_refused_per_file(tmp_path, body):
    path = tmp_path / "deep.py"
    path.write_text(HEAD + NEWER + body)
    line = HEAD.count("\n") + NEWER.count("\n") + 1
    one_error(lint_with_bad(path), path, f"nested more than {limits.MAX_DEPTH} levels deep (line {line}); skipped")


def test_deep_newer_syntax_does_not_break_the_worker_pool(tmp_path):
    """With two workers, a crash in one was BrokenProcessPool: every file's result lost."""
    path = tmp_path / "deep.py"
    path.write_text(HEAD + NEWER + "x = a" + " and a" * 10_000 + "\n")
    for name in ("pad1.py", "pad2.py"):  # enough source for two workers; nothing to analyse in it
        (tmp_path / name).write_text("x = 1\n" * 50_000)
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint", "--no-cache", "-j2", str(tmp_path), str(BAD)],
        capture_output=True,
        text=True,
        timeout=SECONDS,
        check=False,
    )
    assert f"{BAD}:" in proc.stdout, proc.stderr
    one_error(proc, path, f"nested more than {limits.MAX_DEPTH} levels deep (line 5); skipped")


def test_newer_syntax_lints_with_strings_and_comments_that_look_deep(tmp_path):
    """Only code counts: a long rule of dashes in a string or a comment nests nothing."""
    path = tmp_path / "train.py"
    path.write_text(
        HEAD + NEWER + "# " + "-" * 1_000 + "\nprint('" + "-" * 1_000 + "')\nx = [" + ", ".join(["a.b + c"] * 1_000) + "]\n"
    )
    proc = run_cli("--no-cache", str(path), timeout=SECONDS)
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    assert "DDP001" not in proc.stdout and ":3:1: DDP103" in proc.stdout


def test_a_deep_helper_is_refused_by_fix_and_stdin_too(tmp_path):
    """--fix, --diff and standard input read project helpers as the lint does; they segfaulted."""
    (tmp_path / "helpers.py").write_text("x = a" + " and a" * 10_000 + "\ndef is_main_process():\n    return True\n")
    script = tmp_path / "train.py"
    script.write_text(FIX_ME + "from helpers import is_main_process\nif is_main_process():\n    torch.save({}, 'a.pt')\n")
    diff = run_cli("--no-cache", "--diff", str(script), timeout=SECONDS)
    assert diff.returncode == 1 and "+os.makedirs('out', exist_ok=True)" in diff.stdout, diff.stderr
    with script.open() as stdin:
        piped = subprocess.run(
            [sys.executable, "-m", "ddplint", "--no-cache", "--stdin-filename", str(script), "-"],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=SECONDS,
            check=False,
        )
    assert piped.returncode == 1 and "DDP304" in piped.stdout and "Traceback" not in piped.stderr, piped.stderr


def test_brackets_python_refuses_are_a_syntax_error(tmp_path):
    path = tmp_path / "brackets.py"
    path.write_text(HEAD + "x = " + "[" * 500 + "]" * 500 + "\n")
    proc = lint_with_bad(path)
    assert proc.returncode == 1 and f"{path}:4:205: DDP001 syntax error: too many nested parentheses" in proc.stdout


def test_a_deep_helper_module_is_not_handed_to_libcst(tmp_path):
    """A project helper is parsed on demand; before, this segfaulted the whole run."""
    (tmp_path / "helpers.py").write_text("x = a" + " and a" * 10_000 + "\ndef is_main_process():\n    return True\n")
    script = tmp_path / "train.py"
    script.write_text(HEAD + "from helpers import is_main_process\nif is_main_process():\n    torch.save({}, 'a.pt')\n")
    proc = lint_with_bad(script)
    assert proc.returncode == 1 and proc.stderr == ""


def test_warnings_as_errors_do_not_turn_an_escape_into_a_syntax_error(tmp_path):
    path = tmp_path / "escape.py"
    path.write_text(HEAD + 'pattern = "\\d+"\n')
    proc = lint_with_bad(path, env={**os.environ, "PYTHONWARNINGS": "error"})
    assert proc.returncode == 1 and "DDP001" not in proc.stdout and str(path) not in proc.stderr


def test_a_fifo_in_a_directory_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "train.py").write_text(HEAD)
    proc = lint_with_bad(tmp_path)
    one_error(proc, tmp_path / "pipe.py", "a FIFO, not a regular file; skipped")


def test_a_fifo_named_directly_is_not_reported_missing(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    one_error(lint_with_bad(tmp_path / "pipe.py"), tmp_path / "pipe.py", "a FIFO, not a regular file; skipped")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_symlink_to_a_device_is_not_read(tmp_path, device):
    (tmp_path / "data.py").symlink_to(device)
    proc = lint_with_bad(tmp_path)
    one_error(proc, tmp_path / "data.py", "a character device, not a regular file; skipped")


def test_a_directory_named_like_a_python_file_is_walked(tmp_path):
    (tmp_path / "pkg.py").mkdir()
    (tmp_path / "pkg.py" / "train.py").write_text(HEAD)
    proc = lint_with_bad(tmp_path / "pkg.py")
    assert proc.returncode == 1 and f"{tmp_path / 'pkg.py' / 'train.py'}:3:1: DDP103" in proc.stdout


def test_a_file_that_becomes_a_directory_during_the_run_is_one_error(tmp_path, monkeypatch):
    """Found as a file, a directory when read: it was an internal error that ended the run."""
    from ddplint import config as config_mod
    from ddplint.lint import engine
    from ddplint.lint.rules import KNOWN_RULES

    path = tmp_path / "train.py"
    path.write_text(HEAD)
    real = engine.lint_file

    def swapped(file, *args):
        if file == path:
            path.unlink()
            path.mkdir()
        return real(file, *args)

    monkeypatch.setattr(engine, "lint_file", swapped)
    config = config_mod.Config(root=tmp_path, rules=KNOWN_RULES)
    result = engine.lint_paths([path, BAD], config, jobs=1)
    assert [(e.path, e.message) for e in result.errors] == [(str(path), "a directory, not a regular file; skipped")]
    assert result.internal_errors == [] and {d.path for d in result.diagnostics} == {str(BAD)}


def test_the_size_cap_is_checked_before_reading(tmp_path):
    path = tmp_path / "big.py"
    path.write_text(HEAD + "x = [" + ", ".join(str(i) for i in range(200_000)) + "]\n")  # 1.3 MB, one line
    proc = lint_with_bad(path)
    one_error(
        proc, path, f"file is {path.stat().st_size // 1024} KiB, larger than the {MAX_BYTES // 1024} KiB ddplint lints; skipped"
    )


def test_a_file_just_under_the_cap_lints_in_seconds(tmp_path):
    """The worst shape measured (bench/lint_limits.py): a findings-dense file at the cap."""
    line = "torch.zeros(1).to('cuda:0')\n"
    path = tmp_path / "dense.py"
    path.write_text(HEAD + line * ((MAX_BYTES - len(HEAD)) // len(line)))
    started = time.monotonic()
    proc = run_cli("--no-cache", "--statistics", str(path), timeout=SECONDS)
    assert time.monotonic() - started < SECONDS
    # Either every finding, or the file is skipped for taking too long: never a stall.
    assert (
        proc.returncode == 1
        and "DDP101" in proc.stdout
        or proc.stderr.strip().endswith(f"took more than {limits.CPU_SECONDS:g} s of CPU time to lint; skipped")
    )


def test_the_cpu_time_limit_skips_a_slow_file(tmp_path, monkeypatch):
    from ddplint import config as config_mod
    from ddplint.lint import engine
    from ddplint.lint.rules import KNOWN_RULES

    path = tmp_path / "slow.py"
    path.write_text(HEAD + "x = [" + ", ".join(str(i) for i in range(20_000)) + "]\n")
    original, default = limits.cpu_time_limit, limits.CPU_SECONDS
    calls: list[int] = []

    def first_file_only():  # the slow file gets 0.05 s; the next one the usual limit
        calls.append(1)
        return original(0.05 if len(calls) == 1 else default)

    monkeypatch.setattr(limits, "CPU_SECONDS", 0.05)
    monkeypatch.setattr(limits, "cpu_time_limit", first_file_only)
    config = config_mod.Config(root=tmp_path, rules=KNOWN_RULES)
    result = engine.lint_paths([path, BAD], config, jobs=1)
    assert [e.message for e in result.errors] == ["took more than 0.05 s of CPU time to lint; skipped"]
    assert {d.path for d in result.diagnostics} == {str(BAD)}


def test_a_helper_module_is_parsed_on_a_cpu_budget_of_its_own():
    """The file's limit is paused while a project module is parsed for it, and resumes where it was."""
    import signal

    with limits.cpu_time_limit(30):
        before = signal.getitimer(signal.ITIMER_PROF)[0]
        with limits.own_budget(5):
            assert 0 < signal.getitimer(signal.ITIMER_PROF)[0] <= 5.1  # the timer rounds to its tick
        after = signal.getitimer(signal.ITIMER_PROF)[0]
    assert before - 5 < after <= before + 0.1
    assert signal.getitimer(signal.ITIMER_PROF)[0] == 0


def test_a_helper_that_runs_out_of_its_budget_is_left_out_and_the_file_is_linted(tmp_path, monkeypatch):
    from ddplint import config as config_mod
    from ddplint.lint import engine, project
    from ddplint.lint.rules import KNOWN_RULES

    (tmp_path / "helpers.py").write_text("import torch\n\ndef save(m):\n    torch.save(m, 'm.pt')\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nimport torch.distributed as dist\nfrom helpers import save\n\n"
        "dist.init_process_group('gloo')\nsave(1)\ntorch.save(2, 'x.pt')\n"
        "dist.destroy_process_group()\n"
    )

    def out_of_time(text, path):
        raise limits.OutOfTime

    monkeypatch.setattr(project, "_too_complex", out_of_time)
    result = engine.lint_paths([script], config_mod.Config(root=tmp_path, rules=KNOWN_RULES), jobs=1)
    assert result.errors == [] and result.internal_errors == []
    assert [(d.code, d.line) for d in result.diagnostics] == [("DDP301", 7)]  # the helper's save is unknown


def _as_nobody() -> list[str] | None:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import ddplint.cli"], capture_output=True, cwd="/", check=False)
    return prefix if probe.returncode == 0 else None


def test_an_unreadable_directory_as_the_root_is_one_line():
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("cannot drop root privileges here, and root lists any directory")
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        locked = Path(folder) / "locked"
        locked.mkdir()
        (locked / "train.py").write_text(HEAD)
        locked.chmod(0)
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "ddplint", str(locked)],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=SECONDS,
            check=False,
        )
        locked.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"ddplint: error: {locked}: cannot list directory: permission denied\n"


@pytest.mark.parametrize(
    "pyproject,message",
    [
        ("[tool]\nddplint = 5\n", "[tool.ddplint]: must be a table of options"),
        ('# ddplint reads this file\ntool = "x"\n', "`tool` must be a table"),
        ("[tool.ddplint]\nselect = 5\n", "`select` must be a list of strings"),
        ("[tool.ddplint]\nper-file-ignores = 3\n", "`per-file-ignores` must be a table"),
        ("[tool.ddplint]\nbaseline = 3\n", "`baseline` must be a path"),
    ],
)
def test_bad_config_shapes_are_config_errors(tmp_path, pyproject, message):
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "train.py").write_text(HEAD)
    proc = run_cli("train.py", cwd=tmp_path)
    assert proc.returncode == 2 and "internal error" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_python_m_ddplint_does_not_import_the_projects_own_click(tmp_path):
    (tmp_path / "click.py").write_text("raise SystemExit('the project click.py ran')\n")
    (tmp_path / "train.py").write_text(HEAD)
    proc = run_cli("train.py", cwd=tmp_path)
    assert "ran" not in proc.stderr and proc.returncode == 1 and "DDP103" in proc.stdout


# -- --fix on files with owners, links and leftovers -----------------------------------


def test_fix_keeps_owner_group_and_mode(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(FIX_ME)
    path.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    before = path.stat()
    proc = run_cli("--fix", str(path))
    after = path.stat()
    assert "exist_ok=True" in path.read_text(), proc.stderr
    assert after.st_ino != before.st_ino  # swapped in whole
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)


def test_fix_refuses_to_split_hard_links(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(FIX_ME)
    os.link(path, tmp_path / "alias.py")
    proc = run_cli("--fix", str(path))
    assert proc.returncode == 2
    assert f"{path}: not fixed: the file has 2 hard links" in proc.stderr
    assert path.read_text() == FIX_ME and path.stat().st_nlink == 2


def test_stale_temporary_files_of_a_killed_fix_are_removed(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(FIX_ME)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=False)
    stale = tmp_path / f".train.py.{dead.stdout.strip()}.k2j4x9{fixes_mod.TEMP_SUFFIX}"
    live = tmp_path / f".train.py.{os.getpid()}.a8d7q1{fixes_mod.TEMP_SUFFIX}"  # a fix still running
    stale.write_text("half")
    live.write_text("half")
    run_cli("--fix", str(path))
    assert not stale.exists() and live.exists()
    assert "exist_ok=True" in path.read_text()


def test_a_fix_killed_by_sigterm_leaves_no_temporary_file(tmp_path, monkeypatch):
    """SIGTERM during the write unwinds like an exception and removes the temporary file."""
    import signal

    path = tmp_path / "train.py"
    path.write_text(FIX_ME)
    real_replace = os.replace

    def terminate_first(src, dst):
        os.kill(os.getpid(), signal.SIGTERM)
        real_replace(src, dst)

    monkeypatch.setattr(fixes_mod.os, "replace", terminate_first)
    from ddplint import config as config_mod
    from ddplint.lint.rules import KNOWN_RULES

    with pytest.raises(SystemExit):
        fixes_mod.fix_paths([path], config_mod.Config(root=tmp_path, rules=KNOWN_RULES), write=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]
    assert path.read_text() == FIX_ME


def test_syntax_newer_than_the_running_python_is_linted_not_a_syntax_error(tmp_path):
    # PEP 701 (Python 3.12): quotes of the enclosing kind inside an f-string replacement field
    path = tmp_path / "train.py"
    path.write_text('import torch.distributed as dist\ncfg = {"a": 1}\ndist.init_process_group("nccl")\nprint(f"{cfg["a"]}")\n')
    proc = run_cli("--extend-select", "DDP402", str(path))  # the info rule is opt-in
    assert proc.returncode == 1 and "DDP001" not in proc.stdout
    assert ":3:1: DDP103" in proc.stdout and ":3:1: DDP402" in proc.stdout


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="needs a Python that cannot read PEP 701 f-strings")
def test_fixes_apply_in_a_file_of_newer_syntax(tmp_path):
    """The running Python cannot check the fixed file, so libcst's parser does (it read the file)."""
    path = tmp_path / "train.py"
    path.write_text(
        'import os\nimport torch.distributed as dist\nnames = ["a"]\ndist.init_process_group("gloo")\n'
        'print(f"{", ".join(names)}")\nos.makedirs("out")\ndist.destroy_process_group()\n'
    )
    proc = run_cli("--fix", str(path))
    assert proc.returncode == 0, proc.stderr
    assert 'os.makedirs("out", exist_ok=True)' in path.read_text() and 'print(f"{", ".join(names)}")' in path.read_text()
    assert "Fixed 1 problem" in proc.stderr + proc.stdout
