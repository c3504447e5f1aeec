#!/usr/bin/env bash
# R2D2 on a lent GPU (one H100 or H200, 16 cores, Python 3.12 with JAX for CUDA 13 and PyTorch; no TensorFlow,
# Keras or gymnasium, no package index). Here, first: benchmarks/gpu/prepare_carry.sh (wheels into .whl/). Then
# one device run, carrying .whl, of at most nine minutes:
#
#     bash benchmarks/gpu/run_on_device.sh
#
# (a) the update at the R2D2 paper's scale (configs/pong.yaml: batch 64, 40 burn-in + 80 trained + 5 n-step rows
#     of 84x84 frames, Nature CNN, LSTM 512) on Keras' JAX backend on the GPU beside the PyTorch twin (cuDNN
#     nn.LSTM) on the same GPU, both with priorities back on the host (benchmarks/bench_update.py);
# (b) configs/pong.yaml trained with the learner on the GPU and actor processes on the CPU cores until the time
#     is up (SIGINT: a clean stop with a final checkpoint and summary.json): env steps/s, updates/s and the greedy
#     evaluations (metrics.csv).
# Results go to $OUT (the device tool brings back 8 files). On a CPU, to test the script: OUT=/tmp/gpu-test
# NO_CARRY=1 TWIN_DEVICE=cpu BENCH_ARGS=--quick PONG_SECONDS=120 ACTORS=2 bash benchmarks/gpu/run_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/r2d2kit-gpu}
TWIN_DEVICE=${TWIN_DEVICE:-cuda}
BENCH_ARGS=${BENCH_ARGS:-}
PONG_SECONDS=${PONG_SECONDS:-300}
ACTORS=${ACTORS:-14}  # 14 actor processes x 4 envs on 16 cores: the learner and the OS keep two
mkdir -p "$OUT"
if [ -z "${NO_CARRY:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then  # NO_CARRY=1: a machine that has them
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
fi
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
{
    date -u
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    python3 -c "import jax, keras, torch; print('jax', jax.__version__, jax.devices(), '| keras', keras.__version__,
                '| torch', torch.__version__, 'cuda' if torch.cuda.is_available() else 'cpu')"
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

# (a) about two minutes: the equivalence check, then 3 untimed and 20 timed updates of each
timeout 240 python3 benchmarks/bench_update.py --only pong --backend jax --twin-device "$TWIN_DEVICE" --markdown \
    --json "$OUT/update_pong.json" $BENCH_ARGS > "$OUT/update.log" 2>&1
echo "update benchmark: exit $?"
grep -v "^I0000\|^W0000" "$OUT/update.log" | tail -20

# (b) the rest of the time
run=/tmp/r2d2kit-pong
rm -rf "$run"
timeout -s INT -k 60 "$PONG_SECONDS" python3 -m r2d2kit.train configs/pong.yaml --run-dir "$run" \
    --set actors.num_actors="$ACTORS" --set logging.progress=false --set checkpoints.save_replay=false \
    > "$OUT/pong.log" 2>&1
echo "pong: exit $?"
for name in summary.json metrics.csv startup.txt health.csv; do
    cp "$run/$name" "$OUT/" 2>/dev/null || echo "pong: no $name"
done
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
seconds = summary.get("train_seconds") or float("nan")
print(f"pong: {summary.get('env_steps', 0):,} env steps ({summary.get('env_steps', 0) / seconds:.0f}/s), "
      f"{summary.get('updates', 0):,} updates ({summary.get('updates', 0) / seconds:.2f}/s) in {seconds:.0f} s; "
      f"stopped by {summary.get('stopped_by')}")
metrics = out / "metrics.csv"
print(metrics.read_text() if metrics.exists() else "pong: no evaluation yet")
PY
