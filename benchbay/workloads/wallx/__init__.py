"""Wall-X (WALL-OSS): a VLA on Qwen2.5-VL-3B with a per-token action expert and flow matching.

``declared``: what a suite may set (read without torch); ``workload``: the step itself."""
