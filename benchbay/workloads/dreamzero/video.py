"""DreamZero's DROID sample as its loader hands it to the step (``data: video``): the three views'
frames tiled into one canvas of twice the view's height and width, the wrist view across the top
row and the two exterior views below it, each view resized (14B: first cropped to 95%) to fill its
place. uint8 in, uint8 out: the step itself normalises and resizes the canvas as the official head does.

Upstream: the tiling in ``DreamTransform._prepare_video`` of
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/transform/dreamzero_cotrain.py;
the per-view ``VideoCrop`` (scale 0.95, random position, in the DROID transforms of both presets' data configs)
and ``VideoResize`` in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/configs/data/dreamzero/base_48_wan_fine_aug_relative.yaml;
the view sizes: 176x320 in dreamzero0/dreamzero@ab790c198fbc:scripts/train/droid_training_full_finetune_wan21.sh (14B),
160x320 in dreamzero0/dreamzero@ab790c198fbc:groot/vla/configs/data/dreamzero/droid_relative_wan22.yaml (5B)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchbay.workloads.dreamzero.config import SampleShape


class DroidCanvas:
    """Views (exterior 1, exterior 2, wrist; each (frames, h, w, 3) uint8) -> (3, frames, H, W) uint8."""

    def __init__(self, sample: SampleShape):
        self.height, self.width = sample.canvas
        self.crop = sample.view_crop

    def _view(self, frames: torch.Tensor, width: int) -> torch.Tensor:
        x = frames.permute(0, 3, 1, 2).float()
        if self.crop < 1:  # the centre of the view
            h, w = x.shape[-2:]
            ch, cw = round(h * self.crop), round(w * self.crop)
            x = x[..., (h - ch) // 2:(h - ch) // 2 + ch, (w - cw) // 2:(w - cw) // 2 + cw]
        return F.interpolate(x, size=(self.height // 2, width), mode="bilinear", align_corners=False)

    def __call__(self, views: list[torch.Tensor]) -> torch.Tensor:
        if len(views) != 3:
            raise ValueError(f"a DROID sample has 3 views (2 exterior, 1 wrist), got {len(views)}")
        exterior_1, exterior_2, wrist = views
        bottom = torch.cat([self._view(exterior_1, self.width // 2), self._view(exterior_2, self.width // 2)], dim=-1)
        canvas = torch.cat([self._view(wrist, self.width), bottom], dim=-2)
        return canvas.round_().clamp_(0, 255).to(torch.uint8).permute(1, 0, 2, 3)
