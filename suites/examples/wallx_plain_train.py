"""benchbay's Wall-X step as a plain training script (no harness): the same model and batches, in
the loop the Wall-X trainer runs (bf16 autocast over fp32 weights, AdamW, clip at 1.0), printing
its loss and its own clock's step time each step. Run through the ``command`` workload
(suites/wallx-command-crosscheck.yaml) its steps are timed by the probe; beside the ``wallx``
workload's eager point of the same knobs, the two step times cross-check the probe. Its own clock,
with the probe and without (suites/command-probe-overhead.yaml), says what the probe costs a step.

    python suites/examples/wallx_plain_train.py --preset wallx-3b --batch-size 16 --steps 30
"""

import argparse
import time

import torch

from benchbay.workloads.wallx.workload import WallX


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="wallx-3b")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lm-head", default="all", help="the wallx workload's lm_head knob")
    p.add_argument("--layers", default="preset", help="language layers: the preset's, or fewer (the workload's layers)")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    layers = None if args.layers == "preset" else int(args.layers)
    step = WallX({"preset": args.preset, "layers": layers}, {"mbs": args.batch_size, "lm_head": args.lm_head}, device)
    model = step.build().model
    params = [q for q in model.parameters() if q.requires_grad]
    optimizer = step.optimizer(params)
    last = time.perf_counter()
    for i in range(args.steps):
        batch = step.batch(i)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss, _ = step.loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        value = loss.item()  # waits for the step: its own clock below reads a step that has ended
        now = time.perf_counter()
        print(f"step {i} loss {value:.5f} time {now - last:.6f}", flush=True)
        last = now


if __name__ == "__main__":
    main()
