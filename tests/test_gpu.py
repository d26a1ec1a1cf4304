"""The core's CUDA paths (device-event timing, allocator and NVML figures, CUDA graphs, FSDP2
on a GPU, a real CUDA OOM). Skipped without a GPU; run on the GPU machine."""

import pytest

from benchbay import store
from benchbay.runner import SuiteRunner
from benchbay.suite import load
from tests.conftest import TINY, write_suite

pytestmark = pytest.mark.gpu


def test_gpu_points_record_device_figures(tmp_path, in_repo):
    path = write_suite(tmp_path / "gpu.yaml", f"""
name: gpu-smoke
workload: {{name: "{TINY}", params: {{width: 1024, depth: 4}}}}
knobs: {{precision: bf16_mixed, mbs: 64}}
sweep:
  points:
    - {{label: eager}}
    - {{label: recompute, recompute: selective}}
    - {{label: compile, compile: blocks}}
    - {{label: graphs, compile: blocks, cuda_graph: step}}
    - {{label: fsdp2, sharding: fsdp2_full}}
    - {{label: ddp, sharding: ddp, alloc: expandable_segments}}
    - {{label: offload, offload: optimizer}}
    - {{label: oom, mbs: 100000000}}
steps: {{warmup: 3, measure: 10}}
timeout: 300
devices: {{type: cuda}}
""")
    summary = SuiteRunner(load(path), tmp_path / "results").run_all()
    by_label = {r["label"]: r for r in store.read_records(summary.run)}
    for label in ("eager", "recompute", "compile", "graphs", "fsdp2", "ddp", "offload"):
        r = by_label[label]
        assert r["status"] == "ok", (label, r["reason"], r["extra"].get("traceback"))
        m = r["metrics"]
        assert m["step_time_s"] > 0 and m["peak_mem_allocated_gib"] > 0 and m["device_mem_total_gib"] > 10
        assert len(r["env"]["gpu_uuid_hash"]) == 10  # which card: the hosts lent share a hostname
        assert m["peak_mem_reserved_gib"] >= m["peak_mem_allocated_gib"]
        assert r["env"]["gpu"] and r["env"]["gpu_count"] >= 1
    assert by_label["oom"]["status"] == "oom"
    assert by_label["oom"]["metrics"]["oom_step"] == 0
