"""benchbay's Wall-X step as a plain training script (no harness): the same model and batches, in
the loop the Wall-X trainer runs (bf16 autocast over fp32 weights, AdamW, clip at 1.0), printing
its loss and its own clock's step time each step. Run through the ``command`` workload
(suites/wallx-probe-crosscheck.yaml) its steps are timed by the probe; beside the ``wallx``
workload's eager point of the same knobs, the two step times cross-check the probe. Its own clock,
with the probe and without (suites/command-probe-overhead.yaml), says what the probe costs a step.
``--build harness`` takes the model and optimizer from the harness's own preparation of the point
(``training.prepare``, under its process settings) instead of building them as a user's script would:
the same loop over the harness's objects, to tell a difference of the objects from one of the process.

A step's loss is read one step late, once the next step's work is queued, as the harness reads its
losses after its steps (a ``loss.item()`` in its own step would hold the host until the device has
drained). ``train_step`` is the loop's body, which suites/examples/wallx_same_process.py also times.

    python suites/examples/wallx_plain_train.py --preset wallx-3b --batch-size 16 --steps 30
"""

import argparse
import contextlib
import time

import torch

from benchbay.launch import training
from benchbay.workloads.wallx.workload import WallX


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="wallx-3b")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lm-head", default="all", help="the wallx workload's lm_head knob")
    p.add_argument("--vision-attention", default="sdpa", help="the wallx workload's vision_attention knob")
    p.add_argument("--layers", default="preset", help="language layers: the preset's, or fewer (the workload's layers)")
    p.add_argument("--build", choices=("plain", "harness"), default="plain",
                   help="the model and optimizer as a script builds them, or as the harness prepares the point")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    layers = None if args.layers == "preset" else int(args.layers)
    step = WallX({"preset": args.preset, "layers": layers}, {"mbs": args.batch_size, "lm_head": args.lm_head,
                                                                   "vision_attention": args.vision_attention}, device)
    with contextlib.ExitStack() as stack:
        if args.build == "harness":
            stack.enter_context(training.process_settings(step.knob_values))
            prepared = training.prepare(step, step.knob_values, device)
            model, params, optimizer = prepared.model, prepared.params, prepared.optimizer
        else:
            model = step.build().model
            params = [q for q in model.parameters() if q.requires_grad]
            optimizer = step.optimizer(params)
        train(step, model, params, optimizer, args.steps, device)


def train(step: WallX, model: torch.nn.Module, params: list, optimizer: torch.optim.Optimizer, steps: int,
          device: torch.device) -> None:
    """The loop: a step, its loss copied out, and the step before's loss and time printed."""
    start, pending = mark(device), None
    for i in range(steps):
        loss = train_step(step, model, params, optimizer, step.batch(i))
        host, end = on_host(loss), mark(device)
        if pending is not None:
            report(*pending)
        pending, start = (i, host, start, end), end
    report(*pending)


def train_step(step: WallX, model: torch.nn.Module, params: list, optimizer: torch.optim.Optimizer,
               batch) -> torch.Tensor:
    """One step of the Wall-X trainer's loop; returns its loss (not read)."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(step.device.type, dtype=torch.bfloat16):
        loss, _ = step.loss(model, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    return loss


def mark(device: torch.device) -> torch.cuda.Event | float:
    """Now, on the script's own clock: an event queued on a GPU, the host's clock on a CPU (where
    the step has ended when its calls return)."""
    if device.type != "cuda":
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def on_host(loss: torch.Tensor) -> torch.Tensor:
    """The loss, copied to the host as its step ends (without waiting for it)."""
    if loss.device.type != "cuda":
        return loss.detach()
    host = torch.empty((), dtype=loss.dtype, pin_memory=True)
    return host.copy_(loss.detach(), non_blocking=True)


def report(i: int, loss: torch.Tensor, start: torch.cuda.Event | float, end: torch.cuda.Event | float) -> None:
    """Step ``i``'s loss and its time between the end of the step before and its own end."""
    took = seconds(start, end)  # waits for the step, and its loss's copy queued before ``end``
    print(f"step {i} loss {loss.item():.5f} time {took:.6f}", flush=True)


def seconds(start: torch.cuda.Event | float, end: torch.cuda.Event | float) -> float:
    """The time between two marks, once the later has been reached."""
    if isinstance(end, float):
        return end - start
    end.synchronize()
    return start.elapsed_time(end) / 1e3


if __name__ == "__main__":
    main()
