"""Update fidelity: does the optimizer apply the update an fp32 AdamW would?

A pure-bf16 step at DreamZero's lr 1e-5 rounds most AdamW updates back to the old weight (the
spacing of a bf16 weight of 0.02 is ~7.8e-5), and a loss curve of a few steps after random init
cannot show it. So every training point steps, beside its own optimizer, a reference AdamW with
fp32 weights and fp32 state on a fixed sample of each trainable tensor's elements, from the same
(clipped) gradients, and compares the change the optimizer applied over the measured steps with
the reference's change.

The sample is a strided slice of each tensor (views, no copy; a gather of the same elements of a
non-contiguous one): three concatenations and a dozen element-wise kernels over ~``PER_TENSOR`` x
tensors elements a step. Where the optimizer steps fp32 master copies of the weights (offload=optimizer),
the weights sampled are the masters: the device copies are their rounding, not what training keeps.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from benchbay.analysis.update_fidelity import verdict
from benchbay.collect.compute_fidelity import ComputeFidelity
from benchbay.knobs.adam import AdamHyper, local_tensor
from benchbay.record import UPDATE_APPLIED_SHARE, UPDATE_APPLIED_SHARE_SE, UPDATE_LOST_SHARE

#: elements sampled from each trainable tensor (all of a smaller one)
PER_TENSOR = 256


def _where(t: torch.Tensor, offset: int, stride: int, k: int) -> slice | tuple[torch.Tensor, ...]:
    """The sampled elements, in the tensor's logical order: a strided slice of a contiguous tensor (a
    view), else their indices (a gather of k elements: channels_last weights, transposed views)."""
    if t.is_contiguous():
        return slice(offset, offset + stride * (k - 1) + 1, stride)
    return torch.unravel_index(offset + stride * torch.arange(k, device=t.device), t.shape)


def _sample(t: torch.Tensor, where: slice | tuple[torch.Tensor, ...]) -> torch.Tensor:
    t = local_tensor(t).detach()
    if isinstance(where, slice):
        return t.reshape(-1)[where]  # a view, or a copy of a gradient laid out otherwise than its weight
    return t[tuple(i.to(t.device) for i in where)]


class UpdateFidelity:
    """Steps the fp32 reference on the sampled elements around each optimizer step; ``summary``
    gives the applied share and the lost updates over the steps since ``start_window``."""

    def __init__(self, groups: list[tuple[list[nn.Parameter], AdamHyper]], per_tensor: int = PER_TENSOR,
                 seed: int = 0, masters: list[torch.Tensor] | None = None):
        """``masters``: where the optimizer steps copies of the weights (fp32 masters), one for each
        parameter of ``groups`` in order; their values are sampled, the parameters' gradients."""
        rng = torch.Generator().manual_seed(seed)
        flat = [(p, hyper) for params, hyper in groups for p in params]
        self.of_masters = masters is not None
        masters = masters if masters is not None else [p for p, _ in flat]
        self.params, self.weights, self.where, hypers = [], [], [], []
        for (p, hyper), weights in zip(flat, masters, strict=True):
            n = local_tensor(p).numel()
            if n == 0:
                continue
            k = min(per_tensor, n)
            stride = n // k
            offset = int(torch.randint(0, stride, (1,), generator=rng)) if stride > 1 else 0
            self.params.append(p)
            self.weights.append(weights)
            self.where.append(_where(local_tensor(p), offset, stride, k))
            hypers.append((k, hyper))
        self.elements = sum(k for k, _ in hypers)
        self.tensors = len(self.params)
        self.counts = [k for k, _ in hypers]
        if not self.params:
            return
        device = local_tensor(self.params[0]).device

        def per_element(field: str) -> torch.Tensor:
            return torch.cat([torch.full((k,), getattr(h, field), dtype=torch.float32) for k, h in hypers]).to(device)

        self.lr, self.wd = per_element("lr"), per_element("weight_decay")
        self.beta1, self.beta2, self.eps = per_element("beta1"), per_element("beta2"), per_element("eps")
        self.ref_w = self._gather_weights()
        self.m, self.v = torch.zeros_like(self.ref_w), torch.zeros_like(self.ref_w)
        self.steps = 0
        self.start_actual = self.start_ref = None
        self.missing_grads = False

    def _gather_weights(self) -> torch.Tensor:
        device = local_tensor(self.params[0]).device  # a CPU master's sample joins the device's reference
        return torch.cat([_sample(t, w).to(device) for t, w in zip(self.weights, self.where, strict=True)]).float()

    def before_step(self) -> None:
        """After the gradients are final (clipped), before the optimizer steps."""
        if not self.params:
            return
        grads = []
        for p, w, k in zip(self.params, self.where, self.counts, strict=True):
            if p.grad is None:  # AdamW skips such a tensor; the reference would not: say so
                self.missing_grads = True
                grads.append(torch.zeros(k, device=self.ref_w.device))
            else:
                grads.append(_sample(p.grad, w).float())
        g = torch.cat(grads)
        self.steps += 1
        self.m.lerp_(g, 1 - self.beta1)
        self.v.mul_(self.beta2).addcmul_(g, g * (1 - self.beta2))
        m_hat = self.m / (1 - self.beta1 ** self.steps)
        v_hat = self.v / (1 - self.beta2 ** self.steps)
        self.ref_w.mul_(1 - self.lr * self.wd).sub_(self.lr * m_hat / (v_hat.sqrt() + self.eps))

    def start_window(self) -> None:
        """At the first measured step, before it runs."""
        if self.params:
            self.start_actual, self.start_ref = self._gather_weights(), self.ref_w.clone()

    def summary(self) -> dict:
        """Figures of the measured steps: metrics and a note on what was sampled."""
        if not self.params or self.start_actual is None:
            return {}
        applied = self._gather_weights() - self.start_actual
        ref = self.ref_w - self.start_ref
        norm = float(ref.square().sum())
        if norm == 0.0:  # said, not left blank: a blank reads as a record that predates the sample
            return {"extra": {"fidelity_sample": f"not measured: the reference AdamW did not move the "
                                                 f"{self.elements} sampled elements (zero gradients or lr)"}}
        share = float((applied * ref).sum()) / norm
        residual = applied - share * ref
        se = math.sqrt(float((ref.square() * residual.square()).sum())) / norm
        moved = ref != 0
        lost = float(((applied == 0) & moved).sum()) / max(int(moved.sum()), 1)
        return {"metrics": {UPDATE_APPLIED_SHARE: share, UPDATE_APPLIED_SHARE_SE: se,
                            UPDATE_LOST_SHARE: lost, "fidelity_sampled_elements": self.elements},
                "extra": {"fidelity": verdict(share, se),
                          "fidelity_sample": (f"{PER_TENSOR} strided elements (all of smaller ones) of each of "
                                              f"{self.tensors} trainable tensors"
                                              + (" (their fp32 master copies)" if self.of_masters else "")
                                              + f", {self.elements} in all, against "
                                              f"AdamW with fp32 weights and state from the same clipped gradients"
                                              + ("; some tensors had no gradient at some steps" if
                                                 self.missing_grads else ""))}}


class Fidelity:
    """Both measures of a training point's numerics: the update's over the measured steps (above), the
    compute's once before them (benchbay.collect.compute_fidelity)."""

    def __init__(self, update: UpdateFidelity, compute: ComputeFidelity):
        self.update, self.compute = update, compute
        self.steps = 0  # steps run so far: the index of the next one

    def before_step(self) -> None:
        self.steps += 1
        self.update.before_step()

    def before_last_warmup(self) -> None:
        """Compute fidelity's passes, before the last warm-up step: that step, not a measured one,
        pays for the cache they give back."""
        self.compute.measure(self.steps)

    def start_window(self) -> None:
        """At the first measured step, before it runs (and before the worker resets the peak memory);
        compute fidelity's passes here where they did not run before the last warm-up step (a single one:
        the passes come after the first step, which compiles and captures)."""
        self.compute.measure(self.steps)
        self.update.start_window()

    def summary(self) -> dict:
        update, compute = self.update.summary(), self.compute.summary()
        out = {key: {**update.get(key, {}), **compute.get(key, {})} for key in ("metrics", "extra")
               if key in update or key in compute}
        if self.compute.untrained:
            # tensors the reference trains that got no gradient here are not updated at all, whatever
            # the share of the update the others took (compute fidelity says which: fidelity_untrained)
            out.setdefault("extra", {})["fidelity"] = "lossy"
        return out
