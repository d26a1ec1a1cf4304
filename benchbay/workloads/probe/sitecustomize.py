"""benchbay's step probe: put first on a command's PYTHONPATH (benchbay.workloads.command), Python
imports it at start-up in every process of the command (torchrun's ranks and DataLoader workers
included). Where ``BENCHBAY_PROBE_OUT`` is set, it waits for ``torch.optim.optimizer`` to be
imported by the script (so a process that never trains never imports torch for it), then registers
torch's global optimizer-step post hook and, from the first step on, appends one JSON line per step
to ``$BENCHBAY_PROBE_OUT.<rank>`` (the rank torch.distributed gives, else ``RANK``, else 0; each
line names its process, for scripts that start several without a rank, and the ranks of its world):
the step's duration from the previous step's end (CUDA events on a GPU, read once completed, so the
probe never synchronises; the host clock on a CPU), the wall clock at the step's end, peak allocated
and reserved device memory so far, and the host seconds spent in the probe's hook so far (its cost a
step on the host, hidden wherever the device is behind the host). A step a GradScaler skipped (no
optimizer step, so no hook) is marked all the same, and said; an optimizer the script drops for a
new one hands the count to the new one. It never asks CUDA anything before
the script's first step has (``torch.cuda.is_available()`` would initialise the driver in every
process, DataLoader workers included), and an error of its own turns it off rather than fail the
script's step. Where ``BENCHBAY_PROBE_PROFILE`` names a folder (``benchbay profile``),
torch.profiler runs over the steps after the first ``BENCHBAY_PROBE_PROFILE_AFTER``: one step its
warm-up, then ``BENCHBAY_PROBE_PROFILE_STEPS`` recorded, the trace written to ``trace.json`` there
(``rank<N>/`` under torchrun) as the last ends. Standalone on purpose: the command's Python need not
have benchbay installed. A sitecustomize of the command's own later on the path still runs."""

import importlib.abc
import importlib.util
import json
import os
import resource
import sys
import time
import weakref

OUT = os.environ.get("BENCHBAY_PROBE_OUT")
PROFILE = os.environ.get("BENCHBAY_PROBE_PROFILE")
#: the steps before the profiled ones, and the profiled ones (after the profiler's own warm-up step)
PROFILE_AFTER, PROFILE_STEPS = (int(os.environ[f"BENCHBAY_PROBE_PROFILE_{k}"]) for k in ("AFTER", "STEPS")) \
    if PROFILE else (0, 0)
HOOKED = "torch.optim.optimizer"


class _Probe:
    def __init__(self, torch):
        self.torch = torch
        self.cuda = False  # decided at the first step: CUDA events once the script's CUDA is up
        self.rank, self.world = "0", 1
        self.file = None
        # the first optimizer that steps, weakly: its steps are the training's, until the script drops
        # it for another (an optimizer rebuilt at a stage change), whose steps then count
        self.optimizer = None
        self.marks = []  # per step: a CUDA event, or the host clock
        self.ended = []  # per step: the wall clock as its hook ran (the host's view of its end)
        self.written = 0
        self.off = False
        self.profiler = None
        self.spent = 0.0  # host seconds inside the hook, over the steps whose hook has returned
        self.skipped = set()  # the steps a GradScaler skipped (inf or NaN gradients): iterations all the same

    def hook(self, optimizer, args, kwargs):
        if self.off:
            return
        entered = time.perf_counter()
        try:
            self._hook(optimizer)
        except Exception as exc:  # noqa: BLE001 - the script's step must not fail for the probe
            self.off = True
            print(f"benchbay probe: off after an error of its own: {exc!r}", file=sys.stderr, flush=True)
        finally:
            self.spent += time.perf_counter() - entered

    def _first(self, optimizer):
        """At the first step: the optimizer whose steps count, the clock, the rank and its file."""
        torch = self.torch
        self.optimizer = weakref.ref(optimizer)
        self._watch_scaler()
        self.cuda = torch.cuda.is_initialized()
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.rank = str(torch.distributed.get_rank()) if distributed else os.environ.get("RANK", "0")
        self.world = torch.distributed.get_world_size() if distributed else int(os.environ.get("WORLD_SIZE", "1"))
        self.file = open(f"{OUT}.{self.rank}", "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def _watch_scaler(self):
        """A GradScaler skips the optimizer's step, so its hook, where the gradients hold an inf or
        a NaN (fp16's first steps, often): that iteration's end is marked all the same, or the next
        step's time would hold two."""
        scaler = getattr(getattr(self.torch, "amp", None), "GradScaler", None)
        if scaler is None:
            return
        probe, original = self, scaler.step

        def step(scaler_self, optimizer, *args, **kwargs):
            marked = len(probe.marks)
            result = original(scaler_self, optimizer, *args, **kwargs)
            if len(probe.marks) == marked and probe.optimizer() is optimizer:
                probe.skipped.add(marked)  # before the hook: on a CPU it writes the step's line at once
                probe.hook(optimizer, args, kwargs)
            return result

        scaler.step = step

    def _hook(self, optimizer):
        if self.optimizer is None:
            self._first(optimizer)
        elif self.optimizer() is None:  # the counted optimizer is gone: the script built another
            self.optimizer = weakref.ref(optimizer)
        if self.optimizer() is not optimizer:
            return
        torch = self.torch
        self.ended.append(time.time())
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())
        self.flush(wait=False)
        if PROFILE:
            self.profile(len(self.marks))

    def profile(self, ended):
        """After ``ended`` steps: enter the profiler as the first step after the measured ones begins,
        step it as each ends, and write its trace as the last profiled one ends."""
        profiler = self.torch.profiler
        after, steps = PROFILE_AFTER, PROFILE_STEPS
        if ended == after:
            activities = [profiler.ProfilerActivity.CPU] + ([profiler.ProfilerActivity.CUDA] if self.cuda else [])
            self.profiler = profiler.profile(activities=activities,
                                             schedule=profiler.schedule(wait=0, warmup=1, active=steps, repeat=1))
            self.profiler.__enter__()
        elif self.profiler is not None:
            self.profiler.step()
            if ended == after + 1 + steps:
                self.profiler.__exit__(None, None, None)
                folder = PROFILE if os.environ.get("WORLD_SIZE", "1") == "1" else \
                    os.path.join(PROFILE, "rank" + self.rank)
                os.makedirs(folder, exist_ok=True)
                trace = os.path.join(folder, "trace.json")
                self.profiler.export_chrome_trace(trace + ".tmp")
                os.replace(trace + ".tmp", trace)  # whole, or not there: the worker waits for it
                self.profiler = None

    def flush(self, wait):
        """Write every step whose end and the previous one's are known (all of them when ``wait``)."""
        if self.off:
            return
        torch = self.torch
        while self.written < len(self.marks):
            i = self.written
            mark = self.marks[i]
            if self.cuda:
                if wait:
                    mark.synchronize()
                elif not mark.query():
                    return
                dt = self.marks[i - 1].elapsed_time(mark) / 1e3 if i else None
                # the allocator's stats once, unflattened: max_memory_allocated() and _reserved() each
                # flatten and sort all of them (about 110) in Python, on the user's step
                stats = torch.cuda.memory_stats_as_nested_dict()
                mem = {f"peak_{kind}": stats.get(f"{kind}_bytes", {}).get("all", {}).get("peak", 0)
                       for kind in ("allocated", "reserved")}
            else:
                dt, mem = (mark - self.marks[i - 1] if i else None), {}
            # this process's peak RSS since it started (the OS keeps no window): a CPU run's peak memory
            mem["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            self.file.write(json.dumps({"step": i, "dt": dt, "t": self.ended[i], "pid": os.getpid(),
                                        "world": self.world, "probe_s": self.spent, "skipped": i in self.skipped,
                                        **mem}) + "\n")
            self.written += 1


def _install(module):
    import atexit

    import torch

    probe = _Probe(torch)
    module.register_optimizer_step_post_hook(probe.hook)
    atexit.register(probe.flush, True)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``_install`` once ``torch.optim.optimizer`` has been executed."""

    def find_spec(self, name, path, target=None):
        if name != HOOKED:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _install(module)

        spec.loader.exec_module = exec_module
        return spec


def _chain():
    """The next sitecustomize on the path (the command's own), run as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in sys.path:
        candidate = os.path.join(folder or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(folder or os.getcwd()) != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_sitecustomize_chained", candidate)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if OUT:
    if HOOKED in sys.modules:
        _install(sys.modules[HOOKED])
    else:
        sys.meta_path.insert(0, _AfterImport())
_chain()
