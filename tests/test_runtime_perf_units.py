"""mem.peak, perf.steps and ckpt.resume on records built by hand (no torchrun), and the in-rank
pieces they rest on: the step clock and reading a checkpoint back."""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict

import pytest

torch = pytest.importorskip("torch")

from ddplint.runtime.checks.memory import peak_check
from ddplint.runtime.checks.perf import SingleRun, check_resume, check_scaling, check_steps
from ddplint.runtime.datarecords import EpochRecord, LoaderRecord
from ddplint.runtime.perfprobe import (
    StepClock,
    StepMarks,
    TrainingObjects,
    checkpoint_candidates,
    load_checkpoint,
    load_dcp,
)
from ddplint.runtime.perfrecords import (
    CommSample,
    DevicePeak,
    LiveTraining,
    MemPeak,
    OptimizerInfo,
    PerfRecord,
    StepSample,
    StepTimes,
)
from ddplint.runtime.plain import from_plain
from ddplint.runtime.records import RankRecord
from ddplint.runtime.verdict import Status

GIB = 2**30


def steps(
    wait: float, rest: float, n: int = 8, epochs: int = 2, compute: float | None = None, optimizer: float = 0.0
) -> list[StepSample]:
    """n steps per epoch; the first of each epoch 10x slower (start-up), to be left out.
    `compute` and `optimizer`: the parts of `rest` the clock timed."""
    return [
        StepSample(
            e,
            s,
            wait * (10 if s == 1 else 1),
            rest * (10 if s == 1 else 1),
            compute_s=compute,
            optimizer_s=optimizer,
        )
        for e in range(epochs)
        for s in range(1, n + 1)
    ]


def comm(exposed: float, n: int = 16) -> list[CommSample]:
    return [CommSample(i, exposed + 0.001, 0.001) for i in range(n)]


def rec(rank: int, perf: PerfRecord | None = None, binding: dict | None = None, **extra) -> RankRecord:
    out = {"rank": rank, "perf": asdict(perf) if perf else None, "binding": binding or {}}
    out.update(extra)
    return RankRecord.from_plain(out)


def training_loader(site: str, batch_size: int | None = None, num_workers: int = 0) -> dict:
    """A DataLoader record as the probe stores it, with what perf.steps and perf.scaling read."""
    return asdict(
        LoaderRecord(
            site, "TensorDataset", 64, False, "TensorDataset", [], "DistributedSampler", None, True, False, 2, 0,
            False, 0, 32, batch_size, False, True, num_workers, training=True,
        )
    )  # fmt: skip


# ---- mem.peak -------------------------------------------------------------------------------


def test_cpu_peak_passes_with_each_ranks_rss_next_to_the_estimate():
    mem = [MemPeak(900 * 2**20, 700 * 2**20, 16 * GIB), MemPeak(800 * 2**20, 650 * 2**20, 16 * GIB)]
    recs = [
        rec(i, PerfRecord(mem=mem[i], times=StepTimes(steps(0.001, 0.01))), binding={"model": {"total_bytes": 5 * 2**20}})
        for i in range(2)
    ]
    r = peak_check(recs)
    assert r.status is Status.PASS
    assert r.summary == "peak RSS 900.0 MiB per rank (rank 0), on CPU"
    assert r.evidence[0] == "rank 0: peak RSS 900.0 MiB (700.0 MiB when the first batch came)"
    assert "mem.fit's estimate of the model state: 5.0 MiB per rank" in r.evidence
    assert r.data["ranks"][1]["rss_peak_bytes"] == 800 * 2**20 and r.data["estimate_bytes"] == 5 * 2**20


def gpu_rec(rank: int, reserved: int, total: int) -> dict:
    mem = MemPeak(GIB, GIB, 64 * GIB, [DevicePeak(rank, reserved - GIB, reserved)])
    return rec(
        rank,
        PerfRecord(mem=mem, times=StepTimes(steps(0.001, 0.1))),
        binding={"gpu": {"index": rank, "name": "A100", "total_memory": total}},
    )


def test_gpu_peak_above_90_percent_of_the_smallest_gpu_warns():
    # 38 GiB reserved fits the 80 GB card of rank 1, not the 40 GB card of rank 0
    r = peak_check([gpu_rec(0, 30 * GIB, 40 * GIB), gpu_rec(1, 38 * GIB, 80 * GIB)])
    assert r.status is Status.WARN
    assert r.summary.startswith("peak 38.0 GiB reserved on rank 1 is 95% of the smallest GPU")
    assert "FSDP" in r.fix and "smaller batch" in r.fix and "checkpointing" in r.fix
    assert r.data["share"] == pytest.approx(0.95)
    assert "rank 0: cuda:0 peak allocated 29.0 GiB, reserved 30.0 GiB, 75% of its 40960 MiB" in r.evidence


def test_gpu_peak_with_headroom_passes_with_the_numbers():
    r = peak_check([gpu_rec(0, 20 * GIB, 80 * GIB), gpu_rec(1, 21 * GIB, 80 * GIB)])
    assert r.status is Status.PASS
    assert r.summary == "peak 21.0 GiB reserved on rank 1, 26% of the smallest GPU"


def test_no_step_skips_mem_peak():
    r = peak_check([rec(0, PerfRecord(mem=MemPeak(GIB, None, None))), rec(1)])
    assert r.status is Status.SKIP and "no training step ran" in r.summary


# ---- perf.steps ------------------------------------------------------------------------------


def test_input_bound_loader_warns_with_the_dataloader_fix():
    loader = training_loader("/job/train.py:14", num_workers=0)
    recs = {
        i: rec(
            i,
            PerfRecord(times=StepTimes(steps(0.400, 0.010), comm(0.001))),
            training_site="/job/train.py:14",
            loaders={"/job/train.py:14": loader},
        )
        for i in range(2)
    }
    r = check_steps(recs, "/job")
    assert r.status is Status.WARN
    assert r.summary.startswith("input-bound: rank ")
    assert "waits for data 98% of each step (400 ms of 410 ms) in the training loader at train.py:14" in r.summary
    assert "num_workers=4" in r.fix and "(now num_workers=0)" in r.fix and "pin_memory=True" in r.fix
    assert "persistent_workers=True" in r.fix and "decoding" in r.fix
    assert r.data["ranks"][0]["steps"] == 14  # the first step of each epoch left out
    assert r.data["ranks"][0]["first_step_s"] == pytest.approx(4.1)


def test_compute_bound_steps_pass_with_the_split():
    # 50 ms steps: 0.5 ms data, 35 ms from the first forward to the end of backward (10 ms of it
    # waiting for the gradient all_reduce), 4 ms optimizer, 10.5 ms the rest
    timed = steps(0.0005, 0.0495, compute=0.035, optimizer=0.004)
    recs = {i: rec(i, PerfRecord(times=StepTimes(timed, comm(0.010)))) for i in range(2)}
    r = check_steps(recs, "/")
    assert r.status is Status.PASS
    assert r.summary == (
        "median step 50 ms over 14 steps per rank: waiting for data 1%, forward+backward 50%, "
        "waiting in gradient all_reduce 20%, optimizer 8%, the rest 21%; slowest rank 0 1.00x the median"
    )
    assert r.evidence[0] == (
        "rank 0: step 50 ms (median of 14): data wait 0.5 ms (1%), forward+backward 25 ms, gradient sync wait "
        "10 ms, optimizer 4.0 ms, the rest 10 ms; own work 40 ms; first step of an epoch 500 ms"
    )
    ranks = r.data["ranks"]
    assert ranks[0]["forward_backward_s"] == pytest.approx(0.025) and ranks[0]["optimizer_s"] == pytest.approx(0.004)
    assert ranks[0]["other_s"] == pytest.approx(0.0105)


def test_steps_without_a_backward_leave_forward_and_backward_in_the_rest():
    recs = {i: rec(i, PerfRecord(times=StepTimes(steps(0.0005, 0.0495), comm(0.010)))) for i in range(2)}
    r = check_steps(recs, "/")
    assert r.summary.startswith("median step 50 ms over 14 steps per rank: waiting for data 1%, waiting in gradient")
    assert "forward+backward" not in r.summary
    assert "forward+backward not separated (no backward() seen in the steps): it is counted in the rest" in r.evidence


def test_step_marks_split_compute_from_the_optimizer():
    # forward at 1.0, backward 1.2-1.5, optimizer 1.6-1.7
    plain = StepMarks(1.0, [(1.2, 1.5)], [(1.6, 1.7)])
    assert plain.split() == pytest.approx((0.5, 0.1))
    # a closure (Lightning): the optimizer step holds forward and backward
    closure = StepMarks(1.1, [(1.2, 1.5)], [(1.0, 1.7)])
    assert closure.split() == pytest.approx((0.4, 0.3))
    # a GAN: the discriminator's optimizer step between two backwards is cut out of the compute
    gan = StepMarks(1.0, [(1.1, 1.2), (1.5, 1.6)], [(1.25, 1.35), (1.7, 1.8)])
    assert gan.split() == pytest.approx((0.5, 0.2))
    # no backward: no compute span; a backward without a module call starts it
    assert StepMarks(1.0, [], [(1.6, 1.7)]).split() == pytest.approx((None, 0.1))
    assert StepMarks(None, [(1.2, 1.5)], []).split() == pytest.approx((0.3, 0.0))


def test_straggler_is_the_rank_the_others_wait_for_in_all_reduce():
    # synchronous steps: all 0.52 s; ranks 0, 2, 3 wait 0.5 s in all_reduce, rank 1 does not
    recs = {i: rec(i, PerfRecord(times=StepTimes(steps(0.001, 0.519), comm(0.005 if i == 1 else 0.5)))) for i in range(4)}
    r = check_steps(recs, "/")
    assert r.status is Status.WARN
    assert r.summary.startswith("straggler: rank 1 works 515 ms per step, 25.7x the 20 ms of the others, who wait for it")
    assert "rank 1" in r.fix and r.data["straggler"] == 1 and r.data["slowest_rank"] == 1


def test_small_differences_between_ranks_are_not_a_straggler():
    # 1.6x, but the others wait only 3 ms per step: a busy host's noise
    recs = {
        0: rec(0, PerfRecord(times=StepTimes(steps(0.0002, 0.008), comm(0.003)))),
        1: rec(1, PerfRecord(times=StepTimes(steps(0.0002, 0.008), comm(0.0061)))),
    }
    assert check_steps(recs, "/").status is Status.PASS


def test_communication_bound_steps_warn_with_the_measured_and_the_allowed_bandwidth():
    sweep = {"device": "cuda:0", "sweep": [{"bytes": 1 << 26, "busbw_gbps": 11.5}, {"bytes": 1 << 20, "busbw_gbps": 3.0}]}
    info = {"nvml": {"expected_busbw_gbps": 150.0}}
    recs = {i: rec(i, PerfRecord(times=StepTimes(steps(0.001, 0.1), comm(0.07))), comm=sweep, info=info) for i in range(2)}
    r = check_steps(recs, "/")
    assert r.status is Status.WARN
    assert r.summary == "communication-bound: the ranks wait 70 ms of each 101 ms step (69%) for the gradient all_reduce"
    assert r.evidence[-1] == (
        "the all_reduce test reached a peak bus bandwidth of 11.50 GB/s (comm.bandwidth); the links allow about 150 GB/s"
    )
    assert "no_sync()" in r.fix and "bucket_cap_mb" in r.fix


def test_communication_bound_on_the_cpu_is_information_and_a_toy_models_latency_is_nothing():
    on_cpu = {"device": "cpu", "sweep": [{"bytes": 1 << 22, "busbw_gbps": 0.4}]}
    recs = {i: rec(i, PerfRecord(times=StepTimes(steps(0.001, 0.1), comm(0.07))), comm=on_cpu) for i in range(2)}
    r = check_steps(recs, "/")
    assert r.status is Status.INFO and r.summary.endswith("(gloo on the CPU: no forecast for NCCL between GPUs)")
    toy = {i: rec(i, PerfRecord(times=StepTimes(steps(0.0001, 0.003), comm(0.002)))) for i in range(2)}  # 67% of 3 ms
    assert check_steps(toy, "/").status is Status.PASS


def test_without_ddp_timers_communication_is_not_separated():
    recs = {i: rec(i, PerfRecord(times=StepTimes(steps(0.001, 0.05)))) for i in range(2)}
    r = check_steps(recs, "/")
    assert r.status is Status.PASS and "gradient all_reduce" not in r.summary
    assert any("not separated" in e for e in r.evidence)


def test_no_training_step_skips_perf_steps():
    assert check_steps({0: rec(0, PerfRecord())}, "/").status is Status.SKIP


def test_step_clock_times_from_one_next_to_the_next_without_the_probes_own_work():
    clock = StepClock()
    # batch 1: __next__ at 0.0, batch at 0.3, probe done at 0.31; batch 2: __next__ at 0.41 ...
    clock.batch(0, 1, 0.0, 0.3, 0.31)
    clock.batch(0, 2, 0.41, 0.71, 0.72)
    clock.epoch_end(0, 0.82)
    clock.batch(1, 1, 1.0, 1.2, 1.2)
    clock.batch(2, 1, 2.0, 2.1, 2.1)  # epoch 1 left without reaching its end: its last step is dropped
    got = [(s.epoch, s.step, round(s.wait_s, 3), round(s.rest_s, 3)) for s in clock.times.steps]
    assert got == [(0, 1, 0.3, 0.1), (0, 2, 0.3, 0.1)]
    assert clock.times.probe_s == pytest.approx(0.02)
    first, second = clock.times.steps  # each step's start in monotonic time, for the GPU sampler
    assert second.at - first.at == pytest.approx(0.41) and second.ended_at == pytest.approx(second.at + 0.4)


# ---- ckpt.resume -----------------------------------------------------------------------------


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)


def trained(optimizer_cls, **kw):
    model = Net()
    opt = optimizer_cls(model.parameters(), lr=0.1, **kw)
    model.fc(torch.randn(3, 4)).sum().backward()
    opt.step()
    return model, opt


def live_of(opt, scheduler=None) -> LiveTraining:
    objects = TrainingObjects()
    objects._objects.add(opt)
    if scheduler is not None:
        objects._objects.add(scheduler)
    objects.saved()
    return objects.live


def test_model_only_checkpoint_of_a_momentum_optimizer_warns(tmp_path):
    model, opt = trained(torch.optim.SGD, momentum=0.9)
    path = tmp_path / "ckpt.pt"
    torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, path)
    c = load_checkpoint(str(path), str(path))
    assert c.error is None and c.model == "checkpoint" and c.model_tensors == 2 and c.module_prefix
    assert c.optimizer is None and c.counters == {}
    live = live_of(opt)
    assert live.optimizers == [OptimizerInfo("SGD", True)]
    r = check_resume({0: rec(0, PerfRecord(checkpoints=[c], live=live))}, str(tmp_path))
    assert r.status is Status.WARN
    assert r.summary == (
        "a resume from ckpt.pt would miss: no optimizer state: SGD keeps per-parameter "
        "state (momentum, moments) that a resume restarts from zero (+1 more)"
    )
    assert "missing: no epoch/step counter: a resume starts again at epoch 0" in r.evidence
    assert any("'module.' prefix" in e for e in r.evidence)
    assert "optimizer.state_dict()" in r.fix
    json.dumps(r.to_json())


def dcp_save(state: dict, path) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # one process without a group: torch says so
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(path), no_dist=True)


def test_a_distributed_checkpoint_is_read_from_its_metadata(tmp_path):
    model, opt = trained(torch.optim.AdamW)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    dcp_save(
        {"model": model.state_dict(), "optim": opt.state_dict(), "sched": sched.state_dict(), "step": 12},
        tmp_path / "ckpt",
    )
    c = load_dcp(str(tmp_path / "ckpt"), "ckpt")
    assert c.error is None and c.collective
    assert (c.model, c.model_tensors, c.module_prefix) == ("checkpoint['model']", 2, False)
    assert (c.optimizer, c.optimizer_state_entries, c.optimizer_groups) == ("checkpoint['optim']", 2, ["betas"])
    assert c.scheduler == "checkpoint['sched']" and c.counters == {"checkpoint['step']": 12}
    assert c.size_bytes == sum(f.stat().st_size for f in (tmp_path / "ckpt").iterdir())
    r = check_resume({0: rec(0, PerfRecord(checkpoints=[c], live=live_of(opt, sched)))}, str(tmp_path))
    assert r.status is Status.PASS and r.summary.startswith("ckpt holds what a resume needs: model, optimizer, scheduler")
    assert r.evidence[0].startswith("ckpt (rank 0, ") and "a torch.distributed.checkpoint directory" in r.evidence[0]


def saved_at(tmp_path, state: dict, at: list[int], yielded: list[int]) -> dict[int, RankRecord]:
    """One rank that saved `state` with torch.save when the training loader was at `at` (epoch,
    batches), in a run whose epochs yielded `yielded` batches each."""
    path = tmp_path / "ckpt.pt"
    torch.save(state, path)
    c = load_checkpoint(str(path), str(path))
    loader = training_loader("/job/train.py:9")
    loader["epochs"] = [asdict(EpochRecord(yielded=n)) for n in yielded]
    return {
        0: rec(
            0,
            PerfRecord(checkpoints=[c]),
            training_site="/job/train.py:9",
            loaders={"/job/train.py:9": loader},
            writes=[{"path": str(path), "op": "torch.save", "at": at}],
        )
    }


def test_a_checkpoint_saved_inside_an_epoch_needs_a_position_in_it(tmp_path):
    model, _ = trained(torch.optim.SGD)
    every_n_steps = saved_at(tmp_path, {"model": model.state_dict(), "epoch": 1}, [1, 3], [5, 5])
    r = check_resume(every_n_steps, str(tmp_path))
    assert r.status is Status.WARN, r.summary
    assert r.summary == (
        "a resume from ckpt.pt would miss: no position in the epoch: saved after batch 3 of epoch 1 with an "
        "epoch counter only, a resume starts that epoch again from its first batch (or skips the rest of it)"
    )
    # with a step counter beside it, or saved once the epoch's loop was over, nothing is missed
    with_step = saved_at(tmp_path, {"model": model.state_dict(), "epoch": 1, "global_step": 8}, [1, 3], [5, 5])
    assert check_resume(with_step, str(tmp_path)).status is Status.PASS
    at_epoch_end = saved_at(tmp_path, {"model": model.state_dict(), "epoch": 1}, [1, 5], [5, 5])
    assert check_resume(at_epoch_end, str(tmp_path)).status is Status.PASS


def test_a_model_only_distributed_checkpoint_warns_with_the_dcp_fix(tmp_path):
    model, opt = trained(torch.optim.SGD, momentum=0.9)
    dcp_save({"model": model.state_dict()}, tmp_path / "ckpt")
    c = load_dcp(str(tmp_path / "ckpt"), "ckpt")
    r = check_resume({0: rec(0, PerfRecord(checkpoints=[c], live=live_of(opt)))}, str(tmp_path))
    assert r.status is Status.WARN and r.summary.startswith("a resume from ckpt would miss: no optimizer state")
    assert "get_state_dict(model, optimizer)" in r.fix and "dcp.save(" in r.fix


def test_an_unreadable_distributed_checkpoint_says_why(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / ".metadata").write_bytes(b"not a pickle")
    c = load_dcp(str(tmp_path / "ckpt"), "ckpt")
    assert c.error is not None and c.error.startswith("UnpicklingError") and c.model is None


def test_full_checkpoint_passes(tmp_path):
    model, opt = trained(torch.optim.SGD, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    path = tmp_path / "full.pt"
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "epoch": 3,
            "rng": torch.get_rng_state(),
        },
        path,
    )
    c = load_checkpoint(str(path), str(path))
    assert (c.model, c.optimizer, c.scheduler) == ("checkpoint['model']", "checkpoint['optimizer']", "checkpoint['scheduler']")
    assert c.optimizer_state_entries == 2 and c.optimizer_groups == ["momentum=0.9"]
    assert c.counters == {"checkpoint['epoch']": 3} and c.rng == ["checkpoint['rng']"] and not c.module_prefix
    r = check_resume({0: rec(0, PerfRecord(checkpoints=[c], live=live_of(opt, sched)))}, str(tmp_path))
    assert r.status is Status.PASS
    assert r.summary == "full.pt holds what a resume needs: model, optimizer, scheduler, checkpoint['epoch']"


def test_a_scheduler_the_checkpoint_leaves_out_and_an_empty_optimizer_state(tmp_path):
    model, opt = trained(torch.optim.Adam)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    fresh = torch.optim.Adam(model.parameters())  # never stepped: no state
    path = tmp_path / "c.pt"
    torch.save({"model": model, "optim": fresh.state_dict(), "global_step": torch.tensor(12)}, path)
    c = load_checkpoint(str(path), str(path))
    assert c.whole_module and c.optimizer_state_entries == 0 and c.counters == {"checkpoint['global_step']": 12}
    r = check_resume({0: rec(0, PerfRecord(checkpoints=[c], live=live_of(opt, sched)))}, str(tmp_path))
    assert r.status is Status.WARN
    assert r.summary.startswith("a resume from c.pt would miss: the optimizer state at checkpoint['optim'] is empty")
    assert "missing: no LR scheduler state: StepLR restarts its schedule" in r.evidence


def test_one_complete_checkpoint_is_enough(tmp_path):
    model, opt = trained(torch.optim.SGD, momentum=0.9)
    best, last = tmp_path / "best.pt", tmp_path / "last.pt"
    torch.save(model.state_dict(), best)  # weights for inference
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 8}, last)
    cs = [load_checkpoint(str(p), str(p)) for p in (best, last)]
    r = check_resume({0: rec(0, PerfRecord(checkpoints=cs, live=live_of(opt)))}, str(tmp_path))
    assert r.status is Status.PASS and r.summary.startswith("last.pt holds what a resume needs")
    assert "1 other checkpoint(s) hold less" in r.summary


def test_unreadable_checkpoint_and_no_checkpoint(tmp_path):
    path = tmp_path / "broken.pt"
    path.write_bytes(b"not a checkpoint")
    c = load_checkpoint(str(path), str(path))
    assert c.error is not None
    r = check_resume({0: rec(0, PerfRecord(checkpoints=[c]))}, str(tmp_path))
    assert r.status is Status.WARN and "torch.load cannot read it back" in r.summary
    assert check_resume({0: rec(0, PerfRecord())}, "/").status is Status.SKIP


def test_checkpoint_candidates_are_saves_and_checkpoint_names_latest_last():
    writes = [
        {"path": "/o/a.pt.tmp", "op": "torch.save"},
        {"path": "/o/a.pt", "op": "os.replace"},
        {"path": "/o/log.txt", "op": "open:w"},
        {"path": "/o/d", "op": "makedirs", "dir": True},
        {"path": "/o/b.pth", "op": "open:wb"},
        {"path": "/o/a.pt.tmp", "op": "torch.save"},
    ]
    assert checkpoint_candidates(writes) == ["/o/a.pt", "/o/b.pth", "/o/a.pt.tmp"]


def test_perf_record_round_trips_through_plain_data():
    perf = PerfRecord(
        mem=MemPeak(1, 2, 3, [DevicePeak(0, 4, 5)]),
        times=StepTimes(steps(0.1, 0.2), comm(0.1)),
        live=LiveTraining([OptimizerInfo("Adam", True)], ["StepLR"], True),
    )
    assert from_plain(PerfRecord, asdict(perf)) == perf
    assert RankRecord.from_plain({"rank": 0, "perf": None}).perf == PerfRecord()  # a record cut short


def test_grad_scaler_nested_states_and_counters_are_found(tmp_path):
    import numpy as np

    model, opt = trained(torch.optim.AdamW)
    scaler = torch.amp.GradScaler("cpu")
    path = tmp_path / "amp.pt"
    torch.save(
        {
            "state": {
                "net": model.state_dict(),
                "opts": [opt.state_dict()],
                "scaler": scaler.state_dict(),
                "train_step": np.int64(40),
            },
            "torch_rng_state": torch.get_rng_state(),
        },
        path,
    )
    c = load_checkpoint(str(path), str(path))
    assert c.model == "checkpoint['state']['net']" and c.optimizer == "checkpoint['state']['opts'][0]"
    assert c.scaler == "checkpoint['state']['scaler']" and c.counters == {"checkpoint['state']['train_step']": 40}
    assert c.rng == ["checkpoint['torch_rng_state']"] and c.optimizer_groups == ["betas"]
    objects = TrainingObjects()
    for obj in (opt, scaler):
        objects._objects.add(obj)
    objects.saved()
    assert objects.live.scaler and objects.live.optimizers == [OptimizerInfo("AdamW", True)]
    r = check_resume({0: rec(0, PerfRecord(checkpoints=[c], live=objects.live))}, str(tmp_path))
    assert r.status is Status.PASS
    assert r.summary == "amp.pt holds what a resume needs: model, optimizer, GradScaler, checkpoint['state']['train_step']"


# ---- perf.scaling ---------------------------------------------------------------------------


def run_of(
    n: int, wait: float, rest: float, exposed: float | None, batch: int = 16, compute: float | None = None, optimizer: float = 0.0
) -> dict[int, RankRecord]:
    loader = training_loader("/job/train.py:9", batch_size=batch)
    timed = steps(wait, rest, compute=compute, optimizer=optimizer)
    return {
        i: rec(
            i,
            PerfRecord(times=StepTimes(timed, comm(exposed) if exposed is not None else [])),
            training_site="/job/train.py:9",
            loaders={"/job/train.py:9": loader},
        )
        for i in range(n)
    }


def test_near_linear_scaling_passes_with_both_throughputs():
    alone = SingleRun(run_of(1, 0.001, 0.099, None))
    r = check_scaling(run_of(4, 0.001, 0.104, 0.004), alone, 4, on_cpu=False)
    assert r.status is Status.PASS
    assert r.summary.startswith("4 processes: 609.5 samples/s, 1 process: 160.0 samples/s: 3.81x, scaling efficiency 95%")
    assert r.data["processes"] == {"1": pytest.approx(160.0), "4": pytest.approx(609.5, abs=0.1)}


def test_communication_bound_scaling_warns_with_the_communication_fix():
    alone = SingleRun(run_of(1, 0.001, 0.099, None))
    r = check_scaling(run_of(4, 0.001, 0.199, 0.1), alone, 4, on_cpu=False)
    assert r.status is Status.WARN
    assert r.summary.endswith("scaling efficiency 50%, below 80%: mostly gradient sync")
    assert "no_sync" in r.fix and r.data["growth_s"]["gradient sync"] == pytest.approx(0.1)


def test_compute_that_slows_beside_other_processes_is_named():
    # alone: 80 ms forward+backward, 10 ms optimizer; with 4 processes sharing the host: 150 ms, 12 ms
    alone = SingleRun(run_of(1, 0.001, 0.099, None, compute=0.080, optimizer=0.010))
    r = check_scaling(run_of(4, 0.001, 0.175, 0.004, compute=0.154, optimizer=0.012), alone, 4, on_cpu=False)
    assert r.status is Status.WARN and r.summary.endswith("below 80%: mostly forward+backward"), r.summary
    growth = r.data["growth_s"]
    assert growth["forward+backward"] == pytest.approx(0.070) and growth["optimizer"] == pytest.approx(0.002)
    assert growth["gradient sync"] == pytest.approx(0.004) and growth["the rest"] == pytest.approx(0.0)
    assert "OMP_NUM_THREADS" in r.fix and "bind.distinct" in r.fix
    assert r.evidence[1] == (
        "where the step grew: waiting for data +0.0 ms, forward+backward +70 ms, gradient sync +4.0 ms, "
        "optimizer +2.0 ms, the rest +0.0 ms"
    )


def test_an_input_bound_loss_names_the_loader():
    alone = SingleRun(run_of(1, 0.010, 0.090, None))
    r = check_scaling(run_of(2, 0.110, 0.090, 0.0), alone, 2, on_cpu=False)
    assert r.status is Status.WARN and r.summary.endswith("mostly waiting for data") and "num_workers" not in r.summary
    assert "DataLoader workers" in r.fix


def test_on_the_cpu_scaling_is_information_only():
    r = check_scaling(run_of(2, 0.001, 0.199, 0.1), SingleRun(run_of(1, 0.001, 0.099, None)), 2, on_cpu=True)
    assert r.status is Status.INFO and any("no forecast for GPUs" in e for e in r.evidence)


def test_scaling_not_asked_not_possible_or_failed():
    assert check_scaling(run_of(2, 0.0, 0.1, 0.0), None, 2, on_cpu=False).status is Status.SKIP
    skipped = check_scaling(run_of(2, 0.0, 0.1, 0.0), SingleRun({}, skipped="several nodes"), 2, on_cpu=False)
    assert (skipped.status, skipped.summary) == (Status.SKIP, "several nodes")
    failed = check_scaling(run_of(2, 0.0, 0.1, 0.0), SingleRun({}, failed="no rank reported"), 2, on_cpu=False)
    assert failed.status is Status.WARN and "no rank reported" in failed.summary
    untimed = check_scaling(run_of(2, 0.0, 0.1, 0.0), SingleRun({0: rec(0, PerfRecord())}), 2, on_cpu=False)
    assert untimed.status is Status.WARN and "the 1-process run timed no training step" in untimed.summary


def write_safetensors(path, names: list[str]) -> None:
    """The safetensors layout by hand: an 8-byte little-endian header length, the JSON header,
    then the tensors' bytes (float32 scalars here)."""
    header = {n: {"dtype": "F32", "shape": [], "data_offsets": [4 * i, 4 * i + 4]} for i, n in enumerate(names)}
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * (4 * len(names)))


def test_safetensors_weights_are_read_from_the_header(tmp_path):
    from ddplint.runtime.perfprobe import load_safetensors

    path = tmp_path / "model.safetensors"
    write_safetensors(path, ["module.fc.weight", "module.fc.bias"])
    c = load_safetensors(str(path), str(path))
    assert (c.model, c.model_tensors, c.module_prefix, c.error) == ("checkpoint", 2, True, None)
    path.write_bytes(b"\xff" * 8 + b"{}")
    assert load_safetensors(str(path), str(path)).error.startswith("ValueError")


def trainer_directory(directory, model, opt, sched=None, step: int = 8) -> None:
    """A trainer's checkpoint directory: weights in safetensors (native code: the probe never
    sees it written), the optimizer and scheduler with torch.save, the step in a JSON file."""
    directory.mkdir(parents=True)
    write_safetensors(directory / "model.safetensors", list(model.state_dict()))
    torch.save(opt.state_dict(), directory / "optimizer.pt")
    if sched is not None:
        torch.save(sched.state_dict(), directory / "scheduler.pt")
    state = {"eval_steps": 500, "global_step": step, "epoch": 1.0, "log_history": [{"loss": 0.5, "step": 4}]}
    (directory / "trainer_state.json").write_text(json.dumps(state))  # a setting and a log's step beside the counter
    (directory / "config.json").write_text(json.dumps({"hidden_size": 4}))


def test_the_pieces_of_a_directory_checkpoint_are_read_and_judged_together(tmp_path):
    import os
    import time

    from ddplint.runtime.perfprobe import read_checkpoints

    model, opt = trained(torch.optim.AdamW)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    directory = tmp_path / "out" / "checkpoint-8"
    since = time.time() - 1
    trainer_directory(directory, model, opt, sched)
    torch.save({"python": __import__("random").getstate(), "cpu": torch.get_rng_state()}, directory / "rng_state_1.pth")
    old = directory / "old_state.json"  # from an earlier run: not this run's
    old.write_text(json.dumps({"global_step": 99}))
    os.utime(old, (since - 3600, since - 3600))
    writes = [{"path": str(directory / name), "op": "torch.save"} for name in ("optimizer.pt", "scheduler.pt")]
    cs = read_checkpoints(writes, lambda p: p, TrainingObjects(), since=since)
    assert [os.path.basename(c.path) for c in cs] == ["optimizer.pt", "scheduler.pt", "model.safetensors", "trainer_state.json"]
    assert list(cs[-1].counters)[0] == "checkpoint['global_step']"  # before eval_steps and the log's step
    rank1 = read_checkpoints(
        [{"path": str(directory / "rng_state_1.pth"), "op": "torch.save"}], lambda p: p, TrainingObjects(), since=since
    )
    records = {0: rec(0, PerfRecord(checkpoints=cs, live=live_of(opt, sched))), 1: rec(1, PerfRecord(checkpoints=rank1))}
    r = check_resume(records, str(tmp_path))
    assert r.status is Status.PASS, r
    assert r.summary == (
        "out/checkpoint-8 holds what a resume needs: model, optimizer, scheduler, trainer_state.json['global_step']"
    )
    # rank 1 read the files beside its RNG state again: each file counts once
    assert (
        "5 files judged together: optimizer.pt, scheduler.pt, model.safetensors, trainer_state.json, rng_state_1.pth"
        in (r.evidence[0])
    )
    assert "model at model.safetensors (2 tensors)" in r.evidence[0]


def test_a_directory_checkpoint_without_the_optimizer_warns(tmp_path):
    from ddplint.runtime.perfprobe import read_checkpoints

    model, opt = trained(torch.optim.SGD, momentum=0.9)
    directory = tmp_path / "checkpoint-8"
    trainer_directory(directory, model, opt)
    (directory / "optimizer.pt").unlink()
    writes = [{"path": str(directory / "model.safetensors"), "op": "open:wb"}]  # written from Python
    cs = read_checkpoints(writes, lambda p: p, TrainingObjects())
    r = check_resume({0: rec(0, PerfRecord(checkpoints=cs, live=live_of(opt)))}, str(tmp_path))
    assert r.status is Status.WARN
    assert r.summary.startswith("a resume from checkpoint-8 would miss: no optimizer state: SGD keeps")


def test_files_that_each_hold_the_same_parts_stay_checkpoints_of_their_own(tmp_path):
    model, opt = trained(torch.optim.SGD, momentum=0.9)
    for name in ("epoch_0.pt", "epoch_1.pt"):
        torch.save(model.state_dict(), tmp_path / name)
    cs = [load_checkpoint(str(tmp_path / n), str(tmp_path / n)) for n in ("epoch_0.pt", "epoch_1.pt")]
    r = check_resume({0: rec(0, PerfRecord(checkpoints=cs, live=live_of(opt)))}, str(tmp_path))
    assert r.status is Status.WARN and r.summary.startswith("a resume from epoch_0.pt would miss: no optimizer state")
    assert len(r.data["checkpoints"]) == 2 and not any(c["parts"] for c in r.data["checkpoints"])
