"""EpisodeTracker against a hand-checked NEXT_STEP autoreset sequence and a real gymnasium vector env."""

import gymnasium as gym
import numpy as np

from r2d2kit.envs.memory import CueMemoryEnv
from r2d2kit.runners.episodes import EpisodeTracker


def test_hand_checked_autoreset_sequence():
    """Env 0 ends at step 2 (terminated); step 3 is its reset step (reward ignored); env 1 truncates at step 3.

        step            1      2      3        4
        env 0 reward    1      2      9 (reset, ignored)   4
        env 0 done      -      term   -        -
        env 1 reward    0.5    0.5    0.5      7 (reset, ignored)
        env 1 done      -      -      trunc    -
    """
    tracker = EpisodeTracker(2)
    steps = [
        ([1, 1], [1.0, 0.5], [False, False], [False, False]),
        ([0, 1], [2.0, 0.5], [True, False], [False, False]),
        ([1, 0], [9.0, 0.5], [False, False], [False, True]),
        ([1, 1], [4.0, 7.0], [False, False], [False, False]),
    ]
    seen = []
    for action, reward, terminated, truncated in steps:
        ended, returns, lengths, restart = tracker.record(np.array(action), np.array(reward), np.array(terminated),
                                                         np.array(truncated))
        seen.append((ended.tolist(), returns.tolist(), lengths.tolist(), restart.tolist(),
                     tracker.prev_action.tolist(), tracker.prev_reward.tolist()))
    assert seen == [
        ([False, False], [], [], [False, False], [1, 1], [1.0, 0.5]),
        ([True, False], [3.0], [2], [False, False], [0, 1], [2.0, 0.5]),
        # env 0's reset step: no return, inputs zeroed, its recurrent state restarts after it
        ([False, True], [1.5], [3], [True, False], [0, 0], [0.0, 0.5]),
        ([False, False], [], [], [False, True], [1, 0], [4.0, 0.0]),
    ]


def test_returns_match_a_real_vector_env():
    """Every CueMemory episode is 5 steps with return +-1; the tracker sees exactly those episodes."""
    envs = gym.vector.SyncVectorEnv([lambda: CueMemoryEnv(delay=3)] * 3)
    envs.reset(seed=0)
    tracker, rng = EpisodeTracker(3), np.random.default_rng(0)
    returns, lengths = [], []
    for _ in range(60):
        action = rng.integers(0, 2, size=3)
        _, reward, terminated, truncated, _ = envs.step(action)
        _, ended_returns, ended_lengths, _ = tracker.record(action, reward, terminated, truncated)
        returns.extend(ended_returns.tolist())
        lengths.extend(ended_lengths.tolist())
    envs.close()
    # 60 vector steps = 10 cycles of (5 steps + 1 reset step) per env
    assert len(returns) == 30 and set(lengths) == {5} and set(returns) <= {-1.0, 1.0}
