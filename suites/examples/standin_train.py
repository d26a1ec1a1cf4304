"""A stand-in for an environment-switch training image such as Wall-X's `run_wallx_optimized.sh`:
a small transformer trained for a fixed number of iterations, its optimisations switched by
environment variables, its loss printed each iteration. benchbay runs it unchanged through the
`command` workload (suites/examples/env-switches.yaml); nothing here knows about benchbay.

Switches: WALLX_PERF_ATTN=1 fused attention (scaled_dot_product_attention) instead of the eager
softmax(QK^T)V; WALLX_PERF_COMPILE=1 torch.compile of the model; WALLX_PERF_DDP=1 DistributedDataParallel
when launched by torchrun (gloo on a CPU, NCCL on GPUs); WALLX_PERF_BUCKET=MB its bucket size."""

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads, fused):
        super().__init__()
        self.heads, self.fused = heads, fused
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.softmax(q @ k.transpose(-1, -2) / (w // self.heads) ** 0.5, dim=-1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, w))
        return x + self.mlp(self.norm2(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    distributed = "RANK" in os.environ and os.environ.get("WALLX_PERF_DDP") == "1"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else \
        torch.device("cpu")
    if distributed:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.width, 4, os.environ.get("WALLX_PERF_ATTN") == "1") for _ in range(4)],
                          nn.Linear(args.width, 1)).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=int(os.environ.get("WALLX_PERF_BUCKET", 25)))
    if os.environ.get("WALLX_PERF_COMPILE") == "1":
        model = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for iteration in range(args.iterations):
        x = torch.randn(args.batch_size, args.tokens, args.width, device=device)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"iteration {iteration} loss {loss.item():.5f}", flush=True)
    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
