"""Memory and speed of SequenceReplayBuffer against storing every R2D2 window densely.

Feeds synthetic Atari-sized episodes (84x84 uint8 observations, LSTM state 2 x 512 float32) through
SequenceBuilder into SequenceReplayBuffer with the R2D2 window layout (burn-in 40, trace 80,
n-step 5, period 40) and prints, per stored step: the buffer's bytes, the raw step size
(observation + action + reward) and what dense per-window storage would need.

    python benchmarks/bench_sequence_memory.py            # 50k-step ring, about a minute
    python benchmarks/bench_sequence_memory.py --quick    # 5k-step ring, a few seconds
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from r2d2kit.replay import SequenceBuilder, SequenceReplayBuffer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--units", type=int, default=512)
    args = parser.parse_args(argv)

    capacity = 5_000 if args.quick else 50_000
    burn_in, trace, n_step, period = 40, 80, 5, 40
    obs_shape, units, envs = (84, 84), args.units, args.envs
    builder = SequenceBuilder(envs, burn_in, trace, n_step, period)
    buffer = SequenceReplayBuffer(capacity, {"obs": (obs_shape, "uint8"), "action": ((), "int64")},
                                  {"state_h": ((units,), "float32"), "state_c": ((units,), "float32")},
                                  burn_in=burn_in, trace_length=trace, n_step=n_step, period=period, seed=0)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, size=(64,) + obs_shape, dtype=np.uint8)
    lengths = rng.integers(200, 2000, size=(envs, 10_000))
    time_in_episode = np.zeros(envs, dtype=int)
    episode = np.zeros(envs, dtype=int)
    state = (np.zeros((envs, units), np.float32), np.zeros((envs, units), np.float32))
    steps = 2 * capacity // envs  # the ring wraps about twice
    add_seconds, windows, windows_seen = 0.0, 0, False
    start = time.perf_counter()
    for step in range(steps):
        length = lengths[np.arange(envs), episode]
        done = time_in_episode == length - 1
        obs = frames[(step + np.arange(envs)) % len(frames)]
        out = builder.step(obs, rng.integers(0, 18, envs), rng.random(envs), done, np.zeros(envs, bool), state)
        ended = time_in_episode == length
        time_in_episode = np.where(ended, 0, time_in_episode + 1)
        episode += ended
        if out is not None:
            t = time.perf_counter()
            buffer.add_sequences(out)
            if windows_seen:  # the first call loads the compiled kernels: not part of the steady state
                add_seconds += time.perf_counter() - t
                windows += len(out["env"])
            windows_seen = True
    total_seconds = time.perf_counter() - start

    raw_step = int(np.prod(obs_shape)) + 8 + 4  # observation + int64 action + float32 reward
    per_step = buffer.nbytes / capacity
    state_bytes = 2 * units * 4
    dense_per_step = (buffer.length * raw_step + state_bytes) / period  # every window stored in full
    sample_times = []
    for _ in range(20):
        t = time.perf_counter()
        buffer.sample(64)
        sample_times.append(time.perf_counter() - t)
    result = {
        "capacity_steps": capacity,
        "bytes_per_step": per_step,
        "raw_step_bytes": raw_step,
        "ratio_to_raw": per_step / raw_step,
        "dense_windows_ratio_to_raw": dense_per_step / raw_step,
        "add_us_per_window": 1e6 * add_seconds / max(windows, 1),
        "sample64_ms": 1e3 * float(np.median(sample_times)),
        "steps_fed": steps * envs,
        "seconds": total_seconds,
    }
    print(f"SequenceReplayBuffer, obs {obs_shape} uint8, state 2x{units} f32, burn-in {burn_in}, trace {trace}, "
          f"n-step {n_step}, period {period}, ring {capacity} steps, {envs} envs, {steps * envs} steps fed")
    print("| measure | value |\n|---|---:|")
    print(f"| bytes per stored step (r2d2kit, all arrays incl. slot table and states) | {per_step:,.0f} |")
    print(f"| raw step (obs + action + reward) | {raw_step:,} |")
    print(f"| r2d2kit / raw | {result['ratio_to_raw']:.3f}x |")
    print(f"| dense windows (each window stores its {buffer.length} rows) / raw | "
          f"{result['dense_windows_ratio_to_raw']:.2f}x |")
    print(f"| add_sequences, per window | {result['add_us_per_window']:,.0f} us |")
    print(f"| sample(64) windows of {buffer.length} rows | {result['sample64_ms']:.1f} ms |")
    return result


if __name__ == "__main__":
    main()
