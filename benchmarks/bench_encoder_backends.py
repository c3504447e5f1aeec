"""The Nature CNN's forward and gradient on each Keras backend (CPU): why the Pong-size update is slower on JAX.

    python benchmarks/bench_encoder_backends.py                 # 1,000 84x84x4 frames, median of 5
    python benchmarks/bench_encoder_backends.py --frames 250 --repeats 3

Each backend runs in its own process (Keras fixes its backend at import): TensorFlow's compiled step is a
``tf.function`` over a ``GradientTape``, JAX's a ``jax.jit`` of ``value_and_grad`` over ``stateless_call``, the
way r2d2kit's updates are compiled. Prints the median seconds per step, peak RSS, and JAX / TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

BACKENDS = ("tensorflow", "jax")


def child(frames: int, repeats: int) -> dict:
    import keras
    import numpy as np

    x = np.random.default_rng(0).random((frames, 84, 84, 4), dtype=np.float32)
    model = keras.Sequential([keras.Input((84, 84, 4)), keras.layers.Conv2D(32, 8, 4, activation="relu"),
                              keras.layers.Conv2D(64, 4, 2, activation="relu"),
                              keras.layers.Conv2D(64, 3, 1, activation="relu"), keras.layers.Flatten(),
                              keras.layers.Dense(512)])
    if keras.backend.backend() == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        fixed = [v.value for v in model.non_trainable_variables]

        def loss(values, batch):
            out, _ = model.stateless_call(values, fixed, batch)
            return (out ** 2).mean()

        step = jax.jit(jax.value_and_grad(loss))

        def run() -> None:
            jax.block_until_ready(step(trainable, x))
    else:
        import tensorflow as tf

        @tf.function
        def step(batch):
            with tf.GradientTape() as tape:
                value = tf.reduce_mean(model(batch) ** 2)
            return value, tape.gradient(value, model.trainable_variables)

        def run() -> None:
            for tensor in tf.nest.flatten(step(x)):
                tensor.numpy()
    run()  # compile
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return dict(backend=keras.backend.backend(), seconds=float(np.median(times)),
                peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.frames, args.repeats)))
        return
    results = {}
    for backend in BACKENDS:
        done = subprocess.run([sys.executable, __file__, "--child", "--frames", str(args.frames), "--repeats",
                               str(args.repeats)], capture_output=True, text=True,
                              env={**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"})
        if done.returncode:
            print(f"{backend}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        results[backend] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{backend:>10}: {results[backend]['seconds']:.3f} s a step (median of {args.repeats}), "
              f"peak RSS {results[backend]['peak_rss_gib']:.2f} GiB", flush=True)
    if len(results) == len(BACKENDS):
        ratio = results["jax"]["seconds"] / results["tensorflow"]["seconds"]
        print(f"JAX / TensorFlow: {ratio:.2f}x ({args.frames} frames of 84x84x4, the Nature CNN and a dense 512; "
              f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
