"""R2D2, the whole loop in one readable file, built from r2d2kit parts.

    python agents/r2d2_minimal.py                       # CartPole-v1 with velocities hidden
    python agents/r2d2_minimal.py --env CueMemory-v0    # remember a cue over blank steps

Everything the library's runner does, written out top to bottom: a gymnasium vector env, a
stateful-LSTM actor with per-env Ape-X epsilons, a SequenceBuilder cutting overlapping windows
with their stored LSTM state, a prioritized SequenceReplayBuffer, and the R2D2 learner (burn-in,
value-rescaled n-step double-Q targets, priorities eta * max + (1 - eta) * mean).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

import r2d2kit.envs  # noqa: F401  (registers CartPoleNoVel-v1, CueMemory-v0, BitFlip-v0)
from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.learner import R2D2Config, R2D2Learner
from r2d2kit.agent.r2d2.policies import GreedyPolicy, apex_epsilons, epsilon_greedy
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.models import MLPModel
from r2d2kit.models.cores import state_fields
from r2d2kit.models.process_setup import setup_process
from r2d2kit.replay import SequenceBuilder, SequenceReplayBuffer
from r2d2kit.runners.evaluation import evaluate


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPoleNoVel-v1")
    p.add_argument("--total-steps", type=int, default=60_000)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--units", type=int, default=64)
    p.add_argument("--burn-in", type=int, default=10)
    p.add_argument("--trace-length", type=int, default=20)
    p.add_argument("--period", type=int, default=10)
    p.add_argument("--n-step", type=int, default=3)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--target-period", type=int, default=400)
    p.add_argument("--updates-per-step", type=float, default=0.25)
    p.add_argument("--warmup", type=int, default=1_000)
    p.add_argument("--eval-every", type=int, default=5_000)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    setup_process()
    rng = np.random.default_rng(args.seed)
    make_env = lambda: gym.make(args.env)  # noqa: E731
    envs = gym.vector.SyncVectorEnv([make_env] * args.num_envs)  # NEXT_STEP autoreset (gymnasium >= 1.0)
    obs_space, num_actions = envs.single_observation_space, int(envs.single_action_space.n)

    # --- config: the paper's defaults, overridden for a small task
    layout = WindowLayout(burn_in=args.burn_in, trace_length=args.trace_length, period=args.period, n_step=args.n_step)
    config = R2D2Config(gamma=args.gamma, batch_size=args.batch_size, learning_rate=args.lr, adam_epsilon=1e-6,
                        target_update_period=args.target_period, max_gradient_norm=10.0)
    print("R2D2 config:\n" + config.describe())

    # --- network, learner, actor: one set of weights
    network = QNetwork(obs_space.shape, num_actions, MLPModel((args.units,)), core_units=args.units,
                       head_units=args.units)
    learner = R2D2Learner(network, config, layout)
    actor = network.actor(args.num_envs)
    epsilons = apex_epsilons(args.num_envs, epsilon=0.4, alpha=7.0)

    # --- replay: steps stored once, windows reference them
    state = state_fields(network.state_spec())  # the LSTM's h and c, stored with every window as state_h, state_c
    builder = SequenceBuilder(args.num_envs, layout.burn_in, layout.trace_length, layout.n_step, layout.period,
                              state_names=tuple(state))
    replay = SequenceReplayBuffer(
        100_000, {"obs": (obs_space.shape, "float32"), "action": ((), "int64")}, state,
        burn_in=layout.burn_in, trace_length=layout.trace_length, n_step=layout.n_step, period=layout.period,
        alpha=config.priority_exponent, seed=args.seed)

    obs, _ = envs.reset(seed=args.seed)
    prev_action = np.zeros(args.num_envs, np.int32)
    prev_reward = np.zeros(args.num_envs, np.float32)
    in_autoreset = np.zeros(args.num_envs, bool)
    episode_return, returns, evaluations = np.zeros(args.num_envs), [], []
    credit, start = 0.0, time.perf_counter()
    bar = tqdm(range(0, args.total_steps, args.num_envs), unit_scale=args.num_envs, unit="step")
    for step in bar:
        # --- act: the state *before* the step goes into the window that starts here
        state = actor.get_state()
        action = epsilon_greedy(actor.q_values(obs, prev_action, prev_reward), epsilons, rng)
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        windows = builder.step(obs, action, reward, terminated, truncated, state)
        if windows is not None:
            replay.add_sequences(windows)  # new windows get the running max priority

        # --- episode ends: the step after one only carries the final observation (NEXT_STEP autoreset)
        episode_return += np.where(in_autoreset, 0.0, reward)
        ended = (terminated | truncated) & ~in_autoreset
        returns.extend(episode_return[ended])
        episode_return[ended] = 0.0
        prev_action = np.where(in_autoreset, 0, action).astype(np.int32)
        prev_reward = np.where(in_autoreset, 0.0, reward).astype(np.float32)
        actor.reset(in_autoreset)  # a new episode starts from the zero state
        in_autoreset, obs = ended, next_obs

        # --- learn: sample windows by priority, train, write the mixed priorities back
        if replay.steps_stored >= args.warmup:
            credit += args.updates_per_step * args.num_envs
            while credit >= 1.0:
                batch = replay.sample(config.batch_size, beta=config.importance_exponent)
                out = learner.train(batch)
                replay.update_priorities(batch["indices"], out["priorities"], batch["generations"])
                credit -= 1.0

        # --- evaluate greedily now and then
        env_steps = (step + args.num_envs)
        if env_steps % args.eval_every < args.num_envs:
            policy = GreedyPolicy(network.actor(5))
            score = evaluate(policy, make_env, episodes=10, seed=args.seed + env_steps).returns.mean()
            evaluations.append((env_steps, float(score)))
            bar.set_postfix(eval=f"{score:.1f}", updates=learner.updates)
        elif returns and step % 50 == 0:
            bar.set_postfix(ret=f"{np.mean(returns[-20:]):.1f}", updates=learner.updates)
    envs.close()
    result = {"evaluations": evaluations, "updates": learner.updates, "seconds": time.perf_counter() - start,
              "final_eval": evaluations[-1][1] if evaluations else float("nan")}
    print(f"final greedy return {result['final_eval']:.1f} after {args.total_steps} env steps, "
          f"{learner.updates} updates, {result['seconds']:.0f} s")
    return result


if __name__ == "__main__":
    main()
