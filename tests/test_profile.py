"""Profiling: a profiled step leaves a readable trace, an op table and the summary figures
(phases, syncs, idle gaps); memory snapshots; profile runs through the runner."""

import csv
import json
import pickle
import re

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from benchbay import store
from benchbay.analysis.batch_search import search_edges
from benchbay.collect import Figures, Window
from benchbay.collect.compile import compile_counters
from benchbay.collect.memory_snapshot import MemorySnapshot
from benchbay.collect.profile import StepProfiler, Trace, analyse
from benchbay.launch.base import PointSpec
from benchbay.launch.worker import PROFILED_STEPS
from benchbay.profiling import profile_points, summary_lines
from benchbay.record import Record
from benchbay.suite import Steps, load
from tests.conftest import TINY, InProcessLauncher, write_suite
from tests.fixtures.tinywork import Tiny

SUMMARY_KEYS = {"profile_dir", "profile_top_ops", "profile_families", "phases", "idle_gap_share", "syncs_per_step"}


class Annotated(Tiny):
    """Tiny with a "forward" range, and a deliberate host sync when ``sync`` is set."""

    params = {**Tiny.params, "sync": False}

    def loss(self, model, batch):
        with record_function("forward"):
            loss, parts = super().loss(model, batch)
        if self.params["sync"]:
            loss.item()
        return loss, parts


class Ahead(Annotated):
    """Annotated with ``ahead`` batches made ahead (a video loader's), each step's batch named in the trace."""

    params = {**Annotated.params, "ahead": 0}

    def batches_ahead(self) -> int:
        return self.params["ahead"]

    def batch(self, step):
        with record_function(f"batch {step}"):
            return super().batch(step)


def profile_tiny(out_dir, sync=False, device="cpu"):
    """A point of ``Annotated`` profiled through the worker's own loop, in this process: its
    profiler's summary (with the point's other extra figures)."""
    spec = PointSpec(workload="tests.test_profile:Annotated", params={"sync": sync}, knobs={"precision": "fp32"},
                     steps=Steps(warmup=1, measure=1), device=device, timeout=120, profile=True,
                     profile_dir=str(out_dir))
    out = InProcessLauncher().run(spec, out_dir)
    assert out.status == "ok", out.reason
    return out.extra


def test_profiled_step_writes_trace_table_and_summary(tmp_path):
    torch._dynamo.reset()  # compile figures must come from this process's compiles only
    torch._dynamo.utils.counters.clear()
    summary = profile_tiny(tmp_path / "p")
    assert SUMMARY_KEYS <= set(summary)
    trace = json.loads((tmp_path / "p" / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"data", "forward", "backward", "optimizer"} <= names
    assert sum(1 for n in names if n and n.startswith("ProfilerStep#")) == PROFILED_STEPS
    rows = list(csv.DictReader(open(tmp_path / "p" / "top_ops.csv")))
    assert rows[-1]["name"] == "other" and len(rows) == 16
    assert sum(float(r["share"]) for r in rows) == pytest.approx(1.0, abs=1e-6)
    assert any(r["name"] == "aten::addmm" for r in rows)
    assert [r["name"] for r in summary["profile_top_ops"]] == [r["name"] for r in rows]
    assert {"name", "time_s", "share"} <= set(summary["profile_top_ops"][0])
    # the families cover every operator, the top table's "other" row included
    assert sum(summary["profile_families"].values()) == pytest.approx(
        sum(r["time_s"] for r in summary["profile_top_ops"]))
    assert summary["profiled_steps"] == PROFILED_STEPS and summary["phase_clock"] == "host"
    assert list(summary["phases"]) == ["data", "forward", "backward", "optimizer", "unattributed"]
    assert all(s > 0 for s in summary["phases"].values())
    # on the host clock the phases cover the profiled step, each microsecond once
    assert sum(summary["phases"].values()) == pytest.approx(summary["profiled_step_s"])
    assert summary["idle_gap_share"] is None  # no device
    assert summary["syncs_per_step"] == 0  # AdamW's step-counter .item() calls are not syncs
    assert compile_counters()["graph_breaks"] is None  # nothing compiled
    assert summary["profile_dir"] == str(tmp_path / "p")


def test_deliberate_item_counts_as_a_sync_per_step(tmp_path):
    assert profile_tiny(tmp_path / "p", sync=True)["syncs_per_step"] == 1


@pytest.mark.parametrize(("ahead", "steps", "timed"), [
    (2, Steps(warmup=1, measure=2), 1 + 2 + 2),  # the suite's warm-up, the batches ahead, the measured steps
    (0, Steps(warmup=1, measure=8, max_measure_s=0.0), 1 + 3),  # the budget ends the measurement early
])
def test_profiled_steps_are_the_ones_after_the_timed_steps(tmp_path, ahead, steps, timed):
    """However many steps the worker times (warm-up over batches made ahead, a measure budget
    spent), the profiler records the steps after them: none of the timed steps runs traced."""
    spec = PointSpec(workload="tests.test_profile:Ahead", params={"ahead": ahead}, knobs={"precision": "fp32"},
                     steps=steps, device="cpu", timeout=120, profile=True, profile_dir=str(tmp_path / "p"))
    out = InProcessLauncher().run(spec, tmp_path / "p")
    assert out.status == "ok", out.reason
    assert len(out.series["step_times_s"]) == timed and out.extra["profiled_steps"] == PROFILED_STEPS
    events = json.loads((tmp_path / "p" / "trace.json").read_text())["traceEvents"]
    batches = {e["name"] for e in events if e.get("name", "").startswith("batch ")}
    # the first step after the timed ones is the profiler's own warm-up, traced but not kept
    assert batches == {f"batch {i}" for i in range(timed + 1, timed + 1 + PROFILED_STEPS)}


def test_failed_step_leaves_no_analysis(tmp_path):
    with pytest.raises(ValueError):
        with StepProfiler(tmp_path / "p", active=2) as profiler:
            profiler.step()
            raise ValueError("step failed")
    assert not (tmp_path / "p" / "trace.json").exists()


def _x(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_cuda_trace_analysis():
    """The device side of the analysis on a hand-made CUDA trace: two steps of 100 µs."""
    events = []
    for step, t0 in enumerate((0, 100)):
        events += [
            _x(f"ProfilerStep#{step + 3}", "user_annotation", t0, 100),
            _x("forward", "user_annotation", t0 + 1, 40),
            _x("aten::mm", "cpu_op", t0 + 2, 5),
            _x("cudaLaunchKernel", "cuda_runtime", t0 + 3, 1, correlation=10 * step + 1),
            _x("backward", "user_annotation", t0 + 50, 45),
            _x("cuLaunchKernel", "cuda_driver", t0 + 51, 1, tid=2, correlation=10 * step + 2),  # autograd thread
            # .item(): a copy to pageable memory and a stream sync inside one operator: one sync
            _x("aten::_local_scalar_dense", "cpu_op", t0 + 60, 20),
            _x("cudaMemcpyAsync", "cuda_runtime", t0 + 61, 2, correlation=10 * step + 3),
            _x("cudaStreamSynchronize", "cuda_runtime", t0 + 63, 10),
            # kernels: mm 20 µs, triton 30 µs, copy 2 µs; 48 µs of 100 idle
            _x("sm90_gemm", "kernel", t0 + 10, 20, tid=7, correlation=10 * step + 1),
            _x("triton_fused", "kernel", t0 + 40, 30, tid=7, correlation=10 * step + 2),
            _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", t0 + 70, 2, tid=7, correlation=10 * step + 3),
        ]
    events.append(_x("cudaDeviceSynchronize", "cuda_runtime", 190, 5))  # a bare sync, no operator around it
    trace = Trace(events)
    assert len(trace.steps) == 2
    assert trace.host_syncs() == 3
    shares = {r["name"]: r["share"] for r in trace.top_ops(2)}
    assert shares["triton_fused"] == pytest.approx(30 / 52) and shares["other"] == 0
    assert trace.top_ops(2)[0]["time_s"] == pytest.approx(30e-6)
    phases = trace.phase_seconds(2)
    assert phases == pytest.approx({"forward": 20e-6, "backward": 32e-6, "unattributed": 0.0})
    assert trace.idle_gap_share() == pytest.approx(1 - 104 / 162)  # device timeline 10 .. 172 µs


def test_host_phases_cover_the_step_innermost_first():
    """A hand-made CPU trace: one 100 µs step, a forward range holding a nested one, and time in no
    range (the user's own loss): the phases add up to the step, nothing counted twice."""
    events = [_x("ProfilerStep#3", "user_annotation", 0, 100), _x("data", "user_annotation", 0, 10),
              _x("forward", "user_annotation", 20, 30), _x("frozen_encoders", "user_annotation", 25, 10),
              _x("backward", "user_annotation", 60, 30), _x("optimizer", "user_annotation", 92, 8),
              _x("forward", "user_annotation", 30, 40, tid=2)]  # another thread's range: not this step's time
    phases = Trace(events).phase_seconds(1)
    assert phases == pytest.approx({"data": 10e-6, "frozen_encoders": 10e-6, "forward": 20e-6, "backward": 30e-6,
                                    "optimizer": 8e-6, "unattributed": 22e-6})
    assert sum(phases.values()) == pytest.approx(100e-6)


def test_a_user_step_without_a_forward_range_is_covered(tmp_path):
    """The README's kind of step (its loss opens no range): what the harness does not name is
    unattributed, and the phases still add up to the profiled step."""
    spec = PointSpec(workload=TINY, params={}, knobs={"precision": "fp32"}, steps=Steps(warmup=1, measure=1),
                     device="cpu", timeout=120, profile=True, profile_dir=str(tmp_path / "p"))
    out = InProcessLauncher().run(spec, tmp_path / "p")
    assert out.status == "ok", out.reason
    phases = out.extra["phases"]
    assert "forward" not in phases and phases["unattributed"] > 0 and {"data", "backward", "optimizer"} <= set(phases)
    assert sum(phases.values()) == pytest.approx(out.extra["profiled_step_s"])


def test_analyse_reads_a_stored_trace(tmp_path):
    profile_tiny(tmp_path / "p")
    figures = analyse(tmp_path / "p" / "trace.json")
    assert figures["profiled_steps"] == PROFILED_STEPS and "backward" in figures["phases"]


@pytest.mark.slow
def test_compile_counters_count_graph_breaks_and_recompiles():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    @torch.compile(backend="eager", dynamic=False)
    def f(x):
        x = x * 2
        torch._dynamo.graph_break()
        if x.sum() > 0:  # data-dependent branch: a break too
            x = x + 1
        return x

    f(torch.ones(2))
    f(torch.ones(3))  # a new static shape: a recompile
    counters = compile_counters()
    assert counters["graph_breaks"] == 2 and counters["recompiles"] >= 1 and counters["compiled_graphs"] >= 4
    assert counters["cudagraph_skips"] == 0 and counters["compile_cache_hits"] == 0  # the eager backend caches nothing
    assert any("graph_break" in reason or "Call to" in reason for reason in counters["graph_break_reasons"]), \
        counters["graph_break_reasons"]


def test_memory_snapshot_is_a_noop_with_a_reason_on_cpu(tmp_path):
    cpu = torch.device("cpu")
    assert MemorySnapshot(None, cpu).figures(Window(0)) == Figures()
    snapshot = MemorySnapshot(tmp_path, cpu)
    with snapshot:
        torch.ones(4)
    assert snapshot.figures(Window(0)).extra == {"memory_snapshot": None,
                                  "memory_snapshot_reason": "memory snapshots need a CUDA device (running on cpu)"}
    assert not list(tmp_path.iterdir())


@pytest.mark.gpu
def test_memory_snapshot_records_allocations_on_cuda(tmp_path):
    snapshot = MemorySnapshot(tmp_path / "m", torch.device("cuda"))
    with snapshot:
        x = torch.ones(1 << 20, device="cuda")
        del x
    assert snapshot.figures(Window(0)).extra["memory_snapshot"] == str(tmp_path / "m" / "snapshot.pickle")
    data = pickle.loads((tmp_path / "m" / "snapshot.pickle").read_bytes())
    actions = [e["action"] for trace in data["device_traces"] for e in trace]
    assert "alloc" in actions and "free_completed" in actions
    assert any(e["frames"] for trace in data["device_traces"] for e in trace if e["action"] == "alloc")


@pytest.mark.gpu
def test_memory_snapshot_of_a_checkpointed_loss_backward(tmp_path):
    # Wall-X's chunked cross-entropy: recomputed in backward, where a free's stack cannot be taken
    hidden = torch.randn(4096, 256, device="cuda", requires_grad=True)
    head = torch.randn(256, 32000, device="cuda", requires_grad=True)
    labels = torch.randint(0, 32000, (4096,), device="cuda")
    with MemorySnapshot(tmp_path / "m", torch.device("cuda")):
        loss = sum(checkpoint(lambda h, y: F.cross_entropy((h @ head).float(), y, reduction="sum"), h, y,
                              use_reentrant=False) for h, y in zip(hidden.split(1024), labels.split(1024), strict=True))
        loss.backward()
    assert hidden.grad is not None and (tmp_path / "m" / "snapshot.pickle").exists()


@pytest.mark.gpu
def test_profiled_cuda_step(tmp_path):
    summary = profile_tiny(tmp_path / "p", sync=True, device="cuda")
    assert summary["phase_clock"] == "device" and summary["syncs_per_step"] == 1
    assert 0 <= summary["idle_gap_share"] <= 1
    assert summary["phases"]["forward"] > 0 and summary["phases"]["backward"] > 0
    assert sum(r["share"] for r in summary["profile_top_ops"]) == pytest.approx(1.0)
    assert profile_tiny(tmp_path / "q", device="cuda")["syncs_per_step"] == 0


def test_search_edges_pick_largest_fit_and_smallest_oom():
    def probe(mbs, status, reserved=1.0):
        return Record(suite="s", run_id="r", point_id=f"p{mbs}", workload="w", status=status, knobs={"mbs": mbs},
                      metrics={"peak_mem_reserved_gib": reserved, "device_mem_total_gib": 10.0})

    records = [probe(1, "ok"), probe(8, "oom"), probe(4, "ok", 9.5), probe(2, "ok"), probe(16, "oom")]
    edges = search_edges(records, "mbs")
    assert [(role, r.knobs["mbs"]) for role, r in edges] == [("largest_ok", 4), ("smallest_oom", 8)]
    edges = search_edges(records, "mbs", headroom_gib=1.0)
    assert [(role, r.knobs["mbs"]) for role, r in edges] == [("largest_ok", 2), ("smallest_oom", 8)]
    assert search_edges(records[:1], "mbs") == [("largest_ok", records[0])]


@pytest.mark.slow  # torch.profiler in a point's process: 10 s
def test_profile_points_runs_the_chosen_points_under_the_profiler(tmp_path, in_repo):
    path = write_suite(tmp_path / "prof.yaml", f"""
name: prof
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep:
  points:
    - {{label: base}}
    - {{label: wide, mbs: 2}}
steps: {{warmup: 1, measure: 2}}
timeout: 120
breakdown: [base, wide]
equivalent: [[base, wide]]
""")
    suite = load(path)
    with pytest.raises(ValueError, match="no point labelled 'nope'"):
        profile_points(suite, ["nope"], tmp_path / "results")
    run = profile_points(suite, ["wide"], tmp_path / "results")
    assert run.parent.name == "prof-profile"
    (record,) = store.read_records(run)
    assert record["label"] == "wide" and record["status"] == "ok", record.get("reason")
    out = run / "profiles" / f"{record['point_id']}-0"
    assert record["extra"]["profile_dir"] == str(out)
    assert (out / "trace.json").exists() and (out / "top_ops.csv").exists()
    assert {"data", "backward", "optimizer"} <= set(record["extra"]["phases"])
    # a profile run is not for comparing points: its manifest keeps no breakdown or equivalent losses
    as_run = store.read_manifest(run)["suite_as_run"]
    assert as_run["name"] == "prof-profile" and not {"breakdown", "equivalent"} & set(as_run)
    # what the command prints: the phases and top ops it found, and the report that draws them
    lines = summary_lines(run)
    assert re.match(r"wide: step [\d.]+ ms \(profiled\) = data [\d.]+ ms \+ ", lines[0]) and "backward" in lines[0]
    assert lines[1].strip().split()[1] == "ms"
    assert lines[-3].startswith("unattributed: the step's time in no phase range")  # Tiny's loss opens no range
    assert lines[-1] == "report: benchbay report prof-profile (phases and top ops of each point)"
