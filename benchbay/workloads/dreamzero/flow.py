"""Flow matching as DreamZero trains it: Wan's shifted sigma schedule (shift 5, 1000 steps),
timesteps drawn per latent frame and shared within each causal block (actions follow their block),
x_t = (1 - sigma) x0 + sigma noise, target = noise - x0, and the video loss weighted per frame.

``FlowMatching`` keeps everything on the device. ``HostSyncFlowMatching`` (``host_syncs=official``)
does the same arithmetic the way the official step does it, through the CPU: schedule indices
drawn on the CPU and copied over, and the scheduler's ``add_noise`` / ``training_weight`` looking
sigmas and weights up from the timestep values on the CPU (``timestep.cpu()``, an argmin over the
schedule, the result copied back): a host synchronisation each.

Upstream:
- dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/flow_match_scheduler.py::FlowMatchScheduler
  (``set_timesteps``: the shifted sigmas and the training weights; ``add_noise`` and
  ``training_weight``: the ``timestep.cpu()`` / argmin look-ups; ``training_target``: noise - x0)
- dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/action_head/wan_flow_matching_action_tf.py
  (``WANPolicyHead.__init__``: ``FlowMatchScheduler(shift=5, sigma_min=0.0, extra_one_step=True)``;
  ``WANPolicyHead.forward``: ``torch.randint`` timestep ids on the CPU, shared within each block and
  repeated for the block's actions, the weighted dynamics and action losses)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class FlowMatching:
    def __init__(self, device: torch.device | str, shift: float = 5.0, steps: int = 1000):
        self.steps = steps
        sigmas = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)[:-1]
        sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
        timesteps = sigmas * steps
        # Wan's training weights: a bell over the timesteps, shifted to 0 at its ends, mean 1
        bell = torch.exp(-2 * ((timesteps - steps / 2) / steps) ** 2)
        bell = bell - bell.min()
        weights = bell * (steps / bell.sum())
        self.sigmas, self.timesteps, self.weights = (t.to(device=device, dtype=torch.float32)
                                                     for t in (sigmas, timesteps, weights))
        self.device = torch.device(device)

    def sample_ids(self, batch: int, latent_frames: int, frames_per_block: int, actions_per_block: int,
                   seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Schedule indices per latent frame (B, F) and per action (B, blocks * actions_per_block),
        on the device: the first frame draws its own; each block of frames shares its first
        frame's draw."""
        ids = self._draw((batch, latent_frames), seed)
        per_block = ids[:, 1::frames_per_block]
        frame_ids = torch.cat([ids[:, :1], per_block.repeat_interleave(frames_per_block, dim=1)], dim=1)
        return frame_ids, per_block.repeat_interleave(actions_per_block, dim=1)

    def _draw(self, shape: tuple[int, ...], seed: int) -> torch.Tensor:
        # the CPU's generator in both classes, so that both ways train on the same schedule
        return self._place(torch.randint(0, self.steps, shape, generator=torch.Generator().manual_seed(seed)))

    def _place(self, ids: torch.Tensor) -> torch.Tensor:
        """To the device, pinned and asynchronous: no host sync in the step."""
        if self.device.type == "cuda":
            ids = ids.pin_memory()
        return ids.to(self.device, non_blocking=True)

    def timesteps_of(self, ids: torch.Tensor) -> torch.Tensor:
        """The timestep values (what the model embeds) of schedule indices, on the device."""
        return self.timesteps[ids]

    def sigmas_of(self, ids: torch.Tensor) -> torch.Tensor:
        return self.sigmas[ids]

    def weights_of(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weights[ids]

    def noise(self, x0: torch.Tensor, noise: torch.Tensor, ids: torch.Tensor,
              dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_t, target) for samples noised at schedule index ``ids`` along dimension ``dim``
        (the latent-frame axis of videos, the action axis of actions)."""
        shape = [1] * x0.ndim
        shape[0], shape[dim] = ids.shape
        sigma = self.sigmas_of(ids).view(shape)
        x0, noise = x0.float(), noise.float()
        return (1 - sigma) * x0 + sigma * noise, noise - x0

    def video_loss(self, prediction: torch.Tensor, target: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """MSE per (sample, latent frame) of (B, C, F, H, W) videos, weighted by the frame's timestep."""
        per_frame = F.mse_loss(prediction.float(), target, reduction="none").mean(dim=(1, 3, 4))
        return (per_frame * self.weights_of(ids)).mean()


class HostSyncFlowMatching(FlowMatching):
    """The same schedule, driven through the CPU as the official step drives it."""

    def __init__(self, device: torch.device | str, shift: float = 5.0, steps: int = 1000):
        super().__init__(device, shift, steps)
        self.cpu_timesteps, self.cpu_sigmas, self.cpu_weights = (t.cpu() for t in
                                                                 (self.timesteps, self.sigmas, self.weights))

    def _place(self, ids: torch.Tensor) -> torch.Tensor:
        return ids  # they stay on the CPU, where the official step's torch.randint draws them

    def timesteps_of(self, ids: torch.Tensor) -> torch.Tensor:
        return self.cpu_timesteps[ids.cpu()].to(self.device)

    def _lookup(self, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """A table's value at each timestep, found from the timestep values on the CPU and copied back."""
        t = self.timesteps_of(ids).cpu()
        nearest = (self.cpu_timesteps[:, None] - t.flatten()[None]).abs().argmin(dim=0)
        return table[nearest].view(t.shape).to(self.device)

    def sigmas_of(self, ids: torch.Tensor) -> torch.Tensor:
        return self._lookup(ids, self.cpu_sigmas)

    def weights_of(self, ids: torch.Tensor) -> torch.Tensor:
        return self._lookup(ids, self.cpu_weights)


def action_loss(prediction: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """MSE over the real (unpadded) action dimensions."""
    squared = F.mse_loss(prediction.float(), target, reduction="none") * mask
    return squared.sum() / mask.sum().clamp_min(1)
