"""HerReplayBuffer against hand-written cases and the brute-force model in ``reference_her``.

Observations and goals spell out ``(env, episode, t)`` (see ``reference_her.encoded_obs``), so every
sampled transition and every relabelled goal can be traced back to the exact step it came from:

    observation        [env, episode, t, count]      count: the env's step count (its ring position)
    achieved_goal      [env, episode, t]
    next_achieved_goal [env, episode, t + 1]          a goal relabelled from step j is [env, episode, j + 1]
    desired_goal       [env, episode, 1000]           never achieved, so stored rewards are never 0

Layout used in the hand-written expectations: with ``rows = capacity // num_envs``, the ``c``-th step
of env ``e`` lives at flat index ``(c % rows) * num_envs + e``.
"""

from __future__ import annotations

import json
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from dataset_checks import assert_dataset_matches_sample
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import chi_square_test
from reference_her import (
    ReferenceHer,
    distance_reward,
    is_weights,
    reached,
    scripted_rollout,
    stored_reward,
    true_next_obs,
)

import r2d2kit.envs  # noqa: F401  (registers BitFlip-v0)
from r2d2kit.replay import GoalSelectionStrategy, HerReplayBuffer
from r2d2kit.replay.persistence import META_KEY

OBS_SPEC = ((4,), "float32")
GOAL_SPEC = ((3,), "float32")
STRATEGIES = ["future", "final", "episode", "random"]


def make_buffer(capacity: int, num_envs: int = 1, seed: int = 0, **kwargs) -> HerReplayBuffer:
    kwargs.setdefault("compute_reward", distance_reward)
    return HerReplayBuffer(capacity, OBS_SPEC, GOAL_SPEC, num_envs=num_envs, seed=seed, **kwargs)


def feed(buffer: HerReplayBuffer, reference: ReferenceHer | None, calls) -> list[np.ndarray]:
    """Add every call to the buffer (with gymnasium's infos) and to the reference (with the true next obs)."""
    written = []
    for call in calls:
        written.append(buffer.add(call["obs"], call["action"], call["reward"], call["next_obs"], call["terminated"],
                                  call["truncated"], call["infos"]))
        if reference is not None:
            next_obs = true_next_obs(call) if reference.autoreset_mode == "same_step" else call["next_obs"]
            reference.add(call["obs"], call["action"], call["reward"], next_obs, call["terminated"],
                          call["truncated"])
    return written


def sampleable_slots(buffer: HerReplayBuffer) -> list[int]:
    """The live slots of the buffer's sampler, checked against what it draws from (tree mass or heap ranks)."""
    sampler = buffer.sampler
    alive = np.flatnonzero(sampler.alive).tolist()
    if sampler.name == "rank":
        assert np.flatnonzero(sampler.ranks(np.arange(sampler.capacity)) > 0).tolist() == alive
    else:
        assert np.flatnonzero(sampler.tree.leaves() > 0.0).tolist() == alive
    return alive


def goal_step(goal: np.ndarray) -> int:
    """The episode time ``j`` of the step whose next achieved goal ``goal`` is (``goal[2] = j + 1``)."""
    return int(goal[2]) - 1


def check_batch(buffer: HerReplayBuffer, reference: ReferenceHer, batch: dict, compute_terminated=None) -> Counter:
    """Every sample against the reference: source step, goal rule, n-step reward, discount, next obs.

    Returns counts of what the batch exercised (relabelled, goals across the ring's end, ...).
    """
    strategy = buffer.goal_selection_strategy.value
    sampleable = reference.sampleable()
    random_goals = reference.random_goals() if strategy == "random" else set()
    seen = Counter()
    for b in range(batch["indices"].shape[0]):
        slot = int(batch["indices"][b])
        assert slot in sampleable, f"sample {b}: slot {slot} is not sampleable"
        step = sampleable[slot]
        np.testing.assert_array_equal(batch["observation"][b], step.observation)
        np.testing.assert_array_equal(batch["achieved_goal"][b], step.achieved_goal)
        assert batch["action"][b] == step.action
        goal = batch["desired_goal"][b]
        if batch["relabelled"][b]:
            seen["relabelled"] += 1
            assert reference.may_relabel(step.env, step.count, buffer.relabel_unfinished), f"sample {b}"
            if strategy == "random":
                assert goal.tobytes() in random_goals, f"sample {b}: {goal} is no sampleable step's achieved goal"
            else:
                episode = reference.episode_of(step.env, step.count)
                assert goal[0] == step.env and goal[1] == step.observation[1], f"sample {b}: goal from another episode"
                j = episode.start + goal_step(goal)  # the goal step's count
                assert j in reference.goal_counts(step.env, step.count, strategy), (
                    f"sample {b}: {strategy!r} goal from count {j}, sampled count {step.count}")
                if (j > step.count) != (reference.flat_index(step.env, j) > slot):
                    seen["goal_across_ring_end"] += 1
                if episode.end is None:
                    seen["relabelled_unfinished"] += 1
            expected = reference.nstep(step.env, step.count, goal, buffer.n_step, buffer.gamma, distance_reward,
                                       compute_terminated)
        else:
            np.testing.assert_array_equal(goal, step.desired_goal)
            if reference.episode_of(step.env, step.count).end is None:
                seen["unfinished_kept"] += 1
            expected = reference.nstep(step.env, step.count, None, buffer.n_step, buffer.gamma, None)
        assert batch["reward"][b] == pytest.approx(expected["reward"], rel=1e-6, abs=1e-6), f"sample {b}"
        assert batch["discount"][b] == pytest.approx(expected["discount"], rel=1e-6, abs=0), f"sample {b}"
        np.testing.assert_array_equal(batch["next_observation"][b], expected["next_observation"])
        np.testing.assert_array_equal(batch["next_achieved_goal"][b], expected["next_achieved_goal"])
        seen["summed_steps", expected["summed"]] += 1
    return seen


# =====================================================================================================
# Hand-checked cases (Acme test_cases style)
# =====================================================================================================

# plans: per env, the episodes (length, ending) it runs, then one unfinished episode; calls: vector steps
# fed (NEXT_STEP autoreset: one extra call after each episode end). sampleable: flat indices;
# goals: flat index -> the set of goal steps j + 1 (= goal[2]) relabelling may give it; None: never.
HAND_CASES = {
    "future_includes_the_sampled_step": dict(
        capacity=10, plans=[[(3, "terminated")]], calls=3, strategy="future",
        sampleable={0, 1, 2}, goals={0: {1, 2, 3}, 1: {2, 3}, 2: {3}}),
    "final_is_the_last_next_achieved_goal": dict(
        capacity=10, plans=[[(3, "terminated")]], calls=3, strategy="final",
        sampleable={0, 1, 2}, goals={0: {3}, 1: {3}, 2: {3}}),
    "episode_is_any_step_of_the_episode": dict(
        capacity=10, plans=[[(3, "truncated")]], calls=3, strategy="episode",
        sampleable={0, 1, 2}, goals={0: {1, 2, 3}, 1: {1, 2, 3}, 2: {1, 2, 3}}),
    # counts 3 4 5 of episode 1 sit in rows 3 4 0; count 5 overwrote episode 0's first step (row 0)
    "wrapped_episode_keeps_its_future_goals": dict(
        capacity=5, plans=[[(3, "terminated"), (3, "truncated")]], calls=7, strategy="future",
        sampleable={3, 4, 0}, goals={3: {1, 2, 3}, 4: {2, 3}, 0: {3}}),
    "wrapped_episode_final_goal": dict(
        capacity=5, plans=[[(3, "terminated"), (3, "truncated")]], calls=7, strategy="final",
        sampleable={3, 4, 0}, goals={3: {3}, 4: {3}, 0: {3}}),
    "wrapped_episode_any_step": dict(
        capacity=5, plans=[[(3, "terminated"), (3, "truncated")]], calls=7, strategy="episode",
        sampleable={3, 4, 0}, goals={3: {1, 2, 3}, 4: {1, 2, 3}, 0: {1, 2, 3}}),
    # episode 0 (6 steps) never fits 4 rows; episode 1 (counts 6 7) sits in rows 2 3
    "episode_longer_than_its_column_is_never_sampled": dict(
        capacity=4, plans=[[(6, "truncated"), (2, "terminated")]], calls=9, strategy="future",
        sampleable={2, 3}, goals={2: {1, 2}, 3: {2}}),
    # rows = 3, slot 6 unused. env 0: episode 1 (counts 2 3) in rows 2 0 -> flat 4 0; count 3 overwrote
    # episode 0's first step, so its count 1 (flat 2) is dropped. env 1: episode 1 (counts 1 2) -> flat
    # 3 5; its unfinished episode 2 (count 3) overwrote the one-step episode 0 -> flat 1.
    "two_envs_in_interleaved_columns": dict(
        capacity=7, plans=[[(2, "terminated"), (2, "truncated")], [(1, "terminated"), (2, "terminated")]],
        calls=6, strategy="future",
        sampleable={0, 1, 3, 4, 5}, goals={4: {1, 2}, 0: {2}, 3: {1, 2}, 5: {2}, 1: None}),
    "unfinished_episode_is_sampled_but_not_relabelled": dict(
        capacity=10, plans=[[]], calls=3, strategy="future",
        sampleable={0, 1, 2}, goals={0: None, 1: None, 2: None}),
    "relabel_unfinished_uses_the_steps_so_far": dict(
        capacity=10, plans=[[]], calls=3, strategy="future", relabel_unfinished=True,
        sampleable={0, 1, 2}, goals={0: {1, 2, 3}, 1: {2, 3}, 2: {3}}),
    "relabel_unfinished_final_is_the_latest_step": dict(
        capacity=10, plans=[[]], calls=3, strategy="final", relabel_unfinished=True,
        sampleable={0, 1, 2}, goals={0: {3}, 1: {3}, 2: {3}}),
}


def hand_case_setup(case: dict, **kwargs):
    num_envs = len(case["plans"])
    calls = scripted_rollout(0, num_envs, case["calls"], max_len=1, lengths=case["plans"])
    buffer = make_buffer(case["capacity"], num_envs, goal_selection_strategy=case["strategy"],
                         relabel_unfinished=case.get("relabel_unfinished", False), **kwargs)
    reference = ReferenceHer(case["capacity"], num_envs)
    feed(buffer, reference, calls)
    return buffer, reference


@pytest.mark.parametrize("name", list(HAND_CASES))
def test_hand_checked_case(name):
    case = HAND_CASES[name]
    buffer, _ = hand_case_setup(case, n_sampled_goal=4)
    assert sampleable_slots(buffer) == sorted(case["sampleable"])
    assert len(buffer) == len(case["sampleable"])

    batch = buffer.sample(3000)
    assert set(batch["indices"].tolist()) == case["sampleable"]
    for slot, expected in case["goals"].items():
        at_slot = batch["indices"] == slot
        relabelled = at_slot & batch["relabelled"]
        sample_obs = batch["observation"][at_slot]
        if expected is None:
            assert not relabelled.any(), f"slot {slot} must never be relabelled"
            continue
        goals = batch["desired_goal"][relabelled]  # [R, 3]
        np.testing.assert_array_equal(goals[:, :2], sample_obs[:1, :2].repeat(len(goals), axis=0))
        assert set(goals[:, 2].astype(int).tolist()) == expected, f"slot {slot}"
        # a relabelled reward is compute_reward(next_achieved_goal, goal): 0 exactly when j = t
        rewards = batch["reward"][relabelled]
        np.testing.assert_array_equal(rewards, distance_reward(batch["next_achieved_goal"][relabelled], goals))


def test_hand_checked_cases_match_the_reference_too():
    """The brute-force reference agrees with the hand-written table (so the table checks the reference)."""
    for name, case in HAND_CASES.items():
        _, reference = hand_case_setup(case)
        sampleable = reference.sampleable()
        assert set(sampleable) == case["sampleable"], name
        for slot, expected in case["goals"].items():
            step = sampleable[slot]
            if expected is None:
                assert not reference.may_relabel(step.env, step.count, case.get("relabel_unfinished", False)), name
                continue
            start = reference.episode_of(step.env, step.count).start
            counts = reference.goal_counts(step.env, step.count, case["strategy"])
            assert {c - start + 1 for c in counts} == expected, (name, slot)


def test_add_returns_the_flat_index_and_skips_the_autoreset_step():
    calls = scripted_rollout(0, 2, 5, max_len=1, lengths=[[(2, "terminated")], [(1, "truncated")]])
    buffer = make_buffer(8, num_envs=2)  # rows = 4
    written = feed(buffer, None, calls)
    # env 0: counts 0 1, autoreset call, counts 2 3; env 1: count 0, autoreset call, counts 1 2 3
    assert [w.tolist() for w in written] == [[0, 1], [2, -1], [-1, 3], [4, 5], [6, 7]]


# =====================================================================================================
# Random multi-env rollouts vs the reference
# =====================================================================================================

CONFIGS = {
    # capacity not a multiple of any episode length or of num_envs; rings wrap many times
    "one_env_cap_23": dict(num_envs=1, capacity=23, calls=120, max_len=7),
    "three_envs_cap_50": dict(num_envs=3, capacity=50, calls=90, max_len=9),
}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("n_step", [1, 3])
def test_relabelling_matches_the_reference(strategy, config, n_step):
    c = CONFIGS[config]
    buffer = make_buffer(c["capacity"], c["num_envs"], seed=1, goal_selection_strategy=strategy, n_step=n_step,
                         gamma=0.9)
    reference = ReferenceHer(c["capacity"], c["num_envs"])
    seen = Counter()
    calls = scripted_rollout(7, c["num_envs"], c["calls"], c["max_len"])
    for part in range(3):  # check at three points of the rollout: the ring state differs each time
        feed(buffer, reference, calls[part * len(calls) // 3:(part + 1) * len(calls) // 3])
        assert sampleable_slots(buffer) == sorted(reference.sampleable())
        seen += check_batch(buffer, reference, buffer.sample(256))
    assert seen["relabelled"] > 200 and seen["unfinished_kept"] > 0
    if strategy != "random":
        assert seen["goal_across_ring_end"] > 0, "no goal came from across the end of the ring"
    if n_step > 1:
        assert seen["summed_steps", n_step] > 0 and sum(seen["summed_steps", m] for m in range(1, n_step)) > 0


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_relabel_unfinished_matches_the_reference(strategy):
    buffer = make_buffer(40, 2, seed=2, goal_selection_strategy=strategy, relabel_unfinished=True, n_step=2)
    reference = ReferenceHer(40, 2)
    feed(buffer, reference, scripted_rollout(3, 2, 70, max_len=12))
    seen = check_batch(buffer, reference, buffer.sample(512))
    assert seen["relabelled_unfinished"] > 0


@pytest.mark.parametrize("n_step", [1, 3])
def test_compute_terminated_recomputes_termination_under_the_new_goal(n_step):
    buffer = make_buffer(60, 2, seed=3, n_step=n_step, gamma=0.8, compute_terminated=reached)
    reference = ReferenceHer(60, 2)
    feed(buffer, reference, scripted_rollout(4, 2, 80, max_len=8))
    batch = buffer.sample(512)
    check_batch(buffer, reference, batch, compute_terminated=reached)
    # a goal reached by the first summed step ends the return there: reward 0, discount 0
    own = batch["relabelled"] & np.all(batch["desired_goal"] == batch["achieved_goal"] + [0, 0, 1], axis=1)
    assert own.any()
    np.testing.assert_array_equal(batch["reward"][own], 0.0)
    np.testing.assert_array_equal(batch["discount"][own], 0.0)


@settings(deadline=None, max_examples=60)
@given(capacity=st.integers(1, 30), num_envs=st.integers(1, 3), max_len=st.integers(1, 12),
       num_calls=st.integers(1, 50), sampler=st.sampled_from(["uniform", "proportional", "rank"]),
       mode=st.sampled_from(["next_step", "same_step"]), seed=st.integers(0, 2**16))
def test_partly_overwritten_episodes_are_never_sampled(capacity, num_envs, max_len, num_calls, sampler, mode, seed):
    """After every add, the slots with mass are exactly the steps whose whole episode is in the ring."""
    num_envs = min(num_envs, capacity)
    buffer = make_buffer(capacity, num_envs, seed=seed, sampler=sampler, autoreset_mode=mode)
    reference = ReferenceHer(capacity, num_envs, autoreset_mode=mode)
    for call in scripted_rollout(seed, num_envs, num_calls, max_len, autoreset_mode=mode):
        feed(buffer, reference, [call])
        expected = sorted(reference.sampleable())
        assert sampleable_slots(buffer) == expected
        assert len(buffer) == len(expected)
    if len(buffer):
        check_batch(buffer, reference, buffer.sample(32))
    else:
        with pytest.raises(ValueError, match="cannot sample"):
            buffer.sample(1)


# =====================================================================================================
# Statistics: uniform sampling, relabel fraction, uniform goal choice
# =====================================================================================================


def test_uniform_sampling_over_sampleable_transitions():
    buffer = make_buffer(45, 3, seed=4, n_sampled_goal=0)
    feed(buffer, None, scripted_rollout(5, 3, 60, max_len=6))
    slots = sampleable_slots(buffer)
    draws = np.concatenate([buffer.sample(1000)["indices"] for _ in range(30)])
    counts = np.bincount(draws, minlength=buffer.sampler.capacity)
    assert counts[np.setdiff1d(np.arange(counts.size), slots)].sum() == 0
    _, dof, p_value = chi_square_test(counts[slots], np.ones(len(slots)))
    assert dof == len(slots) - 1 and p_value > 1e-4


@pytest.mark.parametrize("n_sampled_goal", [0, 1, 4, 8])
def test_relabel_fraction_is_k_over_k_plus_one(n_sampled_goal):
    buffer = make_buffer(200, 2, seed=5, n_sampled_goal=n_sampled_goal)
    reference = ReferenceHer(200, 2)
    feed(buffer, reference, scripted_rollout(6, 2, 120, max_len=9))
    finished_at = {(step.env, step.count): reference.episode_of(step.env, step.count).end is not None
                   for step in reference.sampleable().values()}
    batches = [buffer.sample(1000) for _ in range(40)]
    relabelled = np.concatenate([b["relabelled"] for b in batches])
    observations = np.concatenate([b["observation"] for b in batches])  # [N, 4]: env, episode, t, count
    finished = np.array([finished_at[int(env), int(count)] for env, count in observations[:, [0, 3]]])
    assert (~finished).any()
    assert not relabelled[~finished].any(), "a step of an unfinished episode was relabelled"
    p = n_sampled_goal / (n_sampled_goal + 1)
    n = int(finished.sum())
    fraction = relabelled[finished].mean()
    assert abs(fraction - p) <= 4.5 * np.sqrt(p * (1 - p) / n) + 1e-12, (fraction, p, n)


@pytest.mark.parametrize("strategy", ["future", "episode"])
def test_goal_steps_are_uniform_within_their_range(strategy):
    """One episode of 6 steps: 'future' picks j uniformly in [t, 6), 'episode' in [0, 6), for every t."""
    calls = scripted_rollout(0, 1, 6, max_len=1, lengths=[[(6, "truncated")]])
    buffer = make_buffer(10, seed=6, goal_selection_strategy=strategy, n_sampled_goal=1)
    feed(buffer, None, calls)
    counts = np.zeros((6, 6))
    for _ in range(20):
        batch = buffer.sample(2000)
        rel = batch["relabelled"]
        np.add.at(counts, (batch["observation"][rel, 2].astype(int), batch["desired_goal"][rel, 2].astype(int) - 1), 1)
    t, j = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    allowed = (j >= t) if strategy == "future" else np.ones((6, 6), bool)
    assert counts[~allowed].sum() == 0
    probabilities = np.where(allowed, 1.0 / allowed.sum(axis=1, keepdims=True), 0.0) / 6  # P(t) P(j | t)
    _, _, p_value = chi_square_test(counts[allowed], probabilities[allowed])
    assert p_value > 1e-4


def test_random_goals_are_uniform_over_sampleable_steps():
    """'random' draws the goal step uniformly over every sampleable step, whatever the sampled step."""
    buffer = make_buffer(30, 2, seed=10, goal_selection_strategy="random", n_sampled_goal=1)
    reference = ReferenceHer(30, 2)
    feed(buffer, reference, scripted_rollout(8, 2, 40, max_len=5))
    sources = {tuple(step.next_achieved_goal.tolist()): slot for slot, step in reference.sampleable().items()}
    counts = Counter()
    same_episode = 0
    for _ in range(10):
        batch = buffer.sample(2000)
        rel = batch["relabelled"]
        same_episode += int(np.sum(np.all(batch["desired_goal"][rel, :2] == batch["observation"][rel, :2], axis=1)))
        counts.update(sources[tuple(goal)] for goal in batch["desired_goal"][rel].tolist())
    slots = sorted(sources.values())
    observed = np.array([counts[slot] for slot in slots])
    _, _, p_value = chi_square_test(observed, np.ones(len(slots)))
    assert p_value > 1e-4
    assert same_episode < 0.5 * observed.sum()  # most random goals come from other episodes


# =====================================================================================================
# n-step returns: closed forms (SB3 compute_expected_nstep_reward style)
# =====================================================================================================

R = [stored_reward(0, 0, t) for t in range(4)]  # 0.25, 0.375, 0.5, 0.625
# one episode of 4 steps, n_step 3, gamma 0.5; under the final goal [0, 0, 4] step s earns -(3 - s)
NSTEP_CASES = {
    "stored_rewards_stop_at_termination": dict(
        ending="terminated", n_sampled_goal=0, compute_terminated=None,
        expected={0: (R[0] + 0.5 * R[1] + 0.25 * R[2], 0.125), 1: (R[1] + 0.5 * R[2] + 0.25 * R[3], 0.0),
                  2: (R[2] + 0.5 * R[3], 0.0), 3: (R[3], 0.0)}),
    "truncation_bootstraps_with_shorter_discounts": dict(
        ending="truncated", n_sampled_goal=0, compute_terminated=None,
        expected={0: (R[0] + 0.5 * R[1] + 0.25 * R[2], 0.125), 1: (R[1] + 0.5 * R[2] + 0.25 * R[3], 0.125),
                  2: (R[2] + 0.5 * R[3], 0.25), 3: (R[3], 0.5)}),
    "final_goal_rewards_are_recomputed": dict(
        ending="truncated", n_sampled_goal=10**9, compute_terminated=None,
        expected={0: (-3 - 0.5 * 2 - 0.25 * 1, 0.125), 1: (-2 - 0.5 * 1 + 0.0, 0.125), 2: (-1 + 0.0, 0.25),
                  3: (0.0, 0.5)}),
    "final_goal_with_compute_terminated_stops_on_success": dict(
        ending="truncated", n_sampled_goal=10**9, compute_terminated=reached,
        expected={0: (-3 - 0.5 * 2 - 0.25 * 1, 0.125), 1: (-2 - 0.5 * 1 + 0.0, 0.0), 2: (-1 + 0.0, 0.0),
                  3: (0.0, 0.0)}),
}


@pytest.mark.parametrize("name", list(NSTEP_CASES))
def test_nstep_closed_form(name):
    case = NSTEP_CASES[name]
    calls = scripted_rollout(0, 1, 4, max_len=1, lengths=[[(4, case["ending"])]])
    buffer = make_buffer(10, seed=7, goal_selection_strategy="final", n_step=3, gamma=0.5,
                         n_sampled_goal=case["n_sampled_goal"], compute_terminated=case["compute_terminated"])
    feed(buffer, None, calls)
    batch = buffer.sample(400)
    assert batch["relabelled"].all() == (case["n_sampled_goal"] > 0)
    for t, (reward, discount) in case["expected"].items():
        at = batch["observation"][:, 2] == t
        assert at.any()
        np.testing.assert_allclose(batch["reward"][at], reward, rtol=1e-6)
        np.testing.assert_array_equal(batch["discount"][at], np.float32(discount))
        last = min(t + 3, 4)  # next observation after the last summed step
        np.testing.assert_array_equal(batch["next_observation"][at, 2], last)


# =====================================================================================================
# Prioritized replay over transitions
# =====================================================================================================


def test_per_weights_match_the_formula():
    alpha, eps, beta = 0.7, 1e-3, 0.5
    buffer = make_buffer(40, 2, seed=8, sampler="proportional", alpha=alpha, eps=eps)
    feed(buffer, None, scripted_rollout(9, 2, 30, max_len=5))
    slots = sampleable_slots(buffer)
    priorities = np.linspace(0.05, 3.0, len(slots))[np.random.default_rng(0).permutation(len(slots))]
    buffer.update_priorities(slots, priorities)
    values = {slot: (p + eps) ** alpha for slot, p in zip(slots, priorities)}
    np.testing.assert_allclose(buffer.sampler.tree.get(slots), [values[s] for s in slots], rtol=1e-12)
    batch = buffer.sample(512, beta=beta)
    np.testing.assert_allclose(batch["weights"], is_weights(values, batch["indices"], beta), rtol=1e-6)
    assert batch["weights"].dtype == np.float32 and batch["weights"].max() <= 1.0
    # frequencies follow the priorities
    draws = np.concatenate([buffer.sample(1000)["indices"] for _ in range(20)])
    counts = np.bincount(draws, minlength=buffer.sampler.capacity)
    _, _, p_value = chi_square_test(counts[slots], np.array([values[s] for s in slots]))
    assert p_value > 1e-4


def test_per_new_steps_get_max_priority_and_dropped_episodes_stay_dropped():
    alpha, eps = 0.6, 1e-6
    calls = scripted_rollout(0, 1, 13, max_len=1, lengths=[[(3, "terminated"), (3, "terminated"), (3, "truncated")]])
    buffer = make_buffer(6, seed=9, sampler="proportional", alpha=alpha, eps=eps)
    feed(buffer, None, calls[:4])  # episode 0 in rows 0 1 2, then its autoreset call
    buffer.update_priorities([0, 1, 2], [9.0, 0.5, 2.0])
    assert buffer.max_priority == pytest.approx(9.0 + eps)
    feed(buffer, None, calls[4:8])  # episode 1 in rows 3 4 5, then its autoreset call
    np.testing.assert_allclose(buffer.sampler.tree.get([3, 4, 5]), (9.0 + eps) ** alpha)
    feed(buffer, None, calls[8:9])  # episode 2's first step overwrites row 0: episode 0 is gone
    np.testing.assert_array_equal(buffer.sampler.tree.get([1, 2]), 0.0)
    buffer.update_priorities([1, 2, 3], [5.0, 5.0, 1.0])  # stale indices 1 and 2 are skipped
    np.testing.assert_array_equal(buffer.sampler.tree.get([1, 2]), 0.0)
    assert buffer.sampler.tree.get([3])[0] == pytest.approx((1.0 + eps) ** alpha)
    assert sampleable_slots(buffer) == [0, 3, 4, 5] and len(buffer) == 4
    assert not np.isin(buffer.sample(500)["indices"], [1, 2]).any()


# =====================================================================================================
# Real gymnasium vector envs (BitFlip)
# =====================================================================================================


def bitflip_envs(num_envs: int, n_bits: int, mode) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([lambda: gym.make("BitFlip-v0", n_bits=n_bits) for _ in range(num_envs)],
                                    autoreset_mode=mode)


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP])
def test_bitflip_vector_env_transitions_follow_the_dynamics(mode):
    num_envs, n_bits, num_calls = 4, 4, 150
    envs = bitflip_envs(num_envs, n_bits, mode)
    env = envs.envs[0].unwrapped
    buffer = HerReplayBuffer(num_envs * 400, ((n_bits,), "float32"), ((n_bits,), "float32"), num_envs=num_envs,
                             compute_reward=env.compute_reward, compute_terminated=env.compute_terminated,
                             autoreset_mode=mode, seed=0)
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    ends = 0
    for c in range(num_calls):
        action = envs.action_space.sample()
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        buffer.add(obs, action, reward, next_obs, terminated, truncated, infos)
        ends += int(np.sum(terminated | truncated)) if c < num_calls - 1 else 0
        obs = next_obs
    envs.close()
    assert ends > 20
    autoreset_calls = ends if mode == gym.vector.AutoresetMode.NEXT_STEP else 0
    assert len(buffer) == num_envs * num_calls - autoreset_calls

    batch = buffer.sample(3000)
    flipped = np.abs(batch["next_observation"] - batch["observation"])  # [B, n_bits]
    np.testing.assert_array_equal(flipped, np.eye(n_bits, dtype=np.float32)[batch["action"]])
    np.testing.assert_array_equal(batch["achieved_goal"], batch["observation"])
    np.testing.assert_array_equal(batch["next_achieved_goal"], batch["next_observation"])
    success = np.all(batch["next_achieved_goal"] == batch["desired_goal"], axis=1)
    np.testing.assert_array_equal(batch["reward"], np.where(success, 0.0, -1.0))
    np.testing.assert_array_equal(batch["discount"], np.where(success, 0.0, np.float32(0.99)))
    relabelled = batch["relabelled"]
    assert relabelled.mean() > 0.5 and success[relabelled].mean() > success[~relabelled].mean()


# =====================================================================================================
# Persistence
# =====================================================================================================

ROUND_TRIPS = {
    "empty": dict(capacity=30, num_envs=2, calls=0, kwargs={}),
    "partial": dict(capacity=30, num_envs=2, calls=5, kwargs={}),
    "wrapped_per_nstep": dict(capacity=31, num_envs=3, calls=60,
                              kwargs=dict(sampler="proportional", alpha=0.7, eps=0.01, n_step=3, gamma=0.9)),
    "random_strategy_same_step": dict(capacity=25, num_envs=2, calls=40, mode="same_step",
                                      kwargs=dict(goal_selection_strategy="random", autoreset_mode="same_step")),
    "relabel_unfinished_with_termination_fn": dict(
        capacity=20, num_envs=1, calls=33, kwargs=dict(relabel_unfinished=True, compute_terminated=reached)),
}


def continuation(buffer: HerReplayBuffer, calls, seed: int) -> list[np.ndarray]:
    """The same adds, samples and priority updates on original and copy; everything returned, flattened."""
    rng = np.random.default_rng(seed)
    out = [np.array(len(buffer))]
    for call in calls:
        out.append(buffer.add(call["obs"], call["action"], call["reward"], call["next_obs"], call["terminated"],
                              call["truncated"], call["infos"]))
        if len(buffer):
            batch = buffer.sample(16, beta=0.6)
            out.extend(batch[key] for key in sorted(batch))
            buffer.update_priorities(batch["indices"], rng.exponential(2.0, 16))
        out.append(buffer.sampler.tree.leaves())
    return out


@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_round_trip_continues_identically(tmp_path, name):
    case = ROUND_TRIPS[name]
    mode = case.get("mode", "next_step")
    calls = scripted_rollout(11, case["num_envs"], case["calls"] + 25, max_len=6, autoreset_mode=mode)
    original = make_buffer(case["capacity"], case["num_envs"], seed=12, **case["kwargs"])
    continuation(original, calls[:case["calls"]], seed=1)
    path = tmp_path / "her.npz"
    original.save(path)
    copy = HerReplayBuffer.load(path, compute_reward=distance_reward,
                                compute_terminated=case["kwargs"].get("compute_terminated"))
    assert repr(copy) == repr(original) and copy.max_priority == original.max_priority
    first = continuation(original, calls[case["calls"]:], seed=2)
    second = continuation(copy, calls[case["calls"]:], seed=2)
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_round_trip_keeps_a_pending_autoreset(tmp_path):
    """Saved right after an episode ended: the copy must still drop the autoreset step that follows."""
    calls = scripted_rollout(0, 1, 5, max_len=1, lengths=[[(2, "terminated")]])
    original = make_buffer(10)
    feed(original, None, calls[:2])
    original.save(tmp_path / "pending.npz")
    copy = HerReplayBuffer.load(tmp_path / "pending.npz", compute_reward=distance_reward)
    assert [w.tolist() for w in feed(copy, None, calls[2:])] == [[-1], [2], [3]]


def rewrite(source, target, meta_changes=None, array_changes=None) -> None:
    with np.load(source, allow_pickle=False) as archive:
        meta = json.loads(str(archive[META_KEY]))
        arrays = {name: archive[name] for name in archive.files if name != META_KEY}
    meta.update(meta_changes or {})
    for name, value in (array_changes or {}).items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value
    np.savez(target, **{META_KEY: np.array(json.dumps(meta))}, **arrays)


@pytest.fixture
def saved(tmp_path):
    buffer = make_buffer(12, 2, sampler="proportional")
    feed(buffer, None, scripted_rollout(0, 2, 20, max_len=4))
    buffer.save(tmp_path / "good.npz")
    return tmp_path / "good.npz"


@pytest.mark.parametrize("meta_changes, array_changes, pattern", [
    ({"has_compute_terminated": True}, None, "compute_terminated"),
    ({"params": {"num_envs": 2, "prioritized": "yes"}}, None, "malformed"),
    ({"slots": 7}, None, "slots"),
    (None, {"field.observation": None}, "field.observation"),
    (None, {"sampler.tree": np.full(12, -1.0)}, "priorit"),
    (None, {"valid": np.array([0, 0])}, "live slots"),
    (None, {"step_count": np.full(12, 99, dtype=np.int64)}, "inconsistent"),
    (None, {"episode_end": np.full(12, -7, dtype=np.int64)}, "inconsistent"),
    (None, {"env_written": np.array([-1, 3])}, "write counts"),
])
def test_tampered_files_raise_value_error(saved, tmp_path, meta_changes, array_changes, pattern):
    path = tmp_path / "tampered.npz"
    rewrite(saved, path, meta_changes, array_changes)
    with pytest.raises(ValueError, match=pattern):
        HerReplayBuffer.load(path, compute_reward=distance_reward)


def test_load_errors_name_the_problem(saved, tmp_path):
    with pytest.raises(TypeError, match="compute_reward"):
        HerReplayBuffer.load(saved, compute_reward=None)
    with pytest.raises(ValueError, match="compute_terminated"):
        HerReplayBuffer.load(saved, compute_reward=distance_reward, compute_terminated=reached)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        HerReplayBuffer.load(tmp_path / "missing.npz", compute_reward=distance_reward)
    from r2d2kit.replay import ReplayBuffer

    ReplayBuffer(4, {"x": ((), "float32")}, sampler="proportional").save(tmp_path / "per.npz")
    with pytest.raises(ValueError, match="load it with ReplayBuffer.load"):
        HerReplayBuffer.load(tmp_path / "per.npz", compute_reward=distance_reward)
    data = saved.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="cut.npz"):
        HerReplayBuffer.load(tmp_path / "cut.npz", compute_reward=distance_reward)


# =====================================================================================================
# compute_reward contract, strategies, tf.data
# =====================================================================================================


@pytest.mark.parametrize("n_step, n_sampled_goal, calls_expected", [(1, 4, 1), (3, 4, 1), (3, 0, 0)])
def test_compute_reward_is_called_once_per_sample(n_step, n_sampled_goal, calls_expected):
    calls = []

    def counting(achieved, desired, info):
        calls.append((achieved.shape, desired.shape, info))
        return distance_reward(achieved, desired)

    buffer = make_buffer(50, 2, compute_reward=counting, n_step=n_step, n_sampled_goal=n_sampled_goal)
    feed(buffer, None, scripted_rollout(0, 2, 30, max_len=5))
    batch = buffer.sample(256)
    assert len(calls) == calls_expected
    if calls_expected:
        (achieved_shape, desired_shape, info), = calls
        assert achieved_shape == desired_shape and achieved_shape[1:] == (3,) and info == {}
        assert achieved_shape[0] >= batch["relabelled"].sum()  # one pair per summed step of each relabelled sample


@pytest.mark.parametrize("alias", ["future", "FUTURE", " Future ", GoalSelectionStrategy.FUTURE])
def test_strategy_aliases(alias):
    assert make_buffer(4, goal_selection_strategy=alias).goal_selection_strategy is GoalSelectionStrategy.FUTURE
    assert GoalSelectionStrategy("Random").code == 3


def test_one_default_strategy_for_transitions_and_windows_and_on_transitions_it_draws_future():
    from r2d2kit.replay import SequenceHerReplayBuffer

    windows = SequenceHerReplayBuffer(40, ((3,), "float32"), ((3,), "float32"), compute_reward=distance_reward,
                                      burn_in=1, trace_length=2, n_step=1)
    assert make_buffer(4).goal_selection_strategy is windows.goal_selection_strategy \
        is GoalSelectionStrategy.TRACE_FUTURE
    batches = []
    for strategy in ("trace_future", "future"):
        buffer = make_buffer(60, 2, seed=5, goal_selection_strategy=strategy)
        feed(buffer, None, scripted_rollout(3, 2, 40, max_len=6))
        batches.append(buffer.sample(64))
    assert batches[0]["relabelled"].any()
    for key in batches[0]:
        np.testing.assert_array_equal(batches[0][key], batches[1][key], err_msg=key)


def test_as_dataset_yields_what_sample_would(tmp_path):
    import tensorflow as tf

    buffer = make_buffer(40, 2, seed=13, n_step=2, sampler="proportional")
    feed(buffer, None, scripted_rollout(1, 2, 30, max_len=6))
    buffer.save(tmp_path / "b.npz")
    copy = HerReplayBuffer.load(tmp_path / "b.npz", compute_reward=distance_reward)
    spec = assert_dataset_matches_sample(buffer, copy, 8, beta=0.5)
    assert isinstance(spec["relabelled"], tf.TensorSpec)


# =====================================================================================================
# Validation
# =====================================================================================================


@pytest.mark.parametrize("kwargs, error, pattern", [
    (dict(capacity=0), ValueError, "capacity"),
    (dict(capacity=2, num_envs=3), ValueError, "capacity must be >= num_envs"),
    (dict(n_sampled_goal=-1), ValueError, "n_sampled_goal"),
    (dict(n_sampled_goal=1.5), TypeError, "n_sampled_goal"),
    (dict(goal_selection_strategy="futur"), ValueError, "'future', 'final', 'episode', 'random'"),
    (dict(compute_reward="reward"), TypeError, "compute_reward must be callable"),
    (dict(compute_terminated=1), TypeError, "compute_terminated"),
    (dict(gamma=1.5), ValueError, "gamma"),
    (dict(n_step=0), ValueError, "n_step"),
    (dict(sampler="yes"), ValueError, "sampler must be one of"),
    (dict(relabel_unfinished=1), TypeError, "relabel_unfinished"),
    (dict(autoreset_mode="sometimes"), ValueError, "autoreset_mode"),
    (dict(alpha=-1.0), ValueError, "alpha"),
])
def test_constructor_validation(kwargs, error, pattern):
    arguments = dict(capacity=10, observation_spec=OBS_SPEC, goal_spec=GOAL_SPEC, compute_reward=distance_reward)
    arguments.update(kwargs)
    with pytest.raises(error, match=pattern):
        HerReplayBuffer(**arguments)


def test_spec_validation():
    with pytest.raises(ValueError, match="dtype"):
        HerReplayBuffer(10, ((4,), "object"), GOAL_SPEC, compute_reward=distance_reward)
    with pytest.raises(ValueError, match="shape"):
        HerReplayBuffer(10, OBS_SPEC, ((0,), "float32"), compute_reward=distance_reward)


def good_step(num_envs: int = 2) -> dict:
    call = scripted_rollout(0, num_envs, 1, max_len=3)[0]
    return {key: call[key] for key in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}


def with_change(step: dict, path: tuple, value) -> dict:
    changed = {key: (dict(v) if isinstance(v, dict) else v) for key, v in step.items()}
    if len(path) == 1:
        changed[path[0]] = value
    elif value is None:
        del changed[path[0]][path[1]]
    else:
        changed[path[0]][path[1]] = value
    return changed


@pytest.mark.parametrize("path, value, error, pattern", [
    (("obs", "desired_goal"), None, ValueError, r"obs must be a dict with exactly the keys"),
    (("next_obs", "extra"), np.zeros(2), ValueError, r"next_obs must be a dict with exactly the keys"),
    (("obs",), np.zeros((2, 4)), ValueError, r"obs must be a dict"),
    (("obs", "observation"), np.zeros(4, np.float32), ValueError,
     r"obs\['observation'\] must have shape \(2, 4\).*leading env axis"),
    (("next_obs", "achieved_goal"), np.zeros((2, 2), np.float32), ValueError, r"next_obs\['achieved_goal'\]"),
    (("obs", "achieved_goal"), np.full((2, 3), "x"), TypeError, r"achieved_goal"),
    (("action",), np.zeros(3, np.int64), ValueError, r"action must have shape \(2,\)"),
    (("action",), np.array([0.5, 1.0]), TypeError, r"action.*int64"),
    (("reward",), np.array([0.0, np.nan]), ValueError, r"reward\[1\] = nan is not finite"),
    (("reward",), np.zeros(3), ValueError, r"reward must have shape \(2,\)"),
    (("terminated",), np.array([0, 2]), TypeError, r"terminated must hold booleans"),
    (("truncated",), np.zeros((2, 1), bool), ValueError, r"truncated must have shape \(2,\)"),
])
def test_add_validation(path, value, error, pattern):
    buffer = make_buffer(10, 2)
    with pytest.raises(error, match=pattern):
        buffer.add(**with_change(good_step(), path, value))
    assert buffer.add(**good_step()).tolist() == [0, 1]  # the refused step left nothing behind


def test_sample_and_update_validation():
    buffer = make_buffer(10, 2)
    with pytest.raises(ValueError, match="empty HerReplayBuffer"):
        buffer.sample(4)
    feed(buffer, None, scripted_rollout(0, 2, 6, max_len=3))
    for bad, error, pattern in [(0, ValueError, "batch_size"), (2.0, TypeError, "batch_size")]:
        with pytest.raises(error, match=pattern):
            buffer.sample(bad)
    with pytest.raises(ValueError, match="beta"):
        buffer.sample(4, beta=1.5)
    with pytest.raises(IndexError, match=r"indices\[1\] = 10 is out of range"):
        buffer.update_priorities([0, 10], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"priorities\[1\] = -1.0"):
        buffer.update_priorities([0, 1], [1.0, -1.0])
    sparse = make_buffer(20, 2)  # rows 10; only rows 0 and 1 are written
    feed(sparse, None, scripted_rollout(0, 2, 2, max_len=3))
    with pytest.raises(IndexError, match=r"indices\[0\] = 8 holds no transition"):
        sparse.update_priorities([8], [1.0])


@pytest.mark.parametrize("returned, error, pattern", [
    (lambda a, d: np.zeros((a.shape[0], 1)), ValueError, r"vectorised over the leading batch axis"),
    (lambda a, d: np.float32(0.0), ValueError, r"vectorised"),
    (lambda a, d: np.full(a.shape[0], np.inf), ValueError, r"must return finite values"),
    (lambda a, d: np.array(["x"] * a.shape[0]), TypeError, r"must return real numbers"),
])
def test_compute_reward_contract_is_checked(returned, error, pattern):
    buffer = make_buffer(20, compute_reward=lambda a, d, info: returned(a, d), relabel_unfinished=True,
                         n_sampled_goal=10**6)
    feed(buffer, None, scripted_rollout(0, 1, 6, max_len=3))
    with pytest.raises(error, match=pattern):
        buffer.sample(8)


def test_episodes_that_never_fit_explain_themselves():
    buffer = make_buffer(3)
    feed(buffer, None, scripted_rollout(0, 1, 5, max_len=1, lengths=[[(5, "terminated")]]))
    assert len(buffer) == 0
    with pytest.raises(ValueError, match=r"partly overwritten.*capacity // num_envs = 3"):
        buffer.sample(1)


def test_unused_remainder_and_nbytes():
    buffer = make_buffer(11, 3)  # rows 3, 9 slots, 2 unused
    assert buffer.rows == 3 and buffer.sampler.tree.capacity == 9
    per_step = 4 * 4 * 2 + 3 * 4 * 3 + 8 + 4 + 1 + 1 + 3 * 8  # obs x2, goals x3, action, reward, flags, bookkeeping
    assert buffer.nbytes == 9 * per_step
