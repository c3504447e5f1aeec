"""Learning benchmark on six POPGym tasks: r2d2kit's R2D2 (LSTM and GRU cores) beside sb3-contrib's RecurrentPPO,
scored by MMER.

    python benchmarks/bench_popgym.py --json benchmarks/results/popgym.json --png benchmarks/results/popgym.png
    python benchmarks/bench_popgym.py --json out.json --resume --cores gru --without recurrent-ppo  # one core only
    python benchmarks/bench_popgym.py --json out.json --resume         # skip the runs out.json already holds
    python benchmarks/bench_popgym.py --without recurrent-ppo --set learner.learning_rate=5e-4
    python benchmarks/bench_popgym.py --quick                          # smoke run: every env, seed 0, 2,048 steps

MMER: the maximum over a run's greedy evaluations of the mean return. Method: benchmarks/README.md.
"""

import functools
import hashlib
import json
import os
from pathlib import Path

import harness
import numpy as np
import yaml
from harness import REPO_ROOT, Results, fmt, table

CONFIG_DIR = REPO_ROOT / "configs" / "popgym"
ENVS = ("RepeatFirstEasy", "RepeatPreviousEasy", "RepeatPreviousMedium", "CountRecallEasy",
        "PositionOnlyCartPoleEasy", "NoisyPositionOnlyCartPoleEasy")
AGENTS = ("r2d2", "recurrent-ppo")
AGENT_NAMES = {"r2d2": "r2d2kit R2D2", "recurrent-ppo": "sb3-contrib RecurrentPPO"}
CORES = ("lstm", "gru")  # R2D2's model.core; a run made before there was a choice is an LSTM run
SERIES = (("r2d2", "lstm"), ("r2d2", "gru"), ("recurrent-ppo", None))  # what the tables compare
SERIES_NAMES = {("r2d2", "lstm"): "r2d2kit R2D2 (LSTM)", ("r2d2", "gru"): "r2d2kit R2D2 (GRU)",
                ("recurrent-ppo", None): "sb3-contrib RecurrentPPO"}
DISTS = ("numpy", "tensorflow", "keras", "gymnasium", "popgym", "r2d2kit", "torch", "stable_baselines3", "sb3_contrib")

# The targets for R2D2's MMER (mean over seeds): (comparison, threshold) ...
TARGETS = {"RepeatFirstEasy": (">=", 0.95), "RepeatPreviousEasy": (">=", 0.95),
           "PositionOnlyCartPoleEasy": (">=", 0.95), "NoisyPositionOnlyCartPoleEasy": (">=", 0.95),
           "CountRecallEasy": (">=", 0.51), "RepeatPreviousMedium": (">", -0.32)}
BEATS_PPO_ON = 5  # ... and R2D2's MMER >= RecurrentPPO's on at least 5 of the 6 envs

# POPGym paper (Morad et al., ICLR 2023), appendix: MMER of PPO-GRU / PPO-LSTM after 15M env steps; not read here,
# so None ("not found"), not a number from memory. Two figures quoted as its best recurrent PPO are targets above.
PAPER_MMER: dict[str, dict[str, float | None]] = {env: {"PPO-GRU": None, "PPO-LSTM": None} for env in ENVS}
QUOTED_PAPER_BEST = {"CountRecallEasy": 0.51, "RepeatPreviousMedium": -0.32}

RECURRENT_PPO = dict(policy="MlpLstmPolicy", n_envs=8, n_steps=128, batch_size=256, n_epochs=10,
                     learning_rate=3e-4, gamma="<learner.gamma>", gae_lambda=0.95, clip_range=0.2, ent_coef=0.01,
                     vf_coef=0.5, max_grad_norm=0.5, normalize=False, prev_action=True,
                     policy_kwargs="dict(lstm_hidden_size=<model.core_units>, n_lstm_layers=1, "
                                   "enable_critic_lstm=True, net_arch=dict(pi=[<model.head_units>], "
                                   "vf=[<model.head_units>]), activation_fn=Tanh, ortho_init=True)")
# What --ppo-set may change: the numeric settings but n_envs (8: both agents evaluate at the same env steps)
PPO_TUNABLE = {**{k: type(v) for k, v in RECURRENT_PPO.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "n_envs"}, "gamma": float}


def mmer(evaluations: list) -> float | None:
    """The maximum over evaluations (rows of env steps, mean, ...) of the mean return; None without any."""
    return max(e[1] for e in evaluations) if evaluations else None


def target_met(env: str, value: float | None) -> bool | None:
    """Whether an MMER meets the target for ``env`` (None: no value or no target)."""
    if value is None or env not in TARGETS:
        return None
    return value >= TARGETS[env][1] if TARGETS[env][0] == ">=" else value > TARGETS[env][1]


def config_path(env: str) -> Path:
    return CONFIG_DIR / f"{env}.yaml"


def read_config(env: str) -> dict:
    return yaml.safe_load(config_path(env).read_text()) or {}


def config_digest(env: str, agent: str) -> str:
    """A digest of what the config decides for ``agent`` on ``env`` (``--resume`` re-runs runs made before an edit):
    every R2D2 setting but the budget (``--steps``); for RecurrentPPO, the model sizes and discount it takes."""
    config = read_config(env)
    if agent == "r2d2":
        config.get("run", {}).pop("total_env_steps", None)
    else:
        model = config.get("model", {})
        config = {"core_units": model.get("core_units"), "head_units": model.get("head_units"),
                  "gamma": config.get("learner", {}).get("gamma")}
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def ppo_hyperparameters(env: str, overrides: dict | None = None) -> dict:
    """RECURRENT_PPO with the R2D2 config's ``gamma``, ``lstm_hidden_size`` and ``head_units``, then ``overrides``."""
    config, overrides = read_config(env), overrides or {}
    gamma = overrides.get("gamma", config.get("learner", {}).get("gamma"))
    if gamma is None:
        raise ValueError(f"{config_path(env)} sets no learner.gamma; RecurrentPPO takes its discount from there "
                         "(or pass --ppo-set gamma=VALUE)")
    model = config["model"]
    return {**RECURRENT_PPO, **overrides, "gamma": float(gamma), "lstm_hidden_size": int(model["core_units"]),
            "head_units": int(model["head_units"])}


def parse_ppo_overrides(items: list[str]) -> dict:
    """``["gamma=0.5", "n_epochs=4"]`` -> ``{"gamma": 0.5, "n_epochs": 4}``, checked against PPO_TUNABLE."""
    overrides = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in PPO_TUNABLE:
            raise ValueError(f"--ppo-set {item!r}: expected KEY=VALUE with KEY one of {', '.join(PPO_TUNABLE)}")
        integer = PPO_TUNABLE[key] is int
        try:
            overrides[key] = int(text) if integer else float(text)
        except ValueError:
            raise ValueError(f"--ppo-set {item!r}: {key} takes {'an integer' if integer else 'a number'}, "
                             f"got {text!r}") from None
    return overrides


def core_of(run: dict) -> str | None:
    """The memory core of an R2D2 run (LSTM for runs stored before the core was a choice); None for PPO."""
    return run.get("core", "lstm") if run["agent"] == "r2d2" else None


def series_of(run: dict) -> tuple[str, str | None]:
    return run["agent"], core_of(run)


def same_settings(run: dict, steps: int, args) -> bool:
    """Whether a stored run was made with this sweep's budget, schedule, agent settings and config."""
    agent_settings = (run.get("overrides") == list(args.set) if run["agent"] == "r2d2"
                      else run.get("ppo_overrides", []) == list(args.ppo_set))
    return (run.get("error") is None and run["steps"] == steps and run["eval_every"] == args.eval_every
            and run["eval_episodes"] == args.eval_episodes and agent_settings
            and run.get("config_digest") == config_digest(run["env"], run["agent"]))


# --- one run (child process)
def run_r2d2(job: dict) -> dict:
    env, seed = job["env"], job["seed"]
    line = (f"  R2D2 ({job['core']}) {env} seed {seed} " "{steps:>7,} env steps: eval {mean:+.3f} +- {std:.3f}, "
            "training episodes {train_return:+.3f}, {updates:,} updates, {seconds:.0f} s")
    evaluations = harness.evaluation_callback(line)
    core = job["core"]
    named = "" if core == "lstm" else f"-{core}"  # the LSTM runs' directories keep their names
    run_dir = Path(job["runs_dir"]) / f"{env}{named}-seed{seed}" if job["runs_dir"] else None
    trainer, summary, fit_seconds = harness.fit(config_path(env), [
        f"run.total_env_steps={job['steps']}", f"run.eval_every={job['eval_every']}", f"run.seed={seed}",
        f"run.eval_episodes={job['eval_episodes']}", "checkpoints.keep=1", f"model.core={core}", *job["overrides"]],
        [evaluations], run_dir)
    train_seconds = float(summary["train_seconds"])
    return dict(evaluations=evaluations.rows, env_steps=int(summary["env_steps"]), train_seconds=train_seconds,
                eval_seconds=fit_seconds - train_seconds, updates=int(summary["updates"]),
                config=dict(trainer.config.to_dict(), path=os.path.relpath(config_path(env), REPO_ROOT)))


def make_ppo_env(env: str):
    """POPGym env -> PreviousAction (on the bare env, as its paper's runs) -> FlattenObservation (one-hot parts)."""
    import gymnasium as gym
    from popgym.wrappers import PreviousAction

    from r2d2kit.envs import ensure_registered

    env_id = f"popgym-{env}-v0"
    ensure_registered(env_id)
    return gym.wrappers.FlattenObservation(PreviousAction(gym.make(env_id).unwrapped))


def run_ppo(job: dict) -> dict:
    env, seed = job["env"], job["seed"]
    hp = ppo_hyperparameters(env, parse_ppo_overrides(job["ppo_overrides"]))
    keys = ("policy", "n_steps", "batch_size", "n_epochs", "learning_rate", "gamma", "gae_lambda", "clip_range",
            "ent_coef", "vf_coef", "max_grad_norm")
    kwargs = dict({k: hp[k] for k in keys}, policy_kwargs=dict(
        lstm_hidden_size=hp["lstm_hidden_size"], n_lstm_layers=1, enable_critic_lstm=True,
        net_arch=dict(pi=[hp["head_units"]], vf=[hp["head_units"]])))
    line = (f"  RecurrentPPO {env} seed {seed} " "{steps:>7,} env steps: eval {mean:+.3f} +- {std:.3f}, "
            "training episodes {train_return:+.3f}, {seconds:.0f} s")
    result = harness.run_sb3("RecurrentPPO", functools.partial(make_ppo_env, env), kwargs, seed=seed, line=line,
                             steps=job["steps"], eval_every=job["eval_every"], eval_episodes=job["eval_episodes"],
                             n_envs=hp["n_envs"], torch_threads=job["torch_threads"])
    result["config"] = dict(hp, torch_threads=result.pop("torch_threads"))
    return result


def child(job: dict) -> dict:
    """One (agent, env, seed) run in this process."""
    result = (run_r2d2 if job["agent"] == "r2d2" else run_ppo)(job)
    evaluations = result["evaluations"]
    return dict(result, mmer=mmer(evaluations), final=evaluations[-1][1] if evaluations else None, error=None)


# --- report
def report(runs: list[dict], envs: list[str], markdown: bool) -> str:
    """Tables of MMER per env and series (R2D2 per core, RecurrentPPO); the targets are judged on R2D2's LSTM."""
    s = {env: {} for env in envs}  # per env and series: the seeds that finished, their mean MMER, failures
    for env in envs:
        for series in SERIES:
            mine = [r for r in runs if r["env"] == env and series_of(r) == series]
            done = [r for r in mine if r.get("error") is None]
            mmer = harness.mean_std([r["mmer"] for r in done])
            s[env][series] = dict(done=done, mmer=mmer[0] if mmer else None, steps=done[0]["steps"] if done else None,
                                  failed=len(mine) - len(done))
    lstm, gru, ppo = SERIES
    header = ["env", "env steps", "R2D2 LSTM MMER (seeds)", "R2D2 GRU MMER (seeds)", "RecurrentPPO MMER (seeds)",
              "LSTM >= PPO", "GRU >= PPO", "paper PPO-GRU", "paper PPO-LSTM", "target (R2D2 LSTM)", "met"]
    rows, beats = [], {lstm: [], gru: []}
    for env in envs:
        judged = {}
        for series in (lstm, gru):
            mine, theirs = s[env][series]["mmer"], s[env][ppo]["mmer"]
            judged[series] = mine >= theirs if mine is not None and theirs is not None else None
            beats[series] += [] if judged[series] is None else [judged[series]]
        met = target_met(env, s[env][lstm]["mmer"])
        quoted = " (quoted paper best)" if env in QUOTED_PAPER_BEST else ""
        mmers = [harness.fmt_mean_std([r["mmer"] for r in s[env][series]["done"]], "+.3f") for series in SERIES]
        steps = next((s[env][series]["steps"] for series in SERIES if s[env][series]["steps"]), None)
        rows.append([env, fmt(steps, ","), *mmers, *({None: "-", True: "yes", False: "no"}[judged[series]]
                                                     for series in (lstm, gru)),
                     *("not found" if value is None else fmt(value) for value in PAPER_MMER[env].values()),
                     f"{TARGETS[env][0]} {TARGETS[env][1]:+.2f}{quoted}",
                     {None: "-", True: "met", False: "not met"}[met]])
    lines = [table(header, rows, markdown, right=range(1, 5)), ""]
    rows = []
    for env in envs:
        for series, a in s[env].items():
            done = a["done"]
            if done:
                rows.append([env, SERIES_NAMES[series], harness.fmt_mean_std([r["final"] for r in done], "+.3f"),
                             harness.fmt_mean_std([r["train_seconds"] for r in done], ".0f", count=False) + " s",
                             f"{np.mean([r['wall_seconds'] for r in done]):.0f} s",
                             f"{max(r['peak_rss_mb'] for r in done):,.0f} MB", str(a["failed"])])
            elif a["failed"]:
                rows.append([env, SERIES_NAMES[series], "-", "-", "-", "-", str(a["failed"])])
    lines += [table(["env", "agent", "final mean return (seeds)", "training wall time", "process wall time",
                     "peak RSS (max over seeds)", "failed runs"], rows, markdown, right=range(2, 7)), ""]
    rows = []
    order = {series: i for i, series in enumerate(SERIES)}
    for r in sorted((r for r in runs if r["env"] in envs),
                    key=lambda r: (envs.index(r["env"]), order[series_of(r)], r["seed"])):
        if r.get("error"):
            rows.append([SERIES_NAMES[series_of(r)], r["env"], str(r["seed"]), "failed"] + ["-"] * 7)
            continue
        best = max(r["evaluations"], key=lambda e: e[1])[0] if r["evaluations"] else None
        rate = r["env_steps"] / max(r["train_seconds"], 1e-9)
        rows.append([SERIES_NAMES[series_of(r)], r["env"], str(r["seed"]), fmt(r["mmer"], "+.3f"),
                     fmt(r["final"], "+.3f"), fmt(best, ","), f"{r['train_seconds']:.0f}", f"{rate:.0f}",
                     f"{r['updates']:,}", f"{r['process_seconds']:.0f}", f"{r['peak_rss_mb']:,.0f} MB"])
    lines += [table(["agent", "env", "seed", "MMER", "final", "best at (env steps)", "training s", "env steps/s",
                     "updates", "process s", "peak RSS"], rows, markdown, right=range(2, 11)), ""]
    lines.append("- MMER: max over evaluations of the mean greedy return (POPGym's metric, in [-1, 1]); mean +- std "
                 "over seeds (count). Training wall time excludes evaluations; process wall time and peak RSS "
                 "(ru_maxrss): the run's subprocess, imports and evaluations included.")
    for series in (lstm, gru):
        wins, judged_envs = sum(beats[series]), len(beats[series])
        verdict = (" (met)" if wins >= BEATS_PPO_ON else " (not met)" if judged_envs == len(ENVS)
                   else " (not judged: fewer envs)")
        lines.append(f"- target: {SERIES_NAMES[series]}'s MMER >= RecurrentPPO's on >= {BEATS_PPO_ON} of 6 envs: "
                     f"{wins} of {judged_envs} envs with both here{verdict}")
    lines.append("- paper: the POPGym paper's appendix MMER table (PPO + GRU / LSTM, 15M env steps) could not be read "
                 "here ('not found'); the targets on CountRecallEasy and RepeatPreviousMedium are quoted from it.")
    return "\n".join(lines)


def plot(runs: list[dict], envs: list[str], path: str) -> None:
    panels = {env: {SERIES_NAMES[series]: [r["evaluations"] for r in runs if r["env"] == env
                                           and series_of(r) == series and r.get("error") is None]
                    for series in SERIES} for env in envs}
    harness.panel_plot(path, panels, "POPGym: mean over seeds (line), min-max over seeds (band); dashed: the target",
                       guides={env: [(TARGETS[env][1], "--")] for env in envs}, ylim=(-1.05, 1.05))


def parse_args(argv=None):
    p = harness.arg_parser(__doc__, "quick", "markdown", "json", "resume", "png", "set", "seeds", "torch-threads")
    p.add_argument("--envs", nargs="+", default=list(ENVS), metavar="ENV", choices=ENVS,
                   type=lambda name: name.removeprefix("popgym-").removesuffix("-v0"),
                   help=f"POPGym tasks (default all six: {' '.join(ENVS)}; a popgym-...-v0 id works too)")
    p.add_argument("--steps", type=int, default=None, help="env-step budget per env for both agents (default: each "
                   "config's run.total_env_steps; --quick: 2048)")
    p.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations (default 10000; "
                                                                "--quick: 1024); a multiple of 8")
    p.add_argument("--eval-episodes", type=int, default=None, help="greedy episodes per evaluation (default 16; "
                                                                   "--quick: 4)")
    p.add_argument("--without", action="extend", type=harness.comma_list(AGENTS, str.lower), default=[],
                   metavar="AGENT", help=f"skip an agent: {' or '.join(AGENTS)} (repeatable, or comma-separated)")
    p.add_argument("--ppo-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a numeric RecurrentPPO hyper-parameter, e.g. gamma=0.5 (repeatable; keys: "
                        + ", ".join(PPO_TUNABLE) + "; gamma defaults to the R2D2 config's learner.gamma)")
    p.add_argument("--cores", action="extend", nargs="+", choices=CORES, default=None, metavar="CORE",
                   help=f"R2D2's memory cores (model.core): {' '.join(CORES)} (default both)")
    p.add_argument("--runs-dir", default=None, help="keep each R2D2 run (metrics with the training-health "
                                                    "columns, checkpoint) in DIR/ENV-seedN")
    args = p.parse_args(argv)
    try:
        parse_ppo_overrides(args.ppo_set)  # checked here, used by the child
    except ValueError as error:
        p.error(str(error))
    args.seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    args.cores = list(dict.fromkeys(args.cores or CORES))
    if args.quick:
        args.steps = args.steps or 2048
        args.set = ["run.warmup_steps=512", *args.set]
    args.eval_every = args.eval_every or (1024 if args.quick else 10_000)
    args.eval_episodes = args.eval_episodes or (4 if args.quick else 16)
    if args.eval_every % 8:
        p.error("--eval-every must be a multiple of 8: both agents step 8 envs at a time, so only then do they "
                "evaluate at the same env steps")
    return args


def main(argv=None) -> dict:
    harness.serve_job(child)
    args = parse_args(argv)
    began, load_start = harness.start(DISTS)
    budgets = {env: args.steps or int(read_config(env)["run"]["total_env_steps"]) for env in args.envs}
    agents = [a for a in AGENTS if a not in args.without]
    print(f"POPGym: {', '.join(f'{env} {budgets[env]:,}' for env in args.envs)} env steps per agent; greedy "
          f"evaluation of {args.eval_episodes} episodes every {args.eval_every:,} steps; seeds "
          f"{' '.join(map(str, args.seeds))}; agents {', '.join(AGENT_NAMES[a] for a in agents)}; R2D2 cores "
          f"{' '.join(args.cores)}"
          + (f"; R2D2 overrides {' '.join(args.set)}" if args.set else "")
          + (f"; RecurrentPPO overrides {' '.join(args.ppo_set)}" if args.ppo_set else ""), flush=True)
    for env, steps in budgets.items():
        if steps % args.eval_every:
            print(f"note: {env}'s budget {steps:,} is not a multiple of --eval-every; the final evaluation is at "
                  f"{steps // args.eval_every * args.eval_every:,}", flush=True)
    results = Results(args.json, lambda run: (*series_of(run), run["env"], run["seed"]), args.resume, lambda: dict(
        machine=harness.machine_line(DISTS), args=vars(args), recurrent_ppo=RECURRENT_PPO, targets=TARGETS,
        paper_mmer=PAPER_MMER, quoted_paper_best=QUOTED_PAPER_BEST))
    # both agents of a seed one after the other: a partial sweep compares like with like
    runs = [dict(agent=agent, env=env, seed=seed, steps=budgets[env], eval_every=args.eval_every,
                 eval_episodes=args.eval_episodes, overrides=list(args.set), ppo_overrides=list(args.ppo_set),
                 **({"core": core} if agent == "r2d2" else {}))
            for env in args.envs for seed in args.seeds for agent in agents
            for core in (args.cores if agent == "r2d2" else [None])]
    for run, result in harness.sweep(
            __file__, runs, results,
            lambda r: f"{SERIES_NAMES[series_of(r)]} {r['env']} seed {r['seed']} ({r['steps']:,} env steps)",
            extras=dict(torch_threads=args.torch_threads, runs_dir=args.runs_dir),
            same=lambda stored, run: same_settings(stored, run["steps"], args),
            before=lambda run: dict(run, config_digest=config_digest(run["env"], run["agent"]))):  # just before it runs
        if result.get("error"):
            result.update(evaluations=[], mmer=None, final=None)
        else:
            print(f"  done: MMER {result['mmer']:+.3f}, final {result['final']:+.3f}, training "
                  f"{result['train_seconds']:.0f} s, process {result['wall_seconds']:.0f} s, peak RSS "
                  f"{result['peak_rss_mb']:,.0f} MB", flush=True)
        results.add(dict(result, **run))
    shown = [r for r in results.runs if r["env"] in args.envs and r["seed"] in args.seeds and r["agent"] in agents
             and (r["agent"] != "r2d2" or core_of(r) in args.cores)]
    harness.finish(report(shown, args.envs, args.markdown), began, load_start, shown and args.png,
                   lambda png: plot(shown, args.envs, png))
    if args.json:
        results.save()
        print(f"- results written to {args.json}")
    return dict(runs=results.runs)


if __name__ == "__main__":
    main()
