#!/usr/bin/env bash
# Run here, in the repository root, before benchmarks/gpu/run_on_device.sh is sent to the lent GPU machine:
# downloads into .whl/ (ignored by git) the wheels that machine lacks for Python 3.12 (it has JAX for CUDA 13,
# PyTorch, numba, numpy, h5py, pyyaml, tqdm, rich, opencv-python-headless, but no Keras, gymnasium or ALE, and
# no package index). About 10 MiB; the device tool carries at most 64 MiB with the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# versions this checkout was tested with (pip list here); one version of each, or the install there stops
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d .whl keras==3.15.1 optree==0.20.0 namex==0.1.0 gymnasium==1.4.0 farama-notifications==0.0.4 \
    ale-py==0.12.1 tensorboardX==2.6.5
ls -l .whl
du -sh .whl
