"""Window gather into reused memory: sample(64) of R2D2 Atari windows against a memcpy of the same bytes.

    python benchmarks/bench_window_gather.py              # 20k-step ring, about a minute
    python benchmarks/bench_window_gather.py --quick      # 5k-step ring, fewer repeats
    python benchmarks/bench_window_gather.py --tf-malloc  # under the malloc setting tf.data applies

Rows: the memcpy bound, a naive per-window gather, ``sample`` into fresh arrays, into reused memory
and into ``out=``; then the same for ``PrioritizedReplayBuffer.sample(512)``. "/ memcpy" is the median
over interleaved rounds of the row's median over the memcpy median of the same round. Method:
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from typing import Callable

import numpy as np
from harness import atari_sequence_buffer, atari_windows, format_load, load_footer, machine_line, peak_rss_mb, table

from r2d2kit.replay import PrioritizedReplayBuffer, SequenceReplayBuffer

ENVS, UNITS, OBS = 4, 512, (84, 84)
TARGET = 1.3  # the target: sample(64) into reused memory <= 1.3x a memcpy of the same bytes


def fill_sequence_buffer(capacity: int, seed: int = 0) -> SequenceReplayBuffer:
    """A ring of ``capacity`` steps written once by 4 envs with episodes of 200-2000 steps."""
    buffer = atari_sequence_buffer(capacity, UNITS, seed)
    for out in atari_windows(capacity // ENVS + 1, ENVS, UNITS, seed=seed):
        buffer.add_sequences(out)
    return buffer


def random_array(shape: tuple[int, ...], dtype, rng: np.random.Generator) -> np.ndarray:
    """Random values of ``dtype`` made without a wider temporary (a 20k-step uint8 ring stays 141 MB)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape, dtype=np.float32) < 0.5
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float32).astype(dtype, copy=False)
    return rng.integers(0, 2, shape, dtype=dtype)


def window_layout(buffer: SequenceReplayBuffer, batch_size: int, seed: int = 1):
    """A ring like the buffer's (same fields and capacity) and ``[B, L]`` window rows with 4 envs interleaved."""
    spec = buffer.batch_spec(1)
    rng = np.random.default_rng(seed)
    row_fields = {name: (shape[2:], dtype) for name, (shape, dtype) in spec.items() if len(shape) >= 2
                  and shape[1] == buffer.length}
    ring = {name: random_array((buffer.capacity + 1,) + shape, dtype, rng)
            for name, (shape, dtype) in row_fields.items()}
    states = {name: random_array((buffer.max_sequences,) + shape[1:], dtype, rng)
              for name, (shape, dtype) in spec.items() if name.startswith("state_")}
    starts = rng.integers(0, buffer.capacity, batch_size)
    rows = ((starts[:, None] + ENVS * np.arange(buffer.length)) % buffer.capacity).astype(np.int32)  # [B, L]
    windows = rng.integers(0, buffer.max_sequences, batch_size)
    return ring, states, rows, windows


def naive_gather(ring, states, rows, windows, capacity):
    batch = {name: np.stack([array[rows[b]] for b in range(rows.shape[0])]) for name, array in ring.items()}
    batch["obs_mask"] = np.stack([rows[b] != capacity for b in range(rows.shape[0])])
    batch.update({name: np.stack([array[w] for w in windows]) for name, array in states.items()})
    return batch


def fresh_arrays(spec) -> dict[str, np.ndarray]:
    """New, untouched arrays for one batch (``np.empty``): what every ``sample`` allocated before reused memory."""
    return {name: np.empty(shape, dtype) for name, (shape, dtype) in spec.items()}


def apply_tf_data_malloc_setting() -> None:
    """Iterate a one-element ``from_generator`` dataset: TensorFlow then sets ``M_TRIM_THRESHOLD`` = 128 kB."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_generator(lambda: iter([np.zeros(1)]),
                                             output_signature=tf.TensorSpec((1,), tf.float64))
    for _ in dataset:
        pass
    print("applied tf.data's malloc setting (M_TRIM_THRESHOLD = 128 kB)")


def new_bytes(call: Callable[[], object]) -> int:
    """Peak bytes numpy allocated during one call (tracemalloc sees numpy's data allocations)."""
    tracemalloc.start()
    result = call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak


def measure(rows: dict[str, Callable[[], object]], rounds: int, reps: int, warmup: int) -> dict[str, dict]:
    """Per row: median seconds per call, median over rounds of its ratio to the first row's median in
    the same round (so load from other work cancels out), and numpy's new bytes in one steady-state call.
    """
    times = {name: [] for name in rows}
    ratios = {name: [] for name in rows}
    allocated = {}
    for name, call in rows.items():
        for _ in range(warmup):
            call()
        allocated[name] = new_bytes(call)  # after warm-up: the steady state
    bound = next(iter(rows))
    gc.disable()
    try:
        for _ in range(rounds):
            medians = {}
            for name, call in rows.items():
                mine = []
                for _ in range(reps):
                    start = time.perf_counter()
                    call()
                    mine.append(time.perf_counter() - start)
                times[name] += mine
                medians[name] = float(np.median(mine))
            for name in rows:
                ratios[name].append(medians[name] / medians[bound])
    finally:
        gc.enable()
    return {name: {"seconds": float(np.median(times[name])), "ratio": float(np.median(ratios[name])),
                   "new_bytes": allocated[name]} for name in rows}


def print_table(title: str, results: dict[str, dict], batch_bytes: int, target_row: str) -> None:
    print(f"\n{title}: {batch_bytes / 1e6:.1f} MB per batch")
    rows = []
    for name, r in results.items():
        ratio = r["ratio"]
        mark = f" (target <= {TARGET}x: {'met' if ratio <= TARGET else 'MISSED'})" if name == target_row else ""
        rows.append([name, f"{1e3 * r['seconds']:.2f}", f"{ratio:.2f}x{mark}",
                     f"{batch_bytes / r['seconds'] / 1e9:.1f}", f"{r['new_bytes'] / 1e6:.1f} MB"])
    print(table(["row", "median ms", "/ memcpy (median of per-round ratios)", "GB/s", "new bytes per call"], rows,
                markdown=True))
    print(f"process peak RSS so far: {peak_rss_mb():,.0f} MB")  # cumulative over all rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tf-malloc", action="store_true", help="apply tf.data's malloc setting first")
    args = parser.parse_args(argv)
    capacity, rounds, reps, warmup = (5_000, 5, 3, 3) if args.quick else (20_000, 20, 3, 5)
    flags = "".join(f" --{name}" for name, on in (("quick", args.quick), ("tf-malloc", args.tf_malloc)) if on)
    print(f"command: python benchmarks/bench_window_gather.py{flags}")
    print(machine_line(["numpy", "numba"] + (["tensorflow"] if args.tf_malloc else [])))
    if args.tf_malloc:
        apply_tf_data_malloc_setting()
    began, load_start = time.perf_counter(), format_load()

    t = time.perf_counter()
    buffer = fill_sequence_buffer(capacity)
    fill_seconds = time.perf_counter() - t
    batch_size = 64
    spec = buffer.batch_spec(batch_size)
    batch_bytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in spec.values())
    source, target = buffer.sample_buffers(batch_size), buffer.sample_buffers(batch_size)
    ring, states, rows, windows = window_layout(buffer, batch_size)
    out = buffer.sample_buffers(batch_size)

    sequence_rows = {
        "memcpy of the same bytes (bound)": lambda: [np.copyto(target[k], source[k]) for k in source],
        "naive per-window numpy gather (fresh)": lambda: naive_gather(ring, states, rows, windows, capacity),
        "sample(64) into fresh arrays (allocation per call, as before reused memory)":
            lambda: buffer.sample(batch_size, out=fresh_arrays(spec)),
        "sample(64), reused memory (default)": lambda: buffer.sample(batch_size),
        "sample(64, out=sample_buffers(64))": lambda: buffer.sample(batch_size, out=out),
    }
    print(f"SequenceReplayBuffer: ring {capacity} steps ({ENVS} envs interleaved, filled in {fill_seconds:.0f} s), "
          f"windows of {buffer.length} rows of {OBS[0]}x{OBS[1]} uint8, state 2x{UNITS} f32, "
          f"{rounds} rounds x {reps} calls per row")
    sequence = measure(sequence_rows, rounds, reps, warmup)
    print_table(f"sample({batch_size}) windows", sequence, batch_bytes, "sample(64), reused memory (default)")

    transition_capacity = 20_000 if args.quick else 100_000
    fields = {"obs": (OBS, "uint8"), "action": ((), "int64"), "reward": ((), "float32"), "done": ((), "bool")}
    transitions = PrioritizedReplayBuffer(transition_capacity, fields, alpha=0.6, seed=0)
    rng = np.random.default_rng(2)
    frames = rng.integers(0, 255, size=(1000,) + OBS, dtype=np.uint8)
    for start in range(0, transition_capacity, 1000):
        transitions.add_batch(obs=frames, action=rng.integers(0, 18, 1000), reward=rng.random(1000),
                              done=rng.random(1000) < 0.01)
    transitions.update_priorities(np.arange(transition_capacity), rng.uniform(0.1, 10.0, transition_capacity))
    n = 512
    tspec = transitions.batch_spec(n)
    tbytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in tspec.values())
    tsource, ttarget, tout = (transitions.sample_buffers(n) for _ in range(3))
    transition_rows = {
        "memcpy of the same bytes (bound)": lambda: [np.copyto(ttarget[k], tsource[k]) for k in tsource],
        "index draw alone: tree.sample(512) (part of every sample)": lambda: transitions.tree.sample(n, rng),
        "sample(512) into fresh arrays (allocation per call, as before reused memory)":
            lambda: transitions.sample(n, beta=0.4, out=fresh_arrays(tspec)),
        "sample(512), reused memory (default)": lambda: transitions.sample(n, beta=0.4),
        "sample(512, out=sample_buffers(512))": lambda: transitions.sample(n, beta=0.4, out=tout),
    }
    print(f"\nPrioritizedReplayBuffer: {transition_capacity} items of {OBS[0]}x{OBS[1]} uint8 obs + action, "
          f"reward, done")
    transition = measure(transition_rows, rounds, 4 * reps, warmup)
    print_table(f"sample({n}) transitions", transition, tbytes, "")
    print()
    print(load_footer(began, load_start))
    return {"sequence": sequence, "transition": transition}


if __name__ == "__main__":
    main()
