"""The Wall-X step two ways in one process, on one model: the harness's training step (as the
``wallx`` workload runs it, eager, bf16 autocast over fp32 weights) and the loop body of
suites/examples/wallx_plain_train.py (``train_step``, its loss read a step late), alternating, each
timed between its steps' ends (CUDA events on a GPU, the host's clock on a CPU). The eager step is
bound by one host core, and its time moves by up to 15% from one process to the next on either side
of the probe's cross-check (suites/wallx-probe-crosscheck.yaml); here that noise is gone, so a
difference between the two lines is a difference of the work they queue.

On an H100 80GB HBM3 (torch 2.11.0+cu130, 12 of 36 language layers, mbs 16, 2026-12-06), the median
of 6 steps in each of 2 rounds: the harness's step 0.992 and 0.982 s, the script's 0.991 and 0.984 s
(measured by this check's first version, the same loops in turns with two more: the script's body
without its loss read, 0.991 and 1.000 s, and on one repeated batch, 0.991 and 0.979 s). The script
alone, in processes of its own, took 1.07-1.15 s a step (medians).

    PYTHONPATH=. python suites/examples/wallx_same_process.py --layers 12
"""

import argparse
import itertools
import statistics
import sys
from pathlib import Path

import torch

from benchbay.launch import training
from benchbay.workloads.wallx.workload import WallX

sys.path.insert(0, str(Path(__file__).parent))
from wallx_plain_train import mark, on_host, report, seconds, train_step  # noqa: E402 - the script beside this one


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="wallx-3b")
    p.add_argument("--layers", default="preset", help="language layers: the preset's, or fewer")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=8, help="steps a round and side; the first two are not counted")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    layers = None if args.layers == "preset" else int(args.layers)
    step = WallX({"preset": args.preset, "layers": layers}, {"mbs": args.batch_size}, device)
    with training.process_settings(step.knob_values):
        harness = training.prepare(step, step.knob_values, device)
        pending = [None, None]  # the script's step whose loss is still to be read; its last step's end

        def script(batch):
            loss = train_step(step, harness.model, harness.params, harness.optimizer, batch)
            host, end = on_host(loss), mark(device)
            if pending[0] is not None:
                report(*pending[0])
            pending[:] = (index, host, pending[1], end), end

        index = 0
        for round_ in range(args.rounds):
            for side, run in (("harness", harness), ("script", script)):
                ends = [mark(device)]
                pending[:] = None, ends[0]
                for _ in range(args.steps):
                    run(step.batch(index))
                    index += 1
                    ends.append(mark(device))
                if pending[0] is not None:  # the script's last loss, before the harness steps again
                    report(*pending[0])
                times = [seconds(a, b) for a, b in itertools.pairwise(ends)][2:]
                print(f"round {round_} {side}: median {statistics.median(times):.3f} s a step "
                      f"({', '.join(f'{t:.3f}' for t in times)})", flush=True)


if __name__ == "__main__":
    main()
