"""The probe's GPU path on a CPU: a stand-in for torch.cuda (events that complete when told, the
allocator's nested stats) drives the hook as a GPU run would, step by step."""

import importlib.util
import json
import os
import types

from benchbay.workloads.command import PROBE_DIR

PROBE = PROBE_DIR / "sitecustomize.py"


class _Event:
    done: set = set()

    def __init__(self, enable_timing):
        self.at = None

    def record(self):
        self.at = _FakeCuda.clock

    def query(self):
        return self in _Event.done

    def synchronize(self):
        raise AssertionError("the probe synchronised inside a step")

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


class _FakeCuda:
    clock = 0.0
    Event = _Event

    @staticmethod
    def is_available():  # cudaGetDeviceCount: it would start the driver in every process of the command
        raise AssertionError("the probe asked CUDA before the script's first step")

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def memory_stats_as_nested_dict():
        peak = int(_FakeCuda.clock * 1e9)
        return {"allocated_bytes": {"all": {"peak": peak, "current": 1}},
                "reserved_bytes": {"all": {"peak": 2 * peak, "current": 1}}}


def _probe_module(tmp_path):
    """The probe's module without the import-time hook on this process's torch (no BENCHBAY_PROBE_OUT
    as it loads), then pointed at a file of this test's."""
    spec = importlib.util.spec_from_file_location("benchbay_probe_under_test", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.OUT = str(tmp_path / "probe")
    return module


#: torch as the probe sees it: CUDA up, no process group
TORCH = types.SimpleNamespace(cuda=_FakeCuda, distributed=types.SimpleNamespace(is_available=lambda: False))


class _Optimizer:  # an optimizer as the probe holds it: weakly
    pass


def test_on_a_gpu_the_probe_writes_a_step_once_its_event_completed_with_the_allocators_peaks(tmp_path, monkeypatch):
    module = _probe_module(tmp_path)
    _Event.done.clear()
    clock = iter(range(100, 200))
    monkeypatch.setattr(module.time, "time", lambda: next(clock))
    probe = module._Probe(TORCH)
    assert not (tmp_path / "probe.0").exists()  # nothing until the first step
    optimizer = _Optimizer()
    for step in range(3):  # each step's end 0.5 s after the last; none completed yet
        _FakeCuda.clock = 0.5 * (step + 1)
        probe.hook(optimizer, (), {})
    assert (tmp_path / "probe.0").read_text() == ""  # nothing waited for the device
    _Event.done.update(probe.marks[:2])
    _FakeCuda.clock = 2.0
    probe.hook(optimizer, (), {})  # a fourth step: the first two are known now
    lines = [json.loads(line) for line in (tmp_path / "probe.0").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1]
    assert lines[0]["dt"] is None and lines[1]["dt"] == 0.5
    assert [line["t"] for line in lines] == [100, 101]  # the clock as each step's hook ran, not as its line was
    assert lines[0]["pid"] == os.getpid()
    assert lines[1]["peak_allocated"] == 2_000_000_000 and lines[1]["peak_reserved"] == 4_000_000_000
    assert 0 < lines[0]["probe_s"] <= lines[1]["probe_s"]
    probe.hook(_Optimizer(), (), {})  # another optimizer's step is not the training's
    assert len(probe.marks) == 4


class _Scaler:
    """torch.amp.GradScaler as the probe sees it: its step skips the optimizer's where the
    gradients held an inf or a NaN."""

    def __init__(self, probe):
        self.probe, self.found_inf = probe, False

    def step(self, optimizer):
        if not self.found_inf:
            self.probe.hook(optimizer, (), {})  # the optimizer's step, and so torch's global hook


def test_a_step_a_grad_scaler_skipped_is_a_step_said_skipped_and_a_rebuilt_optimizer_counts(tmp_path):
    module = _probe_module(tmp_path)
    cpu = types.SimpleNamespace(is_initialized=lambda: False)
    probe = module._Probe(types.SimpleNamespace(cuda=cpu, amp=types.SimpleNamespace(GradScaler=_Scaler),
                                                distributed=types.SimpleNamespace(is_available=lambda: False)))
    scaler, optimizer = _Scaler(probe), _Optimizer()
    for found_inf in (False, True, False):  # fp16's scale finding an overflow at the second step
        scaler.found_inf = found_inf
        scaler.step(optimizer)
    assert len(probe.marks) == 3
    del optimizer  # the script drops its optimizer for a new one (a stage change): its steps count now
    scaler.found_inf = False
    scaler.step(_Optimizer())
    probe.flush(wait=True)
    lines = [json.loads(line) for line in (tmp_path / "probe.0").read_text().splitlines()]
    assert [line["skipped"] for line in lines] == [False, True, False, False]


def test_an_error_of_the_probes_own_turns_it_off_and_never_fails_the_scripts_step(tmp_path, capsys):
    module = _probe_module(tmp_path)
    broken = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: 1 / 0), distributed=None)
    probe = module._Probe(broken)
    probe.hook(object(), (), {})  # raises inside: the step goes on
    probe.hook(object(), (), {})
    assert probe.off and "benchbay probe: off after an error of its own" in capsys.readouterr().err
    probe.flush(wait=True)  # at exit too


def test_the_tables_say_a_commands_skipped_steps_beside_its_figures():
    from benchbay.analysis.frame import records_to_frame
    from benchbay.analysis.tables import point_summary

    record = {"suite": "s", "run_id": "r", "point_id": "p", "label": "a", "workload": "command", "knobs": {"mbs": 1},
              "status": "ok", "metrics": {"step_time_s": 0.1, "samples_per_s_per_gpu": 10.0, "skipped_steps": 2},
              "series": {"step_times_s": [0.1] * 5}}
    notes = point_summary(records_to_frame([record]))["notes"].iloc[0]
    assert "2 steps skipped by its GradScaler" in notes


def test_torchs_own_grad_scaler_skipping_a_step_on_a_cpu_is_seen(tmp_path):
    """The same through torch.amp.GradScaler itself, in a script's process with the probe loaded as
    a command's is: an inf loss at its third step skips that optimizer step."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "scaler = torch.amp.GradScaler('cpu')\n"
        "for i in range(5):\n"
        "    opt.zero_grad()\n"
        "    loss = m(torch.randn(2, 4)).sum() * (float('inf') if i == 2 else 1.0)\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(opt)\n"
        "    scaler.update()\n")
    env = {**os.environ, "BENCHBAY_PROBE_OUT": str(tmp_path / "probe"), "PYTHONPATH": str(PROBE_DIR)}
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120)
    lines = [json.loads(line) for line in (tmp_path / "probe.0").read_text().splitlines()]
    assert [line["skipped"] for line in lines] == [False, False, True, False, False]
