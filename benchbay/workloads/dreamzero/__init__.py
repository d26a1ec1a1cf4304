"""DreamZero (a World Action Model on a Wan video-diffusion transformer): its training step.

``declared``: what a suite may set (read without torch); ``workload``: the step itself."""
