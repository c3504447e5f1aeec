"""Memory and speed of SequenceReplayBuffer against storing every R2D2 window densely.

    python benchmarks/bench_sequence_memory.py            # 50k-step ring, about a minute
    python benchmarks/bench_sequence_memory.py --quick    # 5k-step ring, a few seconds

Bytes per stored step of synthetic Atari-sized episodes, against the raw step and dense per-window storage.
"""

import time

import harness
import numpy as np
from harness import ATARI_LAYOUT, atari_sequence_buffer, atari_windows, median_s, table, timed_ns


def main(argv: list[str] | None = None) -> dict:
    args = harness.arg_parser(__doc__, "quick").parse_args(argv)
    capacity = 5_000 if args.quick else 50_000
    obs_shape, units, envs = (84, 84), 512, 4
    buffer = atari_sequence_buffer(capacity, units)
    steps = 2 * capacity // envs  # the ring wraps about twice
    add_ns, windows, start = [], [], time.perf_counter()
    for out in atari_windows(steps, envs, units):
        add_ns.append(timed_ns(lambda out=out: buffer.add_sequences(out)))
        windows.append(len(out["env"]))
    total_seconds = time.perf_counter() - start

    raw_step = int(np.prod(obs_shape)) + 8 + 4  # observation + int64 action + float32 reward
    per_step = buffer.nbytes / capacity
    dense_per_step = (buffer.length * raw_step + 2 * units * 4) / ATARI_LAYOUT["period"]  # every window in full
    result = {"capacity_steps": capacity, "bytes_per_step": per_step, "raw_step_bytes": raw_step,
              "ratio_to_raw": per_step / raw_step, "dense_windows_ratio_to_raw": dense_per_step / raw_step,
              # the first call loads the compiled kernels: not part of the steady state
              "add_us_per_window": 1e-3 * sum(add_ns[1:]) / max(sum(windows[1:]), 1),
              "sample64_ms": 1e3 * median_s(lambda: buffer.sample(64), 20, warmup=0), "steps_fed": steps * envs,
              "seconds": total_seconds}
    print(f"SequenceReplayBuffer, obs {obs_shape} uint8, state 2x{units} f32, burn-in {ATARI_LAYOUT['burn_in']}, "
          f"trace {ATARI_LAYOUT['trace_length']}, n-step {ATARI_LAYOUT['n_step']}, period {ATARI_LAYOUT['period']}, "
          f"ring {capacity} steps, {envs} envs, {steps * envs} steps fed")
    print(table(["measure", "value"], [
        ["bytes per stored step (r2d2kit, all arrays incl. slot table and states)", f"{per_step:,.0f}"],
        ["raw step (obs + action + reward)", f"{raw_step:,}"],
        ["r2d2kit / raw", f"{result['ratio_to_raw']:.3f}x"],
        [f"dense windows (each window stores its {buffer.length} rows) / raw",
         f"{result['dense_windows_ratio_to_raw']:.2f}x"],
        ["add_sequences, per window", f"{result['add_us_per_window']:,.0f} us"],
        [f"sample(64) windows of {buffer.length} rows", f"{result['sample64_ms']:.1f} ms"]], markdown=True))
    return result


if __name__ == "__main__":
    main()
