"""Per-update loss and Q of a fixed-seed run, to show that a refactor keeps behaviour.

    PYTHONPATH=. python benchmarks/loss_trace.py after.npy cue_memory  # 500 updates, local runner
    PYTHONPATH=../before python benchmarks/loss_trace.py before.npy cue_memory  # the other checkout's code
    python benchmarks/loss_trace.py --compare before.npy after.npy     # identical, or the first update that differs

Extra ``section.key=value`` arguments override the config, as ``--set`` does. Only the local runner
repeats exactly: actor processes and Ray actors load new weights whenever they arrive.
"""

import argparse
import tempfile

import numpy as np


def record(path: str, config_name: str, overrides: list[str], updates: int) -> None:
    from r2d2kit.runners.callbacks import Callback
    from r2d2kit.training.config import load_config
    from r2d2kit.training.trainer import Trainer

    config = load_config(config_name, ["actors.runner=local", "logging.progress=false", *overrides])

    class Record(Callback):
        def __init__(self) -> None:
            self.rows: list[list[float]] = []

        def on_learner_step(self, learner, metrics):
            self.rows.append([metrics["loss"], metrics["q_mean"]])
            return len(self.rows) < updates  # False: stop after this update

    recorder = Record()
    Trainer(config, tempfile.mkdtemp(prefix="loss-trace-"), callbacks=[recorder]).fit()
    np.save(path, np.array(recorder.rows))
    print(f"{len(recorder.rows)} updates of {config_name}: loss {recorder.rows[0][0]:.6g} first, "
          f"{recorder.rows[-1][0]:.6g} last -> {path}")


def compare(before: str, after: str) -> int:
    a, b = np.load(before, allow_pickle=False), np.load(after, allow_pickle=False)
    if a.shape == b.shape and np.array_equal(a, b):
        print(f"identical: {len(a)} updates, loss and mean Q bit for bit")
        return 0
    rows = min(len(a), len(b))
    differ = np.flatnonzero(np.any(a[:rows] != b[:rows], axis=1))
    first = int(differ[0]) if differ.size else rows
    print(f"different: {len(a)} and {len(b)} updates; first difference at update {first + 1}")
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="OUT.npy CONFIG [section.key=value ...], or two .npy with --compare")
    parser.add_argument("--compare", action="store_true", help="compare two recorded traces")
    parser.add_argument("--updates", type=int, default=500, help="updates to record (default 500)")
    args = parser.parse_args()
    if args.compare:
        if len(args.paths) != 2:
            parser.error("--compare takes two .npy files")
        return compare(*args.paths)
    if len(args.paths) < 2:
        parser.error("give OUT.npy and a config (a shipped name or a path)")
    record(args.paths[0], args.paths[1], args.paths[2:], args.updates)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
