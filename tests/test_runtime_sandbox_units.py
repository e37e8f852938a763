"""The sandbox's decisions without launching anything: which directories get layers of their
own, how an upper layer reads as changes, and what io.sandbox and run.leftover conclude."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest
from conftest import rank_records

from ddplint.runtime.checks.containment import (
    Containment,
    check_leftovers,
    check_sandbox,
    writes_report,
)
from ddplint.runtime.sandbox import (
    LAYERS,
    MAP,
    ChangeKind,
    Leftover,
    Outcome,
    layer_changes,
    plan_roots,
    shared_scratch,
)
from ddplint.runtime.verdict import Status


def test_roots_cover_project_cwd_home_temp_and_absolute_outputs(tmp_path):
    project = tmp_path / "repo"
    (project / "src").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    script = project / "src" / "train.py"
    script.write_text("")
    out = tmp_path / "elsewhere" / "runs"
    out.mkdir(parents=True)
    roots = plan_roots(
        script,
        ("--out", str(out / "new" / "x.pt"), f"--log={out}", "--null", "/dev/null"),
        str(project / "src"),
        str(tmp_path / "home"),
        str(tmp_path / "tmp"),
    )
    # the project root (pyproject.toml), the nearest existing directory of each output path;
    # the working directory is inside the project; /dev is never overlaid
    assert roots == sorted([str(project), str(out), str(tmp_path / "home"), str(tmp_path / "tmp")])


def test_an_output_under_a_missing_top_directory_is_left_to_the_tree(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    roots = plan_roots(
        script,
        (
            "--out",
            "/no-such-top-dir/run1",
        ),
        str(tmp_path),
        None,
        str(tmp_path),
    )
    assert roots == [str(tmp_path)]  # / is no root of its own: the tree covers it


def test_nested_directories_are_one_root(tmp_path):
    script = tmp_path / "a" / "train.py"
    script.parent.mkdir()
    script.write_text("")
    roots = plan_roots(script, (), str(tmp_path / "a"), str(tmp_path), str(tmp_path))
    assert roots == [str(tmp_path)]


@pytest.fixture
def layer(tmp_path):
    """A real directory and a hand-made upper layer over it."""
    real, layers = tmp_path / "real", tmp_path / "run" / LAYERS
    upper = layers / "0" / "upper"
    for d in (real / "kept", upper / "kept", upper / "newdir"):
        d.mkdir(parents=True)
    (real / "same.txt").write_text("same")
    (real / "edited.txt").write_text("before")
    (real / "kept" / "chmod.txt").write_text("x")
    os.utime(real / "kept" / "chmod.txt", (1, 1))
    (upper / "edited.txt").write_text("after")
    os.utime(real / "edited.txt", (1, 1))
    os.utime(upper / "edited.txt", (2, 2))
    (upper / "newdir" / "new.bin").write_bytes(b"new")
    (upper / "kept" / "chmod.txt").write_text("x")
    os.utime(upper / "kept" / "chmod.txt", (1, 1))
    (upper / "kept" / "chmod.txt").chmod(0o600)
    (real / "kept" / "chmod.txt").chmod(0o644)
    (layers / MAP).write_text(json.dumps([[str(real), "0"]]))
    return real, layers


def test_an_upper_layer_reads_as_created_and_modified(layer):
    real, layers = layer
    changes = {(os.path.relpath(c.path, real), c.kind, c.type, c.detail) for c in layer_changes(layers, "/nowhere")}
    assert changes == {
        ("edited.txt", ChangeKind.MODIFIED, "file", ("content", "times")),
        ("newdir", ChangeKind.CREATED, "dir", ()),
        ("newdir/new.bin", ChangeKind.CREATED, "file", ()),
        ("kept/chmod.txt", ChangeKind.MODIFIED, "file", ("mode",)),
    }


@pytest.mark.skipif(os.getuid() != 0, reason="a whiteout is a 0/0 character device: mknod needs root")
def test_a_whiteout_is_a_deletion(layer):
    real, layers = layer
    os.mknod(layers / "0" / "upper" / "same.txt", stat.S_IFCHR | 0o000, os.makedev(0, 0))
    deleted = [c for c in layer_changes(layers, "/nowhere") if c.kind is ChangeKind.DELETED]
    assert [(c.path, c.type) for c in deleted] == [(str(real / "same.txt"), "file")]


def test_torchs_scratch_in_the_temp_directory_is_left_out(layer):
    real, layers = layer
    (layers / "0" / "upper" / "torchelastic_abc").mkdir()
    assert not [c for c in layer_changes(layers, str(real)) if "torchelastic" in c.path]


def test_writes_name_the_ranks_the_probe_saw_and_the_rest_unknown(layer):
    real, layers = layer
    records = {
        0: {"writes": [{"path": str(real / "newdir" / "new.bin"), "op": "open:wb", "site": "t.py:3"}]},
        1: {"writes": [{"path": str(real / "tmpfile"), "op": "open:w", "site": "t.py:9"}]},
    }
    writes = {
        os.path.relpath(w["path"], real): w for w in writes_report(layer_changes(layers, "/nowhere"), rank_records(records))
    }
    assert (writes["newdir/new.bin"]["ranks"], writes["newdir/new.bin"]["seen_by_probe"]) == ([0], True)
    assert (writes["edited.txt"]["ranks"], writes["edited.txt"]["seen_by_probe"]) == ([], False)
    assert (writes["tmpfile"]["change"], writes["tmpfile"]["ranks"]) == (None, [1])  # left nothing behind
    check = check_sandbox(Containment(covered=("/",), reported=True), list(writes.values()), str(real))
    assert check.status is Status.PASS and "none reached your disk" in check.summary
    assert check.evidence[0].startswith("copy-on-write over the whole file system: /;")
    assert "edited.txt [content" in "\n".join(check.evidence)
    assert "edited.txt" in next(e for e in check.evidence if "rank unknown" in e)


def test_not_sandboxed_is_a_warning_that_says_what_is_not_contained():
    for containment in (Containment(disabled=True), Containment(unavailable="unshare(user, mount): EPERM")):
        check = check_sandbox(containment, [], "/")
        assert check.status is Status.WARN and check.summary.startswith("not contained")
        assert any("subprocesses" in e for e in check.evidence)
    partial = check_sandbox(Containment(covered=("/",), uncontained=("/data",), reported=True), [], "/")
    assert partial.status is Status.WARN and "writes to /data were not contained" in partial.summary
    assert "none reached" not in partial.summary


def test_a_mount_made_read_only_or_a_directory_in_memory_is_named_but_still_contained():
    """A writable mount the kernel would not overlay was made read-only: a write there failed;
    a directory rebuilt in memory kept its new entries there: nothing reached the disk, and the
    evidence says where."""
    check = check_sandbox(
        Containment(covered=("/", "/scratch"), in_memory=("/mnt",), read_only=("/etc/hosts",), reported=True), [], "/"
    )
    assert check.status is Status.PASS and check.data["in_memory"] == ["/mnt"]
    assert any(e.startswith("rebuilt in memory") and "/mnt;" in e for e in check.evidence)
    assert "whole file system: /, /scratch;" in check.evidence[0]
    assert any("read-only to the job" in e and "/etc/hosts" in e for e in check.evidence)


def test_leftovers_fail_only_when_every_script_had_ended_by_itself():
    left = Outcome(returncode=0, leftovers=[Leftover(7, "sleep 100")])
    completed = rank_records({0: {"status": "completed"}, 1: {"status": "completed"}})
    stopped = rank_records({0: {"status": "stopped"}, 1: {"status": "stopped"}})
    assert check_leftovers(left, completed).status is Status.FAIL
    assert check_leftovers(left, stopped).status is Status.WARN  # the audit cut the script short
    assert check_leftovers(Outcome(returncode=0), completed).status is Status.PASS
    assert check_leftovers(Outcome(stopped_by="SIGTERM"), completed).status is Status.SKIP
    assert check_leftovers(None, completed).status is Status.SKIP


def test_relative_outputs_symlink_targets_and_shared_scratch_are_roots(tmp_path):
    project, runs, disk, cache = (tmp_path / "w" / "project", tmp_path / "w" / "runs", tmp_path / "disk", tmp_path / "cache")
    for d in (project, runs, disk, cache):
        d.mkdir(parents=True)
    (project / "setup.py").write_text("")
    (project / "outputs").symlink_to(disk, target_is_directory=True)
    (project / "python").symlink_to(sys.executable)  # a file link (a venv's interpreter): not a root
    script = project / "train.py"
    script.write_text("")
    roots = plan_roots(
        script,
        ("--out", "../runs", "--log=../runs/log.txt", "--lr", "0.1"),
        str(project),
        None,
        str(project),
        shared=(str(cache),),
    )
    assert roots == sorted([str(project), str(runs), str(disk), str(cache)])


def test_shared_scratch_is_var_tmp_and_moved_xdg_directories(tmp_path):
    (tmp_path / "c").mkdir()
    found = shared_scratch(
        {"XDG_CACHE_HOME": str(tmp_path / "c"), "XDG_DATA_HOME": "relative/ignored", "XDG_STATE_HOME": str(tmp_path / "absent")}
    )
    assert str(tmp_path / "c") in found and "relative/ignored" not in found
    assert str(tmp_path / "absent") not in found
    assert ("/var/tmp" in found) == os.path.isdir("/var/tmp")


def test_the_disk_is_not_said_untouched_without_the_sandbox_outcome(layer):
    real, layers = layer
    writes = writes_report(layer_changes(layers, "/nowhere"), {})
    check = check_sandbox(Containment(), writes, str(real))
    assert check.status is Status.WARN and "unknown" in check.summary and "none reached" not in check.summary
