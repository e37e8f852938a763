"""Host checks replayed on recorded inventories of real machine shapes (fixtures/nvml/)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ddplint.runtime.checks.env import launch_env_check, nccl_ifname_matches
from ddplint.runtime.checks.gpu import inventory_check, visible_gpus
from ddplint.runtime.checks.host import run_host_checks
from ddplint.runtime.checks.stack import cuda_compat
from ddplint.runtime.checks.topology import expected_busbw, topology_check
from ddplint.runtime.nodes import rendezvous_address
from ddplint.runtime.nvml import ReplayReads, load_machine, record
from ddplint.runtime.options import RuntimeOptions
from ddplint.runtime.verdict import Status

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
CU124 = ("2.4.1+cu124", "12.4")


def inventory(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def machine(name: str, edit=None):
    inv = inventory(name)
    if edit:
        edit(inv)
    return load_machine(ReplayReads(inv))


def test_every_fixture_replays_and_records_back_unchanged():
    for path in sorted(FIXTURES.glob("*.json")):
        inv = json.loads(path.read_text())
        recorded = record(ReplayReads(inv))
        assert recorded == {k: v for k, v in inv.items() if not k.startswith("_")}, path.name
        assert inv["_machine"], path.name


def test_fixture_values_use_nvml_units_and_names():
    h100 = inventory("h100_sxm_8x_nvswitch")
    assert h100["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert h100["devices"][0]["memory"]["total"] == 85520809984
    assert h100["cuda_driver_version"] == 12040
    for d in h100["devices"]:
        m = d["memory"]
        assert m["total"] == m["free"] + m["used"]
        assert d["uuid"].startswith("GPU-") and len(d["uuid"]) == 40


def test_h100_node_passes_with_full_nvlink_matrix():
    m = machine("h100_sxm_8x_nvswitch")
    inv = inventory_check(m, 8, {}, CU124)
    assert inv.status is Status.PASS
    assert inv.summary == "8 x NVIDIA H100 80GB HBM3 (80 GB) free for 8 processes"
    assert any("81559 MiB total" in line for line in inv.evidence)
    topo = topology_check(m, list(range(8)))
    assert topo.status is Status.PASS
    assert topo.data["matrix"][0] == ["X"] + ["NV18"] * 7
    assert topo.evidence[1].split()[:3] == ["GPU0", "X", "NV18"]
    assert "0-55,112-167" in topo.evidence[1] and "56-111,168-223" in topo.evidence[8]
    assert topo.data["expected_busbw_gbps"] == 450.0


def test_too_few_gpus_fails_and_names_the_count():
    m = machine("h100_sxm_8x_nvswitch")
    r = inventory_check(m, 8, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, CU124)
    assert r.status is Status.FAIL
    assert r.summary.startswith("4 GPUs visible (CUDA_VISIBLE_DEVICES=0,1,2,3), --nproc-per-node asks for 8")
    assert r.fix == "use --nproc-per-node 4 or make 8 GPUs visible"


@pytest.mark.parametrize(
    "value,expected",
    [
        ("3,1", [3, 1]),
        ("GPU-17b05e3c,GPU-5a3b7c92-6f1e-9d4c-a036-7e8d1f2a4b78", [3, 7]),
        ("0,9,1", [0]),  # CUDA stops at the first entry that names no GPU
        ("1,1,2", [1]),  # and at a repeated one
        ("GPU-ffff", []),
        ("", []),
    ],
)
def test_cuda_visible_devices_by_index_and_uuid(value, expected):
    m = machine("h100_sxm_8x_nvswitch")
    assert visible_gpus(m, value).indices == expected


def test_no_visible_gpu_skips_to_cpu_unless_nccl_asked():
    m = machine("h100_sxm_8x_nvswitch")
    assert inventory_check(m, 2, {"CUDA_VISIBLE_DEVICES": ""}, CU124).status is Status.SKIP
    assert inventory_check(m, 2, {"CUDA_VISIBLE_DEVICES": ""}, CU124, backend="nccl").status is Status.FAIL


def test_mixed_a100_40_and_80_warns_that_the_smallest_sets_the_limit():
    m = machine("a100_pcie_mixed_40gb_80gb")
    r = inventory_check(m, 4, {}, ("2.1.2+cu121", "12.0"))
    assert r.status is Status.WARN
    assert "the batch must fit the 40 GB card: the smallest sets the limit" in r.summary
    assert "CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA numbers them fastest first" in r.summary
    # the same machine with only the two 80 GB cards is uniform, once CUDA numbers by PCI bus
    pci_order = {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    only80 = inventory_check(m, 2, pci_order, ("2.1.2+cu121", "12.0"))
    assert only80.status is Status.PASS
    # without it, "2,3" may name other GPUs than nvidia-smi's 2 and 3
    fastest_first = inventory_check(m, 2, {"CUDA_VISIBLE_DEVICES": "2,3"}, ("2.1.2+cu121", "12.0"))
    assert fastest_first.status is Status.WARN
    assert fastest_first.fix == "export CUDA_DEVICE_ORDER=PCI_BUS_ID in the launch environment"


def test_foreign_processes_warn_or_fail_by_how_much_they_hold():
    m = machine("a100_sxm_4x_foreign_processes")
    both = inventory_check(m, 4, {}, ("2.3.1+cu121", "12.1"))
    assert both.status is Status.FAIL
    assert "GPU2 is already in use: pid 51877 python 75016 MiB" in both.summary
    assert "pid 48213 /opt/conda/bin/python3.10 31744 MiB" in both.summary
    warn_only = inventory_check(m, 2, {"CUDA_VISIBLE_DEVICES": "0,1"}, ("2.3.1+cu121", "12.1"))
    assert warn_only.status is Status.WARN
    free = inventory_check(m, 2, {"CUDA_VISIBLE_DEVICES": "0,3"}, ("2.3.1+cu121", "12.1"))
    assert free.status is Status.PASS


def test_desktop_xorg_framebuffer_is_evidence_not_a_warning():
    m = machine("rtx4090_2x_pcie_cross_socket")
    r = inventory_check(m, 2, {}, ("2.3.1+cu121", "12.1"))
    assert r.status is Status.PASS
    assert any("pid 2107 /usr/lib/xorg/Xorg 258 MiB (graphics)" in e for e in r.evidence)


def test_driver_too_old_for_cuda_12_4_fails_with_both_numbers():
    m = machine("v100_sxm2_4x_driver_470")
    r = inventory_check(m, 4, {}, CU124)
    assert r.status is Status.FAIL
    assert ("driver 470.256.02 supports CUDA 11.4; torch was built for CUDA 12.4: torch cannot use the GPUs") in r.summary
    assert r.fix == "upgrade the NVIDIA driver to 550.54.14 or newer, or install a torch build for CUDA 11.x"
    assert "GPU3 reports 2 uncorrected ECC errors" in r.summary


def test_cuda_minor_version_compatibility_is_a_warning():
    status, line, fix = cuda_compat("535.129.03", 12020, "12.4")
    assert status is Status.WARN and "minor-version compatibility" in line
    assert cuda_compat("550.54.15", 12040, "12.1")[0] is Status.PASS
    assert cuda_compat("560.35.03", 12060, "11.8")[0] is Status.PASS


def test_cpu_only_torch_on_a_gpu_host_warns():
    m = machine("rtx4090_2x_pcie_cross_socket")
    r = inventory_check(m, 2, {}, ("2.13.0+cpu", None))
    assert r.status is Status.WARN and "CPU-only build" in r.summary


def test_mig_enabled_fails_and_pending_change_warns():
    m = machine("a100_sxm_2x_mig")
    r = inventory_check(m, 2, {}, CU124)
    assert r.status is Status.FAIL
    assert "GPU0 is in MIG mode" in r.summary
    assert "GPU1 has a MIG mode change pending" in r.summary
    assert r.fix == "disable MIG (sudo nvidia-smi -i 0 -mig 0) before a multi-process job"
    assert inventory_check(m, 1, {"CUDA_VISIBLE_DEVICES": "1"}, CU124).status is Status.WARN


def test_cross_socket_pcie_pair_warns_sys():
    m = machine("rtx4090_2x_pcie_cross_socket")
    r = topology_check(m, [0, 1])
    assert r.status is Status.WARN
    assert r.data["matrix"] == [["X", "SYS"], ["SYS", "X"]]
    assert "GPU0-GPU1 connect through SYS" in r.summary
    assert r.data["basis"] == "PCIe gen4 x16"
    assert round(r.data["expected_busbw_gbps"], 1) == 31.5


def test_h100_pair_across_sockets_suggests_one_socket_only_without_nvlink():
    def drop_nvlink(inv):
        for d in inv["devices"]:
            d["nvlinks"] = []

    m = machine("h100_sxm_8x_nvswitch", drop_nvlink)
    r = topology_check(m, [0, 4])
    assert r.status is Status.WARN
    assert r.fix.startswith("keep the job on one socket (CUDA_VISIBLE_DEVICES=0,1, NUMA node 0)")
    assert topology_check(machine("h100_sxm_8x_nvswitch"), [0, 4]).status is Status.PASS


def test_degraded_nvlink_warns():
    def one_link_down(inv):
        inv["devices"][3]["nvlinks"][5]["state"] = 0

    m = machine("h100_sxm_8x_nvswitch", one_link_down)
    r = topology_check(m, list(range(8)))
    assert r.status is Status.WARN
    assert "GPU3 has 17 active NVLinks where its peers have 18" in r.summary
    assert any(e.startswith("GPU3: 17/18 NVLinks active") and "inactive: [5]" in e for e in r.evidence)


def test_direct_nvlink_meshes_count_links_per_pair():
    v100 = machine("v100_sxm2_4x_driver_470")
    assert topology_check(v100, [0, 1, 2, 3]).data["matrix"][0] == ["X", "NV1", "NV1", "NV2"]
    a100 = machine("a100_pcie_mixed_40gb_80gb")
    assert [a100.link(0, j) for j in range(4)] == ["X", "NV12", "NODE", "NODE"]
    # bridged pairs only: the whole set is limited by PCIe, a bridged pair by NVLink 3
    assert expected_busbw(a100, [0, 1, 2, 3])[1] == "PCIe gen4 x16"
    assert expected_busbw(a100, [0, 1])[0] == 300.0


def test_single_gpu_topology_skips():
    assert topology_check(machine("h100_sxm_8x_nvswitch"), [0]).status is Status.SKIP


def test_launch_env_flags_settings_that_break_or_slow():
    names = ["lo", "eth0", "ib0"]
    bad = launch_env_check(
        {
            "NCCL_P2P_DISABLE": "1",
            "NCCL_IB_DISABLE": "1",
            "CUDA_LAUNCH_BLOCKING": "1",
            "NCCL_SOCKET_IFNAME": "enp",
            "OMP_NUM_THREADS": "16",
        },
        nproc=8,
        nnodes=2,
        ifnames=names,
        cpus=64,
    )
    assert bad.status is Status.FAIL
    assert bad.summary.startswith("NCCL_SOCKET_IFNAME=enp selects no interface of this host (it has lo, eth0, ib0)")
    for text in (
        "NCCL_P2P_DISABLE=1",
        "NCCL_IB_DISABLE=1 on a multi-node job",
        "CUDA_LAUNCH_BLOCKING=1",
        "OMP_NUM_THREADS=16 x 8 processes = 128 threads",
    ):
        assert text in bad.summary
    single = launch_env_check({"NCCL_IB_DISABLE": "1"}, 2, 1, names, 8)
    assert single.status is Status.PASS and any("no effect on a single node" in e for e in single.evidence)
    clean = launch_env_check({"NCCL_SOCKET_IFNAME": "eth", "NCCL_DEBUG": "INFO"}, 2, 1, names, 8)
    assert clean.status is Status.PASS
    unset = launch_env_check({}, 2, 1, names, 8)
    assert any("NCCL_DEBUG is unset" in e for e in unset.evidence)


@pytest.mark.parametrize(
    "spec,picked",
    [
        ("eth", ["eth0"]),
        ("=eth", []),
        ("=eth0", ["eth0"]),
        ("^lo,docker", ["eth0", "ib0"]),
        ("ib,eth", ["eth0", "ib0"]),
        ("^=eth0", ["lo", "ib0"]),
    ],
)
def test_nccl_socket_ifname_syntax(spec, picked):
    assert nccl_ifname_matches(spec, ["lo", "eth0", "ib0"]) == picked


def test_gloo_ifname_names_exact_interfaces():
    r = launch_env_check({"GLOO_SOCKET_IFNAME": "eth"}, 2, 1, ["lo", "eth0"], 8)
    assert r.status is Status.FAIL and "GLOO_SOCKET_IFNAME names eth" in r.summary


def test_rendezvous_port_prefers_the_c10d_endpoint():
    base = RuntimeOptions(script=Path("t.py"), master_addr="10.0.0.1")
    assert rendezvous_address(base, 29500) == ("10.0.0.1", 29500)
    c10d = RuntimeOptions(script=Path("t.py"), rdzv_backend="c10d", rdzv_endpoint="node0:29400")
    assert rendezvous_address(c10d, 29500) == ("node0", 29400)


def test_run_host_checks_on_a_replayed_machine_returns_every_check():
    opts = RuntimeOptions(script=Path("t.py"))
    reads = ReplayReads(copy.deepcopy(inventory("rtx4090_2x_pcie_cross_socket")))
    results = run_host_checks(opts, 2, 0, nvml=reads, environ={})
    assert [r.check for r in results] == [
        "gpu.inventory",
        "gpu.topology",
        "gpu.health",
        "stack.nvml",
        "env.port",
        "env.stale",
        "env.launch",
        "net.interconnect",
    ]
    assert results[1].status is Status.WARN
    for r in results:
        json.dumps(r.to_json())


def _render(results) -> str:
    from ddplint.runtime import report

    launch = {"nnodes": 1, "world_size": 2, "backend": "nccl", "epochs": 2, "steps": 8}
    built = report.build(
        results, script="train.py", script_args=(), launch=launch, elapsed_s=0.0, ranks=[], loaders=[], writes=[]
    )
    json.loads(report.to_json(built))
    return report.to_text(built)


def test_text_report_of_a_cross_socket_workstation():
    reads = ReplayReads(inventory("rtx4090_2x_pcie_cross_socket"))
    results = run_host_checks(RuntimeOptions(script=Path("t.py")), 2, 0, nvml=reads, environ={"NCCL_P2P_DISABLE": "1"})
    text = _render(results).splitlines()
    topo = next(i for i, line in enumerate(text) if line.startswith("WARN  gpu.topology"))
    assert text[topo].endswith("GPU0-GPU1 connect through SYS (across CPU sockets): NCCL traffic crosses the inter-socket link")
    pad = text[topo + 2][: text[topo + 2].index("GPU0")]
    assert text[topo + 1 : topo + 4] == [
        pad + "       GPU0   GPU1   CPU Affinity      NUMA Affinity",
        pad + "GPU0   X      SYS    0-15,32-47        0",
        pad + "GPU1   SYS    X      16-31,48-63       1",
    ]
    launch_line = next(line for line in text if line.startswith("WARN  env.launch"))
    assert "NCCL_P2P_DISABLE=1 sends GPU-to-GPU traffic through host memory" in launch_line
    assert any(line.strip() == "fix: unset NCCL_P2P_DISABLE unless a broken P2P path was measured" for line in text)


def test_text_report_of_a_gpu_held_by_a_foreign_process():
    reads = ReplayReads(inventory("a100_sxm_4x_foreign_processes"))
    results = run_host_checks(RuntimeOptions(script=Path("t.py")), 4, 0, nvml=reads, environ={})
    text = _render(results)
    assert "FAIL  gpu.inventory" in text
    assert "GPU2 is already in use: pid 51877 python 75016 MiB (6363 MiB of 81920 MiB free)" in text
    assert "fix: stop the processes holding GPU memory, or pick free GPUs with CUDA_VISIBLE_DEVICES" in text
    topology = next(r for r in results if r.check == "gpu.topology")
    assert "GPU0   X      NV4    NV4    NV4    0-63,128-191      0" in topology.evidence


@pytest.mark.parametrize(
    "argv,named",
    [
        (["torchrun", "--master-port", "29500", "t.py"], True),
        (["torchrun", "--master_port=29500", "t.py"], True),
        (["torchrun", "--rdzv-endpoint", "node0:29500", "t.py"], True),
        (["torchrun", "--rdzv-endpoint", "node0:295000", "t.py"], False),
        (["torchrun", "--master-port", "2950", "t.py"], False),
    ],
)
def test_a_peer_node_is_recognised_by_the_port_it_names(argv, named):
    from ddplint.runtime.checks.stale import _names_port

    assert _names_port(argv, 29500) is named


def test_a_pair_on_a_direct_nvlink_mesh_expects_only_its_own_links():
    a100 = machine("a100_sxm_4x_foreign_processes")  # NV4 between every pair
    assert expected_busbw(a100, [0, 1]) == (100.0, "NVLink 3.0 x4 (25 GB/s per link and direction)")
    assert expected_busbw(a100, [0, 1, 2, 3])[0] == 300.0
    v100 = machine("v100_sxm2_4x_driver_470")  # 6 links each, 2 of them to GPUs 4-7
    assert [len(g.active_links) for g in v100.gpus] == [6, 6, 6, 6]
    assert expected_busbw(v100, [0, 3])[0] == 50.0  # NV2
    assert expected_busbw(v100, [0, 1, 2, 3]) == (100.0, "NVLink 2.0 x4 (25 GB/s per link and direction)")
    # through NVSwitch every link carries the job's traffic, whatever the job's size
    assert expected_busbw(machine("h100_sxm_8x_nvswitch"), [0, 1])[0] == 450.0


def test_nvlink_rate_follows_the_gpu_generation_where_the_version_is_ambiguous():
    def ga102(inv):  # two RTX A6000 with an NVLink bridge: NVLink 3 x4 at about 14 GB/s
        for d, peer in zip(inv["devices"], reversed(inv["devices"]), strict=True):
            d["compute_capability"] = [8, 6]
            d["nvlinks"] = [
                {"link": k, "state": 1, "version": 5, "remote_type": 0, "remote_bus_id": peer["pci_bus_id"]} for k in range(4)
            ]

    m = machine("rtx4090_2x_pcie_cross_socket", ga102)
    assert expected_busbw(m, [0, 1]) == (56.25, "NVLink 3.1 x4 (14.0625 GB/s per link and direction)")
    from ddplint.runtime.nvml import nvlink_rate

    assert nvlink_rate(5, [8, 0]) == ("3.1", 25.0)
    assert nvlink_rate(8, [10, 0]) == ("6.0", 50.0)
    assert nvlink_rate(9, [10, 0]) is None


@pytest.mark.parametrize(
    "value,expected,mig",
    [
        ("MIG-c07e1d95-2a48-5f63-b9e0-3d7a1c5f8e24", [0], True),
        ("MIG-c07e1d95", [0], True),  # a unique prefix, as CUDA accepts
        ("MIG-GPU-5f6e7d8c-9b0a-1c2d-3e4f-50617283a4b5/1/0", [0], True),  # the pre-R470 form
        ("GPU-6a7b", [1], False),
        ("MIG-ffff", [], False),
        ("MIG-c07e1d95,MIG-c07e1d95", [0], True),  # named twice: CUDA stops there
    ],
)
def test_cuda_visible_devices_names_mig_instances(value, expected, mig):
    m = machine("a100_sxm_2x_mig")
    visible = visible_gpus(m, value)
    assert visible.indices == expected
    assert bool(visible.mig) is mig


def test_one_process_on_a_mig_instance_passes_and_is_named():
    m = machine("a100_sxm_2x_mig")
    r = inventory_check(m, 1, {"CUDA_VISIBLE_DEVICES": "MIG-4b2f8a61"}, CU124)
    assert r.status is Status.PASS, r.summary
    assert ("CUDA_VISIBLE_DEVICES names MIG-4b2f8a61-93d7-5c0e-a1f4-6e8d2c7b9a30, a MIG instance of GPU0") in r.evidence


def test_fixture_shapes_follow_what_nvml_answers_there():
    v100 = inventory("v100_sxm2_4x_driver_470")
    for d in v100["devices"]:
        assert d["mig_mode"] is None and d["mig_devices"] == []  # V100: no MIG
        assert len(d["nvlinks"]) == 6 and {link["version"] for link in d["nvlinks"]} == {2}
    for d in inventory("rtx4090_2x_pcie_cross_socket")["devices"]:
        assert d["mig_mode"] is None  # GeForce: no MIG mode
    assert [d["numa_node"] for d in inventory("h100_sxm_8x_nvswitch")["devices"]] == [0] * 4 + [1] * 4
