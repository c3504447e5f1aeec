"""Continuous Box action spaces (r2d2kit.spaces with continuous_actions): accepted as one flat float32
vector with finite bounds, refused with the space and a fix otherwise; R2D2's default still refuses them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from r2d2kit.spaces import (
    BoxActionLayout,
    FlatBoxActions,
    UnsupportedSpaceError,
    action_layout,
    box_action_layout,
    check_spaces,
    wrap_spaces,
)

S = gym.spaces


class RecordingEnv(gym.Env):
    """Records every action it is stepped with."""

    def __init__(self, action_space: gym.Space) -> None:
        self.observation_space = S.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = action_space
        self.actions: list[np.ndarray] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.actions.append(np.array(action))
        return np.zeros(2, np.float32), 0.0, False, False, {}


def test_a_box_action_becomes_a_flat_float32_vector_and_back() -> None:
    space = S.Box(low=np.array([[-1.0, 0.0], [-3.0, 2.0]]), high=np.array([[1.0, 5.0], [3.0, 4.0]]), dtype=np.float64)
    layout = box_action_layout(space)
    assert isinstance(layout, BoxActionLayout) and layout.size == 4
    assert layout.low.tolist() == [-1.0, 0.0, -3.0, 2.0] and layout.high.tolist() == [1.0, 5.0, 3.0, 4.0]
    assert layout.low.dtype == np.float32 and layout.vector_space.shape == (4,)
    action = layout.to_env([0.5, 1.0, -2.0, 3.5])
    assert action.shape == (2, 2) and action.dtype == np.float64 and space.contains(action)
    np.testing.assert_array_equal(layout.to_vector(action), [0.5, 1.0, -2.0, 3.5])
    with pytest.raises(ValueError, match=r"action vector of shape \(3,\), expected \(4,\)"):
        layout.to_env([0.0, 0.0, 0.0])


def test_wrap_spaces_flattens_a_shaped_box_action_for_a_continuous_agent() -> None:
    env = RecordingEnv(S.Box(-2.0, 2.0, (2, 2), np.float64))
    wrapped = wrap_spaces(env, continuous_actions=True)
    assert isinstance(wrapped, FlatBoxActions)
    assert wrapped.action_space == S.Box(-2.0, 2.0, (4,), np.float32)
    wrapped.reset(seed=0)
    wrapped.step(np.array([0.25, -0.5, 1.0, 2.0], np.float32))
    np.testing.assert_array_equal(env.actions[-1], [[0.25, -0.5], [1.0, 2.0]])
    assert env.actions[-1].dtype == np.float64


def test_a_flat_float32_box_action_is_used_as_it_is() -> None:
    env = RecordingEnv(S.Box(-1.0, 1.0, (3,), np.float32))
    assert wrap_spaces(env, continuous_actions=True) is env


@pytest.mark.parametrize("space, named", [
    (S.Box(-np.inf, np.inf, (2,), np.float32),
     r"action space Box\(-inf, inf, \(2,\), float32\): it has a non-finite bound.*fix: .*TransformAction.*"
     r"RescaleAction / ClipAction"),
    (S.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, np.inf], np.float32), dtype=np.float32),
     r"non-finite bound"),
    (S.Box(0, 5, (2,), np.int64), r"dtype int64 is not a float dtype.*fix: use the r2d2 agent"),
    (S.Discrete(3), r"action space Discrete\(3\): a continuous-action agent acts in a Box action space, not "
                    r"Discrete; fix: use the r2d2 agent"),
], ids=["infinite", "one-infinite-bound", "integer-box", "discrete"])
def test_unusable_continuous_action_spaces_are_refused_with_the_space_and_a_fix(space, named) -> None:
    with pytest.raises(UnsupportedSpaceError, match=named):
        box_action_layout(space)
    with pytest.raises(UnsupportedSpaceError, match=named):
        check_spaces(S.Box(-1.0, 1.0, (2,), np.float32), space, continuous_actions=True)


def test_r2d2_still_refuses_a_box_action_and_keeps_discrete_ones() -> None:
    with pytest.raises(UnsupportedSpaceError, match="R2D2 picks one of finitely many actions"):
        wrap_spaces(RecordingEnv(S.Box(-1.0, 1.0, (2,), np.float32)))
    assert action_layout(S.Discrete(4)) is None
    assert check_spaces(S.Box(-1.0, 1.0, (2,), np.float32), S.Discrete(4)) == (None, None)
