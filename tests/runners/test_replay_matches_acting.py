"""End to end: the learner's replay of a window reproduces the Q-values the actor acted on.

Acting (stateful actor, one step at a time, NEXT_STEP autoreset) and learning (stored state, whole
window unrolled at once, masked padding) are separate code paths; any off-by-one in the rows,
``prev_action``/``prev_reward``, the stored state or the resets would show up here as a mismatch.
"""

import gymnasium as gym
import keras
import numpy as np

import r2d2kit.envs  # noqa: F401  (CartPoleNoVel-v1)
from r2d2kit.agent.r2d2 import QNetwork
from r2d2kit.agent.r2d2.policies import EpsilonGreedyPolicy
from r2d2kit.models import MLPModel
from r2d2kit.replay import SequenceBuilder
from r2d2kit.runners.acting import ActingLoop

STATE_NAMES = ("state_h", "state_c")  # the windows' fields of an LSTM's (h, c)

NUM_ENVS = 3


def test_replayed_windows_give_the_actors_q_values_row_for_row():
    keras.utils.set_random_seed(0)
    network = QNetwork((2,), 2, MLPModel((8,)), core_units=8, head_units=8)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPoleNoVel-v1")] * NUM_ENVS)
    builder = SequenceBuilder(NUM_ENVS, burn_in=3, trace_length=5, n_step=2, period=4, state_names=STATE_NAMES)
    policy = EpsilonGreedyPolicy(network.actor(NUM_ENVS), np.array([0.5, 0.1, 0.0]), seed=0)
    loop = ActingLoop(envs, policy, builder, seed=0)

    seen: dict[tuple[int, int, int], np.ndarray] = {}  # (env, episode of that env, time) -> actor Q
    episode, time = np.zeros(NUM_ENVS, int), np.zeros(NUM_ENVS, int)
    actor_q_values = policy.actor.q_values

    def recording_q_values(obs, prev_action, prev_reward):
        q = actor_q_values(obs, prev_action, prev_reward)
        for env in range(NUM_ENVS):
            seen[env, episode[env], time[env]] = q[env].copy()
        return q

    policy.actor.q_values = recording_q_values
    windows = []
    for _ in range(150):
        autoreset = loop.tracker.resets.pending.copy()  # this step shows the final observation only
        new, _, _ = loop.step()
        if new is not None:
            windows.append(new)
        time += 1
        episode[autoreset] += 1
        time[autoreset] = 0
    envs.close()
    assert episode.min() >= 3  # several episodes per env, so resets are crossed

    batch = {key: np.concatenate([w[key] for w in windows]) for key in windows[0]}
    q, _, _ = network.model([batch["obs"], batch["prev_action"].astype(np.int32), batch["prev_reward"],
                             batch["obs_mask"], batch["state_h"], batch["state_c"]])
    q = np.asarray(q)
    # builder episode ids -> (env, n-th episode of that env)
    per_env = {env: sorted(set(batch["episode"][batch["env"] == env])) for env in range(NUM_ENVS)}
    checked = 0
    for w in range(len(batch["env"])):
        env = int(batch["env"][w])
        n = per_env[env].index(batch["episode"][w])
        for t in np.flatnonzero(batch["obs_mask"][w]):
            np.testing.assert_allclose(q[w, t], seen[env, n, batch["start"][w] + t], rtol=1e-4, atol=1e-5,
                                       err_msg=f"window {w} (env {env}, episode {n}) row {t}")
            checked += 1
    assert checked > 500
