"""Prioritized replay against peer libraries: one table of medians and ratios (peer / r2d2kit).

    python benchmarks/bench_replay.py --quick      # smoke run: N = 2^16, under ~30 s (full: N = 2^20)
    python benchmarks/bench_replay.py --only tree,import --without seed-style --markdown

A ratio above 1: r2d2kit is faster. A peer that does not load shows as n/a. Method: benchmarks/README.md.
"""

import contextlib
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import harness
import numpy as np
import peers
from harness import BENCH_DIR, REPO_ROOT, interleaved, table, timed_ns

ALPHA, BETA, EPS = 0.6, 0.4, 1e-6
FIELDS = {"obs": ((4,), "float32"), "action": ((), "int64"), "reward": ((), "float32"), "next_obs": ((4,), "float32"),
          "done": ((), "float32")}
PEERS = ("cpprb", "TorchRL", "Tianshou", "seed-style")
DISTS = ("numpy", "numba", "r2d2kit", "cpprb", "torch", "torchrl", "tensordict", "tianshou")

FULL = dict(n=2**20, batch=512, add_n=10**6, reps=2000, slow_reps=200, add_reps=11, rounds=10,
            warmup=50, import_runs=3, scaling_reps=500)
QUICK = dict(n=2**16, batch=512, add_n=50_000, reps=300, slow_reps=30, add_reps=3, rounds=3,
             warmup=10, import_runs=1, scaling_reps=60)

Step = Callable[[], int]  # performs one operation, returns the nanoseconds of its timed section


def make_items(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` random transitions with the benchmark's fields."""
    return dict(obs=rng.standard_normal((n, 4), dtype=np.float32), action=rng.integers(0, 4, n, dtype=np.int64),
                reward=rng.standard_normal(n, dtype=np.float32), next_obs=rng.standard_normal((n, 4), dtype=np.float32),
                done=(rng.random(n) < 0.01).astype(np.float32))


def random_priorities(rng: np.random.Generator, size: int) -> np.ndarray:
    return rng.uniform(0.01, 10.0, size)


def try_peer(name: str, make: Callable, errors: dict):
    """``make()``, or None with the reason in ``errors[name]`` (not available, or failed)."""
    try:
        return make()
    except (peers.PeerUnavailable, ImportError) as error:
        errors.setdefault(name, f"not available: {error}")
    except Exception as error:  # noqa: BLE001
        errors.setdefault(name, f"failed: {type(error).__name__}: {error}")
    return None


# --- buffer peers: build(capacity) -> buffer; fill(buffer, items, priorities); sample(buffer, batch) -> batch
# holding the indices under ``index``; update(buffer, indices, priorities); add(buffer, items)
BUFFER_DEFAULTS = dict(update=lambda buf, i, p: buf.update_priorities(i, p), convert=lambda a: a,
                       priorities=lambda p: p)


def r2d2kit_buffer_ops(cfg: dict) -> dict:
    from r2d2kit.replay import ReplayBuffer

    def fill(buf, items, priorities):
        buf.add_batch(**items)
        buf.update_priorities(np.arange(len(priorities), dtype=np.int64), priorities)

    return dict(build=lambda capacity: ReplayBuffer(capacity, FIELDS, "proportional", alpha=ALPHA, eps=EPS, seed=0),
                fill=fill, sample=lambda buf, batch: buf.sample(batch, beta=BETA), index="indices",
                add=lambda buf, items: buf.add_batch(**items),
                sample_out=lambda buf, batch, out: buf.sample(batch, beta=BETA, out=out))


def cpprb_buffer_ops(cfg: dict) -> dict:
    import cpprb

    env_dict = {name: {"shape": shape or 1, "dtype": np.dtype(dtype)} for name, (shape, dtype) in FIELDS.items()}
    return dict(build=lambda capacity: cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=ALPHA, eps=EPS),
                fill=lambda buf, items, priorities: buf.add(**items, priorities=priorities), index="indexes",
                sample=lambda buf, batch: buf.sample(batch, beta=BETA), add=lambda buf, items: buf.add(**items))


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

    # sample: a TensorDict of every field + "index" + "priority_weight"
    return dict(build=build, fill=fill, sample=lambda buf, batch: buf.sample(batch), index="index",
                update=lambda buf, i, p: buf.update_priority(i, p), add=lambda buf, items: buf.extend(items),
                convert=convert, priorities=lambda p: torch.from_numpy(p.astype(np.float32)))


BUFFER_PEERS = {"r2d2kit": r2d2kit_buffer_ops, "cpprb": cpprb_buffer_ops, "TorchRL": torchrl_buffer_ops}


def buffer_steps(o: dict, buf, cfg: dict, rng: np.random.Generator, add_items) -> dict[str, Step]:
    """One peer's steps for the buffer rows: sample, update_priorities, add_batch into empty / into full."""
    batch, full = cfg["batch"], {}

    def update() -> int:
        indices = o["sample"](buf, batch)[o["index"]]  # indices from a previous sample, as in training
        priorities = o["priorities"](random_priorities(rng, batch))
        return timed_ns(lambda: o["update"](buf, indices, priorities))

    def add_into_empty() -> int:
        fresh = o["build"](cfg["n"])  # a fresh, empty buffer each time (not timed)
        return timed_ns(lambda: o["add"](fresh, add_items))

    def add_into_full() -> int:  # one buffer that is already full: no first-touch page faults, only the work
        if not full:
            full["buf"] = o["build"](cfg["n"])
            o["add"](full["buf"], add_items)
            o["add"](full["buf"], add_items)  # wraps around: every slot has been written once
        return timed_ns(lambda: o["add"](full["buf"], add_items))

    steps = dict(sample=lambda: timed_ns(lambda: o["sample"](buf, batch)), update=update, add=add_into_empty,
                 overwrite=add_into_full)
    if "sample_out" in o:  # r2d2kit: the same sample into arrays kept across calls (reuse opted in)
        out = buf.sample_buffers(batch)
        steps["sample_out"] = lambda: timed_ns(lambda: o["sample_out"](buf, batch, out))
    return steps


def buffer_cases(cfg: dict, errors: dict, without: set[str]) -> dict[str, dict[str, Step]]:
    """Per buffer row (sample, update, add, overwrite): each peer's step."""
    cases: dict[str, dict[str, Step]] = {row: {} for row in ("sample", "sample_out", "update", "add", "overwrite")}
    for name, make_ops in BUFFER_PEERS.items():
        if name in without:
            continue
        rng = np.random.default_rng(1)

        def build(make_ops=make_ops, rng=rng):
            o = dict(BUFFER_DEFAULTS, **make_ops(cfg))
            buf = o["build"](cfg["n"])
            o["fill"](buf, o["convert"](make_items(cfg["n"], rng)), random_priorities(rng, cfg["n"]))
            o["sample"](buf, cfg["batch"])  # first call outside any timing
            return o, buf

        built = try_peer("r2d2kit ReplayBuffer (proportional)" if name == "r2d2kit" else name, build, errors)
        if built:
            add_items = built[0]["convert"](make_items(cfg["add_n"], np.random.default_rng(2)))
            for row, step in buffer_steps(*built, cfg, rng, add_items).items():
                cases[row][name] = step
    return cases


# --- bare trees: sample(batch) -> indices and update(indices, priorities)
def r2d2kit_tree(n, priorities):
    from r2d2kit import SumTree

    tree = SumTree(n)  # default: a companion min tree keeps min() O(1), as PER needs
    sum_only = SumTree(n, track_min=False)  # like for like with the peers' bare sum trees
    for each in (tree, sum_only):
        each.update(np.arange(n, dtype=np.int64), priorities)
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
    tree, min_tree = peers.SeedSumSegmentTree(capacity), peers.SeedSegmentTree(capacity, min, float("inf"))
    tree.build(priorities)
    min_tree.build(priorities)

    def update_sum_min(indices, values):  # what baselines' update_priorities does
        tree.update(indices, values)
        min_tree.update(indices, values)

    return dict(sample=tree.sample, update=tree.update, update_sum_min=update_sum_min)


TREE_PEERS = {"r2d2kit": r2d2kit_tree, "TorchRL": torchrl_tree, "Tianshou": tianshou_tree, "seed-style": seed_tree}


def tree_cases(cfg: dict, errors: dict, without: set[str]) -> dict[str, dict[str, Step]]:
    """Per tree row (sample, update of the sum tree, update of sum + min trees): each peer's step."""
    n, batch = cfg["n"], cfg["batch"]
    priorities = random_priorities(np.random.default_rng(4), n)
    cases: dict[str, dict[str, Step]] = {row: {} for row in ("sample", "update", "update_sum_min")}
    for name, make_tree in TREE_PEERS.items():
        def build(make_tree=make_tree):
            tree = make_tree(n, priorities)
            tree["sample"](batch)  # first call outside any timing
            return tree

        tree = None if name in without else try_peer(name, build, errors)
        if tree is None:
            continue
        cases["sample"][name] = lambda sample=tree["sample"]: timed_ns(lambda: sample(batch))
        for row in ("update", "update_sum_min"):
            if row in tree:
                rng = np.random.default_rng(5)

                def step(update=tree[row], rng=rng) -> int:
                    indices, values = rng.integers(0, n, batch, dtype=np.int64), random_priorities(rng, batch)
                    return timed_ns(lambda: update(indices, values))

                cases[row][name] = step
    return cases


# --- row 6: first import + first sample in a fresh process
FIRST_USE = {
    "r2d2kit": """
from r2d2kit.replay import ReplayBuffer
buf = ReplayBuffer(1024, fields=FIELDS, alpha=0.6, seed=0, sampler="proportional")
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


def run_first_use(name: str, env: dict) -> float:
    """Seconds from a fresh ``python -c`` start to the end of ``FIRST_USE[name]``."""
    script = (f"import time; t = time.perf_counter()\nimport numpy as np\nFIELDS = {FIELDS!r}\n"
              "items = {k: np.zeros((64,) + s, dtype=d) for k, (s, d) in FIELDS.items()}\n"
              f"{FIRST_USE[name]}print(time.perf_counter() - t)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    if result.returncode != 0:
        raise RuntimeError((result.stderr.strip().splitlines() or ["?"])[-1][:120])
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
            elif not quick or name == "r2d2kit":  # --quick: not the peers, their imports alone take ~10 s
                try:
                    env = dict(base_env, NUMBA_CACHE_DIR=cache_dir) if name == "r2d2kit" and not quick else base_env
                    first = run_first_use(name, env)  # an empty numba cache: compiles; else warms the caches
                    if env is not base_env:
                        cold[name] = first
                    warm[name] = float(np.median([run_first_use(name, env) for _ in range(cfg["import_runs"])]))
                except Exception as error:  # noqa: BLE001
                    warm[name] = f"failed: {error}"
    return warm, cold


# --- rows and the table
@dataclass
class Row:
    label: str
    target: str
    cells: dict = field(default_factory=dict)  # peer -> seconds (float) or a text
    checks: tuple = ()  # (peer, minimum ratio) pairs; ratio = peer / r2d2kit
    unit: str = "us"  # how to print times: "us", "ms" or "s"
    limit_s: float | None = None  # target on r2d2kit's own time instead of a ratio
    spread: dict = field(default_factory=dict)  # peer -> (p10, p90) seconds


def verdict(row: Row) -> str:
    base = row.cells.get("r2d2kit")
    if row.limit_s is not None:
        return "?" if not isinstance(base, float) else ("met" if base < row.limit_s else "NOT met")
    results = {"?" if not (isinstance(base, float) and isinstance(row.cells.get(peer), float)) else
               "met" if row.cells[peer] / base >= minimum else "NOT met" for peer, minimum in row.checks}
    return "" if not results else "NOT met" if "NOT met" in results else "? (peer missing)" if "?" in results else "met"


def fmt_cell(value, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return "n/a" if value.startswith("not available") else ("failed" if value.startswith("failed") else value)
    if unit == "s":
        return f"{value:.2f} s"
    value *= {"us": 1e6, "ms": 1e3}[unit]
    return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


def replay_table(rows: list[Row], markdown: bool) -> str:
    header = ["operation", "r2d2kit"] + [x for peer in PEERS for x in (peer, f"{peer}/r2d2kit")] + ["target", "verdict"]
    body = []
    for row in rows:
        base, line = row.cells.get("r2d2kit"), [row.label, fmt_cell(row.cells.get("r2d2kit"), row.unit)]
        for peer in PEERS:
            other = row.cells.get(peer)
            ratio = f"{other / base:.2f}x" if isinstance(base, float) and isinstance(other, float) and base > 0 else "-"
            line += [fmt_cell(other, row.unit), ratio]
        body.append(line + [row.target, verdict(row)])
    return table(header, body, markdown, right=range(1, len(header) - 2))


@contextlib.contextmanager
def fresh_pages(notes: dict):
    """Every large block a fresh ``mmap`` inside (page faults as in a fresh process, not the last peer's freed
    memory), glibc's own 32 MiB threshold after."""
    def set_mmap_threshold(nbytes: int) -> bool:  # M_MMAP_THRESHOLD, fixed (glibc stops adjusting it)
        try:
            return sys.platform.startswith("linux") and ctypes.CDLL("libc.so.6").mallopt(-3, nbytes) == 1
        except (OSError, AttributeError):
            return False

    if set_mmap_threshold(128 * 1024):
        notes["malloc"] = ("add_batch into empty: glibc's mmap threshold fixed at 128 KiB, so every new "
                           "buffer gets fresh pages (first-touch page faults included, as in a fresh process)")
    try:
        yield
    finally:
        set_mmap_threshold(32 * 1024 * 1024)


def run(cfg: dict, quick: bool, only: set[str] | None, without: set[str]) -> tuple[list[Row], dict, dict]:
    errors: dict[str, str] = {name: "not available: left out with --without" for name in without}
    notes, rows = {}, []
    b, n_add = cfg["batch"], f"{cfg['add_n']:,}"

    def timed_row(label, target, steps, reps, participants, checks=(), unit="us"):
        """A row of medians (and 10th-90th percentiles) of every step in interleaved rounds; none: "n/a"."""
        samples = interleaved(steps, min(cfg["rounds"], reps), reps, cfg["warmup"] if reps > 50 else 1,
                              ("seed-style",), cfg["slow_reps"], errors)
        cells = {name: "not available" for name in participants}
        cells.update({name: float(np.median(t)) / 1e9 for name, t in samples.items()})
        spread = {name: (float(np.percentile(t, 10)) / 1e9, float(np.percentile(t, 90)) / 1e9)
                  for name, t in samples.items()}
        rows.append(Row(label, target, cells, checks, unit, spread=spread))

    if only is None or {"buffer", "add"} & only:
        cases = buffer_cases(cfg, errors, without)
        if only is None or "buffer" in only:
            timed_row(f"buffer sample({b}) + IS weights, all fields", ">=3x cpprb, >=2x TorchRL",
                      cases["sample"], cfg["reps"], BUFFER_PEERS, (("cpprb", 3.0), ("TorchRL", 2.0)))
            timed_row(f"buffer sample({b}), out= (reuse opted in)", "(information)", cases["sample_out"],
                      cfg["reps"], ("r2d2kit",))
            timed_row(f"buffer update_priorities({b})", ">= cpprb", cases["update"], cfg["reps"], BUFFER_PEERS,
                      (("cpprb", 1.0),))
        # free the pre-filled buffers before add_batch allocates
        del cases["sample"], cases["sample_out"], cases["update"]
        gc.collect()
        if only is None or "add" in only:
            with fresh_pages(notes):
                timed_row(f"buffer add_batch({n_add}) into empty", ">= cpprb", cases["add"], cfg["add_reps"],
                          BUFFER_PEERS, (("cpprb", 1.0),), unit="ms")
            timed_row(f"buffer add_batch({n_add}) into full (overwrite)", "(information)", cases["overwrite"],
                      cfg["add_reps"], BUFFER_PEERS, unit="ms")
        del cases
        gc.collect()
    if only is None or "tree" in only:
        cases = tree_cases(cfg, errors, without)
        timed_row(f"tree sample({b})", "> Tianshou", cases["sample"], cfg["reps"], TREE_PEERS, (("Tianshou", 1.0),))
        timed_row(f"tree update({b} random indices)", ">= TorchRL C++", cases["update"], cfg["reps"], TREE_PEERS,
                  (("TorchRL", 1.0),))
        timed_row(f"tree update({b}), sum + min trees", "(information)", cases["update_sum_min"], cfg["reps"],
                  [name for name in TREE_PEERS if name != "Tianshou"])  # Tianshou has no min tree
        del cases
        gc.collect()
    if only is None or "import" in only:
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


def scaling(cfg: dict, errors: dict, without: set[str], exponents: range) -> tuple[list[str], list[list[str]]]:
    """``sample(batch)`` and ``update_priorities(batch)`` medians of every buffer peer at 2^k items, a row per k."""
    names = [name for name in BUFFER_PEERS if name not in without]
    header = ["items"] + [column for op in ("sample", "update") for name in names
                          for column in [f"{op} {name}"] + ([f"{name}/r2d2kit"] if name != "r2d2kit" else [])]
    cells = []
    for k in exponents:
        sized = dict(cfg, n=2**k, add_n=1_000)
        cases, row = buffer_cases(sized, errors, without), [f"2^{k} ({2**k:,})"]
        for op in ("sample", "update"):
            samples = interleaved(cases[op], min(cfg["rounds"], cfg["scaling_reps"]), cfg["scaling_reps"],
                                  cfg["warmup"], (), 0, errors)
            medians = {name: float(np.median(t)) / 1e3 for name, t in samples.items()}  # us
            for name in names:
                value, mine = medians.get(name), medians.get("r2d2kit")
                row.append("n/a" if value is None else f"{value:,.1f}")
                if name != "r2d2kit":
                    row.append("-" if value is None or mine is None else f"{value / mine:.2f}x")
        cells.append(row)
        del cases
        gc.collect()
    return header, cells


def main(argv: list[str] | None = None) -> int:
    parser = harness.arg_parser(__doc__, "quick", "markdown", "json")
    parser.add_argument("--only", type=harness.comma_list(("buffer", "add", "tree", "import", "scaling")),
                        help="comma-separated subset of: buffer, add, tree, import, scaling")
    parser.add_argument("--without", type=harness.comma_list(PEERS), default=[], metavar="PEERS",
                        help=f"comma-separated peers to leave out, of: {', '.join(PEERS)}")
    args = parser.parse_args(argv)
    without, only = set(args.without), set(args.only) if args.only else None
    cfg = dict(QUICK if args.quick else FULL, torch_threads=1)  # torch on one core, as every library

    started, load_start = harness.start(DISTS)
    rows, errors, notes = run(cfg, args.quick, only, without)
    print(f"N = {cfg['n']:,} items, batch {cfg['batch']}, fields {', '.join(FIELDS)}; alpha={ALPHA}, beta={BETA}, "
          f"eps={EPS}; medians of {cfg['reps']} repeats ({cfg['slow_reps']} for seed-style, {cfg['add_reps']} for "
          f"add_batch) in {cfg['rounds']} interleaved rounds; torch threads {cfg['torch_threads']}; ratio = peer / "
          "r2d2kit (> 1: r2d2kit is faster)\n")
    print(replay_table(rows, args.markdown) + "\n")
    if only is None or "scaling" in only:
        print(f"sample({cfg['batch']}) and update_priorities({cfg['batch']}) against the buffer size, us (medians of "
              f"{cfg['scaling_reps']} in interleaved rounds; ratio = peer / r2d2kit)")
        exponents = range(12, 17, 2) if args.quick else range(12, 25, 2)
        print(table(*scaling(cfg, errors, without, exponents), markdown=args.markdown) + "\n")
    for message in [f"{peer}: {message}" for peer, message in errors.items()] + list(notes.values()):
        print(f"- {message}")
    print(harness.load_footer(started, load_start))
    harness.write_json(args.json, {"machine": harness.machine_line(DISTS), "config": cfg, "errors": errors,
                                   "notes": notes, "rows": [dict(operation=r.label, target=r.target, verdict=verdict(r),
                                                                 median_s=r.cells, p10_p90_s=r.spread) for r in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
