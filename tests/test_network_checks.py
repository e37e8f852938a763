"""The network between nodes: InfiniBand/RoCE ports read from a sysfs tree laid out as the
kernel lays it out, NCCL_IB_HCA and NCCL_SOCKET_IFNAME selections, the interfaces' state and
addresses, and the measured bandwidth across nodes against the ports' rate."""

from __future__ import annotations

from pathlib import Path

from ddplint.runtime.checks.comm import bandwidth_check
from ddplint.runtime.checks.env import launch_env_check
from ddplint.runtime.checks.network import (
    IbPort,
    Interface,
    active_rates,
    ib_ports,
    interconnect_check,
    interface,
    nccl_ib_hca_matches,
    unusable,
)
from ddplint.runtime.records import RankRecord
from ddplint.runtime.verdict import Status


def hca(root: Path, device: str, port: int, state: str, rate: str, layer: str = "InfiniBand") -> None:
    where = root / "class" / "infiniband" / device / "ports" / str(port)
    where.mkdir(parents=True)
    (where / "state").write_text(state + "\n")
    (where / "rate").write_text(rate + "\n")
    (where / "link_layer").write_text(layer + "\n")


def cluster_node(tmp_path: Path) -> str:
    """Two 400G NDR ports (one cable pulled) and a 200G RoCE port, as `ibstat` would list them."""
    hca(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)")
    hca(tmp_path, "mlx5_1", 1, "1: DOWN", "400 Gb/sec (4X NDR)")
    hca(tmp_path, "mlx5_2", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet")
    return str(tmp_path)


def test_ports_are_read_as_ibstat_shows_them(tmp_path):
    ports = ib_ports(cluster_node(tmp_path))
    assert [p.describe() for p in ports] == [
        "mlx5_0:1 ACTIVE 400 Gb/s InfiniBand",
        "mlx5_1:1 DOWN 400 Gb/s InfiniBand",
        "mlx5_2:1 ACTIVE 200 Gb/s RoCE",
    ]
    assert ib_ports(str(tmp_path / "none")) == []


def test_nccl_ib_hca_selection_forms():
    ports = [IbPort(f"mlx5_{k}", 1, "ACTIVE", 400.0, "InfiniBand") for k in range(3)] + [
        IbPort("mlx5_10", 1, "ACTIVE", 400.0, "InfiniBand")
    ]
    names = lambda spec: [p.name for p in nccl_ib_hca_matches(spec, ports)]  # noqa: E731
    assert names("mlx5_1") == ["mlx5_1:1", "mlx5_10:1"]  # a prefix, as NCCL reads it
    assert names("=mlx5_1") == ["mlx5_1:1"]
    assert names("^mlx5_0,mlx5_1") == ["mlx5_2:1"]
    assert names("mlx5_2:1,mlx5_0:2") == ["mlx5_2:1"]  # mlx5_0 has no port 2
    assert names("=mlx4_0") == []


def test_interconnect_verdicts(tmp_path):
    sysfs = cluster_node(tmp_path)
    assert interconnect_check({}, 1, sysfs).status is Status.SKIP  # one node: not used
    r = interconnect_check({}, 2, sysfs)
    assert r.status is Status.WARN
    assert r.summary.startswith("mlx5_1:1 DOWN not ACTIVE")
    r = interconnect_check({"NCCL_IB_HCA": "=mlx5_0,mlx5_2"}, 2, sysfs)
    assert r.status is Status.PASS
    assert r.summary == "2 InfiniBand/RoCE ports ACTIVE, 600 Gb/s together"
    r = interconnect_check({"NCCL_IB_HCA": "mlx4"}, 2, sysfs)
    assert r.status is Status.FAIL
    assert r.summary == "NCCL_IB_HCA=mlx4 selects no port of this host (it has mlx5_0:1, mlx5_1:1, mlx5_2:1)"
    r = interconnect_check({"NCCL_IB_HCA": "=mlx5_1"}, 2, sysfs)
    assert r.status is Status.WARN and "NCCL falls back to TCP sockets" in r.summary
    assert interconnect_check({"NCCL_IB_DISABLE": "1"}, 2, sysfs).status is Status.SKIP
    no_ib = interconnect_check({}, 2, str(tmp_path / "none"))
    assert no_ib.status is Status.SKIP and "TCP sockets" in no_ib.summary
    assert active_rates(sysfs, {}) == [400.0, 200.0]
    assert active_rates(sysfs, {"NCCL_IB_HCA": "mlx5_2"}) == [200.0]


def test_the_loopback_interface_is_up_with_its_address():
    lo = interface("lo")
    assert lo.up and "127.0.0.1" in lo.addresses


def test_interfaces_down_or_without_address_cannot_carry_nccl(tmp_path):
    net = tmp_path / "class" / "net" / "ib0"
    net.mkdir(parents=True)
    (net / "operstate").write_text("down\n")
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "if_inet6").write_text("fe800000000000000000000000000001 05 40 20 80      ib0\n")
    down = interface("ib0", str(tmp_path), str(tmp_path))
    assert down == Interface("ib0", False, ("fe80::1",))
    table = {"ib0": down, "eth1": Interface("eth1", True, ()), "eth0": Interface("eth0", True, ("10.0.0.5",))}
    assert unusable(["ib0", "eth1"], table.__getitem__) == ["ib0 is down", "eth1 is up with no address"]
    assert unusable(["ib0", "eth0"], table.__getitem__) == []
    r = launch_env_check({"NCCL_SOCKET_IFNAME": "ib"}, 8, 2, ["lo", "eth0", "ib0"], 64, ifinfo=table.__getitem__)
    assert r.status is Status.FAIL
    assert r.summary == ("NCCL_SOCKET_IFNAME=ib selects only interfaces that cannot carry NCCL's connections (ib0 is down)")
    ok = launch_env_check({"NCCL_SOCKET_IFNAME": "eth0"}, 8, 2, ["lo", "eth0", "ib0"], 64, ifinfo=table.__getitem__)
    assert ok.status is Status.PASS


def _swept(rank: int, group: str, busbw: float, nics: list[float] | None) -> dict:
    rows = [{"bytes": 1 << 28, "seconds": 0.01, "algbw_gbps": busbw, "busbw_gbps": busbw}]
    info = {"hostname": f"n{group}", "env": {"RANK": str(rank), "GROUP_RANK": group, "LOCAL_WORLD_SIZE": "1"}}
    if nics is not None:
        info["nics_gbps"] = nics
    return RankRecord.from_plain(
        {"rank": rank, "info": info, "comm": {"sweep": rows, "world_size": 2, "backend": "nccl", "device": "cuda:0"}}
    )


def test_bandwidth_across_nodes_is_compared_with_the_ports():
    slow = bandwidth_check([_swept(0, "0", 4.0, [400.0]), _swept(1, "1", 4.0, [400.0, 400.0])])
    assert slow.status is Status.WARN  # 4 GB/s over a 400 Gb/s (50 GB/s) port: sockets?
    assert slow.summary.endswith(": 8% of the 50.0 GB/s the nodes' ports allow")
    fast = bandwidth_check([_swept(0, "0", 45.0, [400.0]), _swept(1, "1", 45.0, [400.0])])
    assert fast.status is Status.PASS
    assert fast.data["share"] == 0.9
    sockets = bandwidth_check([_swept(0, "0", 1.0, []), _swept(1, "1", 1.0, [])])
    assert sockets.status is Status.PASS
    assert "no active InfiniBand/RoCE port rate was read" in sockets.evidence[-1]
