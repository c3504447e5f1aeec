"""Double DQN with hindsight experience replay on BitFlip (or another GoalEnv), in one file (CleanRL style).

The "goal half" example: r2d2kit's ``HerReplayBuffer`` relabels sampled transitions with goals
achieved later in the same episode ('future', k = 4: 80% of samples relabelled), so the -1/0
reward of BitFlip (HER paper, section 3.1) becomes learnable for many bits. The Q-network sees
concat(observation, desired_goal); the buffer hands back the relabelled goal in ``desired_goal``
and the rewards and terminations recomputed under it (the env's ``compute_reward`` and
``compute_terminated``, one vectorised call per batch).

    python agents/her_dqn.py                                   # n_bits=15, stops at 0.95 greedy success
    python agents/her_dqn.py --config agents/her_dqn.yaml --n-bits 30 --out curve.png
    python agents/her_dqn.py --no-her --n-bits 15              # DQN alone: greedy success stays ~0
    python agents/her_dqn.py --env-id PointMassGoal-v0 --no-stop-at-target   # any GoalEnv, discrete actions

``--env-id`` takes any registered GoalEnv with a ``Discrete`` action space and flat ``observation``
and ``desired_goal`` boxes; the network's input (observation + desired goal) and output sizes come
from its spaces. ``--n-bits`` applies to ``BitFlip-v0`` only.

Evaluation (as in the HER paper): the greedy policy's success rate over ``--eval-episodes``
episodes, each with a freshly drawn random goal, every ``--eval-every`` env steps; an episode
succeeds when its last step reports ``info["is_success"]`` (or, for envs that do not report it,
terminates). Timings in the returned metrics leave the evaluations out (``train_seconds``,
``seconds_to_target``).
Runs with one seed are reproducible on one machine: sampling happens in the loop, not in a thread.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gymnasium as gym  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import yaml  # noqa: E402
from tqdm import tqdm  # noqa: E402

import r2d2kit.envs  # noqa: E402, F401  (registers BitFlip-v0, PointMassGoal-v0)
from r2d2kit.replay import HerReplayBuffer  # noqa: E402

for _gpu in tf.config.list_physical_devices("GPU"):  # take GPU memory as needed, not all at once
    tf.config.experimental.set_memory_growth(_gpu, True)


# --- command line and YAML config: one flag per key, YAML sections name the component ---
def build_parser() -> tuple[argparse.ArgumentParser, dict[str, dict[str, argparse.Action]]]:
    """The CLI parser and ``{section: {key: action}}``: the YAML keys each section accepts."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help="YAML with env/replay/agent/run sections; flags override it")
    sections: dict[str, dict[str, argparse.Action]] = {}

    def add(section: str, *flags: str, **kwargs: Any) -> None:
        group = sections.setdefault(section, {})
        action = groups.setdefault(section, p.add_argument_group(section)).add_argument(*flags, **kwargs)
        group[action.dest] = action

    groups: dict[str, Any] = {}
    add("env", "--env-id", default="BitFlip-v0", help="a registered GoalEnv with discrete actions")
    add("env", "--n-bits", type=int, default=15, help="bits of BitFlip-v0 (ignored by other envs); episodes "
        "last n_bits steps")
    add("env", "--num-envs", type=int, default=2, help="envs stepped together (one batched act call)")

    add("replay", "--her", action=argparse.BooleanOptionalAction, default=True,
        help="hindsight relabelling (--no-her: the same buffer with n_sampled_goal=0)")
    add("replay", "--n-sampled-goal", type=int, default=4, help="HER's k: relabel probability k/(k+1)")
    add("replay", "--goal-selection-strategy", default="future", choices=["future", "final", "episode", "random"])
    add("replay", "--buffer-size", type=int, default=200_000)
    add("replay", "--n-step", type=int, default=1, help="n-step returns, summed under the relabelled goal")

    add("agent", "--hidden", type=int, nargs="+", default=[1024], help="hidden layer sizes of the Q-network")
    add("agent", "--lr", type=float, default=1e-3)
    add("agent", "--gamma", type=float, default=0.98)
    add("agent", "--batch-size", type=int, default=256)
    add("agent", "--learning-starts", type=int, default=200, help="env steps before the first update")
    add("agent", "--train-frequency", type=int, default=2, help="vector-env steps between training calls")
    add("agent", "--gradient-steps", type=int, default=4, help="gradient steps per training call (one graph)")
    add("agent", "--target-period", type=int, default=100, help="gradient steps per target-network copy")
    add("agent", "--clip-targets", action=argparse.BooleanOptionalAction, default=True,
        help="clip targets to [-1/(1-gamma), 0], the range of returns under -1/0 rewards (HER paper)")
    add("agent", "--start-e", type=float, default=0.5)
    add("agent", "--end-e", type=float, default=0.05)
    add("agent", "--exploration-steps", type=int, default=2_000, help="env steps to decay epsilon linearly")

    add("run", "--total-steps", type=int, default=50_000, help="env steps, summed over all envs")
    add("run", "--max-seconds", type=float, default=None, help="also stop after this much training wall time")
    add("run", "--seed", type=int, default=1)
    add("run", "--eval-every", type=int, default=500, help="env steps between greedy evaluations")
    add("run", "--eval-episodes", type=int, default=100, help="episodes per evaluation, a random goal each")
    add("run", "--success-target", type=float, default=0.95, help="report the env steps to reach this success")
    add("run", "--stop-at-target", action=argparse.BooleanOptionalAction, default=True,
        help="stop training once an evaluation reaches --success-target")
    add("run", "--out", default=None, help="optional path of a learning-curve PNG")
    add("run", "--progress", action=argparse.BooleanOptionalAction, default=True, help="show the tqdm bar")
    return p, sections


def load_config(path: str, sections: dict[str, dict[str, argparse.Action]] | None = None) -> dict[str, Any]:
    """Read a YAML config into ``{dest: value}``; an unknown section or key is a ValueError naming it."""
    sections = build_parser()[1] if sections is None else sections
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of sections {sorted(sections)}, got {type(data).__name__}")
    values: dict[str, Any] = {}
    for section, entries in data.items():
        if section not in sections:
            raise ValueError(f"{path}: unknown section {section!r}; valid sections: {', '.join(sections)}")
        if not isinstance(entries, dict):
            raise ValueError(f"{path}: section {section!r} must be a mapping of keys, got {entries!r}")
        for key, value in entries.items():
            dest = str(key).replace("-", "_")
            if dest not in sections[section]:
                raise ValueError(f"{path}: unknown key {key!r} in section {section!r}; valid keys in "
                                 f"{section!r}: {', '.join(sections[section])}")
            values[dest] = _config_value(path, section, key, value, sections[section][dest])
    return values


def _config_value(path: str, section: str, key: str, value: Any, action: argparse.Action) -> Any:
    """``value`` as the flag would parse it (YAML reads ``1e-3`` as a string, and bools must be bools)."""
    where = f"{path}: {section}.{key}"
    if isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, got {value!r}")
        return value
    if value is None:
        return None
    try:
        if action.nargs in ("+", "*"):
            items = value if isinstance(value, list) else [value]
            return [action.type(v) if action.type else v for v in items]
        value = action.type(value) if action.type and not isinstance(value, (list, dict)) else value
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None
    if isinstance(value, (list, dict)) or (action.choices and value not in action.choices):
        raise ValueError(f"{where} must be one of {list(action.choices)}" if action.choices
                         else f"{where} must be a single value, got {value!r}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    parser, sections = build_parser()
    known, _ = parser.parse_known_args(argv)
    if known.config:
        try:
            parser.set_defaults(**load_config(known.config, sections))
        except (OSError, ValueError) as error:
            parser.error(str(error))
    return parser.parse_args(argv)


def make_q_network(input_dim: int, num_actions: int, hidden: list[int]) -> keras.Model:
    return keras.Sequential([keras.Input((input_dim,))]
                            + [keras.layers.Dense(units, activation="relu") for units in hidden]
                            + [keras.layers.Dense(num_actions)])


def make_env(env_id: str = "BitFlip-v0", n_bits: int = 15) -> gym.Env:
    """``env_id`` from gymnasium's registry; ``n_bits`` reaches BitFlip-v0 only."""
    return gym.make(env_id, n_bits=n_bits) if env_id == "BitFlip-v0" else gym.make(env_id)


# --- greedy evaluation: one episode per env, a fresh random goal each (HER paper's success rate) ---
def make_eval_envs(n_bits: int, episodes: int, seed: int, env_id: str = "BitFlip-v0") -> gym.vector.SyncVectorEnv:
    envs = gym.vector.SyncVectorEnv([lambda: make_env(env_id, n_bits) for _ in range(episodes)])
    envs.reset(seed=seed)  # seeds each env's goal generator once; later resets draw new goals
    return envs


def evaluate(envs: gym.vector.VectorEnv, policy: Callable[[dict[str, np.ndarray]], np.ndarray]) -> float:
    """Success rate of ``policy`` (batched dict observations -> [N] actions) over one episode per env:
    ``info["is_success"]`` at each episode's last step, or ``terminated`` where the env does not report it."""
    obs, _ = envs.reset()
    running = np.ones(envs.num_envs, dtype=bool)  # [N] still in its first episode
    success = np.zeros(envs.num_envs, dtype=bool)  # [N]
    while running.any():  # the TimeLimit ends every episode
        obs, _, terminated, truncated, infos = envs.step(np.asarray(policy(obs), dtype=np.int64))
        ended = running & (terminated | truncated)  # [N] first episodes ending on this step
        reached = np.asarray(infos["is_success"], dtype=bool) if "is_success" in infos else terminated  # [N]
        success |= ended & reached
        running &= ~ended  # finished envs autoreset; their later steps are ignored
    return float(success.mean())


def goal_input(observation: np.ndarray, desired_goal: np.ndarray) -> np.ndarray:
    return np.concatenate([observation, desired_goal], axis=-1)  # [..., observation + goal size]


def main(argv=None) -> dict:
    """Train, evaluate greedily along the way, and return metrics (plus the buffer, for inspection)."""
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    start_time = time.perf_counter()
    env_id, n_bits, num_envs = args.env_id, args.n_bits, args.num_envs

    # --- env: SAME_STEP autoreset, so every env step is a transition (the final obs is in infos) ---
    envs = gym.vector.SyncVectorEnv([lambda: make_env(env_id, n_bits) for _ in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    goal_env = envs.envs[0].unwrapped  # compute_reward / compute_terminated, vectorised over a batch axis
    eval_envs = make_eval_envs(n_bits, args.eval_episodes, args.seed + 10_000, env_id)
    obs_space = envs.single_observation_space
    obs_size, goal_size = obs_space["observation"].shape[0], obs_space["desired_goal"].shape[0]  # BitFlip: n_bits each
    input_dim, num_actions = obs_size + goal_size, int(envs.single_action_space.n)  # BitFlip: 2 * n_bits, n_bits

    # --- replay: HER relabels at sample time; rewards and terminations recomputed under the new goal ---
    buffer = HerReplayBuffer(
        args.buffer_size, ((obs_size,), "float32"), ((goal_size,), "float32"), ((), "int64"),
        compute_reward=goal_env.compute_reward, compute_terminated=goal_env.compute_terminated,
        num_envs=num_envs, n_sampled_goal=args.n_sampled_goal if args.her else 0,
        goal_selection_strategy=args.goal_selection_strategy, n_step=args.n_step, gamma=args.gamma,
        autoreset_mode=envs.metadata["autoreset_mode"], seed=args.seed)

    # --- networks: online Q, target Q, and compiled act / train / sync functions ---
    q_network = make_q_network(input_dim, num_actions, args.hidden)
    target_network = make_q_network(input_dim, num_actions, args.hidden)
    target_network.set_weights(q_network.get_weights())
    optimizer = keras.optimizers.Adam(args.lr)
    optimizer.build(q_network.trainable_variables)
    q_min = -1.0 / (1.0 - args.gamma) if args.clip_targets else -np.inf  # returns of -1/0 rewards
    q_max = 0.0 if args.clip_targets else np.inf

    @tf.function(input_signature=[tf.TensorSpec([None, input_dim], tf.float32)])
    def act(x):  # greedy actions, [N]
        return tf.argmax(q_network(x), axis=1)

    @tf.function
    def sync_target():
        for target_var, var in zip(target_network.variables, q_network.variables):
            target_var.assign(var)

    def train_one(x, action, reward, next_x, discount):  # one double-DQN gradient step on [B] samples
        next_actions = tf.argmax(q_network(next_x), axis=1)  # online net picks, [B]
        next_q = tf.gather(target_network(next_x), next_actions, batch_dims=1)  # target net evaluates, [B]
        targets = tf.clip_by_value(reward + discount * next_q, q_min, q_max)  # discount = 0 if terminated
        with tf.GradientTape() as tape:
            q = tf.gather(q_network(x, training=True), action, batch_dims=1)  # [B]
            td = targets - q
            abs_td = tf.abs(td)
            loss = tf.reduce_mean(tf.where(abs_td <= 1.0, 0.5 * tf.square(td), abs_td - 0.5))  # Huber
        grads = tape.gradient(loss, q_network.trainable_variables)
        optimizer.apply_gradients(zip(grads, q_network.trainable_variables))
        return loss

    # --- train call: U gradient steps in one graph (a Python call per step costs ~0.5 ms on 2 cores) ---
    @tf.function(input_signature=[tf.TensorSpec([None, None, input_dim], tf.float32),
                                  tf.TensorSpec([None, None], tf.int64), tf.TensorSpec([None, None], tf.float32),
                                  tf.TensorSpec([None, None, input_dim], tf.float32),
                                  tf.TensorSpec([None, None], tf.float32)])
    def train(x, action, reward, next_x, discount):  # every argument [U, B, ...]
        loss = tf.constant(0.0)
        for u in tf.range(tf.shape(x)[0]):
            loss = train_one(x[u], action[u], reward[u], next_x[u], discount[u])
        return loss

    def sample_and_train() -> float:
        u, b = args.gradient_steps, args.batch_size
        batch = buffer.sample(u * b)  # uniform over transitions; 'desired_goal' is the relabelled goal
        g = batch["desired_goal"]  # [U * B, goal_size]
        return float(train(goal_input(batch["observation"], g).reshape(u, b, -1),
                           batch["action"].reshape(u, b), batch["reward"].reshape(u, b),
                           goal_input(batch["next_observation"], g).reshape(u, b, -1),
                           batch["discount"].reshape(u, b)))

    def greedy(obs):
        return act(goal_input(obs["observation"], obs["desired_goal"])).numpy()

    # --- rollout loop ---
    obs, _ = envs.reset(seed=args.seed)
    global_step, train_steps, loss = 0, 0, float("nan")
    episode_success: list[float] = []  # training episodes (epsilon-greedy): 1 if the goal was reached
    episode_end_steps: list[int] = []
    eval_curve: list[tuple[int, float]] = []
    eval_seconds, steps_to_target, seconds_to_target = 0.0, None, None
    next_eval = args.eval_every
    progress = tqdm(total=args.total_steps, disable=not args.progress, mininterval=0.5, unit="step")
    while global_step < args.total_steps:
        # epsilon-greedy with a linear decay over exploration_steps
        epsilon = float(np.interp(global_step, [0, args.exploration_steps], [args.start_e, args.end_e]))
        actions = greedy(obs)
        explore = rng.random(num_envs) < epsilon
        actions = np.where(explore, rng.integers(num_actions, size=num_envs), actions)

        next_obs, rewards, terminated, truncated, infos = envs.step(actions)
        # next_obs of a finished env is already its reset obs; the buffer takes infos["final_obs"]
        buffer.add(obs, actions, rewards, next_obs, terminated, truncated, infos)
        obs = next_obs
        global_step += num_envs
        progress.update(num_envs)
        ended = terminated | truncated  # [E]
        episode_success.extend(terminated[ended].astype(float))  # BitFlip and PointMassGoal end on success
        episode_end_steps.extend([global_step] * int(ended.sum()))

        # --- learning ---
        iteration = global_step // num_envs
        if global_step >= args.learning_starts and iteration % args.train_frequency == 0:
            loss = sample_and_train()
            previous, train_steps = train_steps, train_steps + args.gradient_steps
            if train_steps // args.target_period > previous // args.target_period:
                sync_target()

        # --- greedy evaluation (its time is left out of the training time) ---
        train_seconds = time.perf_counter() - start_time - eval_seconds
        out_of_time = args.max_seconds is not None and train_seconds >= args.max_seconds
        if global_step >= next_eval or global_step >= args.total_steps or out_of_time:
            next_eval += args.eval_every
            eval_start = time.perf_counter()
            success = evaluate(eval_envs, greedy)
            eval_seconds += time.perf_counter() - eval_start
            eval_curve.append((global_step, success))
            if steps_to_target is None and success >= args.success_target:
                steps_to_target, seconds_to_target = global_step, train_seconds
            progress.set_postfix(eval=f"{success:.2f}", train=f"{np.mean(episode_success[-100:] or [0]):.2f}",
                                 eps=f"{epsilon:.2f}", refresh=False)
            if args.stop_at_target and steps_to_target is not None:
                break
        if out_of_time:
            break
    progress.close()
    envs.close()
    eval_envs.close()
    seconds = time.perf_counter() - start_time

    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        steps, success = zip(*eval_curve) if eval_curve else ((), ())
        ax.plot(steps, success, marker="o", ms=3, label=f"greedy, {args.eval_episodes} random goals")
        if episode_success:
            window = min(100, len(episode_success))
            moving = np.convolve(episode_success, np.ones(window) / window, "valid")
            ax.plot(episode_end_steps[window - 1:], moving, lw=1, alpha=0.6,
                    label=f"training (epsilon-greedy), mean of {window}")
        ax.axhline(args.success_target, color="grey", lw=0.5, ls="--")
        ax.set(xlabel="env steps", ylabel="success rate", ylim=(-0.02, 1.02),
               title=f"DQN{'+HER' if args.her else ''} {env_id}"
               + (f" n_bits={n_bits}" if env_id == "BitFlip-v0" else ""))
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(args.out, dpi=120)
        plt.close(fig)

    return {
        "env_id": env_id,
        "n_bits": n_bits if env_id == "BitFlip-v0" else None,
        "her": args.her,
        "success_target": args.success_target,
        "global_step": global_step,
        "train_steps": train_steps,
        "episodes": len(episode_success),
        "loss": loss,
        "train_success_last100": float(np.mean(episode_success[-100:])) if episode_success else 0.0,
        "eval_curve": eval_curve,  # [(env_steps, greedy success rate)]
        "final_success": eval_curve[-1][1] if eval_curve else float("nan"),
        "steps_to_target": steps_to_target,  # env steps at the first evaluation >= success_target (or None)
        "seconds_to_target": seconds_to_target,  # training wall seconds at that point, evaluations excluded
        "train_seconds": seconds - eval_seconds,
        "eval_seconds": eval_seconds,
        "seconds": seconds,
        "buffer": buffer,
    }


if __name__ == "__main__":
    m = main()
    reached = (f"{m['success_target']:.2f} at {m['steps_to_target']} env steps "
               f"({m['seconds_to_target']:.1f} s)" if m["steps_to_target"] is not None else "target not reached")
    env = f"n_bits={m['n_bits']}" if m["n_bits"] is not None else m["env_id"]
    print(f"{env} her={m['her']} steps={m['global_step']} updates={m['train_steps']} "
          f"final greedy success={m['final_success']:.2f}; {reached}; wall {m['seconds']:.1f} s")
