"""From DQN to R2D2 one rung at a time, on a MinAtar game's shipped config: which of R2D2's pieces costs it?

    python benchmarks/ladder.py --games freeway --rungs dqn --seeds 10 11 --json benchmarks/results/ladder_freeway.json
    python benchmarks/ladder.py --games freeway asterix --json ladder.json --resume --markdown   # the table so far
    python benchmarks/ladder.py --list                                                        # the rungs

Rung 0 (``dqn``) is the game's config turned into the MinAtar paper's DQN as SB3 DQN runs it in
``bench_minatar.py`` (feed-forward network, one env, one update of 32 single transitions per env step,
1-step targets without double Q or value rescaling, Huber loss, centered RMSprop, a hard target copy
every 1,000 updates, epsilon from 1 to 0.1 over 100k env steps). Each later rung gives one of R2D2's
pieces back, in order, until the last rung is the shipped config itself; each states the hypothesis
it tests; off-ladder variants (``VARIANTS``) change one more key on a rung where its signal points.
Every run keeps its run directory (``--runs-dir``), and the result stores its greedy
curve and the means of its health columns over the last fifth of the run beside the curve.
Screening seeds are 10 and up: the reported seeds (0-2) are never screened on. A run writes a
checkpoint (replay included) every ``--checkpoint-every`` env steps (50k), so a sweep that was killed goes
on from there when started again (its earlier evaluations are read back from the run's ``metrics.csv``).
"""

import csv
import json
import math
from pathlib import Path

import harness
import numpy as np
from harness import REPO_ROOT, Results, table

GAMES = ("breakout", "space_invaders", "asterix", "freeway", "seaquest")
DISTS = ("numpy", "tensorflow", "keras", "gymnasium", "minatar", "r2d2kit")

# DQN as bench_minatar.py runs SB3's (the MinAtar paper's settings) on top of a shipped MinAtar config
DQN = ["model.core=none", "model.dueling=false", "model.head_units=0", "model.prev_action_reward=false",
       "replay.burn_in=0", "replay.trace_length=1", "replay.period=1", "replay.n_step=1",
       "learner.double_q=false", "learner.value_rescaling=false", "learner.loss=huber", "learner.optimizer=rmsprop",
       "learner.max_gradient_norm=1e10", "learner.target_update_period=1000", "learner.learning_rate_decay_updates=0",
       "actors.runner=local", "env.num_envs=1", "actors.exploration=linear", "actors.epsilon=0.1",
       "actors.epsilon_start=1.0", "actors.epsilon_decay_steps=100000", "run.updates_per_env_step=1.0"]

# (name, hypothesis, the DQN overrides this rung drops: the shipped config's values return)
RUNGS = [
    ("dqn", "the toolkit's DQN with SB3 DQN's settings lands inside SB3 DQN's spread (else the comparison is off)",
     []),
    ("adam", "R2D2's optimiser and loss (Adam, epsilon 1e-6; squared TD; norm clipped at 40) learn as RMSprop and "
     "Huber do", ["learner.optimizer", "learner.loss", "learner.max_gradient_norm"]),
    ("double_q", "double-Q targets do not slow these games", ["learner.double_q"]),
    ("n_step", "3-step returns do not bias Freeway's and Asterix's values under epsilon-greedy actors",
     ["replay.n_step"]),
    ("rescaling", "value rescaling h(x) keeps small action gaps (Freeway: 3% of Q) learnable",
     ["learner.value_rescaling"]),
    ("dueling", "the dueling head of 128 units learns as the linear head does", ["model.dueling", "model.head_units"]),
    ("windows", "windows of 10 trained rows updated 10x less often (the same rows per env step; the target copied "
     "every 500 updates) learn as single transitions do",
     ["replay.trace_length", "replay.period", "run.updates_per_env_step", "learner.target_update_period"]),
    ("rate_decay", "the rate falling to a tenth by 500k does not stop late learning",
     ["learner.learning_rate_decay_updates"]),
    ("actors", "8 envs in 2 actor processes (asynchronous weights) learn as 1 env in the learner's process does",
     ["actors.runner", "env.num_envs"]),
    ("apex", "Ape-X's fixed per-env epsilons (0.4 down to 0.0007) explore as well as epsilon 1 -> 0.1",
     ["actors.exploration", "actors.epsilon", "actors.epsilon_start", "actors.epsilon_decay_steps"]),
    ("lstm", "an LSTM core with stored state and 5 burn-in rows learns as the feed-forward network does",
     ["model.core", "replay.burn_in"]),
    ("r2d2", "the previous action and reward as inputs: this rung is the shipped config", ["model.prev_action_reward"]),
]
# off the ladder: (name, the rung it starts from, hypothesis, overrides on top): one piece changed where a rung's
# signal points, e.g. the loss on the rung where the values diverged
RMSPROP_PLAIN = ["learner.optimizer=rmsprop", "learner.value_rescaling=false"]  # DQN's optimiser, gradients unshrunk
LINEAR_HEAD = ["model.dueling=false", "model.head_units=0"]  # the dqn rung's head
# DQN's rhythm for 10-row windows: one update of 4 windows (40 rows) per env step, the target every 1000 updates
DQN_RHYTHM = ["learner.batch_size=4", "run.updates_per_env_step=1.0", "learner.target_update_period=1000"]
# the rate to a tenth over 495,000 updates: by 500k env steps at one update per env step (after the 5k warm-up)
RATE_TO_500K = ["learner.learning_rate_decay_updates=495000"]
LSTM_BURN_IN = ["model.core=lstm", "replay.burn_in=5"]  # the shipped core and burn-in, on a feed-forward rung
# the candidate shared setting on the r2d2 rung
CANDIDATE = RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + RATE_TO_500K
VARIANTS = [
    ("adam_huber", "adam", "the squared TD loss, not Adam or the clipping, lets the adam rung's values diverge (Q 41 "
     "against returns of 2): with the Huber loss it learns as the dqn rung does", ["learner.loss=huber"]),
    ("adam_rmsprop", "adam", "Adam (epsilon 1e-6: full-size steps on gradients of any scale), not the squared TD loss, "
     "stalls the adam rung: with DQN's RMSprop and the squared loss it learns as the dqn rung does",
     ["learner.optimizer=rmsprop"]),
    ("r2d2_rmsprop", "r2d2", "the shipped config with DQN's RMSprop instead of Adam (the optimiser alone restored "
     "the dqn rung's values and return on Asterix) learns Asterix and Freeway", ["learner.optimizer=rmsprop"]),
    ("n_step_huber", "n_step", "the squared TD loss also flattens the n_step rung (values sane, but online and "
     "target agreeing on every greedy action): with the Huber loss it learns as the dqn rung does",
     ["learner.loss=huber"]),
    ("r2d2_huber", "r2d2", "the shipped config with the Huber loss instead of the squared TD error learns Asterix",
     ["learner.loss=huber"]),
    ("r2d2_rmsprop_plain", "r2d2", "value rescaling shrinks the gradients to where RMSprop's epsilon damps them "
     "(r2d2_rmsprop: gradient norms 0.015 on Asterix and 0.0024 on Freeway, DQN's 0.26 and 0.06; Freeway's actors "
     "never cross): without rescaling, the shipped config with RMSprop learns as the dqn rung does",
     RMSPROP_PLAIN),
    ("r2d2_slow_adam", "r2d2", "Adam's steps (about the full rate on every weight, whatever the gradient's scale) are "
     "several times the steps RMSprop takes on the dqn rung's gradients: the shipped config at a fifth of the rate "
     "(5e-5 falling to 5e-6) learns Asterix",
     ["learner.learning_rate=0.00005", "learner.final_learning_rate=0.000005"]),
    ("double_q_rmsprop", "double_q", "with the optimiser that learns Asterix (RMSprop, as adam_rmsprop), double-Q "
     "targets learn as the 1-step targets do", ["learner.optimizer=rmsprop"]),
    ("n_step_rmsprop", "n_step", "with RMSprop, 3-step returns of epsilon-greedy actors (their deaths inside the "
     "3 steps folded into the target) learn Asterix as 1-step returns do", ["learner.optimizer=rmsprop"]),
    ("dueling_rmsprop_plain", "dueling", "with RMSprop and no value rescaling (double Q and 3-step returns learn "
     "Asterix with them), the dueling head of 128 units learns as the linear head does",
     RMSPROP_PLAIN),
    ("windows_rmsprop_plain", "windows", "with RMSprop and no value rescaling, windows of 10 rows at 0.1 updates per "
     "env step learn Asterix as single transitions do (r2d2_rmsprop_plain churns at 11% greedy disagreement)",
     RMSPROP_PLAIN),
    ("windows_often", "windows", "the windows' 10x fewer updates, not their 10-row windows, stall "
     "windows_rmsprop_plain (its greedy disagreement 0, Q below the returns): 4 windows of 10 rows (40 rows) at one "
     "update per env step with the target copied every 1000 updates, as the dueling rung's rhythm, learn Asterix",
     RMSPROP_PLAIN + DQN_RHYTHM),
    ("dueling_rare", "dueling", "(the converse of windows_often) single transitions updated as the windows are, "
     "10x less often on 10x the rows (320) with the target copied every 500 updates, stall Asterix as "
     "windows_rmsprop_plain does",
     RMSPROP_PLAIN + ["learner.batch_size=320", "run.updates_per_env_step=0.1", "learner.target_update_period=500"]),
    ("n_step_dueling_linear", "n_step", "(dueling_rmsprop_plain stalls: Q flat at 0.65, disagreement 0) the dueling "
     "sum V + A - mean(A) itself, on linear streams, stalls the n_step_rmsprop rung",
     ["learner.optimizer=rmsprop", "model.dueling=true", "model.head_units=0"]),
    ("n_step_head", "n_step", "(the converse) the head's hidden layer of 128 units, without the dueling sum, stalls "
     "the n_step_rmsprop rung", ["learner.optimizer=rmsprop", "model.dueling=false", "model.head_units=128"]),
    ("r2d2_linear", "r2d2", "(a candidate fix from the top) the shipped config with RMSprop, no value rescaling and "
     "a linear Q head (no dueling, no head layer: the dqn rung's head) learns Asterix",
     RMSPROP_PLAIN + LINEAR_HEAD),
    ("windows_linear", "windows", "(dueling_rmsprop_plain lean: the head costs) with RMSprop, no value rescaling and "
     "the dqn rung's linear head, windows of 10 rows at 0.1 updates per env step learn Asterix as n_step_rmsprop does",
     RMSPROP_PLAIN + LINEAR_HEAD),
    ("windows_often_linear", "windows", "(windows_linear stalls on Freeway, 0.1, and Asterix, 0.7) the windows' "
     "rhythm, not their 10-row windows: with a linear head, 4 windows of 10 rows at one update per env step and "
     "the target every 1000 updates learn as the n_step_rmsprop and dqn rungs do",
     RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM),
    ("r2d2_often_linear", "r2d2", "(a candidate shared setting: windows learn at DQN's rhythm with a linear head, "
     "windows_often_linear) the shipped config with RMSprop, no value rescaling, a linear head and one update of 4 "
     "windows per env step, the target every 1000 updates, learns Asterix and Freeway",
     RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM),
    ("apex_often_linear", "apex", "(r2d2_often_linear flat on Asterix: 0.4-0.6 through 200k, its actors' return "
     "flat at 0.5) R2D2's actors (8 envs in 2 processes, Ape-X's per-env epsilons) and the rate decay, on the "
     "feed-forward windows at DQN's rhythm with a linear head, learn Asterix as windows_often_linear does: if not, "
     "the actors are the cost; if so, the LSTM is", RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM),
    ("actors_often_linear", "actors", "(apex_often_linear stalls Asterix: 0.7 0.4 0.4 at 50k-150k, where "
     "windows_often_linear learns) 8 envs in 2 actor processes and the rate decay, with epsilon 1 -> 0.1, learn "
     "Asterix at DQN's rhythm: if so, Ape-X's per-env epsilons are the cost", RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM),
    ("rate_decay_often_linear", "rate_decay", "(r2d2_often_linear, apex_often_linear and actors_often_linear kept the "
     "shipped rate schedule, counted in updates: 50,000 updates, which at one update per env step bring the rate to "
     "a tenth by 55k env steps instead of 500k) the rate decay alone, on windows_often_linear, holds Asterix back: "
     "the schedule, not the actors, is the cost", RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM),
    ("r2d2_often_linear_decay", "r2d2", "(the candidate again, its rate schedule in env steps) r2d2_often_linear with "
     "the rate falling to a tenth over 495,000 updates, i.e. by 500k env steps at one update per env step as the "
     "shipped configs intend, learns Asterix and Freeway",
     CANDIDATE),
    ("r2d2_often_linear_decay_n1", "r2d2", "(double_q_rmsprop learns Asterix, 26.1 at 500k, where n_step_rmsprop "
     "stalls at 1.8: the 3-step returns are the cost) the candidate with 1-step returns learns Asterix and Freeway",
     CANDIDATE + ["replay.n_step=1"]),
    ("windows_often_linear_n1", "windows", "(the 3-step returns stall Asterix on single transitions) with 1-step "
     "returns, the feed-forward windows at DQN's rhythm learn Asterix as double_q_rmsprop does: if not, the windows "
     "cost Asterix on their own too", RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + ["replay.n_step=1"]),
    ("windows_often_lstm", "windows", "(the converse of apex_often_linear) an LSTM core with stored state and 5 "
     "burn-in rows, on windows_often_linear (one env in the learner's process, epsilon 1 -> 0.1), learns Asterix "
     "as the feed-forward network does", RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + LSTM_BURN_IN),
    ("windows_often_lstm_n1", "windows", "(windows_often_linear_n1 learns Asterix, 10.6 at 300k, where the candidate "
     "with 1-step returns stalls at 0.6 with 43% of its ReLUs dead) an LSTM core with stored state and 5 burn-in rows "
     "on the feed-forward windows at DQN's rhythm with 1-step returns learns Asterix as they do: if not, the LSTM is "
     "the cost", RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + LSTM_BURN_IN + ["replay.n_step=1"]),
    ("windows_often_lstm_zero_n1", "windows", "(windows_often_lstm_n1 stalls, 0.8 at 300k, with delta-Q after "
     "burn-in at 37-52% of the largest |Q|, where the shipped Asterix runs read 1.5-2%: at one update per env step a "
     "stored state is 10x more updates old) the LSTM from a zero state with the same 5 burn-in rows learns Asterix as "
     "the feed-forward windows do: if so, stale stored states are the LSTM's cost at DQN's rhythm",
     RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + LSTM_BURN_IN + ["replay.n_step=1", "replay.initial_state=zero"]),
    ("windows_often_lstm_eps_n1", "windows", "(windows_often_lstm_n1 and windows_often_lstm_zero_n1 keep their encoder "
     "at its initialisation: their gradients into its dense layer have an RMS of 2-5e-5, the feed-forward windows' "
     "2-5e-3, and centered RMSprop divides by the root of the squared-gradient variance plus 1e-4, i.e. by at least "
     "0.01) the LSTM with rmsprop_epsilon 1e-8 (at least 1e-4 after the root) learns Asterix as the feed-forward "
     "windows do: if so, the optimiser's epsilon, sized for the feed-forward network's gradients, is the LSTM's cost",
     RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + LSTM_BURN_IN + ["replay.n_step=1", "learner.rmsprop_epsilon=1e-8"]),
    ("apex_often_linear_decay_n1", "apex", "(the converse of windows_often_lstm_n1) R2D2's actors (8 envs in 2 "
     "processes, Ape-X's per-env epsilons) and the rate to a tenth by 500k, on the feed-forward windows at DQN's "
     "rhythm with 1-step returns, learn Asterix as windows_often_linear_n1 does: if not, the actors are the cost",
     RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + RATE_TO_500K + ["replay.n_step=1"]),
    ("actors_often_linear_decay_n1", "actors", "(apex_often_linear_decay_n1 stalls Asterix: 0.9 at 300k, where "
     "windows_often_linear_n1 reaches 10.6) 8 envs in 2 actor processes with the rate to a tenth by 500k, each "
     "actor's epsilon falling from 1 to 0.1 over the run's first 100k env steps (50k per actor), learn Asterix with "
     "1-step returns: if so, Ape-X's per-env epsilons are the cost; if not, the actor processes or the rate decay are",
     RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + RATE_TO_500K + ["replay.n_step=1", "actors.epsilon_decay_steps=50000"]),
    ("actors_one_env_n1", "actors", "(actors_often_linear_decay_n1 climbs to 3.6 at 500k where "
     "rate_decay_often_linear_n1 reaches 15.6: the actor processes cost Asterix) one actor process with one env, "
     "else as actors_often_linear_decay_n1: if it learns as rate_decay_often_linear_n1 does, the 8 envs are the cost; "
     "if not, the process boundary (weights hundreds of updates behind) is",
     RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + RATE_TO_500K + ["replay.n_step=1", "actors.num_actors=1",
                                                               "env.num_envs=1"]),
    ("rate_decay_often_linear_n1", "rate_decay", "(the rate decay alone) windows_often_linear_n1 with the rate to a "
     "tenth by 500k learns Asterix as it does with a constant rate",
     RMSPROP_PLAIN + LINEAR_HEAD + DQN_RHYTHM + RATE_TO_500K + ["replay.n_step=1"]),
    ("r2d2_n1", "r2d2", "(3-step returns stall Asterix on single transitions and on windows: double_q_rmsprop 26.1 "
     "against n_step_rmsprop 1.8, windows_often_linear_n1 9.2 against windows_often_linear 1.2; at one update per env "
     "step the LSTM's stored states go stale, delta-Q after burn-in 0.57 of max |Q|) the shipped config, at its own "
     "rhythm (0.1 updates per env step: delta-Q after burn-in 1.5-2% on Asterix), with 1-step returns learns Asterix",
     ["replay.n_step=1"]),
    ("r2d2_linear_n1", "r2d2", "(with DQN's optimiser and head) the shipped config with RMSprop, no value rescaling, a "
     "linear head and 1-step returns, at its own rhythm, learns Asterix",
     RMSPROP_PLAIN + LINEAR_HEAD + ["replay.n_step=1"]),
    ("actors_rmsprop_plain", "actors", "(the top churns: r2d2_rmsprop_plain and r2d2_linear at 10-11% greedy "
     "disagreement, where windows_rmsprop_plain stalls at 0) with RMSprop and no value rescaling, 8 envs in 2 actor "
     "processes with asynchronous weights do not bring the churn", RMSPROP_PLAIN),
    ("apex_rmsprop_plain", "apex", "with RMSprop and no value rescaling, Ape-X's fixed per-env epsilons explore "
     "Asterix as well as epsilon 1 -> 0.1 (and bring no churn: else the LSTM's part is ruled out)", RMSPROP_PLAIN),
]
RUNG_NAMES = [name for name, _, _ in RUNGS]
STEPS = RUNG_NAMES + [name for name, _, _, _ in VARIANTS]  # what --rungs accepts
# health.csv columns summarised per run (their means over the last fifth of the run)
HEALTH = ("health/q_taken", "health/action_gap", "health/greedy_disagreement", "health/target_age",
          "learner/gradient_norm", "learner/td_p50", "learner/loss", "health/overestimation", "health/dead_relu_share",
          "train/episode_return")


def rung_overrides(rung: str) -> list[str]:
    """The DQN overrides still in force at ``rung`` (each rung drops the ones it names, cumulatively); a variant's
    are its rung's followed by its own (the last ``--set`` of a key wins)."""
    for name, base, _, extra in VARIANTS:
        if name == rung:
            return rung_overrides(base) + extra
    dropped: set[str] = set()
    for _, _, keys in RUNGS[:RUNG_NAMES.index(rung) + 1]:
        dropped.update(keys)
    return [item for item in DQN if item.split("=", 1)[0] not in dropped]


def health_summary(path: Path, target_update_period: int) -> dict[str, float]:
    """Means of the :data:`HEALTH` columns over the last fifth of ``health.csv``'s rows (NaN where absent).

    Runs logged before ``health/target_age`` existed get it from their ``updates`` column: the greedy disagreement
    is 0 right after a target copy, so a run that always logs at the same age reads high or low by construction."""
    if not path.exists():
        return {}
    with open(path) as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if row.get("health/target_age") in (None, "") and row.get("updates"):
            row["health/target_age"] = str(int(float(row["updates"])) % target_update_period)
    tail = rows[len(rows) - max(1, len(rows) // 5):]
    out = {}
    for column in HEALTH:
        values = [float(row[column]) for row in tail if row.get(column) not in (None, "", "nan")]
        out[column] = float(np.mean(values)) if values else math.nan
    return out


def earlier_evaluations(metrics_csv: Path) -> list[tuple]:
    """The evaluation rows a resumed run wrote before it was stopped, as :func:`harness.evaluation_callback` keeps
    them (steps, mean, std, seconds, train return, success)."""
    with metrics_csv.open() as f:
        return [(int(row["env_steps"]), float(row["eval_mean"]), float(row["eval_std"]), float(row["seconds"]),
                 float(row["train_return"]) if row.get("train_return") else None, None)
                for row in csv.DictReader(f) if row.get("eval_mean")]


def run(job: dict) -> dict:
    line = (f"  {job['rung']} {job['game']} seed {job['seed']} " "{steps:>8,} env steps: eval {mean:6.2f} +- {std:5.2f}"
            ", training episodes {train_return:6.2f}, {updates:,} updates, {seconds:.0f} s")
    evaluations = harness.evaluation_callback(line)
    run_dir = Path(job["runs_dir"]) / f"{job['game']}-{job['rung']}-seed{job['seed']}"
    resume = any((run_dir / "checkpoints").glob("*"))
    earlier = earlier_evaluations(run_dir / "metrics.csv") if resume else []
    if resume:  # a killed sweep goes on from the run's newest checkpoint, its earlier evaluations read back
        print(f"  resuming {run_dir.name} after {len(earlier)} evaluations", flush=True)
    config = REPO_ROOT / "configs" / "minatar" / f"{job['game']}.yaml"
    trainer, summary, _ = harness.fit(config, [
        *rung_overrides(job["rung"]), f"run.total_env_steps={job['steps']}", f"run.eval_every={job['eval_every']}",
        f"run.seed={job['seed']}", f"run.eval_episodes={job['eval_episodes']}", "logging.diagnostics=true",
        f"checkpoints.every_env_steps={job['checkpoint_every']}", "checkpoints.save_replay=true"],
        [evaluations], run_dir, resume=resume)
    resumed_at = evaluations.rows[0][0] if evaluations.rows else math.inf  # rows past the checkpoint were redone
    evaluations.rows = [row for row in earlier if row[0] < resumed_at] + evaluations.rows
    config_dict = trainer.config.to_dict()
    health = health_summary(run_dir / "health.csv", config_dict["learner"]["target_update_period"])
    return dict(evaluations=evaluations.rows, env_steps=int(summary["env_steps"]), updates=int(summary["updates"]),
                train_seconds=float(summary["train_seconds"]), health=health, run_dir=str(run_dir), config=config_dict)


def child(job: dict) -> dict:
    result = run(job)
    last = result["evaluations"][-1] if result["evaluations"] else None
    return dict(result, error=None, final=last[1] if last else None)


def report(runs: list[dict], games: list[str], markdown: bool) -> str:
    header = ["rung", "hypothesis", *(f"{game} (seeds)" for game in games), "health (last fifth; per game)"]
    rows = []
    for name, hypothesis in hypotheses():
        done = {game: [r for r in runs if r["game"] == game and r["rung"] == name] for game in games}
        if not any(done.values()):
            continue
        health = "; ".join(f"{game}: gap/Q {_mean(done[game], _gap_share):.3f}, churn "
                           f"{_mean(done[game], _health('health/greedy_disagreement')):.3f}, "
                           f"grad {_mean(done[game], _health('learner/gradient_norm')):.3g}"
                           for game in games if done[game])
        rows.append([name, hypothesis, *(harness.fmt_mean_std([r["final"] for r in done[game]]) for game in games),
                     health])
    curves = [[r["rung"], r["game"], str(r["seed"]), "  ".join(f"{e[1]:.1f}" for e in r["evaluations"])]
              for r in sorted(runs, key=lambda r: (r["game"], STEPS.index(r["rung"]), r["seed"]))]
    return "\n".join([table(header, rows, markdown), "", table(["rung", "game", "seed", "greedy evaluations"], curves,
                                                                markdown)])


def hypotheses() -> list[tuple[str, str]]:
    """Every rung and variant with its hypothesis, in ladder order (a variant after the rungs)."""
    return [(name, hypothesis) for name, hypothesis, _ in RUNGS] + \
        [(name, f"(from `{base}`) {hypothesis}") for name, base, hypothesis, _ in VARIANTS]


def _health(column: str):
    return lambda run: run["health"].get(column, math.nan)


def _mean(runs: list[dict], value) -> float:
    values = [value(run) for run in runs]
    return float(np.nanmean(values)) if any(not math.isnan(v) for v in values) else math.nan


def _gap_share(run: dict) -> float:
    """The action gap as a share of the mean Q of taken actions (Freeway's was 3% in the shipped runs)."""
    gap, q = run["health"].get("health/action_gap", math.nan), run["health"].get("health/q_taken", math.nan)
    return gap / abs(q) if q else math.nan


def parse_args(argv=None):
    p = harness.arg_parser(__doc__, "markdown", "json", "resume", "seeds")
    p.add_argument("--games", nargs="+", default=["freeway", "asterix"], choices=GAMES)
    p.add_argument("--rungs", nargs="+", default=RUNG_NAMES, choices=STEPS,
                   help="rungs (default: all, in order) or off-ladder variants (--list shows both)")
    p.add_argument("--steps", type=int, default=500_000, help="env steps per run")
    p.add_argument("--eval-every", type=int, default=50_000)
    p.add_argument("--eval-episodes", type=int, default=16)
    p.add_argument("--runs-dir", default="runs/ladder", help="each run's directory: DIR/GAME-RUNG-seedN")
    p.add_argument("--checkpoint-every", type=int, default=50_000,
                   help="env steps between checkpoints (replay included): a killed sweep started again goes on there")
    p.add_argument("--list", action="store_true", help="print the rungs and their overrides, and exit")
    p.add_argument("--table", action="store_true", help="run nothing: print the table of --json and --include")
    p.add_argument("--include", nargs="+", default=[], metavar="JSON",
                   help="also show the runs of these result files (runs in parallel write one file each)")
    args = p.parse_args(argv)
    args.seeds = args.seeds if args.seeds is not None else [10, 11]
    if any(seed in (0, 1, 2) for seed in args.seeds):
        p.error("seeds 0-2 are the reported seeds; screen on others (default 10 11)")
    return args


def main(argv=None) -> dict:
    harness.serve_job(child)
    args = parse_args(argv)
    if args.list:
        for name, hypothesis in hypotheses():
            overrides = " --set ".join(rung_overrides(name)) or "(none: the shipped config)"
            print(f"{name}: {hypothesis}\n    --set {overrides}")
        return {}
    began, load_start = harness.start(DISTS)
    results = Results(args.json, lambda r: (r["game"], r["rung"], r["seed"]), args.resume or args.table,
                      lambda: dict(machine=harness.machine_line(DISTS), dqn=DQN))
    todo = [dict(game=game, rung=rung, seed=seed, steps=args.steps, eval_every=args.eval_every,
                 eval_episodes=args.eval_episodes, overrides=rung_overrides(rung))
            for rung in args.rungs for seed in args.seeds for game in args.games] if not args.table else []
    for job, result in harness.sweep(__file__, todo, results, lambda r: f"{r['rung']} {r['game']} seed {r['seed']}",
                                     extras=dict(runs_dir=str(Path(args.runs_dir).resolve()),
                                                 checkpoint_every=args.checkpoint_every)):
        if not result.get("error"):
            print(f"  done: return {result['final']:.2f}, {result['train_seconds'] / 60:.0f} min", flush=True)
            results.add(dict(result, **job))
    included = [run for path in args.include for run in json.loads(Path(path).read_text())["runs"]]
    shown = [r for r in results.runs + included if r["game"] in args.games and not r.get("error")]
    harness.finish(report(shown, args.games, args.markdown), began, load_start)
    return dict(runs=results.runs)


if __name__ == "__main__":
    main()
