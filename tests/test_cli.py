"""The command line as a user runs it: output shape, exit codes, selection, bad input."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli

BAD = FIXTURES / "lint" / "device" / "hardcoded_to_cuda0.py"
GOOD = FIXTURES / "lint" / "device" / "nanogpt_style.py"
DIST_SCRIPT = 'import torch\nimport torch.distributed as dist\ndist.init_process_group("nccl")\nx = torch.zeros(1).to("cuda:0")\n'


def test_findings_are_sorted_lines_with_summary_and_exit_1():
    proc = run_cli(str(BAD), str(GOOD))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[-1] == "Found 2 problems in 1 file."
    body = lines[:-1]
    assert body == sorted(body, key=lambda line: (line.split(":")[0], int(line.split(":")[1]), int(line.split(":")[2])))
    assert body[0].startswith(f"{BAD}:13:39: DDP101 device index 0 is hard-coded")


def test_clean_file_exits_0():
    proc = run_cli(str(GOOD))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == "All checks passed (1 file).\n"


def test_directories_are_walked_recursively_skipping_venvs_and_hidden(tmp_path):
    for rel in ("src/pkg/train.py", ".venv/lib/x.py", "build/y.py", ".hidden/z.py", "src/__pycache__/w.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(DIST_SCRIPT)
    (tmp_path / "src" / "notes.txt").write_text(DIST_SCRIPT)
    proc = run_cli(str(tmp_path))
    assert proc.returncode == 1
    assert {line.split(":")[0] for line in proc.stdout.splitlines()[:-1]} == {str(tmp_path / "src/pkg/train.py")}


def test_select_and_ignore_by_prefix():
    unbound = FIXTURES / "lint" / "device" / "nccl_without_binding.py"  # DDP102 and DDP103
    assert "DDP103" not in run_cli("--select", "DDP102", str(unbound)).stdout
    out = run_cli("--select", "DDP1", "--ignore", "DDP102", str(unbound)).stdout
    assert "DDP103" in out and "DDP102" not in out


def test_unknown_rule_code_is_a_usage_error():
    proc = run_cli("--select", "DDP999", str(BAD))
    assert proc.returncode == 2
    assert "unknown rule selector 'DDP999'" in proc.stderr


def test_json_output_schema():
    proc = run_cli("--format", "json", str(BAD))
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 1
    assert data["summary"] == {"files": 1, "problems": 2, "errors": 0, "fixable": 0, "baselined": 0}
    first = data["diagnostics"][0]
    assert set(first) == {
        "path",
        "cell",
        "line",
        "column",
        "end_line",
        "end_column",
        "code",
        "name",
        "severity",
        "message",
        "fix",
        "fixable",
        "related",
    }
    assert first["related"] == []
    assert (first["code"], first["name"], first["line"]) == ("DDP101", "hard-coded-cuda-index", 13)


def test_output_file(tmp_path):
    target = tmp_path / "report.json"
    proc = run_cli("--format", "json", "--output", str(target), str(BAD))
    assert proc.returncode == 1 and proc.stdout == ""
    assert json.loads(target.read_text())["summary"]["problems"] == 2


def test_exit_zero():
    assert run_cli("--exit-zero", str(BAD)).returncode == 0


def test_list_rules_and_explain():
    listing = run_cli("--list-rules")
    assert listing.returncode == 0
    codes = [line.split()[0] for line in listing.stdout.splitlines()]
    assert codes[:7] == ["DDP001", "DDP101", "DDP102", "DDP103", "DDP104", "DDP105", "DDP106"]
    explain = run_cli("--explain", "ddp101")
    assert explain.returncode == 0
    assert explain.stdout.startswith("# DDP101 hard-coded-cuda-index")
    assert "## How to fix" in explain.stdout
    missing = run_cli("--explain", "DDP999")
    assert missing.returncode == 2 and "unknown rule 'DDP999'" in missing.stderr


def test_help_documents_every_option():
    out = run_cli("--help").stdout
    for option in (
        "--select",
        "--ignore",
        "--format",
        "--output",
        "--config",
        "--force-exclude",
        "--exit-zero",
        "--jobs",
        "--list-rules",
        "--explain",
        "--runtime",
        "--nproc-per-node",
        "--backend",
        "--steps",
        "--epochs",
        "--timeout",
        "--rdzv-timeout",
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--rdzv-backend",
        "--rdzv-endpoint",
        "--version",
        "--output-format",
        "--extend-select",
        "--statistics",
        "--show-fixes",
        "--unsafe-fixes",
        "--color",
        "--show-source",
        "--stdin-filename",
        "--no-respect-gitignore",
        "--no-cache",
        "--baseline",
        "--write-baseline",
        "--quiet",
        "--verbose",
    ):
        assert option in out, option


def test_console_script_matches_module(tmp_path):
    exe = Path(sys.executable).parent / "ddplint"  # installed with the interpreter running the tests
    if not exe.exists():
        pytest.skip("console script not installed in this environment")
    import subprocess

    proc = subprocess.run([str(exe), str(BAD)], capture_output=True, text=True)
    assert proc.stdout == run_cli(str(BAD)).stdout


# -- bad input: one clear line, the right exit code, other files still linted ------------


def test_syntax_error_is_a_finding_and_other_files_are_linted(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n\ndef train(:\n    pass\n")
    proc = run_cli(str(broken), str(BAD))
    assert proc.returncode == 1
    assert f"{broken}:3:11: DDP001 syntax error: " in proc.stdout
    assert "DDP101" in proc.stdout


def test_syntax_error_in_file_without_torch(tmp_path):
    broken = tmp_path / "util.py"
    broken.write_text("x = (1,\n")
    proc = run_cli(str(broken))
    assert proc.returncode == 1 and "DDP001" in proc.stdout


@pytest.mark.parametrize(
    "content,message",
    [
        (b"import torch\nx = '\xff\xfe'\n", "not valid utf-8 at line 2 (byte 18)"),
        (b"import torch\x00\n", "file contains a NUL byte"),
        (b"# -*- coding: klingon -*-\nimport torch\n", "unknown encoding"),
    ],
)
def test_undecodable_files_give_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "bad.py"
    path.write_bytes(content)
    proc = run_cli(str(path), str(BAD))
    assert proc.returncode == 2
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and message in errors[0] and str(path) in errors[0]
    assert "Traceback" not in proc.stderr
    assert "DDP101" in proc.stdout


def test_pep263_latin1_and_bom_are_honoured(tmp_path):
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n" + DIST_SCRIPT.encode() + b"print('\xe9')\n")
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + DIST_SCRIPT.encode())
    proc = run_cli(str(latin), str(bom))
    assert proc.returncode == 1
    assert f"{latin}:5:" in proc.stdout and f"{bom}:4:" in proc.stdout


def test_empty_file_is_clean(tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("")
    proc = run_cli(str(empty))
    assert proc.returncode == 0 and "All checks passed" in proc.stdout


def test_missing_path_exits_2(tmp_path):
    proc = run_cli(str(tmp_path / "nope"), str(GOOD))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"ddplint: error: {tmp_path / 'nope'}: no such file or directory"


def _unprivileged() -> list[str] | None:
    """How to run ddplint so that file permissions apply: as is, or (as root, which reads
    everything) as nobody through setpriv; None when neither works here."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import ddplint.cli"], capture_output=True, cwd="/")
    return prefix if probe.returncode == 0 else None


def test_unreadable_file_exits_2():
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("cannot drop root privileges here, and root reads files without read permission")
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        path = Path(folder) / "secret.py"
        path.write_text(DIST_SCRIPT)
        path.chmod(0)
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "ddplint", str(path)], cwd=folder, capture_output=True, text=True, timeout=60
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"ddplint: error: {path}: cannot read file: permission denied\n"


def test_symlink_loop_exits_2(tmp_path):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    proc = run_cli(str(tmp_path / "a.py"))
    assert proc.returncode == 2
    assert "symlink loop" in proc.stderr and "Traceback" not in proc.stderr


def test_directory_symlink_loop_terminates(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(DIST_SCRIPT)
    (tmp_path / "pkg" / "loop").symlink_to(tmp_path / "pkg")
    proc = run_cli(str(tmp_path))
    assert proc.returncode == 1 and proc.stdout.count("DDP101") == 1


def test_huge_file_is_refused_with_one_line(tmp_path):
    path = tmp_path / "generated.py"
    path.write_bytes(b"import torch\n" + b"x = 1\n" * 2_000_000)
    proc = run_cli(str(path))
    assert proc.returncode == 2 and "larger than the 512 KiB ddplint lints; skipped" in proc.stderr


def test_no_path_lints_the_working_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text(DIST_SCRIPT)
    (tmp_path / "clean.py").write_text("x = 1\n")
    proc = run_cli(cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("sub/train.py:4:23: DDP101 ")
    assert lines[1] == "Found 1 problem in 1 file."
    assert run_cli(cwd=tmp_path / "sub").stdout.startswith("train.py:4:23: DDP101 ")


def test_static_path_never_imports_torch_or_pynvml():
    code = (
        "import sys\n"
        "from ddplint.cli import main\n"
        "try:\n"
        f"    main([{str(BAD)!r}, {str(FIXTURES / 'lint')!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('torch' in sys.modules, 'pynvml' in sys.modules, file=sys.stderr)\n"
    )
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stderr.strip().splitlines()[-1] == "False False"


@pytest.mark.parametrize("output_format", ["text", "json", "sarif", "github"])
@pytest.mark.parametrize("to_file", [False, True], ids=["stdout", "output-file"])
def test_a_file_name_that_is_not_utf8_is_written_with_its_bytes_escaped(tmp_path, output_format, to_file):
    """Linux names may hold any byte; the report stays valid UTF-8 (it was a UnicodeEncodeError)."""
    import jsonschema
    from conftest import SARIF_SCHEMA

    (tmp_path / os.fsdecode(b"bad\xff.py")).write_text(
        "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"
    )
    (tmp_path / "ok.py").write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    (tmp_path / ".git").mkdir()  # the repository root, for SARIF's and GitHub's relative paths
    output = ["-o", "report.out"] if to_file else []
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--no-cache",
            "--extend-select",
            "DDP402",
            "--output-format",
            output_format,
            *output,
            ".",
        ],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"},
    )
    assert proc.returncode == 1 and proc.stderr == b"", proc.stderr
    report = ((tmp_path / "report.out").read_bytes() if to_file else proc.stdout).decode("utf-8")
    if output_format == "json":
        paths = {d["path"] for d in json.loads(report)["diagnostics"]}
        assert paths == {"bad\\xff.py", "ok.py"}
    elif output_format == "sarif":
        log = json.loads(report)
        jsonschema.validate(log, json.loads(SARIF_SCHEMA.read_text()))
        uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]}
        assert uris == {"bad%FF.py", "ok.py"}
    elif output_format == "github":
        assert "::error file=bad\\xff.py,line=3," in report
    else:
        assert "bad\\xff.py:3:1: DDP103" in report


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_exits_130_without_a_traceback(tmp_path, jobs):
    """As the shell and ruff report it; click made it `Aborted!` and 1, and workers printed tracebacks."""
    import signal

    body = "import torch\nimport torch.distributed as dist\nimport os\ndist.init_process_group('nccl')\n" + "".join(
        f"x{i} = torch.zeros(1).to('cuda:0')\nos.makedirs('out{i}')\n" for i in range(400)
    )
    for n in range(60):  # about a minute of linting on one core: still running when interrupted
        (tmp_path / f"train{n}.py").write_text(body)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddplint", "--no-cache", "-v", "-j", jobs, "."],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        first = proc.stderr.readline()  # -v: the configuration line, printed before linting starts
        assert first.startswith("ddplint: configuration:"), first
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)  # the whole process group, as a terminal's Ctrl-C
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # nothing of the run may outlive the test
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr and stdout == "", stderr


def test_rules_lists_the_rules_unless_a_path_of_that_name_is_here(tmp_path):
    listed = run_cli("rules", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout == run_cli("--list-rules", cwd=tmp_path).stdout
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "train.py").write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    linted = run_cli("rules", cwd=tmp_path)
    assert linted.returncode == 1 and "rules/train.py:2:1: DDP103" in linted.stdout
