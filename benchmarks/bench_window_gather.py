"""Window gather into reused memory: sample(64) of R2D2 Atari windows against a memcpy of the same bytes.

    python benchmarks/bench_window_gather.py --quick      # 5k-step ring (full: 20k steps, about a minute)
    python benchmarks/bench_window_gather.py --tf-malloc  # under the malloc setting tf.data applies

Also ``ReplayBuffer(sampler="proportional").sample(512)`` of 84x84 frames. Rows, method: benchmarks/README.md.
"""

import time
import tracemalloc
from collections.abc import Callable

import harness
import numpy as np
from harness import atari_sequence_buffer, atari_windows, interleaved, table, timed_ns

from r2d2kit.replay import BatchPool, ReplayBuffer, SequenceReplayBuffer

ENVS, UNITS, OBS = 4, 512, (84, 84)
TARGET = 1.3  # the target: sample(64) with reuse opted in <= 1.3x a memcpy of the same bytes


def random_array(shape: tuple[int, ...], dtype, rng: np.random.Generator) -> np.ndarray:
    """Random values of ``dtype`` made without a wider temporary (a 20k-step uint8 ring stays 141 MB)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape, dtype=np.float32) < 0.5
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float32).astype(dtype, copy=False)
    return rng.integers(0, 2, shape, dtype=dtype)


def naive_gather(buffer: SequenceReplayBuffer, batch_size: int, seed: int = 1) -> Callable[[], dict]:
    """A per-window numpy gather (fresh arrays) from a ring like the buffer's, 4 envs interleaved."""
    spec, rng, capacity = buffer.batch_spec(1), np.random.default_rng(seed), buffer.capacity
    ring = {name: random_array((capacity + 1,) + shape[2:], dtype, rng) for name, (shape, dtype) in spec.items()
            if len(shape) >= 2 and shape[1] == buffer.length}
    states = {name: random_array((buffer.max_sequences,) + shape[1:], dtype, rng)
              for name, (shape, dtype) in spec.items() if name.startswith("state_")}
    starts = rng.integers(0, capacity, batch_size)
    rows = ((starts[:, None] + ENVS * np.arange(buffer.length)) % capacity).astype(np.int32)  # [B, L]
    windows = rng.integers(0, buffer.max_sequences, batch_size)

    def gather() -> dict:
        batch = {name: np.stack([array[rows[b]] for b in range(batch_size)]) for name, array in ring.items()}
        batch["obs_mask"] = np.stack([rows[b] != capacity for b in range(batch_size)])
        batch.update({name: np.stack([array[w] for w in windows]) for name, array in states.items()})
        return batch

    return gather


def new_bytes(call: Callable[[], object]) -> int:
    """Peak bytes numpy allocated during one call (tracemalloc sees numpy's data allocations)."""
    tracemalloc.start()
    result = call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak


def measure(title: str, buffer, n: int, sample: Callable[..., dict], extra: dict[str, Callable[[], object]],
            rounds: int, reps: int, warmup: int, target: bool = False) -> dict[str, dict]:
    """Print and return the rows of ``sample(n)`` (memcpy bound, ``extra``, fresh, BatchPool, ``out=``): median seconds,
    the median of per-round ratios to the bound (other work's load cancels out), numpy's new bytes per call."""
    spec = buffer.batch_spec(n)
    batch_bytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in spec.values())
    source, copy, out = (buffer.sample_buffers(n) for _ in range(3))
    reused = f"sample({n}, out=sample_buffers({n})): reuse opted in"
    pool = BatchPool(spec, 2)
    rows = {"memcpy of the same bytes (bound)": lambda: [np.copyto(copy[k], source[k]) for k in source], **extra,
            f"sample({n}) into fresh arrays (the default)": sample,
            f"sample({n}, out=BatchPool.acquire())": lambda: sample(out=pool.acquire()),
            reused: lambda: sample(out=out)}
    times = interleaved({name: lambda call=call: timed_ns(call) for name, call in rows.items()}, rounds,
                        rounds * reps, warmup)
    per_round = {name: np.median(t.reshape(rounds, reps), axis=1) for name, t in times.items()}  # [rounds]
    bound = next(iter(per_round.values()))
    results = {name: {"seconds": float(np.median(times[name])) / 1e9, "new_bytes": new_bytes(call),
                      "ratio": float(np.median(per_round[name] / bound))} for name, call in rows.items()}
    print(f"\n{title}: {batch_bytes / 1e6:.1f} MB per batch")
    cells = []
    for name, r in results.items():
        verdict = "met" if r["ratio"] <= TARGET else "MISSED"
        mark = f" (target <= {TARGET}x: {verdict})" if target and name == reused else ""
        cells.append([name, f"{1e3 * r['seconds']:.2f}", f"{r['ratio']:.2f}x{mark}",
                      f"{batch_bytes / r['seconds'] / 1e9:.1f}", f"{r['new_bytes'] / 1e6:.1f} MB"])
    print(table(["row", "median ms", "/ memcpy (median of per-round ratios)", "GB/s", "new bytes per call"], cells,
                markdown=True))
    print(f"process peak RSS so far: {harness.peak_rss_mb():,.0f} MB")  # cumulative over all rows
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = harness.arg_parser(__doc__, "quick")
    parser.add_argument("--tf-malloc", action="store_true", help="apply tf.data's malloc setting first")
    args = parser.parse_args(argv)
    capacity, rounds, reps, warmup = (5_000, 5, 3, 3) if args.quick else (20_000, 20, 3, 5)
    began, load_start = harness.start(["numpy", "numba"] + (["tensorflow"] if args.tf_malloc else []))
    if args.tf_malloc:  # a one-element from_generator dataset: TensorFlow then sets M_TRIM_THRESHOLD = 128 kB
        import tensorflow as tf

        list(tf.data.Dataset.from_generator(lambda: iter([np.zeros(1)]),
                                            output_signature=tf.TensorSpec((1,), tf.float64)))
        print("applied tf.data's malloc setting (M_TRIM_THRESHOLD = 128 kB)")

    fill_began = time.perf_counter()
    buffer = atari_sequence_buffer(capacity, UNITS)  # a ring written once by 4 envs, episodes of 200-2000 steps
    for out in atari_windows(capacity // ENVS + 1, ENVS, UNITS):
        buffer.add_sequences(out)
    print(f"SequenceReplayBuffer: ring {capacity} steps ({ENVS} envs interleaved, filled in "
          f"{time.perf_counter() - fill_began:.0f} s), windows of {buffer.length} rows of {OBS[0]}x{OBS[1]} uint8, "
          f"state 2x{UNITS} f32, {rounds} rounds x {reps} calls per row")
    sequence = measure("sample(64) windows", buffer, 64, lambda **kw: buffer.sample(64, **kw),
                       {"naive per-window numpy gather (fresh)": naive_gather(buffer, 64)}, rounds, reps, warmup, True)

    transition_capacity = 20_000 if args.quick else 100_000
    fields = {"obs": (OBS, "uint8"), "action": ((), "int64"), "reward": ((), "float32"), "done": ((), "bool")}
    transitions = ReplayBuffer(transition_capacity, fields, alpha=0.6, seed=0, sampler="proportional")
    rng = np.random.default_rng(2)
    frames = rng.integers(0, 255, size=(1000,) + OBS, dtype=np.uint8)
    for _ in range(0, transition_capacity, 1000):
        transitions.add_batch(obs=frames, action=rng.integers(0, 18, 1000), reward=rng.random(1000),
                              done=rng.random(1000) < 0.01)
    transitions.update_priorities(np.arange(transition_capacity), rng.uniform(0.1, 10.0, transition_capacity))
    print(f"\nReplayBuffer (proportional): {transition_capacity} items of {OBS[0]}x{OBS[1]} uint8 obs + action, "
          f"reward, done")
    index_draw = {"index draw alone: tree.sample(512) (part of every sample)":
                  lambda: transitions.sampler.tree.sample(512, rng)}
    transition = measure("sample(512) transitions", transitions, 512,
                         lambda **kw: transitions.sample(512, beta=0.4, **kw), index_draw, rounds, 4 * reps, warmup)
    print("\n" + harness.load_footer(began, load_start))
    return {"sequence": sequence, "transition": transition}


if __name__ == "__main__":
    main()
