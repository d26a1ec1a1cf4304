#!/bin/bash
# Downloads, here, the wheels that the GPU machine lacks into .whl/ (ignored by git), for its
# Python 3.12 / torch 2.11 image, and puts device-env.sh beside them (docs/gpu-machine.md). Usage:
#   bash tools/device-wheels.sh decoders   # av (bundles FFmpeg 8), torchcodec, decord
#   bash tools/device-wheels.sh train      # diffusers, Optuna (tune) and what they lack there
#   bash tools/device-wheels.sh all        # both (~62 MiB: close to the 64 MiB that may travel)
#   bash tools/device-wheels.sh lerobot    # LeRobot 0.6.1 and what lerobot-train needs there (~44 MiB;
#                                          # its scripts land in /tmp/site/bin: put that on PATH)
#   bash tools/device-wheels.sh dali       # NVIDIA DALI (199 MB: over what one call may carry),
#                                          # split into .whl-dali/1..4, see below
#   bash tools/device-wheels.sh NAME==VER  # any other pure or manylinux wheel
# DALI: a warm GPU machine keeps ignored files between calls (about 30 s idle), so carry .whl-dali/1,
# then 2, 3 and 4 in four calls made one right after the other, each starting with
#   mkdir -p /tmp/dali && cp .whl-dali/N/* /tmp/dali/
# and in the last one
#   cat /tmp/dali/part.* > /tmp/dali/nvidia_dali_cuda130-2.4.0-py3-none-manylinux_2_28_x86_64.whl &&
#   rm /tmp/dali/part.* && python3 -m pip install -q --no-index --no-deps --target /tmp/site /tmp/dali/*.whl
# (seen working on the H200: fn.readers.video(device="gpu") and fn.decoders.video(device="mixed")).
# Then send .whl/ along with the tree to the GPU machine and start the command there with
#   source .whl/device-env.sh || exit 1;
set -eu
tools=$(cd "$(dirname "$0")" && pwd)
cd "$tools/.."  # the repository root, wherever it is called from
[ $# -gt 0 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# pip of the project's .venv (.ci/setup), else of python3: a Debian python3 may have none
py=.venv/bin/python
[ -x "$py" ] || py=python3
mkdir -p .whl
cp -f "$tools/device-env.sh" .whl/device-env.sh
get_to() {  # DIR ARGS...: the wheels for the GPU machine's Python and platform
  dir=$1; shift
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 \
    --platform manylinux1_x86_64 -d "$dir" "$@"
}
for what in "$@"; do
  case "$what" in
    decoders) get_to .whl av==18.1.0 torchcodec==0.16.0 decord==0.6.0 ;;
    train) get_to .whl diffusers==0.42.1 importlib_metadata optuna==5.1.0 colorlog alembic mako sqlalchemy==2.1.9 ;;
    all) get_to .whl av==18.1.0 torchcodec==0.16.0 decord==0.6.0 diffusers==0.42.1 importlib_metadata ;;
    # within lerobot 0.6.1's pins (av < 16, torchcodec < 0.12, datasets < 5); the image has the rest
    # with the tracked tree (~39 MiB) they are over what one call may carry: PyAV's wheel (40 MB) is cut
    # in two, its first half into .whl-stage/ for a call of its own just before (docs/gpu-machine.md)
    lerobot) get_to .whl lerobot==0.6.1 av==15.1.0 torchcodec==0.11.1 datasets==4.8.5 dill multiprocess \
               draccus==0.11.6 mergedeep pyyaml-include toml gymnasium==1.2.2 farama-notifications jsonlines termcolor
      exclude=$(git rev-parse --git-path info/exclude)
      grep -qx '/.whl-stage/' "$exclude" 2>/dev/null || echo '/.whl-stage/' >> "$exclude"
      rm -rf .whl-stage && mkdir -p .whl-stage
      (cd .whl && split -b 22M av-15.1.0-*.whl avpart. && rm av-15.1.0-*.whl)
      mv .whl/avpart.aa .whl-stage/; du -sh .whl-stage ;;
    dali)
      d=.whl-dali; mkdir -p "$d/dl"
      exclude=$(git rev-parse --git-path info/exclude)  # .gitignore names .whl/, not this folder
      grep -qx '/.whl-dali/' "$exclude" 2>/dev/null || echo '/.whl-dali/' >> "$exclude"
      get_to "$d/dl" nvidia-dali-cuda130==2.4.0 astunparse==1.6.3 gast==0.6.0 makefun optree nvtx "libcst>=1.8,<1.9"
      (cd "$d/dl" && split -b 52M nvidia_dali_cuda130-*.whl part. && rm nvidia_dali_cuda130-*.whl)
      i=0; for part in "$d"/dl/part.*; do i=$((i + 1)); mkdir -p "$d/$i"; mv "$part" "$d/$i/"; done
      mv "$d"/dl/*.whl "$d/$i/"; rmdir "$d/dl"; du -sh "$d"/*; continue ;;
    *) get_to .whl "$what" ;;
  esac
done
du -sh .whl; ls .whl
