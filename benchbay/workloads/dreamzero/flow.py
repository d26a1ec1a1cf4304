"""Flow matching as DreamZero trains it: Wan's shifted sigma schedule (shift 5, 1000 steps),
timesteps drawn per latent frame and shared within each causal block (actions follow their block),
x_t = (1 - sigma) x0 + sigma noise, target = noise - x0, and the video loss weighted per frame.
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

    def sample_ids(self, batch: int, latent_frames: int, frames_per_block: int, actions_per_block: int,
                   generator: torch.Generator, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """Schedule indices per latent frame (B, F) and per action (B, blocks * actions_per_block):
        the first frame draws its own; each block of frames shares its first frame's draw."""
        ids = torch.randint(0, self.steps, (batch, latent_frames), generator=generator, device=device)
        per_block = ids[:, 1::frames_per_block]
        frame_ids = torch.cat([ids[:, :1], per_block.repeat_interleave(frames_per_block, dim=1)], dim=1)
        return frame_ids, per_block.repeat_interleave(actions_per_block, dim=1)

    def noise(self, x0: torch.Tensor, noise: torch.Tensor, ids: torch.Tensor,
              dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_t, target) for samples noised at schedule index ``ids`` along dimension ``dim``
        (the latent-frame axis of videos, the action axis of actions)."""
        shape = [1] * x0.ndim
        shape[0], shape[dim] = ids.shape
        sigma = self.sigmas[ids].view(shape)
        x0, noise = x0.float(), noise.float()
        return (1 - sigma) * x0 + sigma * noise, noise - x0

    def video_loss(self, prediction: torch.Tensor, target: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """MSE per (sample, latent frame) of (B, C, F, H, W) videos, weighted by the frame's timestep."""
        per_frame = F.mse_loss(prediction.float(), target, reduction="none").mean(dim=(1, 3, 4))
        return (per_frame * self.weights[ids]).mean()


def action_loss(prediction: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """MSE over the real (unpadded) action dimensions."""
    squared = F.mse_loss(prediction.float(), target, reduction="none") * mask
    return squared.sum() / mask.sum().clamp_min(1)
