"""Host checks against the real machine: the real pynvml without a driver, a real stale
`pynvml` install layout, and a real torchrun left running on the master port."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddplint.runtime.checks.host import run_host_checks
from ddplint.runtime.checks.ports import free_port, port_check
from ddplint.runtime.checks.stale import find_stale, stale_check
from ddplint.runtime.nvml import NvmlUnavailable, ReplayReads, load_machine, open_nvml
from ddplint.runtime.options import RuntimeOptions
from ddplint.runtime.verdict import Status

ROOT = Path(__file__).resolve().parent.parent


def _driver_loaded() -> bool:
    try:
        open_nvml().close()
        return True
    except NvmlUnavailable:
        return False


@pytest.mark.skipif(_driver_loaded(), reason="an NVIDIA driver is loaded on this machine")
def test_real_pynvml_without_driver_skips_gpu_checks_and_the_rest_runs():
    with pytest.raises(NvmlUnavailable, match=r"^NVML not available \(no NVIDIA driver loaded\)$"):
        open_nvml()
    results = run_host_checks(RuntimeOptions(script=Path("t.py")), 2, free_port())
    by = {r.check: r for r in results}
    for check in ("gpu.inventory", "gpu.topology", "gpu.health"):
        assert by[check].status is Status.SKIP
        assert by[check].summary == "NVML not available (no NVIDIA driver loaded)"
    assert by["env.port"].status is Status.PASS
    assert by["stack.nvml"].status is Status.PASS
    assert set(by) == {
        "gpu.inventory",
        "gpu.topology",
        "gpu.health",
        "stack.nvml",
        "env.port",
        "env.stale",
        "env.launch",
        "net.interconnect",
    }


def _nvml_check_in(pythonpath: str | None) -> dict:
    code = (
        "import json; from ddplint.runtime.checks.gpu import nvml_module_check; print(json.dumps(nvml_module_check().to_json()))"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_stale_pynvml_distribution_shadowing_nvidia_ml_py_warns(tmp_path):
    # the layout pip leaves for pynvml 11.5.0: a package directory and its dist-info RECORD
    pkg = tmp_path / "pynvml"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .nvml import *\n")
    (pkg / "nvml.py").write_text("")
    info = tmp_path / "pynvml-11.5.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pynvml\nVersion: 11.5.0\n")
    (info / "RECORD").write_text("pynvml/__init__.py,,\npynvml/nvml.py,,\npynvml-11.5.0.dist-info/METADATA,,\n")
    stale = _nvml_check_in(str(tmp_path))
    assert stale["status"] == "WARN"
    assert stale["summary"].startswith("`import pynvml` loads the stale `pynvml` 11.5.0 distribution, not nvidia-ml-py")
    assert stale["fix"] == "pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py"
    good = _nvml_check_in(None)
    assert good["status"] == "PASS" and good["summary"].startswith("pynvml comes from nvidia-ml-py")


@pytest.fixture(scope="module")
def leftover_torchrun(tmp_path_factory):
    """A real torchrun agent (static rendezvous: it hosts the store on the port) and its rank,
    left running as after an interrupted job."""
    script = tmp_path_factory.mktemp("stale") / "sleeper.py"
    script.write_text(
        textwrap.dedent("""
        import time
        time.sleep(120)
    """)
    )
    port = free_port()
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [
        sys.executable,
        str(torchrun),
        "--nnodes",
        "1",
        "--nproc-per-node",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        str(script),
    ]
    # started through a shell that exits at once, so it is no child of this test process
    # (the checks never count their own process tree as stale)
    out = subprocess.run(
        ["sh", "-c", f"setsid {shlex.join(cmd)} >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True
    )
    agent = int(out.stdout)
    rank_pid = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and rank_pid is None:
        time.sleep(0.3)
        rank_pid = next((p.pid for p, role in find_stale() if role == "rank 0" and str(script) in p.command), None)
    try:
        assert rank_pid is not None, "torchrun did not start its rank"
        yield agent, rank_pid, port
    finally:
        os.killpg(agent, signal.SIGKILL)
        if rank_pid is not None:  # torchrun starts each rank in a session of its own
            os.killpg(rank_pid, signal.SIGKILL)


def test_taken_port_names_the_torchrun_holding_it(leftover_torchrun):
    agent, _, port = leftover_torchrun
    r = port_check("127.0.0.1", port)
    assert r.status is Status.FAIL
    assert r.summary == f"port {port} (the rendezvous store) is already taken by pid {agent} (torchrun)"
    assert r.fix.startswith(f"stop it (kill {agent}) or use --master-port ")
    alternative = r.data["free_port"]
    assert alternative != port and port_check("127.0.0.1", alternative).status is Status.PASS
    assert "--master-port" in r.evidence[0]
    # the other node of a multi-node job only connects to that port
    assert port_check("127.0.0.1", port, node_rank=1).status is Status.SKIP
    # node 0 of a multi-node audit also needs the next port, for the other nodes' records
    records = port_check("127.0.0.1", port - 1, 0, record_port=port)
    assert records.status is Status.FAIL
    assert records.summary.startswith(f"port {port} (the other nodes' records) is already taken")
    both_free = port_check("127.0.0.1", alternative, 0, record_port=free_port())
    assert both_free.status is Status.PASS and both_free.summary.startswith("ports ")


def test_leftover_agent_and_rank_are_stale(leftover_torchrun):
    agent, rank, port = leftover_torchrun
    r = stale_check(None, [], free_port())
    assert r.status is Status.WARN
    roles = {p["pid"]: p["role"] for p in r.data["processes"]}
    assert roles[agent] == "torchrun agent" and roles[rank] == "rank 0"
    assert str(agent) in r.fix
    # a second "node" of this job, naming the same port, is not stale
    peer = stale_check(None, [], port, nnodes=2)
    assert agent not in {p["pid"] for p in peer.data["processes"]}
    assert rank not in {p["pid"] for p in peer.data["processes"]}


def test_leftover_rank_holding_gpu_memory_fails(leftover_torchrun):
    _, rank, _ = leftover_torchrun
    inv = json.loads((ROOT / "fixtures/nvml/a100_sxm_4x_foreign_processes.json").read_text())
    inv["devices"][1]["compute_processes"][0]["pid"] = rank
    machine = load_machine(ReplayReads(inv))
    r = stale_check(machine, [0, 1], free_port())
    assert r.status is Status.FAIL
    assert f"pid {rank} (rank 0) holds 31744 MiB on GPU1" in r.summary
    assert stale_check(machine, [2, 3], free_port()).status is Status.WARN


@pytest.mark.skipif(_driver_loaded(), reason="an NVIDIA driver is loaded on this machine")
def test_recording_an_inventory_without_driver_is_a_one_line_error():
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint.runtime.nvml"], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "ddplint: NVML not available (no NVIDIA driver loaded)\n"
