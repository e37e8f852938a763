"""The sandbox, for real: a job that writes by every route (Python, C, a shell, a subprocess, an
mp.spawn child, metadata, links, a FIFO, sqlite, numpy) into a project under the temp directory
and into one outside it; not one byte or mode of the user's files changes, the report lists
every write, and no process survives. SIGINT and SIGTERM at several moments leave no process
and no scratch directory."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import jsonschema
import pytest
from test_runtime_audit import FIXTURES, ROOT, env, processes_naming, report_schema

from ddplint.runtime.checks.causes import cause_of
from ddplint.runtime.sandbox import unavailable_reason

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"namespaces not available here: {unavailable_reason()}")

WAIT_S = 180  # a loaded 2-core machine: wait on events, with room to spare


def snapshot(path: Path) -> dict[str, tuple]:
    """Every entry under `path`: type, mode, and the bytes' digest or the link's target."""
    out = {}
    for p in sorted(path.rglob("*")):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            what = os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            what = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            what = None
        out[str(p.relative_to(path))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_mtime_ns, what)
    return out


def processes_with_env(assignment: str) -> list[int]:
    """Live processes whose environment holds `assignment` (NAME=value): every process the job
    started inherits the one the test gave ddplint."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if assignment.encode() in environ:
                found.append(int(entry))
    return found


def make_project(base: Path) -> tuple[Path, Path, Path]:
    project, home, out = base / "project", base / "home", base / "out"
    for d in (project / "outputs" / "sub", project / "emptydir", home, out):
        d.mkdir(parents=True)
    files = {
        "outputs/a.txt": "a",
        "outputs/sub/b.txt": "b",
        "data.txt": "data",
        "mode.txt": "mode",
        "times.txt": "times",
        "keep.txt": "keep",
        "copied_onto.txt": "other",
        "renamed_from.txt": "r",
    }
    for name, text in files.items():
        (project / name).write_text(text)
    (project / "copied_onto.txt").chmod(0o600)
    (project / "stats.npy").write_bytes(b"the user's own array")
    shutil.copy(FIXTURES / "writes_everywhere.py", project)
    return project, home, out


@pytest.fixture(params=["under-temp", "outside-temp"])
def base(request, tmp_path):
    if request.param == "under-temp":
        yield tmp_path
        return
    # a directory outside the temp directory: the checkout's git-ignored build/, or, for a
    # checkout that itself lives under the temp directory (CI clones), one under $HOME
    temp = os.path.realpath(tempfile.gettempdir())
    candidates = [ROOT / "build", Path.home() / ".cache" / "ddplint-tests"]
    parent = next((c for c in candidates if not os.path.realpath(c).startswith(temp + os.sep)), None)
    if parent is None:
        pytest.skip("no writable directory outside the temp directory")
    parent.mkdir(parents=True, exist_ok=True)
    outside = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=parent))
    try:
        yield outside
    finally:
        shutil.rmtree(outside)


def test_every_write_is_contained_listed_and_no_process_survives(base):
    project, home, out = make_project(base)
    marker = f"{uuid.uuid4().int % 10**6}.25"  # `sleep <marker>`: the processes left running
    before = {d: snapshot(d) for d in (project, home, out)}
    report_path = base / "report.json"
    e = env()
    e["HOME"] = str(home)
    e["DDPLINT_TEST_JOB"] = marker  # inherited by every process of the job
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            "--format",
            "json",
            "--output",
            str(report_path),
            "writes_everywhere.py",
            "--out",
            str(out),
            "--marker",
            marker,
        ],
        cwd=project,
        env=e,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert {d: snapshot(d) for d in (project, home, out)} == before, "a file of the user's changed"
    assert processes_naming(f"sleep {marker}") == []
    assert processes_with_env(f"DDPLINT_TEST_JOB={marker}") == []
    assert processes_naming(str(project)) == []
    report = json.loads(report_path.read_text())
    jsonschema.validate(report, report_schema())
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["io.sandbox"]["status"] == "PASS", checks["io.sandbox"]
    assert checks["run.failure"]["status"] == "PASS"
    assert [r["status"] for r in report["ranks"]] == ["completed", "completed"]

    writes = {}
    for w in report["writes"]:
        path = Path(w["path"])
        for root, name in ((project, ""), (home, "~"), (out, "OUT")):
            if path.is_relative_to(root):
                writes[str(Path(name) / path.relative_to(root))] = w
    changes = {k: (w["change"], w["type"], w["seen_by_probe"]) for k, w in writes.items()}
    assert changes == {
        "outputs": ("deleted", "dir", False),
        "emptydir": ("deleted", "dir", False),
        "data.txt": ("modified", "file", False),
        "from_system.txt": ("created", "file", False),
        "from_subprocess.txt": ("created", "file", False),
        "fileio.bin": ("created", "file", False),
        "mode.txt": ("modified", "file", False),
        "times.txt": ("modified", "file", False),
        "symlink": ("created", "symlink", False),
        "hardlink": ("created", "file", False),
        "fifo": ("created", "fifo", False),
        "db.sqlite": ("created", "file", False),
        "copied_onto.txt": ("modified", "file", True),
        "stats.npy": ("modified", "file", True),
        "renamed_from.txt": ("deleted", "file", False),
        "renamed_to.txt": ("created", "file", True),
        "checkpoint.pt": ("created", "file", True),
        "spawned.txt": ("created", "file", True),  # its worker ran the probe
        "~/home_file.txt": ("created", "file", True),
        "OUT/result.txt": ("created", "file", True),
    }, proc.stderr
    assert writes["mode.txt"]["detail"] == ["mode"]
    assert writes["times.txt"]["detail"] == ["times"]
    assert "content" in writes["data.txt"]["detail"] and "mode" in writes["copied_onto.txt"]["detail"]
    assert writes["checkpoint.pt"]["ranks"] == [0]
    source = (project / "writes_everywhere.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if 'open("checkpoint.pt"' in text)
    assert writes["checkpoint.pt"]["sites"] == [f"{project / 'writes_everywhere.py'}:{line}"]
    assert any(
        line.endswith("from_system.txt: written outside Python's file calls, rank unknown")
        for line in checks["io.sandbox"]["evidence"]
    )

    leftover = checks["run.leftover"]
    assert leftover["status"] == "FAIL" and proc.returncode == 1
    commands = [p["command"] for p in leftover["data"]["processes"]]
    assert commands.count(f"sleep {marker}") == 2, commands  # the daemon and the new session
    assert any("multiprocessing.spawn" in c for c in commands), commands  # the mp.spawn worker


def _watch(proc: subprocess.Popen, wanted: str, lines: list[str]) -> bool:
    """Read ddplint's stderr until a line contains `wanted` (True) or it ends (False)."""
    for line in proc.stderr:
        lines.append(line)
        if wanted in line:
            return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
# "(epoch 0)": while the ranks run their steps (the progress line names the first step it sees)
@pytest.mark.parametrize("moment", ["launching torchrun", "2/2 ranks reporting", "(epoch 0)"])
def test_signal_at_any_moment_leaves_no_process_and_no_scratch(tmp_path, sig, moment):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = tmp_path / "deadlock.py"
    shutil.copy(FIXTURES / "deadlock.py", script)
    e = env()
    e["TMPDIR"] = str(scratch)  # where ddplint keeps its run directory and layers
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddplint", "--runtime", "--timeout", "300", str(script)],
        cwd=tmp_path,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    guard = threading.Timer(WAIT_S, proc.kill)
    guard.start()
    lines: list[str] = []
    try:
        assert _watch(proc, moment, lines), "".join(lines)
        proc.send_signal(sig)
        rest_out, rest_err = proc.communicate(timeout=WAIT_S)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(lines) + rest_err
    assert proc.returncode == 2, err
    assert f"interrupted ({signal.Signals(sig).name}); every process of the job was stopped" in err
    assert "Traceback" not in err and rest_out == ""
    assert processes_naming(str(script)) == []
    assert os.listdir(scratch) == []


def test_no_sandbox_says_what_is_not_contained(tmp_path):
    script = tmp_path / "correct.py"
    shutil.copy(FIXTURES / "correct.py", script)
    before = snapshot(tmp_path)
    out = tmp_path.parent / f"{tmp_path.name}-report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint", "--runtime", "--no-sandbox", "--format", "json", "--output", str(out), "correct.py"],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "not sandboxed (see io.sandbox)" in proc.stderr
    assert snapshot(tmp_path) == before  # Python's own file calls are still redirected
    report = json.loads(out.read_text())
    jsonschema.validate(report, report_schema())
    checks = {c["check"]: c for c in report["checks"]}
    sandbox = checks["io.sandbox"]
    assert sandbox["status"] == "WARN" and sandbox["summary"].startswith("not contained: turned off with --no-sandbox")
    assert any("subprocesses" in line for line in sandbox["evidence"])
    assert checks["run.leftover"]["status"] == "SKIP"
    assert checks["io.single_writer"]["summary"].endswith("(Python's file calls redirected)")
    assert [(w["path"], w["change"], w["ranks"]) for w in report["writes"]] == [(str(script.parent / "checkpoint.pt"), None, [0])]


@pytest.mark.skipif(
    os.getuid() != 0 or shutil.which("setpriv") is None, reason="becoming an unprivileged user needs root and setpriv"
)
def test_the_sandbox_needs_no_privilege():
    """The keeper and its init as `nobody`: namespaces, overlays, whiteouts and the process
    sweep work without any privilege (the sandbox module needs only the standard library). In
    the user namespace the host's mounts are locked, so / cannot be a lower layer: the tree is
    rebuilt, and a write to a directory nothing named (`other`) is contained all the same."""
    from ddplint.runtime.sandbox import ChangeKind, Outcome, layer_changes

    base = Path(tempfile.mkdtemp(prefix="ddplint-unprivileged-"))
    try:
        project, rundir, other = base / "project", base / "run", base / "other"
        import pwd

        nobody = pwd.getpwnam("nobody")
        for d in (base, project, rundir, other):
            d.mkdir(exist_ok=True)
            os.chown(d, nobody.pw_uid, nobody.pw_gid)  # (a user's own directories)
        shared = base / "shared"  # root's, writable by all: its copy-up needs root's uid mapped
        shared.mkdir(mode=0o777)
        shared.chmod(0o777)
        for name in ("old.txt", "gone.txt"):  # the user's own files
            (project / name).write_text(name)
            os.chown(project / name, nobody.pw_uid, nobody.pw_gid)
        shutil.copy(ROOT / "ddplint" / "runtime" / "sandbox.py", base / "sandbox.py")
        marker = f"{uuid.uuid4().int % 10**6}.75"
        spec = base / "spec.json"
        spec.write_text(
            json.dumps(
                {
                    "roots": [str(project)],
                    "rundir": str(rundir),
                    "cwd": str(project),
                    "grace_s": 1,
                    "command": [
                        "sh",
                        "-c",
                        "echo new > new.txt; echo changed > old.txt; rm gone.txt; echo o > ../other/o.txt; "
                        "echo s 2> ../run/shared.err > ../shared/s.txt; mkdir /new-top; echo t > /new-top/t.txt; "
                        f"setsid sleep {marker} &",
                    ],
                }
            )
        )
        before = snapshot(project)
        proc = subprocess.run(
            [
                "setpriv",
                "--reuid",
                "nobody",
                "--regid",
                "nogroup",
                "--clear-groups",
                os.path.realpath(sys.executable),
                str(base / "sandbox.py"),
                str(spec),
            ],
            cwd=base,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert snapshot(project) == before
        assert processes_naming(f"sleep {marker}") == []
        outcome = Outcome.read(rundir)
        assert outcome is not None and [x.command for x in outcome.leftovers] == [f"sleep {marker}"]
        changes = {(Path(c.path).name, c.kind) for c in layer_changes(rundir / "layers", "/nowhere")}
        assert changes == {
            ("new.txt", ChangeKind.CREATED),
            ("old.txt", ChangeKind.MODIFIED),
            ("gone.txt", ChangeKind.DELETED),
            ("o.txt", ChangeKind.CREATED),
        }
        assert list(other.iterdir()) == [] and list(shared.iterdir()) == []
        refused = (rundir / "shared.err").read_text()
        assert "Value too large for defined data type" in refused  # the known limit: named, not leaked
        assert cause_of(refused).fix.startswith("name the output directory among the script's arguments")
        assert "/" in outcome.in_memory and outcome.uncontained == []
        assert not Path("/new-top").exists()  # made directly in /, rebuilt in memory: listed all the same
        assert [(c.path, c.kind, c.type) for c in outcome.memory_changes] == [
            ("/new-top", ChangeKind.CREATED, "dir"),
            ("/new-top/t.txt", ChangeKind.CREATED, "file"),
        ]
    finally:
        from ddplint.runtime.sandbox import remove_tree

        remove_tree(base)


def test_a_daemonic_worker_ends_with_its_rank(tmp_path):
    """Python's exit terminates daemonic multiprocessing children; the audit must too, or it
    would report as left running what plain torchrun would not leave."""
    shutil.copy(FIXTURES / "daemonic_worker.py", tmp_path)
    out = tmp_path.parent / f"{tmp_path.name}-report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            "--format",
            "json",
            "--output",
            str(out),
            "--allow-no-data",
            "daemonic_worker.py",
        ],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    checks = {c["check"]: c for c in json.loads(out.read_text())["checks"]}
    assert checks["run.leftover"]["status"] == "PASS", checks["run.leftover"]


@pytest.mark.skipif(
    os.getuid() != 0 or shutil.which("unshare") is None, reason="mounting a file system of its own needs root and unshare"
)
def test_a_mount_below_the_project_stays_visible_and_contained(tmp_path):
    """An overlay does not cross mount points: a data directory mounted inside the project must
    be put back, under a copy-on-write layer of its own."""
    project, report, listing = tmp_path / "project", tmp_path / "report.json", tmp_path / "listing"
    (project / "data").mkdir(parents=True)
    shutil.copy(FIXTURES / "reads_mounted_data.py", project)
    shell = (
        f"mount -t tmpfs none data && echo hello > data/in.txt && {sys.executable} -m ddplint --runtime "
        f"--format json --output {report} --allow-no-data reads_mounted_data.py; rc=$?; ls data > {listing}; exit $rc"
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", shell],
        cwd=project,
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert listing.read_text() == "in.txt\n"  # the mounted file system is untouched
    checks = {c["check"]: c for c in json.loads(report.read_text())["checks"]}
    assert checks["run.failure"]["status"] == "PASS"  # the script read data/in.txt
    assert checks["io.sandbox"]["status"] == "PASS"
    writes = json.loads(report.read_text())["writes"]
    assert [(w["path"], w["change"], w["ranks"]) for w in writes] == [(str(project / "data" / "out.txt"), "created", [0])]


def _outside_temp(name: str) -> Path:
    """A new directory outside the temp directory and $HOME (see the `base` fixture)."""
    temp = os.path.realpath(tempfile.gettempdir())
    candidates = [ROOT / "build", Path.home() / ".cache" / "ddplint-tests"]
    parent = next((c for c in candidates if not os.path.realpath(c).startswith(temp + os.sep)), None)
    if parent is None:
        pytest.skip("no writable directory outside the temp directory")
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=parent))


def test_shared_memory_var_tmp_xdg_symlinked_and_relative_outputs_are_contained(tmp_path):
    work, disk, xdg = _outside_temp("work"), _outside_temp("disk"), _outside_temp("xdg")
    try:
        project, runs = work / "project", work / "runs"
        project.mkdir()
        runs.mkdir()
        shutil.copy(FIXTURES / "writes_to_scratch.py", project)
        (project / "scratch_link").symlink_to(disk, target_is_directory=True)
        marker = uuid.uuid4().hex[:12]
        e = env()
        e["HOME"] = str(tmp_path)
        e["XDG_CACHE_HOME"] = str(xdg)
        report_path = tmp_path / "report.json"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ddplint",
                "--runtime",
                "--allow-no-data",
                "--format",
                "json",
                "--output",
                str(report_path),
                "writes_to_scratch.py",
                "--out",
                "../runs",
                "--marker",
                marker,
            ],
            cwd=project,
            env=e,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )
        report = json.loads(report_path.read_text())
        checks = {c["check"]: c for c in report["checks"]}
        assert checks["run.failure"]["status"] == "PASS", checks["run.failure"]
        for leaked in (
            Path(f"/dev/shm/ddplint-test-{marker}"),
            Path(f"/var/tmp/ddplint-test-{marker}"),
            xdg / "cache.bin",
            disk / "ckpt.pt",
            runs / "result.txt",
        ):
            assert not leaked.exists(), f"{leaked} reached the disk"
        sandbox = checks["io.sandbox"]
        assert sandbox["status"] == "PASS", sandbox
        written = {w["path"] for w in report["writes"]}
        for path in (str(xdg / "cache.bin"), str(disk / "ckpt.pt"), str(runs / "result.txt")):
            assert path in written, (path, written)
        assert proc.returncode == 0, proc.stderr
    finally:
        for d in (work, disk, xdg):
            shutil.rmtree(d, ignore_errors=True)


def test_a_directory_from_before_the_run_can_be_renamed(tmp_path):
    """The overlay refuses to rename a directory of the layer below (EXDEV); the rank's rename
    still works, and the user's directory is untouched."""
    (tmp_path / "runs" / "latest").mkdir(parents=True)
    (tmp_path / "runs" / "latest" / "old.txt").write_text("old run\\n")
    shutil.copy(FIXTURES / "renames_directory.py", tmp_path)
    before = snapshot(tmp_path / "runs")
    out = tmp_path.parent / f"{tmp_path.name}-report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            "--allow-no-data",
            "--format",
            "json",
            "--output",
            str(out),
            "renames_directory.py",
        ],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    failure = next(c for c in report["checks"] if c["check"] == "run.failure")
    assert failure["status"] == "PASS", failure
    assert snapshot(tmp_path / "runs") == before
    written = {Path(w["path"]).relative_to(tmp_path).as_posix() for w in report["writes"]}
    assert {"runs/previous/old.txt", "runs/latest/log.txt"} <= written, written


def test_a_write_anywhere_works_is_listed_and_never_reaches_the_disk(tmp_path):
    """The whole file system is under the copy-on-write layer: a write to a directory nothing
    names (outside the project, the temp directory and $HOME), or to a new top-level directory,
    succeeds for the job, is listed, and leaves the disk as it was."""
    home = Path(os.path.realpath(Path.home()))
    parent = home / ".cache" / "ddplint-tests"
    if any(parent == p or p in parent.parents for p in (ROOT, Path(os.path.realpath(tempfile.gettempdir())), tmp_path)):
        pytest.skip("no directory outside the project, the temp directory and the test's $HOME")
    parent.mkdir(parents=True, exist_ok=True)
    elsewhere = Path(tempfile.mkdtemp(prefix="elsewhere-", dir=parent))
    top = Path(f"/ddplint-test-{uuid.uuid4().hex[:12]}")
    try:
        e = env()
        e["HOME"] = str(tmp_path)
        e["ELSEWHERE"] = str(elsewhere)
        if os.access("/", os.W_OK):  # (only root could make one for real)
            e["TOPDIR"] = str(top)
        project = tmp_path / "project"
        project.mkdir()
        shutil.copy(FIXTURES / "writes_elsewhere.py", project)
        report_path = tmp_path / "report.json"
        proc = subprocess.run(
            [sys.executable, "-m", "ddplint", "--runtime", "--allow-no-data", "--format", "json"]
            + ["--output", str(report_path), "writes_elsewhere.py"],
            cwd=project,
            env=e,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )
        assert list(elsewhere.iterdir()) == [], "the write reached the disk"
        assert not top.exists(), "the new top-level directory reached the disk"
        report = json.loads(report_path.read_text())
        checks = {c["check"]: c for c in report["checks"]}
        assert checks["run.failure"]["status"] == "PASS", checks["run.failure"]
        sandbox = checks["io.sandbox"]
        assert sandbox["status"] == "PASS" and "none reached your disk" in sandbox["summary"], sandbox
        assert sandbox["data"]["covered"][0] == "/" and sandbox["data"]["not_contained"] == []
        written = {w["path"]: w for w in report["writes"]}
        assert written[str(elsewhere / "out.txt")]["ranks"] == [0]
        if "TOPDIR" in e:
            assert written[str(top / "out.txt")]["change"] == "created"
        assert proc.returncode == 0, proc.stderr
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


REFUSED_MOUNT = """
set -e
mount -t overlay overlay -o lowerdir={d}/low,upperdir={d}/u1,workdir={d}/w1 {d}/m1
mount -t overlay overlay -o lowerdir={d}/m1,upperdir={d}/u2,workdir={d}/w2 {d}/m2 || exit 77
cd {d}/m2
exec {python} -m ddplint --runtime --format json --output {d}/report.json correct.py
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_a_directory_the_kernel_will_not_overlay_is_read_only_and_its_failed_write_is_the_audits(tmp_path):
    """The script's directory is an overlay already two deep (built in a user namespace of the
    test's own), and the kernel refuses a third: the sandbox makes it read-only, so the script's
    checkpoint write fails. The report says so (io.sandbox WARN naming the directory, run.failure
    WARN naming the audit, not a FAIL of the script), and nothing reached the directory."""
    for name in ("low", "u1", "w1", "m1", "u2", "w2", "m2"):
        (tmp_path / name).mkdir()
    shutil.copy(FIXTURES / "correct.py", tmp_path / "low")
    script = tmp_path / "run.sh"
    script.write_text(REFUSED_MOUNT.format(d=tmp_path, python=sys.executable))
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "bash", str(script)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    if proc.returncode == 77 or "mount" in proc.stderr and not (tmp_path / "report.json").exists():
        pytest.skip(f"this kernel does not stack overlays in a user namespace: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    checks = {c["check"]: c for c in json.loads((tmp_path / "report.json").read_text())["checks"]}
    sandbox, failure = checks["io.sandbox"], checks["run.failure"]
    assert sandbox["status"] == "WARN" and sandbox["data"]["read_only"] == [str(tmp_path / "m2")], sandbox
    assert "read-only to the job, so a write there fails" in sandbox["summary"]
    assert failure["status"] == "WARN", failure
    assert "Read-only file system at correct.py:" in failure["summary"]
    assert f"the audit made {tmp_path / 'm2'} read-only" in failure["summary"]
    assert sorted(os.listdir(tmp_path / "low")) == ["correct.py"] and os.listdir(tmp_path / "u2") == []
