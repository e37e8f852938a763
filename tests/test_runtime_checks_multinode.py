"""Multi-node audits on one machine: two `ddplint --runtime` processes act as two nodes on
127.0.0.1 (static rendezvous with explicit flags; c10d with the layout read from SLURM_*
variables as under `srun`), and each prints the merged report of all ranks."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ddplint.runtime.checks.ports import bind_error, free_port
from ddplint.runtime.nodes import LayoutError, Nodes, RecordExchange, _recv, _send, first_host, resolve_layout
from ddplint.runtime.options import RuntimeOptions

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(data)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in DataLoader(data, batch_size=4, sampler=sampler):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""


# ---- layout -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "nodelist,host",
    [
        ("gpu[07-09,12],login1", "gpu07"),
        ("node1,node2", "node1"),
        ("a-[3-5]", "a-3"),
        ("dgx001", "dgx001"),
    ],
)
def test_first_host_of_a_slurm_node_list(nodelist, host):
    assert first_host(nodelist) == host


SRUN = {
    "SLURM_NNODES": "4",
    "SLURM_NTASKS": "4",
    "SLURM_NODEID": "2",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NODELIST": "gpu[07-10]",
    "SLURM_JOB_ID": "123456",
}


def test_srun_task_reads_its_layout_from_slurm():
    o = resolve_layout(RuntimeOptions(script=Path("t.py")), SRUN)
    assert (o.nnodes, o.node_rank, o.master_addr, o.master_port) == (4, 2, "gpu07", 23456)
    explicit = RuntimeOptions(script=Path("t.py"), nnodes=2, node_rank=1, master_addr="10.0.0.5", master_port=29500)
    assert resolve_layout(explicit, SRUN) == explicit  # flags win
    batch_shell = {k: v for k, v in SRUN.items() if k != "SLURM_STEP_ID"}
    assert resolve_layout(RuntimeOptions(script=Path("t.py")), batch_shell).nnodes == 1


def test_bad_layouts_are_one_line_errors():
    with pytest.raises(LayoutError, match="run one ddplint per node: srun --nodes 4 --ntasks-per-node=1"):
        resolve_layout(RuntimeOptions(script=Path("t.py")), dict(SRUN, SLURM_NTASKS="32"))
    # eight tasks on one node would start eight torchruns, each with every rank
    one_node = dict(SRUN, SLURM_NNODES="1", SLURM_NTASKS="8", SLURM_NODEID="0")
    with pytest.raises(
        LayoutError,
        match=r"^srun started 8 tasks on 1 node; ddplint starts "
        r"torchrun, which starts the ranks, so run one ddplint "
        r"per node: srun --nodes 1 --ntasks-per-node=1 ",
    ):
        resolve_layout(RuntimeOptions(script=Path("t.py")), one_node)
    # one task on one node, and a batch script (no step) with 8 tasks allotted, are fine
    alone = resolve_layout(RuntimeOptions(script=Path("t.py")), dict(one_node, SLURM_NTASKS="1"))
    assert alone.nnodes == 1
    batch = {k: v for k, v in one_node.items() if k != "SLURM_STEP_ID"}
    assert resolve_layout(RuntimeOptions(script=Path("t.py")), batch).nnodes == 1
    with pytest.raises(LayoutError, match="--master-port is required with --nnodes > 1"):
        resolve_layout(RuntimeOptions(script=Path("t.py"), nnodes=2), {})
    with pytest.raises(LayoutError, match=r"--node-rank 2 is outside 0\.\.1"):
        resolve_layout(RuntimeOptions(script=Path("t.py"), nnodes=2, node_rank=2, master_port=29500), {})
    c10d = RuntimeOptions(script=Path("t.py"), nnodes=2, rdzv_backend="c10d", rdzv_endpoint="head:29400")
    assert resolve_layout(c10d, {}) == c10d
    assert Nodes.of(c10d, 0) == Nodes(2, 0, "head", 29401)


# ---- record exchange over real sockets ----------------------------------------------------


def test_exchange_merges_three_nodes_and_returns_the_union_to_each():
    port = free_port()
    opts = RuntimeOptions(script=Path("t.py"), nnodes=3, master_port=port - 1)
    messages: list[str] = []
    node0 = RecordExchange(Nodes.of(opts, port - 1), messages.append)
    node0.open()
    results = {}

    def other(rank):
        ex = RecordExchange(Nodes.of(replace(opts, node_rank=rank), port - 1), messages.append)
        results[rank] = ex.merge({2 * rank: {"rank": 2 * rank, "idx": np.arange(rank + 3)}})

    threads = [threading.Thread(target=other, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    results[0] = node0.merge({0: {"rank": 0}}, wait_s=20)
    for t in threads:
        t.join(20)
    for rank in (0, 1, 2):
        assert sorted(results[rank]) == [0, 2, 4]
        assert list(results[rank][4]["idx"]) == [0, 1, 2, 3, 4]
    assert bind_error(port) is None  # node 0 released the port


def test_exchange_refuses_a_pickle_that_would_run_code():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    evil = pickle.dumps(os.system)
    client.sendall(len(evil).to_bytes(8, "big") + evil)
    with pytest.raises(pickle.UnpicklingError, match="unexpected posix.system"):
        _recv(conn)
    _send(client, {"records": {0: {"rank": 0, "info": {"torch": "2.4.1"}}}})
    assert _recv(conn)["records"][0]["info"]["torch"] == "2.4.1"
    for s in (client, conn, server):
        s.close()


def test_node_0_alone_reports_its_own_records_after_the_wait():
    port = free_port()
    messages: list[str] = []
    ex = RecordExchange(Nodes(2, 0, "127.0.0.1", port), messages.append)
    ex.open()
    assert ex.merge({0: {"rank": 0}}, wait_s=0.5) == {0: {"rank": 0}}
    assert messages == ["only 1 of 2 nodes sent their records within 0.5 s"]


# ---- two real nodes on one machine --------------------------------------------------------


def _launch(args: list[str], cwd: Path, env_extra: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(env_extra or {})
    return subprocess.Popen(
        [sys.executable, "-m", "ddplint", "--runtime", "--format", "json", "--steps", "3", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _reports(procs: list[subprocess.Popen]) -> list[tuple[int, dict, str]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=240)
        assert stdout, stderr
        report = json.loads(stdout)
        out.append((p.returncode, {c["check"]: c for c in report["checks"]}, stderr))
    return out


@pytest.fixture(scope="module")
def two_nodes_different_scripts(tmp_path_factory):
    """Node 0 and node 1 run train.py from different checkouts: node 1's has one more line."""
    base = tmp_path_factory.mktemp("nodes")
    for name, extra in (("node0", ""), ("node1", "print('node 1 edit')\n")):
        (base / name).mkdir()
        (base / name / "train.py").write_text(SCRIPT + extra)
    port = free_port()
    flags = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    node0 = _launch(flags + ["--node-rank", "0", "train.py"], base / "node0")
    time.sleep(1.0)
    node1 = _launch(flags + ["--node-rank", "1", "train.py"], base / "node1")
    return _reports([node0, node1])


def test_node_0_prints_the_merged_report_of_both_nodes(two_nodes_different_scripts):
    (rc0, checks, stderr), _ = two_nodes_different_scripts
    assert "records of node 1 received (2 ranks)" in stderr
    assert checks["env.ranks"]["status"] == "PASS"
    assert checks["env.ranks"]["summary"].startswith("ranks 0-3 of 4")
    assert [e.split(",")[0] for e in checks["env.ranks"]["evidence"]] == [
        f"rank 0: node 0 ({socket.gethostname()})",
        f"rank 1: node 0 ({socket.gethostname()})",
        f"rank 2: node 1 ({socket.gethostname()})",
        f"rank 3: node 1 ({socket.gethostname()})",
    ]
    assert checks["comm.allreduce"]["summary"].startswith("all_reduce of rank+1 = 10 = W(W+1)/2 on ranks 0-3")
    assert checks["run.failure"]["status"] == "PASS"
    assert rc0 == 1  # stack.consistent fails


def test_different_script_contents_fail_stack_consistent(two_nodes_different_scripts):
    for _, checks, _ in two_nodes_different_scripts:
        c = checks["stack.consistent"]
        assert c["status"] == "FAIL"
        assert c["summary"] == "script sha256 differs across 4 ranks on 2 nodes"
        host = socket.gethostname()
        assert f"on ranks 0-1 (node 0 ({host})) |" in c["evidence"][0]
        assert c["evidence"][0].endswith(f"on ranks 2-3 (node 1 ({host}))")


def test_node_1_reports_the_same_ranks(two_nodes_different_scripts):
    _, (rc1, checks, stderr) = two_nodes_different_scripts
    assert "merged the records of all 2 nodes from node 0" in stderr
    assert checks["env.port"]["status"] == "SKIP"
    assert checks["run.failure"]["status"] == "PASS"
    assert rc1 == 1


def _free_slurm_job_id() -> int:
    for job in range(31000, 39000, 37):
        port = 20000 + job % 20000
        if bind_error(port) is None and bind_error(port + 1) is None:
            return job
    pytest.skip("no free port for the SLURM-derived master port")


def test_srun_style_nodes_with_c10d_rendezvous(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    job = _free_slurm_job_id()
    slurm = {
        "SLURM_NNODES": "2",
        "SLURM_NTASKS": "2",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_JOB_ID": str(job),
    }
    procs = []
    for node in (0, 1):
        procs.append(_launch(["--rdzv-backend", "c10d", "train.py"], tmp_path, dict(slurm, SLURM_NODEID=str(node))))
        time.sleep(1.0)
    for rc, checks, stderr in _reports(procs):
        assert f"port {20000 + job % 20000}" in stderr
        assert checks["stack.consistent"]["status"] == "PASS"
        assert checks["stack.consistent"]["summary"].startswith("4 ranks on 2 nodes run the same")
        assert checks["comm.allreduce"]["status"] == "PASS"
        assert rc == 0, checks


def test_cli_layout_errors_are_one_line_and_exit_2(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for args, line in (
        (
            ["--nnodes", "2", "train.py"],
            "ddplint: error: --master-port is required with --nnodes > 1: every node must use the same port",
        ),
        (
            ["--nnodes", "2", "--node-rank", "3", "--master-port", "29500", "train.py"],
            "ddplint: error: --node-rank 3 is outside 0..1",
        ),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "ddplint", "--runtime", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [line]
