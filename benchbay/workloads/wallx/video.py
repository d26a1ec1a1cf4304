"""Wall-X's LIBERO sample as its loader hands it to the step (``data: video``): the current frame of
each camera through transformers' Qwen2-VL image processor, its PIL/numpy version wherever it runs
(smart-resize to the preset's size, rescale, normalise, cut into the vision tower's patch rows), the
cameras' rows one after another.

Upstream: ``PreprocessedDataset._vision_preprocess`` (``smart_resize``) and ``DataCollator.load_processor``
(``AutoProcessor``) in X-Square-Robot/wall-x@17335bcc3dd8:wall_x/data/load_lerobot_dataset.py; the frames come from
``LeRobotDataset(..., video_backend="pyav")`` there (``load_lerobot_data``)."""

from __future__ import annotations

import torch

try:  # transformers >= 5.2x names its PIL/numpy processor apart from the torchvision one
    from transformers import Qwen2VLImageProcessorPil as ImageProcessor
except ImportError:
    from transformers import Qwen2VLImageProcessor as ImageProcessor

from benchbay.workloads.wallx.config import Preset


class QwenPatches:
    """Views (each (1, h, w, 3) uint8) -> (cameras x patches, C x T x P x P) float32 pixel rows."""

    def __init__(self, preset: Preset):
        v, side = preset.vision, preset.resized_image
        self.cameras = preset.cameras
        self.processor = ImageProcessor(patch_size=v["patch_size"], merge_size=v["spatial_merge_size"],
                                        temporal_patch_size=v["temporal_patch_size"],
                                        min_pixels=side * side, max_pixels=side * side)

    def __call__(self, views: list[torch.Tensor]) -> torch.Tensor:
        if len(views) != self.cameras:
            raise ValueError(f"a Wall-X sample has {self.cameras} camera views, got {len(views)}")
        images = [view[0].numpy() for view in views]
        return self.processor(images=images, return_tensors="pt")["pixel_values"]
