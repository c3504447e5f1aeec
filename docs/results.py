"""Every learning result quoted outside docs/performance.md's prose, generated from benchmarks/results/*.json.

One source for each number: the MinAtar and MiniGrid tables in ``docs/performance.md``, the summary
that the README and ``docs/training.md`` give, and the ``# result:`` line of each shipped config
(what ``python -m r2d2kit.train --list`` prints) are written here from the JSON the benchmark
scripts save. Markdown pages hold them between ``<!-- results:NAME -->`` and ``<!-- /results -->``;
a config holds one ``# result:`` line.

    python docs/results.py            # list what differs from the data (exit 1 if anything does)
    python docs/results.py --write    # rewrite the blocks and lines

tests/test_docs.py fails while any of them differs from what the JSON gives.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
GAMES = {"breakout": "Breakout", "space_invaders": "SpaceInvaders", "freeway": "Freeway", "asterix": "Asterix",
         "seaquest": "Seaquest"}
POPGYM = ["RepeatFirstEasy", "RepeatPreviousEasy", "RepeatPreviousMedium", "CountRecallEasy",
          "PositionOnlyCartPoleEasy", "NoisyPositionOnlyCartPoleEasy"]
NOT_LEARNED = 2.0  # a MinAtar greedy return below this for both agents: neither learned the game (random play ~1)
BLOCK = re.compile(r"(<!-- results:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.DOTALL)
RESULT_LINE = re.compile(r"^# result:.*$", re.MULTILINE)


def load(name: str) -> list[dict]:
    """The runs of ``benchmarks/results/<name>.json`` that finished."""
    return [run for run in json.loads((RESULTS / f"{name}.json").read_text())["runs"] if not run.get("error")]


def _runs(runs: list[dict], **match: object) -> list[dict]:
    found = [run for run in runs if all(run.get(key) == value for key, value in match.items())]
    return sorted(found, key=lambda run: run["seed"])


def _seeds(runs: list[dict]) -> str:
    seeds = [run["seed"] for run in runs]
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else \
        "seeds " + ", ".join(map(str, seeds))


def _end_over_highest(runs: list[dict]) -> float:
    """The seed-mean curve's last point over its highest: 1.00 holds what it learned."""
    curve = np.mean([[evaluation[1] for evaluation in run["evaluations"]] for run in runs], axis=0)
    return float(curve[-1] / curve.max()) if curve.max() > 0 else float("nan")


def _first_success(run: dict) -> int | None:
    """Env steps of the first evaluation with greedy success 1.0 (column 5 of an evaluation row)."""
    return next((int(e[0]) for e in run["evaluations"] if e[5] is not None and e[5] >= 1.0), None)


def _each(runs: list[dict], key: str) -> str:
    """``run[key]`` of each run, comma-separated, to two decimals."""
    return ", ".join(f"{run[key]:.2f}" for run in runs)


def _k(steps: int) -> str:
    return f"{steps // 1000}k"


# --------------------------------------------------------------------------- MinAtar (minatar.json)
def minatar_table() -> str:
    runs = load("minatar")
    header = ("| 500k env steps, greedy, seeds 0-2 | R2D2 | per seed | seed-mean curve: end / its highest | SB3 DQN "
              "| per seed | R2D2 >= DQN | env steps/s, R2D2 / DQN | training min, R2D2 / DQN "
              "| peak RSS MB, R2D2 / DQN |\n"
              "|---|---:|---|---:|---:|---|---|---:|---:|---:|\n")
    rows = []
    for game, title in GAMES.items():
        r2d2, dqn = _runs(runs, game=game, agent="r2d2"), _runs(runs, game=game, agent="dqn")
        mine, theirs = np.mean([r["final"] for r in r2d2]), np.mean([r["final"] for r in dqn])
        verdict = "no" if mine < theirs else (f"yes ({mine / theirs:.1f}x)" if mine >= 1.5 * theirs else "yes")
        rate = "{:,.0f} / {:,.0f}".format(*(np.mean([r["env_steps"] / r["train_seconds"] for r in runs_])
                                            for runs_ in (r2d2, dqn)))
        minutes = "{:.0f} / {:.0f}".format(*(np.mean([r["train_seconds"] / 60 for r in runs_])
                                             for runs_ in (r2d2, dqn)))
        rss = "{:,.0f} / {:,.0f}".format(*(max(r["peak_rss_mb"] for r in runs_) for runs_ in (r2d2, dqn)))
        rows.append(f"| MinAtar {title} | {mine:.2f} | {_each(r2d2, 'final')} | "
                    f"{_end_over_highest(r2d2):.2f} | {theirs:.2f} | {_each(dqn, 'final')} | "
                    f"{verdict} | {rate} | {minutes} | {rss} |\n")
    return header + "".join(rows)


def minatar_result(game: str) -> str:
    runs = load("minatar")
    r2d2, dqn = _runs(runs, game=game, agent="r2d2"), _runs(runs, game=game, agent="dqn")
    mine, theirs = np.mean([r["final"] for r in r2d2]), np.mean([r["final"] for r in dqn])
    steps = _k(r2d2[0]["env_steps"])
    return (f"# result: greedy {mine:.2f} at {steps} env steps, {_seeds(r2d2)} (SB3 DQN {theirs:.2f}"
            f"{': behind' if mine < theirs else ''}; docs/performance.md)")


# --------------------------------------------------------------------------- MiniGrid (minigrid.json)
def minigrid_table() -> str:
    runs = load("minigrid")
    lines = ["| MiniGrid-MemoryS7-v0, greedy, 500k env steps | success per seed | mean "
             "| first success 1.0 (per seed) |",
             "|---|---|---:|---|"]
    for agent, title in (("r2d2", "R2D2 (the shipped config)"), ("recurrent-ppo", "sb3-contrib RecurrentPPO")):
        done = _runs(runs, agent=agent)
        firsts = [_first_success(r) for r in done]
        lines.append(f"| {title} | {_each(done, 'final_success')} | "
                     f"{np.mean([r['final_success'] for r in done]):.2f} | "
                     f"{', '.join(_k(f) if f is not None else 'never' for f in firsts)} |")
    return "\n".join(lines) + "\n"


def minigrid_result() -> str:
    r2d2 = _runs(load("minigrid"), agent="r2d2")
    success = np.mean([r["final_success"] for r in r2d2])
    firsts = "/".join(_k(_first_success(r) or 0) for r in r2d2)
    return (f"# result: greedy success {success:.2f} at {_k(r2d2[0]['env_steps'])} env steps on {_seeds(r2d2)}, "
            f"first at {firsts} (docs/performance.md)")


# --------------------------------------------------------------------------- POPGym (popgym.json)
def popgym_result(env: str) -> str:
    runs = load("popgym")
    lstm = [r for r in _runs(runs, env=env, agent="r2d2") if r.get("core", "lstm") == "lstm"]
    ppo = [r for r in runs if r["env"] == env and r["agent"] != "r2d2"]
    return (f"# result: MMER {np.mean([r['mmer'] for r in lstm]):+.3f}, "
            f"final {np.mean([r['final'] for r in lstm]):+.3f} "
            f"at {_k(lstm[0]['env_steps'])} env steps, {_seeds(lstm)} (RecurrentPPO's MMER "
            f"{np.mean([r['mmer'] for r in ppo]):+.3f}; docs/performance.md)")


# --------------------------------------------------------------------------- continuous control (continuous.json)
CONTINUOUS = {"pendulum_novel": "PendulumNoVel-v1", "halfcheetah_p": "HalfCheetah-P-v5"}
CONTINUOUS_SERIES = (("sac", "r2d2kit recurrent SAC (stored state + burn-in), masked"),
                     ("sac_zero_state", "r2d2kit recurrent SAC, zero start state, no burn-in, masked"),
                     ("sb3_sac_full", "SB3 SAC, full state"),
                     ("sb3_sac_masked", "SB3 SAC, masked (no memory)"),
                     ("recurrent_ppo", "sb3-contrib RecurrentPPO, masked"))


def _mean_std(values: list[float]) -> str:
    return f"{np.mean(values):.1f} +- {np.std(values):.1f}"


def continuous_table(task: str) -> str:
    """The final and best greedy (deterministic) returns of every series on ``task``, over its seeds."""
    runs = _runs(load("continuous"), task=task)
    steps = _k(max(r["steps"] for r in runs))
    lines = [f"| {CONTINUOUS[task]}, {steps} env steps, deterministic | final per seed | final (mean +- std) "
             "| best of curve (mean) | minutes per run |",
             "|---|---|---:|---:|---:|"]
    for series, title in CONTINUOUS_SERIES:
        done = _runs(runs, series=series)
        if not done:
            continue
        finals = ", ".join(f"{r['final']:.1f}" for r in done)
        lines.append(f"| {title} | {finals} | "
                     f"{_mean_std([r['final'] for r in done])} | {np.mean([r['best'] for r in done]):.1f} | "
                     f"{np.mean([r['wall_seconds'] for r in done]) / 60:.0f} |")
    return "\n".join(lines) + "\n"


def continuous_result(task: str) -> str:
    runs = _runs(load("continuous"), task=task)
    mine = _runs(runs, series="sac")
    full = _runs(runs, series="sb3_sac_full")
    masked = _runs(runs, series="sb3_sac_masked")
    return (f"# result: deterministic {np.mean([r['final'] for r in mine]):.1f} at {_k(mine[0]['steps'])} env steps, "
            f"{_seeds(mine)} (SB3 SAC {np.mean([r['final'] for r in masked]):.1f} on the same observations, "
            f"{np.mean([r['final'] for r in full]):.1f} on the full state; docs/performance.md)")


# --------------------------------------------------------------------------- the DQN-to-R2D2 ladder (ladder.json)
LADDER_GAMES = ("freeway", "asterix")
LADDER_STEPS = (150_000, 300_000, 500_000)  # where every rung's curve is read: the budgets the screens ran to
LADDER_HEALTH = (  # (health.csv column, label, format)
    ("health/greedy_disagreement", "disagreement", "{:.3f}"),
    ("health/target_age", "at target age", "{:.0f}"),  # disagreement is 0 right after a copy: read it at its age
    ("learner/gradient_norm", "gradient norm", "{:.3g}"),
    ("health/q_taken", "Q", "{:.2f}"),
    ("health/overestimation", "overestimation", "{:.2f}"),
)


def _ladder_hypotheses() -> list[tuple[str, str]]:
    """Every rung and variant with its hypothesis, as benchmarks/ladder.py defines them (one source)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import ladder
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return ladder.hypotheses()


def _return_at(run: dict, steps: int) -> float | None:
    """A run's greedy mean at the evaluation for ``steps`` (actor processes may overshoot it by a batch)."""
    return next((e[1] for e in run["evaluations"] if steps <= e[0] < steps + run["eval_every"] // 2), None)


def _ladder_cell(runs: list[dict], steps: tuple[int, ...]) -> str:
    """The seed-mean return at each of ``steps`` ('-' past a run's budget), and the seeds."""
    if not runs:
        return "-"
    means = []
    for at in steps:
        values = [_return_at(run, at) for run in runs]
        means.append("-" if None in values else f"{np.mean(values):.1f}")
    return " / ".join(means) + f" ({_seeds(runs)})"


def _ladder_health(runs: list[dict]) -> str:
    """The :data:`LADDER_HEALTH` means ('-' for a value a run's health.csv did not keep)."""
    means = [(label, fmt, np.mean([r["health"].get(key, np.nan) for r in runs])) for key, label, fmt in LADDER_HEALTH]
    return ", ".join(f"{label} " + ("-" if np.isnan(mean) else fmt.format(mean)) for label, fmt, mean in means)


def ladder_table() -> str:
    """Each rung and variant that ran: its hypothesis, its seed-mean greedy return on Freeway and Asterix at 150k,
    300k and 500k env steps, and the health columns that moved (means over the last fifth of the run)."""
    runs = load("ladder")
    at = " / ".join(_k(s) for s in LADDER_STEPS)
    lines = ["| rung | hypothesis | " + " | ".join(f"{GAMES[g]} at {at}" for g in LADDER_GAMES)
             + " | health, last fifth of the run (" + "; ".join(GAMES[g] for g in LADDER_GAMES) + ") |",
             "|---|---|" + "---|" * len(LADDER_GAMES) + "---|"]
    for name, hypothesis in _ladder_hypotheses():
        done = {game: _runs(runs, rung=name, game=game) for game in LADDER_GAMES}
        if not any(done.values()):
            continue
        health = "; ".join(_ladder_health(done[g]) if done[g] else "-" for g in LADDER_GAMES)
        lines.append(f"| `{name}` | {hypothesis} | "
                     + " | ".join(_ladder_cell(done[g], LADDER_STEPS) for g in LADDER_GAMES) + f" | {health} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the summary other pages give
def summary() -> str:
    """One paragraph for the README and docs/training.md, linking to the tables."""
    runs = load("minatar")
    finals = {game: {agent: np.mean([r["final"] for r in _runs(runs, game=game, agent=agent)])
                     for agent in ("r2d2", "dqn")} for game in GAMES}
    neither = [g for g in GAMES if max(finals[g].values()) < NOT_LEARNED]
    ahead = [g for g in GAMES if finals[g]["r2d2"] >= finals[g]["dqn"] and g not in neither]
    behind = [g for g in GAMES if g not in ahead and g not in neither]
    said = "; ".join(f"{GAMES[g]} {finals[g]['r2d2']:.2f} against {finals[g]['dqn']:.2f}"
                     for g in ahead + behind + neither)
    grid = _runs(load("minigrid"), agent="r2d2")
    ppo = _runs(load("minigrid"), agent="recurrent-ppo")
    firsts = sorted(_first_success(r) or 0 for r in grid)
    return (f"At 500k env steps on 2 cores (greedy, seeds 0-2), R2D2 against DQN with the MinAtar paper's settings: "
            f"{said} (R2D2 ahead on {', '.join(GAMES[g] for g in ahead)}; behind on "
            f"{', '.join(GAMES[g] for g in behind)}; neither learns {', '.join(GAMES[g] for g in neither)}). "
            "MiniGrid-MemoryS7: greedy success "
            f"{np.mean([r['final_success'] for r in grid]):.2f} at 500k on every seed, first reached at "
            f"{_k(firsts[0])}-{_k(firsts[-1])} env steps (RecurrentPPO at 500k: "
            f"{np.mean([r['final_success'] for r in ppo]):.2f}). The tables, the method and the curves: "
            "[performance](performance.md#learning-images-minatar-beside-dqn-and-minigrid-memorys7-beside-recurrentppo).\n")


BLOCKS: dict[str, Callable[[], str]] = {"minatar": minatar_table, "minigrid": minigrid_table, "summary": summary,
                                        **{task: functools.partial(continuous_table, task) for task in CONTINUOUS},
                                        "ladder": ladder_table}
PAGES = ["README.md", "docs/performance.md", "docs/training.md"]


def result_lines() -> dict[str, str]:
    """``{config path relative to the root: its generated # result: line}``."""
    lines = {f"configs/minatar/{game}.yaml": minatar_result(game) for game in GAMES}
    lines["configs/minigrid_memory.yaml"] = minigrid_result()
    lines.update({f"configs/popgym/{env}.yaml": popgym_result(env) for env in POPGYM})
    lines.update({f"configs/sac/{task}.yaml": continuous_result(task) for task in CONTINUOUS})
    return lines


def rendered() -> dict[str, str]:
    """``{file relative to the root: its text with every generated part as the data gives it}``."""
    out = {}
    for page in PAGES:
        text = (ROOT / page).read_text()
        link = "docs/performance.md" if page == "README.md" else "performance.md"

        def fill(match: re.Match, link: str = link) -> str:
            body = BLOCKS[match["name"]]().replace("(performance.md#", f"({link}#")
            return match.group(1) + body + match.group(4)

        out[page] = BLOCK.sub(fill, text)
    for path, line in result_lines().items():
        text = (ROOT / path).read_text()
        out[path] = RESULT_LINE.sub(lambda _, line=line: line, text, count=1)
    return out


def stale() -> list[str]:
    """The files whose generated parts differ from the data."""
    return [path for path, text in rendered().items() if (ROOT / path).read_text() != text]


def main(argv: list[str]) -> int:
    if "--write" in argv:
        for path, text in rendered().items():
            if (ROOT / path).read_text() != text:
                (ROOT / path).write_text(text)
                print(f"wrote {path}")
        return 0
    differ = stale()
    for path in differ:
        print(f"{path} differs from benchmarks/results/*.json: run python docs/results.py --write")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
