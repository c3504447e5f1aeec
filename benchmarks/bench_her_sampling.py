"""HER sampling: r2d2kit's HerReplayBuffer against the seed article's per-index Python relabelling.

    python benchmarks/bench_her_sampling.py --quick      # capacity 2^14, about 15 s (full: 2^17, about a minute)
    python benchmarks/bench_her_sampling.py --markdown   # the table as markdown

Median seconds of one ``sample(batch)`` call (a ratio above 1: r2d2kit is faster). Method: benchmarks/README.md.
"""

import gc
from collections.abc import Callable
from typing import Any

import harness
import numpy as np
from harness import interleaved, table, timed_ns

from r2d2kit.envs import BitFlipEnv
from r2d2kit.replay import HerReplayBuffer

FULL = dict(capacity=2**17, fill=2**17 + 2**15, n_bits=15, batch=256, reps=2000, slow_reps=300, rounds=10, warmup=50)
QUICK = dict(capacity=2**14, fill=2**14 + 2**12, n_bits=15, batch=256, reps=300, slow_reps=60, rounds=3, warmup=10)
STEP_FIELDS = ("observation", "achieved_goal", "desired_goal")  # of obs; next_obs gives the next_ ones


class SeedStyleHerBuffer:
    """The seed article's buffer as it describes it: a ring bookkept by ``index_episode_map`` and
    ``episode_end_indices``, relabelling in a Python loop; an episode wrapping the ring falls back to ``final``."""

    def __init__(self, capacity: int, n_bits: int, n_sampled_goal: int, strategy: str,
                 compute_reward: Callable, seed: int = 0) -> None:
        self.capacity, self.strategy, self.compute_reward = capacity, strategy, compute_reward
        self.her_ratio = 1.0 - 1.0 / (n_sampled_goal + 1)
        self.rng = np.random.default_rng(seed)
        self.data = {name: np.zeros((capacity, n_bits), np.float32)
                     for name in (*STEP_FIELDS, "next_observation", "next_achieved_goal")}
        self.data.update(action=np.zeros(capacity, np.int64), reward=np.zeros(capacity, np.float32))
        self.index_episode_map = np.full(capacity, -1, np.int64)
        self.episode_end_indices: dict[int, int] = {}
        self.complete = np.zeros(capacity, bool)  # slot holds a step of a complete, unbroken episode
        self.position, self.episode, self.fallbacks = 0, 0, 0

    def add(self, obs: dict, action: int, reward: float, next_obs: dict, done: bool) -> None:
        i = self.position
        old = self.index_episode_map[i]
        if old >= 0 and old in self.episode_end_indices:  # the ring overwrites an old episode: forget it
            end = self.episode_end_indices.pop(old)
            j = i
            while self.index_episode_map[j] == old:
                self.complete[j] = False
                if j == end:
                    break
                j = (j + 1) % self.capacity
        for name in STEP_FIELDS:
            self.data[name][i] = obs[name]
        self.data["next_observation"][i] = next_obs["observation"]
        self.data["next_achieved_goal"][i] = next_obs["achieved_goal"]
        self.data["action"][i], self.data["reward"][i] = action, reward
        self.index_episode_map[i] = self.episode
        self.complete[i] = False
        self.position = (i + 1) % self.capacity
        if done:
            self.episode_end_indices[self.episode] = i
            j = i
            while self.index_episode_map[j] == self.episode:
                self.complete[j] = True
                j = (j - 1) % self.capacity
                if j == i:
                    break
            self.episode += 1

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        indices = self.sampleable[self.rng.integers(0, self.sampleable.size, batch_size)]
        her_count = int(self.her_ratio * batch_size)
        her_indices = indices[:her_count]
        goal_indices = np.empty(her_count, np.int64)
        for k, index in enumerate(her_indices):  # the per-index Python relabelling
            end = self.episode_end_indices[int(self.index_episode_map[index])]
            if self.strategy == "final" or end < index:
                if end < index:
                    self.fallbacks += 1  # episode wraps the ring: fall back to 'final'
                goal_indices[k] = end
            else:
                goal_indices[k] = self.rng.integers(index, end + 1)
        out = {name: array[indices] for name, array in self.data.items()}
        next_achieved = self.data["next_achieved_goal"]
        out["desired_goal"][:her_count] = next_achieved[goal_indices]
        out["reward"][:her_count] = self.compute_reward(next_achieved[her_indices], out["desired_goal"][:her_count], {})
        return out


def episodes(n_steps: int, n_bits: int, seed: int):
    """``n_steps`` BitFlip-style steps: random start and goal, a random walk; half the episodes reach the goal."""
    rng = np.random.default_rng(seed)
    produced = 0
    while produced < n_steps:
        length = int(rng.integers(1, n_bits + 1))
        success = rng.random() < 0.5
        state = rng.integers(0, 2, n_bits).astype(np.float32)
        flips = rng.integers(0, n_bits, length)
        path = [state.copy()]
        for a in flips:
            state[a] = 1.0 - state[a]
            path.append(state.copy())
        goal = path[-1].copy() if success else 1.0 - path[-1]
        for t in range(length):
            obs = {"observation": path[t], "achieved_goal": path[t], "desired_goal": goal}
            next_obs = {"observation": path[t + 1], "achieved_goal": path[t + 1], "desired_goal": goal}
            last = t == length - 1
            reward = 0.0 if last and success else -1.0
            yield obs, int(flips[t]), reward, next_obs, last and success, last and not success
        produced += length


def build(cfg: dict, strategy: str, **kwargs: Any) -> tuple[HerReplayBuffer, SeedStyleHerBuffer]:
    env, n = BitFlipEnv(cfg["n_bits"]), cfg["n_bits"]
    ours = HerReplayBuffer(cfg["capacity"], ((n,), "float32"), ((n,), "float32"), num_envs=1, n_sampled_goal=4,
                           goal_selection_strategy=strategy, compute_reward=env.compute_reward, seed=0, **kwargs)
    seed_style = SeedStyleHerBuffer(cfg["capacity"], n, 4, strategy, env.compute_reward, seed=0)

    def one_env(x):  # a batch of one env
        return {k: v[np.newaxis] for k, v in x.items()} if isinstance(x, dict) else np.asarray(x)[np.newaxis]

    for step in episodes(cfg["fill"], n, seed=1):
        ours.add(*map(one_env, step))
        obs, action, reward, next_obs, terminated, truncated = step
        seed_style.add(obs, action, reward, next_obs, terminated or truncated)
    seed_style.sampleable = np.flatnonzero(seed_style.complete)  # once, untimed (the article: in every call)
    return ours, seed_style


def run(cfg: dict) -> tuple[list[list[str]], list[str]]:
    b, rows, notes = cfg["batch"], [], []
    for label, strategy, kwargs in [("future, k=4", "future", {}), ("final, k=4", "final", {}),  # with seed-style
                                    ("episode, k=4", "episode", {}), ("random, k=4", "random", {}),
                                    ("future, k=4, PER", "future", {"sampler": "proportional"}),
                                    ("future, k=4, n_step=3", "future", {"n_step": 3})]:
        ours, seed_style = build(cfg, strategy, **kwargs)
        steps = {"r2d2kit": lambda ours=ours: ours.sample(b, beta=0.4)}
        if len(rows) < 2:
            steps["seed-style"] = lambda seed_style=seed_style: seed_style.sample(b)
        times = interleaved({name: lambda step=step: timed_ns(step) for name, step in steps.items()}, cfg["rounds"],
                            cfg["reps"], cfg["warmup"], ("seed-style",), cfg["slow_reps"])  # collector off
        t = {name: float(np.median(ns)) / 1e9 for name, ns in times.items()}  # median seconds per call
        rows.append([f"sample({b}), {label}", f"{t['r2d2kit'] * 1e6:,.1f} us"] + (
            [f"{t['seed-style'] * 1e6:,.1f} us", f"{t['seed-style'] / t['r2d2kit']:.1f}x"] if len(t) == 2 else
            ["n/a", "-"]))
        if label == "future, k=4":
            notes.append(f"seed-style fell back from 'future' to 'final' for {seed_style.fallbacks:,} relabelled "
                         f"samples over the run (episodes wrapping the ring); r2d2kit: never, by construction")
        ours = seed_style = None
        gc.collect()
    return rows, notes


def main(argv: list[str] | None = None) -> None:
    args = harness.arg_parser(__doc__, "quick", "markdown").parse_args(argv)
    cfg = QUICK if args.quick else FULL
    began, load_start = harness.start(("numpy", "numba", "r2d2kit"))
    print(f"capacity {cfg['capacity']:,} transitions ({cfg['fill']:,} steps fed, ring wrapped), n_bits "
          f"{cfg['n_bits']}, one env; medians of {cfg['reps']} (seed-style: {cfg['slow_reps']}) calls; "
          f"load average {load_start}")
    rows, notes = run(cfg)
    print(table(["operation", "r2d2kit", "seed-style", "seed-style/r2d2kit"], rows, args.markdown))
    print("\n".join(f"note: {note}" for note in notes))
    print(harness.load_footer(began, load_start))


if __name__ == "__main__":
    main()
