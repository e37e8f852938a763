"""Baselines: record today's findings, then report only new ones, through edits elsewhere."""

from __future__ import annotations

import json
import os

from conftest import run_cli

SCRIPT = (
    "import torch\n"
    "import torch.distributed as dist\n"
    "dist.init_process_group('nccl')\n"
    "a = torch.zeros(1).to('cuda:0')\n"
    "dist.destroy_process_group()\n"
)


def codes_and_lines(proc) -> list[tuple[str, int]]:
    return [(line.split(": ")[1].split()[0], int(line.split(":")[1])) for line in proc.stdout.splitlines() if ": DDP" in line]


def test_write_then_only_new_findings_are_reported(tmp_path):
    train = tmp_path / "src" / "train.py"
    train.parent.mkdir()
    train.write_text(SCRIPT)
    before = codes_and_lines(run_cli("src", cwd=tmp_path))
    assert ("DDP101", 4) in before

    proc = run_cli("--write-baseline", "ddplint-baseline.json", "src", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "All checks passed (1 file)."
    plural = "s" * (len(before) != 1)
    assert proc.stderr == f"ddplint: recorded {len(before)} finding{plural} in ddplint-baseline.json\n"
    recorded = json.loads((tmp_path / "ddplint-baseline.json").read_text())
    assert {(f["path"], f["code"]) for f in recorded["findings"]} == {("src/train.py", c) for c, _ in before}

    # Code added above moves every finding down; none of them is new.
    train.write_text("import os\n\n\n" + SCRIPT)
    proc = run_cli("--baseline", "ddplint-baseline.json", "src", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert f"{len(before)} known problem" in proc.stdout

    # A new instance of the same mistake, on an identical line, is new.
    train.write_text("import os\n\n\n" + SCRIPT.replace("dist.destroy", "b = torch.zeros(1).to('cuda:0')\ndist.destroy"))
    proc = run_cli("--baseline", "ddplint-baseline.json", "src", cwd=tmp_path)
    assert proc.returncode == 1 and codes_and_lines(proc) == [("DDP101", 8)]


def test_the_baseline_is_matched_from_another_working_directory(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    run_cli("--write-baseline", str(tmp_path / "base.json"), str(tmp_path / "train.py"), cwd=tmp_path)
    proc = run_cli("--baseline", str(tmp_path / "base.json"), "train.py", cwd=tmp_path)
    assert proc.returncode == 0
    proc = run_cli("--baseline", "base.json", str(tmp_path / "train.py"), cwd=tmp_path)
    assert proc.returncode == 0


def test_config_key_baseline(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    run_cli("--write-baseline", "known.json", "train.py", cwd=tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.ddplint]\nbaseline = "known.json"\n')
    (tmp_path / "sub").mkdir()
    proc = run_cli("../train.py", cwd=tmp_path / "sub")  # relative to the pyproject.toml, not the cwd
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(run_cli("--output-format", "json", "train.py", cwd=tmp_path).stdout)
    assert data["diagnostics"] == [] and data["summary"]["baselined"] >= 1


def test_a_missing_or_foreign_baseline_is_one_line(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = run_cli("--baseline", "nope.json", "train.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "ddplint: error: cannot read baseline nope.json: No such file or directory\n"
    (tmp_path / "other.json").write_text("[]")
    proc = run_cli("--baseline", "other.json", "train.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "ddplint: error: other.json is not a ddplint baseline (write one with --write-baseline)\n"


def test_fingerprints_are_the_sarif_partial_fingerprints(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    run_cli("--write-baseline", "b.json", "train.py", cwd=tmp_path)
    recorded = {f["fingerprint"] for f in json.loads((tmp_path / "b.json").read_text())["findings"]}
    log = json.loads(run_cli("--output-format", "sarif", "train.py", cwd=tmp_path).stdout)
    sarif = {r["partialFingerprints"]["ddplint/v1"] for r in log["runs"][0]["results"]}
    assert sarif and sarif == recorded


def test_a_baseline_that_is_not_a_regular_file_is_one_line(tmp_path):
    """A FIFO blocked the run forever and /dev/zero read without end."""
    (tmp_path / "train.py").write_text(SCRIPT)
    os.mkfifo(tmp_path / "pipe.json")
    for baseline, kind in (("pipe.json", "a FIFO"), ("/dev/zero", "a character device")):
        proc = run_cli("--baseline", baseline, "train.py", cwd=tmp_path, timeout=60)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == f"ddplint: error: cannot read baseline {baseline}: {kind}, not a regular file\n"


def test_write_baseline_through_a_symlink_updates_its_target(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "shared").mkdir()
    target = tmp_path / "shared" / "baseline.json"
    target.write_text("{}\n")
    (tmp_path / "link.json").symlink_to(target)
    proc = run_cli("--write-baseline", "link.json", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "link.json").is_symlink() and os.readlink(tmp_path / "link.json") == str(target)
    recorded = json.loads(target.read_text())["findings"]
    assert {f["path"] for f in recorded} == {"train.py"}
    assert run_cli("--baseline", "link.json", "train.py", cwd=tmp_path).returncode == 0


def test_write_baseline_keeps_the_files_permission_bits(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    baseline = tmp_path / "base.json"
    baseline.write_text("{}\n")
    baseline.chmod(0o664)
    assert run_cli("--write-baseline", "base.json", "train.py", cwd=tmp_path).returncode == 0
    assert baseline.stat().st_mode & 0o7777 == 0o664 and "findings" in baseline.read_text()


def test_write_baseline_refuses_a_fifo_or_a_device(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "null.json").symlink_to("/dev/null")
    for name, kind in (("pipe.json", "a FIFO"), ("null.json", "a character device")):
        proc = run_cli("--write-baseline", name, "train.py", cwd=tmp_path, timeout=60)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == f"ddplint: error: cannot write baseline {name}: {kind}, not a regular file\n"
    assert (tmp_path / "pipe.json").is_fifo() and (tmp_path / "null.json").is_symlink()
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
