"""Prioritized replay against peer libraries: one table of medians and ratios (peer / r2d2kit).

    python benchmarks/bench_replay.py              # full run: N = 2^20, a few minutes
    python benchmarks/bench_replay.py --quick      # smoke run: N = 2^16, under ~30 s
    python benchmarks/bench_replay.py --markdown   # markdown table (for docs)

A ratio above 1 means r2d2kit is faster. The peers (cpprb, TorchRL, Tianshou's Numba SegmentTree, a
seed-style pure-Python tree; install: benchmarks/requirements.txt) are loaded by benchmarks/peers.py;
one that cannot be loaded is reported in the table, never fatal. Method: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import peers
from harness import BENCH_DIR, REPO_ROOT, interleaved, load_footer, machine_line, start, table, timed_ns

ALPHA, BETA, EPS = 0.6, 0.4, 1e-6
FIELDS = {"obs": ((4,), "float32"), "action": ((), "int64"), "reward": ((), "float32"), "next_obs": ((4,), "float32"),
          "done": ((), "float32")}
PEERS = ("cpprb", "TorchRL", "Tianshou", "seed-style")

FULL = dict(n=2**20, batch=512, add_n=10**6, reps=2000, slow_reps=200, add_reps=11, rounds=10,
            warmup=50, import_runs=3)
QUICK = dict(n=2**16, batch=512, add_n=50_000, reps=300, slow_reps=30, add_reps=3, rounds=3,
             warmup=10, import_runs=1)

Step = Callable[[], int]  # performs one operation, returns the nanoseconds of its timed section


# ---------------------------------------------------------------------------------------------
# data


def make_items(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` random transitions with the benchmark's fields."""
    return {
        "obs": rng.standard_normal((n, 4), dtype=np.float32),
        "action": rng.integers(0, 4, n, dtype=np.int64),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "next_obs": rng.standard_normal((n, 4), dtype=np.float32),
        "done": (rng.random(n) < 0.01).astype(np.float32),
    }


def random_priorities(rng: np.random.Generator, size: int) -> np.ndarray:
    return rng.uniform(0.01, 10.0, size)


# ---------------------------------------------------------------------------------------------
# buffer peers: build(capacity) -> buffer; fill(buffer, items, priorities);
# sample(buffer, batch) -> (batch dict, indices); update(buffer, indices, priorities); add(buffer, items)


def r2d2kit_buffer_ops(cfg: dict) -> dict:
    from r2d2kit.replay import PrioritizedReplayBuffer

    def fill(buf, items, priorities):
        buf.add_batch(**items)
        buf.update_priorities(np.arange(len(priorities), dtype=np.int64), priorities)

    def sample(buf, batch):
        out = buf.sample(batch, beta=BETA)
        return out, out["indices"]

    return dict(build=lambda capacity: PrioritizedReplayBuffer(capacity, fields=FIELDS, alpha=ALPHA, eps=EPS, seed=0),
                fill=fill, sample=sample, update=lambda buf, i, p: buf.update_priorities(i, p),
                add=lambda buf, items: buf.add_batch(**items), convert=lambda a: a)


def cpprb_buffer_ops(cfg: dict) -> dict:
    cpprb = peers.load_cpprb()
    env_dict = {name: {"shape": shape or 1, "dtype": np.dtype(dtype)} for name, (shape, dtype) in FIELDS.items()}

    def sample(buf, batch):
        out = buf.sample(batch, beta=BETA)
        return out, out["indexes"]

    return dict(build=lambda capacity: cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=ALPHA, eps=EPS),
                fill=lambda buf, items, priorities: buf.add(**items, priorities=priorities), sample=sample,
                update=lambda buf, i, p: buf.update_priorities(i, p), add=lambda buf, items: buf.add(**items),
                convert=lambda a: a)


def torchrl_buffer_ops(cfg: dict) -> dict:
    torch = peers.load_torchrl()["torch"]
    torch.set_num_threads(cfg["torch_threads"])  # 1 by default: every library on one core
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    def build(capacity):
        return TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), batch_size=cfg["batch"],
                                      sampler=PrioritizedSampler(capacity, alpha=ALPHA, beta=BETA, eps=EPS),
                                      priority_key="td_error")

    def convert(items):  # numpy -> TensorDict, zero-copy; done outside the timed section
        return TensorDict({k: torch.from_numpy(v) for k, v in items.items()}, batch_size=[len(items["obs"])])

    def fill(buf, items, priorities):
        buf.extend(items)
        buf.update_priority(torch.arange(len(priorities)), torch.from_numpy(priorities.astype(np.float32)))

    def sample(buf, batch):
        out = buf.sample(batch)  # TensorDict: every field + "index" + "priority_weight"
        return out, out["index"]

    return dict(build=build, fill=fill, sample=sample, update=lambda buf, i, p: buf.update_priority(i, p),
                add=lambda buf, items: buf.extend(items), convert=convert,
                priorities=lambda p: torch.from_numpy(p.astype(np.float32)))


BUFFER_PEERS = {"r2d2kit": r2d2kit_buffer_ops, "cpprb": cpprb_buffer_ops, "TorchRL": torchrl_buffer_ops}


def buffer_cases(cfg: dict, errors: dict, without: set[str]) -> tuple[dict, dict, dict, dict]:
    """Steps for the buffer rows (sample, update_priorities, add_batch into empty / into full)."""
    sample_steps, update_steps, add_steps, overwrite_steps = {}, {}, {}, {}
    for name, make_ops in BUFFER_PEERS.items():
        if name in without:
            continue
        label = "r2d2kit PrioritizedReplayBuffer" if name == "r2d2kit" else name
        try:
            o = make_ops(cfg)
            rng = np.random.default_rng(1)
            buf = o["build"](cfg["n"])
            o["fill"](buf, o["convert"](make_items(cfg["n"], rng)), random_priorities(rng, cfg["n"]))
            o["sample"](buf, cfg["batch"])  # first call outside any timing
        except peers.PeerUnavailable as error:
            errors[label] = f"not available: {error}"
            continue
        except Exception as error:  # noqa: BLE001
            errors[label] = f"failed: {type(error).__name__}: {error}"
            continue
        to_priorities = o.get("priorities", lambda p: p)
        add_items = o["convert"](make_items(cfg["add_n"], np.random.default_rng(2)))
        sample_steps[name] = make_sample_step(o, buf, cfg["batch"])
        update_steps[name] = make_update_step(o, buf, cfg["batch"], rng, to_priorities)
        add_steps[name] = make_add_step(o, cfg["n"], add_items)
        overwrite_steps[name] = make_overwrite_step(o, cfg["n"], add_items)
    return sample_steps, update_steps, add_steps, overwrite_steps


def make_sample_step(o: dict, buf, batch: int) -> Step:
    return lambda: timed_ns(lambda: o["sample"](buf, batch))


def make_update_step(o: dict, buf, batch: int, rng, to_priorities) -> Step:
    def step():
        _, indices = o["sample"](buf, batch)  # indices from a previous sample, as in training
        priorities = to_priorities(random_priorities(rng, batch))
        return timed_ns(lambda: o["update"](buf, indices, priorities))
    return step


def make_add_step(o: dict, capacity: int, items) -> Step:
    def step():
        buf = o["build"](capacity)  # a fresh, empty buffer each time (not timed)
        elapsed = timed_ns(lambda: o["add"](buf, items))
        buf = None
        return elapsed
    return step


def make_overwrite_step(o: dict, capacity: int, items) -> Step:
    """add_batch into one buffer that is already full: no first-touch page faults, only the work."""
    state = {}

    def step():
        if "buf" not in state:
            state["buf"] = o["build"](capacity)
            o["add"](state["buf"], items)
            o["add"](state["buf"], items)  # wraps around: every slot has been written once
        return timed_ns(lambda: o["add"](state["buf"], items))
    return step


# ---------------------------------------------------------------------------------------------
# bare trees: sample(batch) -> indices and update(indices, priorities)


def r2d2kit_tree(n, priorities):
    from r2d2kit import SumTree

    tree = SumTree(n)  # default: a companion min tree keeps min() O(1), as PER needs
    tree.update(np.arange(n, dtype=np.int64), priorities)
    sum_only = SumTree(n, track_min=False)  # like for like with the peers' bare sum trees
    sum_only.update(np.arange(n, dtype=np.int64), priorities)
    rng = np.random.default_rng(3)
    return dict(sample=lambda b: tree.sample(b, rng), update=sum_only.update, update_sum_min=tree.update)


def tianshou_tree(n, priorities):
    tree = peers.load_tianshou_segment_tree()[0](n)
    tree[np.arange(n, dtype=np.int64)] = priorities
    # sample: what tianshou's PrioritizedReplayBuffer.sample_indices does
    return dict(sample=lambda batch: tree.get_prefix_sum_idx(np.random.rand(batch) * tree.reduce()),
                update=lambda indices, values: tree.__setitem__(indices, values))


def torchrl_tree(n, priorities):
    trees = peers.load_torchrl()["trees"]
    tree, min_tree = trees.SumSegmentTreeFp64(n), trees.MinSegmentTreeFp64(n)
    tree[np.arange(n, dtype=np.int64)] = priorities
    min_tree[np.arange(n, dtype=np.int64)] = priorities

    def update_sum_min(indices, values):  # what its PrioritizedSampler.update_priority does
        tree[indices] = values
        min_tree[indices] = values

    # sample: what torchrl's PrioritizedSampler.sample does on CPU
    return dict(sample=lambda batch: tree.scan_lower_bound(np.random.uniform(0.0, tree.query(0, n), size=batch)),
                update=lambda indices, values: tree.__setitem__(indices, values), update_sum_min=update_sum_min)


def seed_tree(n, priorities):
    capacity = 1 << max(0, (n - 1).bit_length())
    tree, min_tree = peers.SeedSumSegmentTree(capacity), peers.SeedMinSegmentTree(capacity)
    tree.build(priorities)
    min_tree.build(priorities)

    def update_sum_min(indices, values):  # what baselines' update_priorities does
        tree.update(indices, values)
        min_tree.update(indices, values)

    return dict(sample=tree.sample, update=tree.update, update_sum_min=update_sum_min)


TREE_PEERS = {"r2d2kit": r2d2kit_tree, "TorchRL": torchrl_tree, "Tianshou": tianshou_tree,
              "seed-style": seed_tree}


def tree_cases(cfg: dict, errors: dict, without: set[str]) -> tuple[dict, dict, dict]:
    """Steps for the tree rows (sample, update of the sum tree, update of sum + min trees)."""
    n, batch = cfg["n"], cfg["batch"]
    priorities = random_priorities(np.random.default_rng(4), n)
    sample_steps, update_steps, sum_min_steps = {}, {}, {}
    for name, make_tree in TREE_PEERS.items():
        if name in without:
            continue
        try:
            tree = make_tree(n, priorities)
            tree["sample"](batch)
        except peers.PeerUnavailable as error:
            errors.setdefault(name, f"not available: {error}")
            continue
        except Exception as error:  # noqa: BLE001
            errors.setdefault(name, f"failed: {type(error).__name__}: {error}")
            continue
        sample_steps[name] = make_tree_sample_step(tree["sample"], batch)
        update_steps[name] = make_tree_update_step(tree["update"], n, batch)
        if "update_sum_min" in tree:
            sum_min_steps[name] = make_tree_update_step(tree["update_sum_min"], n, batch)
    return sample_steps, update_steps, sum_min_steps


def make_tree_sample_step(sample: Callable, batch: int) -> Step:
    return lambda: timed_ns(lambda: sample(batch))


def make_tree_update_step(update: Callable, n: int, batch: int) -> Step:
    rng = np.random.default_rng(5)

    def step():
        indices = rng.integers(0, n, batch, dtype=np.int64)
        values = random_priorities(rng, batch)
        return timed_ns(lambda: update(indices, values))

    return step


# ---------------------------------------------------------------------------------------------
# row 6: first import + first sample in a fresh process


FIRST_USE = {
    "r2d2kit": """
from r2d2kit.replay import PrioritizedReplayBuffer
buf = PrioritizedReplayBuffer(1024, fields=FIELDS, alpha=0.6, seed=0)
buf.add_batch(**items)
b = buf.sample(32, beta=0.4)
buf.update_priorities(b["indices"], np.ones(32))
""",
    "cpprb": """
import cpprb
buf = cpprb.PrioritizedReplayBuffer(1024, {k: {"shape": s or 1, "dtype": d} for k, (s, d) in FIELDS.items()})
buf.add(**items)
b = buf.sample(32, beta=0.4)
buf.update_priorities(b["indexes"], np.ones(32))
""",
    "TorchRL": """
from peers import load_torchrl
torch = load_torchrl()["torch"]
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer
buf = TensorDictReplayBuffer(storage=LazyTensorStorage(1024), sampler=PrioritizedSampler(1024, 0.6, 0.4))
buf.extend(TensorDict({k: torch.from_numpy(v) for k, v in items.items()}, batch_size=[64]))
b = buf.sample(32)
buf.update_priority(b["index"], torch.ones(32))
""",
}


def first_use_script(name: str) -> str:
    return (
        "import time; t = time.perf_counter()\n"
        "import numpy as np\n"
        f"FIELDS = {FIELDS!r}\n"
        "items = {k: np.zeros((64,) + s, dtype=d) for k, (s, d) in FIELDS.items()}\n"
        + FIRST_USE[name]
        + "print(time.perf_counter() - t)\n"
    )


def run_first_use(name: str, env: dict) -> float:
    result = subprocess.run(
        [sys.executable, "-c", first_use_script(name)], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=600,
    )
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(tail[:120])
    return float(result.stdout.strip().splitlines()[-1])


def first_use_rows(cfg: dict, quick: bool, errors: dict, without: set[str]) -> tuple[dict, dict]:
    """Seconds for import + first sample: warm numba cache (median of runs) and cold, per peer."""
    warm, cold = {}, {}
    base_env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), str(BENCH_DIR), os.environ.get("PYTHONPATH", "")]), RL_WARNINGS="0")
    with tempfile.TemporaryDirectory(prefix="r2d2kit-numba-cache-") as cache_dir:
        for name in FIRST_USE:
            if name in without or name in errors:
                warm[name] = "not available"
                continue
            if quick and name != "r2d2kit":  # the peers' imports alone take ~10 s
                continue
            env = base_env
            try:
                if name == "r2d2kit" and not quick:
                    env = dict(base_env, NUMBA_CACHE_DIR=cache_dir)  # empty cache: compiles
                    cold[name] = run_first_use(name, env)
                else:
                    run_first_use(name, env)  # warms the cache (and the OS file cache)
                warm[name] = float(np.median([run_first_use(name, env) for _ in range(cfg["import_runs"])]))
            except Exception as error:  # noqa: BLE001
                warm[name] = f"failed: {error}"
    return warm, cold


# ---------------------------------------------------------------------------------------------
# measuring


def measure(steps: dict[str, Step], cfg: dict, reps: int, slow: tuple[str, ...] = (),
            errors: dict | None = None) -> dict[str, np.ndarray]:
    """Run every step ``reps`` times (``slow_reps`` for the slow peers) in interleaved rounds."""
    return interleaved(steps, min(cfg["rounds"], reps), reps, cfg["warmup"] if reps > 50 else 1, slow,
                       cfg["slow_reps"], {} if errors is None else errors)


@dataclass
class Row:
    label: str
    target: str
    cells: dict = field(default_factory=dict)  # peer -> seconds (float) or a text
    checks: tuple = ()  # (peer, minimum ratio) pairs; ratio = peer / r2d2kit
    unit: str = "us"  # how to print times: "us", "ms" or "s"
    limit_s: float | None = None  # target on r2d2kit's own time instead of a ratio
    spread: dict = field(default_factory=dict)  # peer -> (p10, p90) seconds


def summarize(label: str, target: str, samples: dict[str, np.ndarray], participants, checks: tuple = (),
              unit: str = "us") -> Row:
    """A table row: the median of each peer's timings, plus its 10th-90th percentile range.

    A participant without timings (it could not be loaded, or was left out) shows as "n/a".
    """
    cells = {name: "not available" for name in participants}
    cells.update({name: float(np.median(t)) / 1e9 for name, t in samples.items()})
    spread = {name: (float(np.percentile(t, 10)) / 1e9, float(np.percentile(t, 90)) / 1e9)
              for name, t in samples.items()}
    return Row(label, target, cells, checks, unit, spread=spread)


def verdict(row: Row) -> str:
    base = row.cells.get("r2d2kit")
    if row.limit_s is not None:
        return "?" if not isinstance(base, float) else ("met" if base < row.limit_s else "NOT met")
    if not row.checks:
        return ""
    results = []
    for peer, minimum in row.checks:
        other = row.cells.get(peer)
        if not (isinstance(base, float) and isinstance(other, float)):
            results.append("?")
        else:
            results.append("met" if other / base >= minimum else "NOT met")
    if "?" in results:
        return "? (peer missing)" if "NOT met" not in results else "NOT met"
    return "met" if all(r == "met" for r in results) else "NOT met"


# ---------------------------------------------------------------------------------------------
# printing


def fmt_time(seconds: float, unit: str) -> str:
    scale = {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
    value = seconds * scale
    return f"{value:,.1f} {unit}" if value < 100 or unit == "s" and value < 10 else f"{value:,.0f} {unit}"


def fmt_cell(value, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return "n/a" if value.startswith("not available") else ("failed" if value.startswith("failed") else value)
    return fmt_time(value, unit) if unit != "s" else f"{value:.2f} s"


def fmt_ratio(row: Row, peer: str) -> str:
    base, other = row.cells.get("r2d2kit"), row.cells.get(peer)
    if isinstance(base, float) and isinstance(other, float) and base > 0:
        return f"{other / base:.2f}x"
    return "-"


def replay_table(rows: list[Row], markdown: bool) -> str:
    header = ["operation", "r2d2kit"] + [x for peer in PEERS for x in (peer, f"{peer}/r2d2kit")] + ["target", "verdict"]
    body = []
    for row in rows:
        line = [row.label, fmt_cell(row.cells.get("r2d2kit"), row.unit)]
        for peer in PEERS:
            line += [fmt_cell(row.cells.get(peer), row.unit), fmt_ratio(row, peer)]
        body.append(line + [row.target, verdict(row)])
    return table(header, body, markdown, right=range(1, len(header) - 2))


# ---------------------------------------------------------------------------------------------
# main


def run(cfg: dict, quick: bool, only: set[str] | None, without: set[str]) -> tuple[list[Row], dict, dict]:
    errors: dict[str, str] = {name: "not available: left out with --without" for name in without}
    notes: dict[str, str] = {}
    rows: list[Row] = []
    b = cfg["batch"]
    want = (lambda key: only is None or key in only)

    def timed_row(label, target, steps, reps, participants, checks=(), unit="us"):
        samples = measure(steps, cfg, reps, ("seed-style",), errors)
        rows.append(summarize(label, target, samples, participants, checks, unit))

    if want("buffer") or want("add"):
        sample_steps, update_steps, add_steps, overwrite_steps = buffer_cases(cfg, errors, without)
        if want("buffer"):
            timed_row(f"buffer sample({b}) + IS weights, all fields", ">=3x cpprb, >=2x TorchRL",
                      sample_steps, cfg["reps"], BUFFER_PEERS, (("cpprb", 3.0), ("TorchRL", 2.0)))
            timed_row(f"buffer update_priorities({b})", ">= cpprb", update_steps, cfg["reps"], BUFFER_PEERS,
                      (("cpprb", 1.0),))
        del sample_steps, update_steps  # frees the pre-filled buffers before add_batch allocates
        gc.collect()
        if want("add"):
            with fresh_pages(notes):
                timed_row(f"buffer add_batch({cfg['add_n']:,}) into empty", ">= cpprb", add_steps,
                          cfg["add_reps"], BUFFER_PEERS, (("cpprb", 1.0),), unit="ms")
            timed_row(f"buffer add_batch({cfg['add_n']:,}) into full (overwrite)", "(information)",
                      overwrite_steps, cfg["add_reps"], BUFFER_PEERS, unit="ms")
        del add_steps, overwrite_steps
        gc.collect()

    if want("tree"):
        sample_steps, update_steps, sum_min_steps = tree_cases(cfg, errors, without)
        timed_row(f"tree sample({b})", "> Tianshou", sample_steps, cfg["reps"], TREE_PEERS, (("Tianshou", 1.0),))
        timed_row(f"tree update({b} random indices)", ">= TorchRL C++", update_steps, cfg["reps"], TREE_PEERS,
                  (("TorchRL", 1.0),))
        timed_row(f"tree update({b}), sum + min trees", "(information)", sum_min_steps, cfg["reps"],
                  [name for name in TREE_PEERS if name != "Tianshou"])  # Tianshou has no min tree
        del sample_steps, update_steps, sum_min_steps
        gc.collect()

    if want("import"):
        warm, cold = first_use_rows(cfg, quick, errors, without)
        rows.append(Row("first import + first sample, warm cache [s]", "< 2 s", warm, unit="s", limit_s=2.0))
        if cold:
            notes["cold"] = (f"r2d2kit first import + first sample with an EMPTY numba cache (compiles): "
                             f"{cold['r2d2kit']:.2f} s (once, for information)")
    timed_peers = {peer for row in rows if row.unit != "s" for peer, v in row.cells.items() if isinstance(v, float)}
    if "TorchRL" in timed_peers:
        notes["torchrl"] = f"TorchRL trees: {peers.load_torchrl()['note']}; torch threads {cfg['torch_threads']}"
    if "Tianshou" in timed_peers:
        notes["tianshou"] = f"Tianshou SegmentTree: {peers.load_tianshou_segment_tree()[1]}"
    return rows, errors, notes


M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


def set_mmap_threshold(nbytes: int) -> bool:
    """Fix glibc's mmap threshold (which also stops glibc from adjusting it); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, nbytes) == 1
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def fresh_pages(notes: dict):
    """Serve every large block by a fresh ``mmap`` while "add_batch into empty" runs.

    glibc raises its mmap threshold after a large block is freed; blocks up to 32 MiB then come
    from heap memory that is already touched. Whether a peer's new buffer paid first-touch page
    faults then depended on what the peer before it had freed (the same add_batch took 12 ms or
    160 ms). A fixed 128 KiB threshold gives every new buffer fresh pages, as in a fresh process.
    Afterwards the threshold is fixed at 32 MiB, where glibc's own adjustment ends up.
    """
    if set_mmap_threshold(128 * 1024):
        notes["malloc"] = ("add_batch into empty: glibc's mmap threshold fixed at 128 KiB, so every new "
                           "buffer gets fresh pages (first-touch page faults included, as in a fresh process)")
    try:
        yield
    finally:
        set_mmap_threshold(32 * 1024 * 1024)


DISTS = ("numpy", "numba", "r2d2kit", "cpprb", "torch", "torchrl", "tensordict", "tianshou")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 2^16 and few repeats: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--only", default=None,
                        help="comma-separated subset of: buffer, add, tree, import (default: all)")
    parser.add_argument("--without", default="", metavar="PEERS",
                        help=f"comma-separated peers to leave out, of: {', '.join(PEERS)}")
    parser.add_argument("--torch-threads", type=int, default=1, metavar="N",
                        help="torch intra-op threads for TorchRL (default 1: every library on one core)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the medians to PATH")
    args = parser.parse_args(argv)
    without = {name for name in args.without.split(",") if name}
    if without - set(PEERS):
        parser.error(f"--without: unknown peer(s) {sorted(without - set(PEERS))}; choose from {PEERS}")
    cfg = dict(QUICK if args.quick else FULL, torch_threads=args.torch_threads)
    only = set(args.only.split(",")) if args.only else None

    started, load_start = start(DISTS)
    rows, errors, notes = run(cfg, args.quick, only, without)
    print(f"N = {cfg['n']:,} items, batch {cfg['batch']}, fields {', '.join(FIELDS)}; "
          f"alpha={ALPHA}, beta={BETA}, eps={EPS}; medians of {cfg['reps']} repeats "
          f"({cfg['slow_reps']} for seed-style, {cfg['add_reps']} for add_batch) in {cfg['rounds']} "
          f"interleaved rounds; torch threads {cfg['torch_threads']}; "
          "ratio = peer / r2d2kit (> 1: r2d2kit is faster)\n")
    print(replay_table(rows, args.markdown))
    print()
    for peer, message in errors.items():
        print(f"- {peer}: {message}")
    for message in notes.values():
        print(f"- {message}")
    print(load_footer(started, load_start))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": machine_line(DISTS), "config": cfg, "errors": errors, "notes": notes,
             "rows": [{"operation": r.label, "target": r.target, "verdict": verdict(r),
                       "median_s": r.cells, "p10_p90_s": r.spread} for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
