"""SequenceBuilder vs named hand-written cases, literal windows, and a brute-force reference.

Every case drives the builder one vector step at a time and checks, step for step, that it emits
exactly the windows ``reference_sequences.expected_windows`` says are emittable at that step, with
identical arrays (values, dtypes, shapes). Observations encode ``(env, episode-in-env, time)`` so a
mismatch reads as a layout.

Layout strings (hand-written expectations) mirror the module docstring's grid, one token per row and
``|`` between burn-in, trace and n-step tail::

    "p p | 0 1 2 | 3T"       p   padding (obs_mask False)
    "0 1 | 2 3U 4f | p"      3   a transition at episode time 3 (mask True)
                             3T  ... whose step terminated,   3U  ... whose step was truncated
                             4f  the final observation (obs_mask True, mask False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_sequences import (
    ROW_KEYS,
    RecordedEpisode,
    episode_start_steps,
    expected_windows,
    stack_windows,
    vector_steps,
)

from r2d2kit.replay.sequence_builder import SequenceBuilder

STATE_NAMES = ("state_h", "state_c")  # the windows' fields of an LSTM's (h, c)

# =====================================================================================================
# Episodes whose every value says where it came from
# =====================================================================================================


def encoded_episode(env: int, j: int, transitions: int, end: str, *, with_state: bool = True,
                    action_shape: tuple[int, ...] = (), obs_dtype: Any = np.float32) -> RecordedEpisode:
    """Episode ``j`` of env ``env``: obs ``[env, j, t]``, nonzero actions/rewards, states ``[env, j, t, ±1]``.

    ``end`` is ``"T"`` (terminated) or ``"U"`` (truncated, time-Up).
    """
    T = transitions
    times = np.arange(T + 1)
    obs = np.stack([np.full(T + 1, env), np.full(T + 1, j), times], axis=1).astype(obs_dtype)  # [T + 1, 3]
    code = 1 + 1000 * env + 100 * j + times[:T]  # [T], never 0 (0 is padding)
    if action_shape == ():
        action = code.astype(np.int64)
    else:
        action = np.stack([code, -code], axis=1).astype(np.float32)  # [T, 2]
    reward = (times[:T] + 1 + 0.25 * j - 0.5 * env).astype(np.float32)  # exact in float32
    terminated = np.zeros(T, bool)
    truncated = np.zeros(T, bool)
    (terminated if end == "T" else truncated)[-1] = True
    state = None
    if with_state:
        h = np.stack([np.full(T + 1, env), np.full(T + 1, j), times, np.ones(T + 1)], axis=1)  # [T + 1, 4]
        state = (h.astype(np.float32), (-h - 1).astype(np.float32))
    return RecordedEpisode(obs, action, reward, terminated, truncated, state)


def episodes_from_specs(specs: Sequence[Sequence[str]], **kwargs: Any) -> list[list[RecordedEpisode]]:
    """``[["4T", "2U"], ["7T"]]`` -> per env, episodes of 4 (terminated) then 2 (truncated) transitions, ..."""
    return [[encoded_episode(env, j, int(spec[:-1]), spec[-1], **kwargs) for j, spec in enumerate(mine)]
            for env, mine in enumerate(specs)]


# =====================================================================================================
# Driving and comparing
# =====================================================================================================


def drive(builder: SequenceBuilder, steps: list[dict[str, Any]]) -> list[dict[str, np.ndarray] | None]:
    return [builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], s["state"])
            for s in steps]


def layout(out: dict[str, np.ndarray], w: int, burn_in: int, trace_length: int) -> str:
    """One window as a layout string (see the module docstring), read from the encoded obs."""
    tokens = []
    for i in range(out["obs_mask"].shape[1]):
        if not out["obs_mask"][w, i]:
            token = "p" if not out["mask"][w, i] else "?mask-without-obs"
        else:
            token = str(int(out["obs"][w, i].reshape(-1)[2]))
            if not out["mask"][w, i]:
                token += "f"
            token += "T" if out["terminated"][w, i] else ""
            token += "U" if out["truncated"][w, i] else ""
        tokens.append(token)
    segments = (tokens[:burn_in], tokens[burn_in:burn_in + trace_length], tokens[burn_in + trace_length:])
    return " | ".join(" ".join(segment) for segment in segments).strip()


def describe(out: dict[str, np.ndarray] | None, burn_in: int, trace_length: int) -> str:
    if out is None:
        return "  (nothing)"
    return "\n".join(f"  env {out['env'][w]} episode {out['episode'][w]} start {out['start'][w]}: "
                     f"{layout(out, w, burn_in, trace_length)}" for w in range(out["env"].shape[0]))


def assert_matches_reference(outputs: list[dict[str, np.ndarray] | None], episodes_per_env, burn_in: int,
                             trace_length: int, n_step: int, period: int) -> None:
    """Same windows at the same steps, with identical arrays (dtype and shape included)."""
    reference = expected_windows(episodes_per_env, burn_in, trace_length, n_step, period, num_steps=len(outputs))
    for step, got in enumerate(outputs):
        wanted = [w for w in reference if w.step == step]
        want = stack_windows(wanted) if wanted else None
        where = (f"step {step}:\n builder emitted\n{describe(got, burn_in, trace_length)}\n"
                 f" reference expects\n{describe(want, burn_in, trace_length)}")
        if want is None:
            assert got is None, where
            continue
        assert got is not None, where
        assert sorted(got) == sorted(want), f"{where}\n keys {sorted(got)} != {sorted(want)}"
        for key, expected in want.items():
            assert got[key].dtype == expected.dtype, f"{where}\n {key}: dtype {got[key].dtype} != {expected.dtype}"
            assert got[key].shape == expected.shape, f"{where}\n {key}: shape {got[key].shape} != {expected.shape}"
            assert np.array_equal(got[key], expected), f"{where}\n {key}:\n{got[key]}\n!=\n{expected}"


def emitted(outputs: list[dict[str, np.ndarray] | None]) -> list[tuple[int, dict[str, np.ndarray], int]]:
    """(step, output, w) for every emitted window, in emission order."""
    return [(step, out, w) for step, out in enumerate(outputs) if out is not None for w in range(out["env"].shape[0])]


def assert_well_formed(outputs, burn_in: int, trace_length: int) -> None:
    """No window crosses an episode boundary; padding is all zeros; one episode id per (env, episode)."""
    ids: dict[tuple[int, int], int] = {}
    for step, out, w in emitted(outputs):
        env, start = int(out["env"][w]), int(out["start"][w])
        real = out["obs_mask"][w]  # [L]
        assert not (out["mask"][w] & ~real).any(), f"step {step}: mask set on a row without an observation"
        obs = out["obs"][w][real].reshape(real.sum(), -1)  # [R, 3]
        assert (obs[:, 0] == env).all(), f"step {step}: window of env {env} holds obs of env {obs[:, 0]}"
        assert (obs[:, 1] == obs[0, 1]).all(), f"step {step}: window crosses episodes {obs[:, 1]}"
        times = start + np.flatnonzero(real)
        assert (obs[:, 2] == times).all(), f"step {step}: rows {obs[:, 2]} are not times {times}"
        assert np.array_equal(np.flatnonzero(real), np.arange(real.argmax(), real.argmax() + real.sum())), \
            f"step {step}: real rows are not contiguous"
        assert ids.setdefault((env, int(obs[0, 1])), int(out["episode"][w])) == int(out["episode"][w])
        for key in ROW_KEYS:
            padding = out[key][w][~real]
            assert not padding.any(), f"step {step}: {key} padding is not zero: {padding}"
        final = real & ~out["mask"][w]  # at most the final observation
        assert final.sum() <= 1
        if final.any():
            assert not out["terminated"][w][final].any() and not out["truncated"][w][final].any()
    assert len(set(ids.values())) == len(ids), f"two episodes share an id: {ids}"


def assert_coverage(outputs, episodes_per_env, burn_in: int, trace_length: int) -> None:
    """Every transition of every finished episode is in some window's trace with mask True."""
    seen = set()
    for _, out, w in emitted(outputs):
        trace = slice(burn_in, burn_in + trace_length)
        for obs, mask in zip(out["obs"][w][trace], out["mask"][w][trace]):
            if mask:
                seen.add(tuple(int(v) for v in obs.reshape(-1)[:3]))
    starts = episode_start_steps(episodes_per_env)
    for env, episodes in enumerate(episodes_per_env):
        for j, episode in enumerate(episodes):
            if starts[env][j] + episode.transitions < len(outputs):  # final observation fed
                missing = [t for t in range(episode.transitions) if (env, j, t) not in seen]
                assert not missing, f"env {env} episode {j}: transitions {missing} are in no trace"


def run_and_check(specs, burn_in, trace_length, n_step, period, num_steps=None, **episode_kwargs):
    episodes = episodes_from_specs(specs, **episode_kwargs)
    if num_steps is None:
        num_steps = min(sum(e.span for e in mine) for mine in episodes)
    state_names = STATE_NAMES if episode_kwargs.get("with_state", True) else ()  # stateless episodes: no fields
    builder = SequenceBuilder(len(specs), burn_in, trace_length, n_step, period, state_names=state_names)
    outputs = drive(builder, vector_steps(episodes, num_steps))
    assert_matches_reference(outputs, episodes, burn_in, trace_length, n_step, period)
    assert_well_formed(outputs, burn_in, trace_length)
    assert_coverage(outputs, episodes, burn_in, trace_length)
    return outputs


# =====================================================================================================
# Named cases (Acme test_cases.py style)
# =====================================================================================================


@dataclass(frozen=True)
class Case:
    """``episodes``: per env, ``"<T><end>"`` with end T(erminated) / U (truncated), played back to back.

    ``expected``: ``(step, env, episode id, layout)`` for every emitted window, in emission order.
    ``num_steps``: vector steps fed (default: until the env with the shortest log has fed everything).
    """

    name: str
    burn_in: int
    trace_length: int
    n_step: int
    period: int
    episodes: tuple[tuple[str, ...], ...]
    expected: tuple[tuple[int, int, int, str], ...]
    num_steps: int | None = None
    with_state: bool = True


CASES = [
    # The module docstring's grid: window 2 (t0 = 2) has no transition in its trace.
    Case("docstring_example", burn_in=2, trace_length=3, n_step=1, period=2, episodes=(("4T",),),
         expected=((3, 0, 0, "p p | 0 1 2 | 3T"),
                   (4, 0, 0, "0 1 | 2 3T 4f | p"))),
    # T < burn_in: one window, its burn-in all padding; emitted when the final obs arrives.
    Case("short_episode_shorter_than_burn_in", burn_in=4, trace_length=2, n_step=1, period=2,
         episodes=(("2T",),),
         expected=((2, 0, 0, "p p p p | 0 1T | 2f"),)),
    Case("single_transition_truncated", burn_in=3, trace_length=2, n_step=2, period=1, episodes=(("1U",),),
         expected=((1, 0, 0, "p p p | 0U 1f | p p"),)),
    # period == trace_length: traces tile the episode exactly; windows leave as soon as their rows are in.
    Case("long_episode_period_equals_trace", burn_in=2, trace_length=4, n_step=1, period=4,
         episodes=(("13T",),),
         expected=((4, 0, 0, "p p | 0 1 2 3 | 4"),
                   (8, 0, 0, "2 3 | 4 5 6 7 | 8"),
                   (12, 0, 0, "6 7 | 8 9 10 11 | 12T"),
                   (13, 0, 0, "10 11 | 12T 13f p p | p"))),
    # period < trace_length: overlapping traces; three windows wait for the same final obs.
    Case("period_less_than_trace", burn_in=1, trace_length=4, n_step=2, period=2, episodes=(("7U",),),
         expected=((5, 0, 0, "p | 0 1 2 3 | 4 5"),
                   (7, 0, 0, "1 | 2 3 4 5 | 6U 7f"),
                   (7, 0, 0, "3 | 4 5 6U 7f | p p"),
                   (7, 0, 0, "5 | 6U 7f p p | p p"))),
    # period 1 with burn-in: windows with t0 <= 0 all carry the row-0 state (checked via the reference).
    Case("period_one", burn_in=2, trace_length=2, n_step=1, period=1, episodes=(("4U",),),
         expected=((2, 0, 0, "p p | 0 1 | 2"),
                   (3, 0, 0, "p 0 | 1 2 | 3U"),
                   (4, 0, 0, "0 1 | 2 3U | 4f"),
                   (4, 0, 0, "1 2 | 3U 4f | p"))),
    Case("burn_in_zero", burn_in=0, trace_length=3, n_step=1, period=3, episodes=(("7T",),),
         expected=((3, 0, 0, "| 0 1 2 | 3"),
                   (6, 0, 0, "| 3 4 5 | 6T"),
                   (7, 0, 0, "| 6T 7f p | p"))),
    # n_step 0: the last window needs no final obs, so it leaves on the truncating step itself.
    Case("n_step_zero", burn_in=2, trace_length=3, n_step=0, period=3, episodes=(("6U",),),
         expected=((2, 0, 0, "p p | 0 1 2 |"),
                   (5, 0, 0, "1 2 | 3 4 5U |"))),
    # Same grid for the next three: burn_in 2, trace 3, n_step 2, period 3 -> t0 = -2, 1, 4, 7
    #   window 1: burn-in rows 1-2, trace 3-5, tail 6-7;  window 2: burn-in 4-5, trace 6-8, tail 9-10.
    # The end (row 4) falls in window 2's burn-in: window 2 would train on nothing and is dropped.
    Case("ends_inside_burn_in", burn_in=2, trace_length=3, n_step=2, period=3, episodes=(("5T",),),
         expected=((4, 0, 0, "p p | 0 1 2 | 3 4T"),
                   (5, 0, 0, "1 2 | 3 4T 5f | p p"))),
    # The end (row 7) falls in window 2's trace: window 1 is all real and leaves before the final obs.
    Case("ends_inside_trace", burn_in=2, trace_length=3, n_step=2, period=3, episodes=(("8U",),),
         expected=((4, 0, 0, "p p | 0 1 2 | 3 4"),
                   (7, 0, 0, "1 2 | 3 4 5 | 6 7U"),
                   (8, 0, 0, "4 5 | 6 7U 8f | p p"))),
    # The end (row 6) falls in window 1's n-step tail: its bootstrap rows are the last transition and the final obs.
    Case("ends_inside_n_step_tail", burn_in=2, trace_length=3, n_step=2, period=3, episodes=(("7T",),),
         expected=((4, 0, 0, "p p | 0 1 2 | 3 4"),
                   (7, 0, 0, "1 2 | 3 4 5 | 6T 7f"),
                   (7, 0, 0, "4 5 | 6T 7f p | p p"))),
    # Same lengths, different ends: only the flag columns differ.
    Case("terminated_vs_truncated", burn_in=1, trace_length=2, n_step=1, period=2, episodes=(("3T",), ("3U",)),
         expected=((2, 0, 0, "p | 0 1 | 2T"),
                   (2, 1, 1, "p | 0 1 | 2U"),
                   (3, 0, 0, "1 | 2T 3f | p"),
                   (3, 1, 1, "1 | 2U 3f | p"))),
    # Three envs ending at different steps, episodes back to back (NEXT_STEP autoreset).
    #   step:    0    1    2    3    4    5    6
    #   env 0:  A0   A1T  A2f  B0   B1   B2U  B3f        A = episode 0, B = episode 4
    #   env 1:  C0U  C1f  D0T  D1f  E0   E1T  E2f        C = 1, D = 3, E = 5
    #   env 2:  F0   F1   F2   F3   F4T  F5f  G0         F = 2, G = 6 (never emits: stream stops)
    Case("three_envs_back_to_back", burn_in=1, trace_length=2, n_step=1, period=2,
         episodes=(("2T", "3U"), ("1U", "1T", "2T"), ("5T", "3U")), num_steps=7,
         expected=((1, 1, 1, "p | 0U 1f | p"),
                   (2, 0, 0, "p | 0 1T | 2f"),
                   (2, 2, 2, "p | 0 1 | 2"),
                   (3, 1, 3, "p | 0T 1f | p"),
                   (4, 2, 2, "1 | 2 3 | 4T"),
                   (5, 0, 4, "p | 0 1 | 2U"),
                   (5, 2, 2, "3 | 4T 5f | p"),
                   (6, 0, 4, "1 | 2U 3f | p"),
                   (6, 1, 5, "p | 0 1T | 2f"))),
    # No overlap at all (burn_in 0, n_step 0, period == trace_length): each window leaves with the last row
    # it holds, yet the next row still has a previous row (prev_action/prev_reward checked via the reference).
    Case("no_overlap_burn_in_zero_n_step_zero", burn_in=0, trace_length=2, n_step=0, period=2, episodes=(("5U",),),
         expected=((1, 0, 0, "| 0 1 |"),
                   (3, 0, 0, "| 2 3 |"),
                   (5, 0, 0, "| 4U 5f |"))),
    # No recurrent state: no state keys in the output.
    Case("state_none", burn_in=1, trace_length=2, n_step=1, period=2, episodes=(("3T", "2U"), ("4U", "1T")),
         with_state=False,
         expected=((2, 0, 0, "p | 0 1 | 2T"),
                   (2, 1, 1, "p | 0 1 | 2"),
                   (3, 0, 0, "1 | 2T 3f | p"),
                   (4, 1, 1, "1 | 2 3U | 4f"),
                   (6, 0, 2, "p | 0 1U | 2f"),
                   (6, 1, 3, "p | 0T 1f | p"))),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_named_case(case: Case) -> None:
    outputs = run_and_check(case.episodes, case.burn_in, case.trace_length, case.n_step, case.period,
                            num_steps=case.num_steps, with_state=case.with_state)
    got = [(step, int(out["env"][w]), int(out["episode"][w]), layout(out, w, case.burn_in, case.trace_length))
           for step, out, w in emitted(outputs)]
    assert got == list(case.expected)
    for _, out, _ in emitted(outputs):
        assert ("state_h" in out and "state_c" in out) == case.with_state


# =====================================================================================================
# Literal windows for the docstring example
# =====================================================================================================


def literal_episode(transitions: int, end: str) -> RecordedEpisode:
    """obs_t = [10 (t + 1)], action_t = t + 1, reward_t = (t + 1) / 2, h_t = [100 + t], c_t = [200 + t]."""
    T = transitions
    t = np.arange(T + 1)
    terminated, truncated = np.zeros(T, bool), np.zeros(T, bool)
    (terminated if end == "T" else truncated)[-1] = True
    return RecordedEpisode(obs=(10.0 * (t + 1))[:, None].astype(np.float32), action=(t[:T] + 1).astype(np.int64),
                           reward=((t[:T] + 1) / 2).astype(np.float32), terminated=terminated, truncated=truncated,
                           state=((100.0 + t)[:, None].astype(np.float32), (200.0 + t)[:, None].astype(np.float32)))


def test_docstring_example_literal_windows() -> None:
    """burn_in 2, trace 3, n_step 1, period 2, T = 4 (terminated)::

        row:        -2  -1   0   1   2   3   4   5
        window 0:   [p   p | 0   1   2 | 3 ]            emitted at step 3 (its last row)
        window 1:           [0   1 | 2   3   4f| p ]    emitted at step 4 (the final obs)
    """
    builder = SequenceBuilder(1, burn_in=2, trace_length=3, n_step=1, period=2, state_names=STATE_NAMES)
    outputs = drive(builder, vector_steps([[literal_episode(4, "T")]], 5, ignored_action=99))
    assert outputs[:3] == [None, None, None]
    F, T_ = False, True
    expected = {
        3: {"obs": [[[0.0], [0.0], [10.0], [20.0], [30.0], [40.0]]],
            "action": [[0, 0, 1, 2, 3, 4]],
            "reward": [[0.0, 0.0, 0.5, 1.0, 1.5, 2.0]],
            "prev_action": [[0, 0, 0, 1, 2, 3]],
            "prev_reward": [[0.0, 0.0, 0.0, 0.5, 1.0, 1.5]],
            "terminated": [[F, F, F, F, F, T_]],
            "truncated": [[F, F, F, F, F, F]],
            "mask": [[F, F, T_, T_, T_, T_]],
            "obs_mask": [[F, F, T_, T_, T_, T_]],
            "env": [0], "episode": [0], "start": [-2],
            "state_h": [[100.0]], "state_c": [[200.0]]},
        # The autoreset step's action (99) is ignored: row 4 has action 0, and prev_action 4.
        4: {"obs": [[[10.0], [20.0], [30.0], [40.0], [50.0], [0.0]]],
            "action": [[1, 2, 3, 4, 0, 0]],
            "reward": [[0.5, 1.0, 1.5, 2.0, 0.0, 0.0]],
            "prev_action": [[0, 1, 2, 3, 4, 0]],
            "prev_reward": [[0.0, 0.5, 1.0, 1.5, 2.0, 0.0]],
            "terminated": [[F, F, F, T_, F, F]],
            "truncated": [[F, F, F, F, F, F]],
            "mask": [[T_, T_, T_, T_, F, F]],
            "obs_mask": [[T_, T_, T_, T_, T_, F]],
            "env": [0], "episode": [0], "start": [0],
            "state_h": [[100.0]], "state_c": [[200.0]]},
    }
    dtypes = {"obs": np.float32, "action": np.int64, "reward": np.float32, "prev_action": np.int64,
              "prev_reward": np.float32, "terminated": bool, "truncated": bool, "mask": bool, "obs_mask": bool,
              "env": np.int64, "episode": np.int64, "start": np.int64, "state_h": np.float32, "state_c": np.float32}
    for step, want in expected.items():
        got = outputs[step]
        assert sorted(got) == sorted(want)
        for key, value in want.items():
            np.testing.assert_array_equal(got[key], np.array(value, dtypes[key]), err_msg=f"step {step} {key}")
            assert got[key].dtype == dtypes[key], key


def test_literal_window_after_start_carries_its_own_state() -> None:
    """Same grid, T = 6 truncated: window 2 starts at row 2, so it carries (h_2, c_2) and bootstraps from 6f::

        row:         2   3   4   5   6   7
        window 2:   [2   3 | 4   5U  6f| p ]
    """
    builder = SequenceBuilder(1, burn_in=2, trace_length=3, n_step=1, period=2, state_names=STATE_NAMES)
    outputs = drive(builder, vector_steps([[literal_episode(6, "U")]], 7))
    assert [None if out is None else out["start"].tolist() for out in outputs] == \
        [None, None, None, [-2], None, [0], [2]]  # window 2 waits for the final obs (step 6)
    got = outputs[6]
    F, T_ = False, True
    np.testing.assert_array_equal(got["obs"][0, :, 0], np.float32([30, 40, 50, 60, 70, 0]))
    np.testing.assert_array_equal(got["action"][0], [3, 4, 5, 6, 0, 0])
    np.testing.assert_array_equal(got["reward"][0], np.float32([1.5, 2, 2.5, 3, 0, 0]))
    np.testing.assert_array_equal(got["prev_action"][0], [2, 3, 4, 5, 6, 0])
    np.testing.assert_array_equal(got["prev_reward"][0], np.float32([1, 1.5, 2, 2.5, 3, 0]))
    np.testing.assert_array_equal(got["terminated"][0], [F, F, F, F, F, F])
    np.testing.assert_array_equal(got["truncated"][0], [F, F, F, T_, F, F])
    np.testing.assert_array_equal(got["mask"][0], [T_, T_, T_, T_, F, F])
    np.testing.assert_array_equal(got["obs_mask"][0], [T_, T_, T_, T_, T_, F])
    np.testing.assert_array_equal(got["state_h"], np.float32([[102]]))
    np.testing.assert_array_equal(got["state_c"], np.float32([[202]]))


def test_prev_action_survives_windows_that_do_not_overlap() -> None:
    """burn_in 0, trace 2, n_step 0, period 2: window 1 is rows 2-3, and row 2's previous row is row 1.

    prev_action/prev_reward of row t are action/reward of row t - 1 whenever t >= 1, even when no
    pending window still holds row t - 1.
    """
    builder = SequenceBuilder(1, burn_in=0, trace_length=2, n_step=0, period=2)  # no recurrent state here
    outputs = [builder.step(np.array([[float(t)]]), np.array([t + 1]), np.array([10.0 * (t + 1)]),
                            np.array([False]), np.array([False])) for t in range(4)]
    assert outputs[0] is None and outputs[2] is None
    np.testing.assert_array_equal(outputs[1]["prev_action"], [[0, 1]])
    np.testing.assert_array_equal(outputs[3]["action"], [[3, 4]])
    np.testing.assert_array_equal(outputs[3]["prev_action"], [[2, 3]])
    np.testing.assert_array_equal(outputs[3]["prev_reward"], np.float32([[20, 30]]))


# =====================================================================================================
# Inputs the caller reuses in place (vector envs and Keras state buffers do)
# =====================================================================================================


def test_inputs_mutated_after_step_do_not_change_windows() -> None:
    episodes = episodes_from_specs([["5T", "4U"], ["3U", "6T"]])
    steps = vector_steps(episodes, 11)
    builder = SequenceBuilder(2, burn_in=2, trace_length=2, n_step=1, period=1, state_names=STATE_NAMES)
    buffers = {key: np.zeros_like(steps[0][key]) for key in ("obs", "action", "reward", "terminated", "truncated")}
    h, c = np.zeros_like(steps[0]["state"][0]), np.zeros_like(steps[0]["state"][1])
    outputs = []
    for s in steps:
        for key, buffer in buffers.items():
            buffer[...] = s[key]
        h[...], c[...] = s["state"]
        outputs.append(builder.step(buffers["obs"], buffers["action"], buffers["reward"], buffers["terminated"],
                                    buffers["truncated"], (h, c)))
        for buffer in (*buffers.values(), h, c):
            buffer[...] = 77  # the env / model overwrite their buffers before the next step
    assert_matches_reference(outputs, episodes, 2, 2, 1, 1)


# =====================================================================================================
# A real gymnasium vector env (NEXT_STEP autoreset) matches the model in reference_sequences.vector_steps
# =====================================================================================================


class ScriptedEnv(gym.Env):
    """Plays ``encoded_episode(index, j, *specs[j])`` for j = 0, 1, ...: obs [index, j, t], the same rewards."""

    def __init__(self, index: int, specs: Sequence[str]) -> None:
        self.index, self.specs, self.j, self.t = index, list(specs), -1, 0
        self.observation_space = gym.spaces.Box(0, 1000, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(100_000)

    def _obs(self) -> np.ndarray:
        return np.array([self.index, self.j, self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.j, self.t = self.j + 1, 0
        return self._obs(), {}

    def step(self, action):
        assert action == policy(self._obs()), "the env only sees actions of real steps"
        reward = self.t + 1 + 0.25 * self.j - 0.5 * self.index
        self.t += 1
        transitions, end = int(self.specs[self.j][:-1]), self.specs[self.j][-1]
        done = self.t == transitions
        return self._obs(), reward, done and end == "T", done and end == "U", {}


def policy(obs: np.ndarray) -> int:
    """The action encoded_episode records: 1 + 1000 env + 100 j + t (on an autoreset step: ignored)."""
    env, j, t = (int(v) for v in obs)
    return 1 + 1000 * env + 100 * j + t


def test_gymnasium_vector_env_next_step_autoreset() -> None:
    specs = [["3T", "4U", "2T", "20U"], ["1U", "6T", "1T", "20U"], ["5U", "5T", "20U"]]
    burn_in, trace_length, n_step, period = 2, 3, 1, 2
    envs = gym.vector.SyncVectorEnv([lambda i=i: ScriptedEnv(i, specs[i]) for i in range(3)])
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    builder = SequenceBuilder(3, burn_in, trace_length, n_step, period)  # no recurrent state here
    obs, _ = envs.reset(seed=0)
    outputs = []
    for _ in range(16):
        action = np.array([policy(o) for o in obs], np.int64)
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        outputs.append(builder.step(obs, action, reward, terminated, truncated))  # obs the action was taken in
        obs = next_obs
    envs.close()
    episodes = episodes_from_specs(specs, with_state=False)
    assert_matches_reference(outputs, episodes, burn_in, trace_length, n_step, period)
    assert_well_formed(outputs, burn_in, trace_length)
    assert_coverage(outputs, episodes, burn_in, trace_length)
    assert sum(out["env"].shape[0] for out in outputs if out is not None) >= 12


def scripted_windows(mode: str, steps: int) -> dict[str, np.ndarray]:
    """Every window the builder cuts from the scripted vector env in autoreset ``mode``, in (env, episode,
    start) order; the final observation is passed beside the step where the mode needs it."""
    specs = [["3T", "4U", "2T", "20U"], ["1U", "6T", "1T", "20U"], ["5U", "5T", "20U"]]
    gym_mode = {"next_step": gym.vector.AutoresetMode.NEXT_STEP, "same_step": gym.vector.AutoresetMode.SAME_STEP,
                "disabled": gym.vector.AutoresetMode.DISABLED}[mode]
    envs = gym.vector.SyncVectorEnv([lambda i=i: ScriptedEnv(i, specs[i]) for i in range(3)], autoreset_mode=gym_mode)
    builder = SequenceBuilder(3, 2, 3, 1, 2, autoreset_mode=gym_mode)  # no recurrent state here
    obs, _ = envs.reset(seed=0)
    outputs = []
    for _ in range(steps):
        action = np.array([policy(o) for o in obs], np.int64)
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        done = terminated | truncated
        final = {} if mode == "next_step" else {"final_obs": infos["final_obs"] if mode == "same_step" and done.any()
                                                else next_obs}
        outputs.append(builder.step(obs, action, reward, terminated, truncated, **final))
        if mode == "disabled" and done.any():
            next_obs, _ = envs.reset(options={"reset_mask": done})
        obs = next_obs
    envs.close()
    windows = [out for out in outputs if out is not None]
    merged = {key: np.concatenate([out[key] for out in windows]) for key in windows[0]}
    # each env's last episode is still open (20 steps): how far it got depends on the step count
    last = {env: merged["episode"][merged["env"] == env].max() for env in range(3)}
    closed = np.array([episode != last[env] for env, episode in zip(merged["env"], merged["episode"])])
    order = np.lexsort((merged["start"][closed], merged["episode"][closed], merged["env"][closed]))
    return {key: value[closed][order] for key, value in merged.items()}


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_gymnasium_vector_env_other_autoreset_modes_give_the_next_step_windows(mode) -> None:
    """Without reset-only steps the same episodes take fewer steps; their windows are the same (the
    next-step run's are checked against the reference above)."""
    expected = scripted_windows("next_step", 16)
    got = scripted_windows(mode, 16)
    assert got["env"].shape[0] == expected["env"].shape[0] >= 9
    for key in expected:
        if key != "episode":  # numbered in the order episodes close, which may differ across envs
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


def test_a_mode_without_reset_steps_asks_for_the_final_observation() -> None:
    builder = SequenceBuilder(2, 1, 2, 1, 1, autoreset_mode="same_step")
    obs = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"env 1's episode ended on this step: with autoreset_mode='same_step' pass "
                                         r"its final observation as final_obs"):
        builder.step(obs, np.zeros(2, np.int64), np.zeros(2), [False, True], [False, False])
    with pytest.raises(ValueError, match=r"final_obs / final_extras are for the 'same_step' and 'disabled'"):
        SequenceBuilder(2, 1, 2, 1, 1).step(obs, np.zeros(2, np.int64), np.zeros(2), [False, True], [False, False],
                                            final_obs=obs)
    with pytest.raises(ValueError, match=r"autoreset_mode must be one of \['next_step', 'same_step', 'disabled'\]"):
        SequenceBuilder(2, 1, 2, 1, 1, autoreset_mode="sometimes")


# =====================================================================================================
# Builder vs reference on random streams
# =====================================================================================================


@st.composite
def streams(draw):
    num_envs = draw(st.integers(1, 3))
    trace_length = draw(st.integers(1, 5))
    config = {
        "burn_in": draw(st.integers(0, 4)),
        "trace_length": trace_length,
        "n_step": draw(st.integers(0, 3)),
        "period": draw(st.integers(1, trace_length)),
    }
    specs = [[f"{draw(st.integers(1, 12))}{draw(st.sampled_from('TU'))}" for _ in range(draw(st.integers(1, 4)))]
             for _ in range(num_envs)]
    kwargs = {"with_state": draw(st.booleans()), "action_shape": draw(st.sampled_from([(), (2,)])),
              "obs_dtype": draw(st.sampled_from([np.float32, np.uint8]))}
    shortest = min(sum(int(spec[:-1]) + 1 for spec in mine) for mine in specs)
    num_steps = draw(st.integers(1, shortest))
    return specs, config, num_steps, kwargs


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_builder_matches_reference_on_random_streams(stream) -> None:
    specs, config, num_steps, kwargs = stream
    run_and_check(specs, config["burn_in"], config["trace_length"], config["n_step"], config["period"],
                  num_steps=num_steps, **kwargs)


# =====================================================================================================
# Validation
# =====================================================================================================


@pytest.mark.parametrize("kwargs, error, match", [
    ({"period": 4, "trace_length": 3}, ValueError, "period"),
    ({"num_envs": 0}, ValueError, "num_envs"),
    ({"trace_length": 0, "period": 1}, ValueError, "trace_length"),
    ({"period": 0}, ValueError, "period"),
    ({"burn_in": -1}, ValueError, "burn_in"),
    ({"n_step": -1}, ValueError, "n_step"),
    ({"burn_in": 1.5}, TypeError, "burn_in"),
    ({"num_envs": True}, TypeError, "num_envs"),
], ids=["period_gt_trace", "num_envs_0", "trace_0", "period_0", "burn_in_neg", "n_step_neg", "burn_in_float",
        "num_envs_bool"])
def test_constructor_rejects(kwargs, error, match) -> None:
    config = {"num_envs": 2, "burn_in": 1, "trace_length": 3, "n_step": 1, "period": 2} | kwargs
    with pytest.raises(error, match=match):
        SequenceBuilder(**config)


def test_period_equal_to_trace_is_accepted() -> None:
    assert SequenceBuilder(1, burn_in=0, trace_length=3, n_step=0, period=3).length == 3


GOOD = {"obs": np.zeros((3, 2), np.float32), "action": np.zeros(3, np.int64), "reward": np.zeros(3),
        "terminated": np.zeros(3, bool), "truncated": np.zeros(3, bool),
        "state": (np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32))}


@pytest.mark.parametrize("name, bad, match", [
    ("reward", np.zeros(2), "reward"),
    ("reward", np.zeros((3, 1)), "reward"),
    ("terminated", np.zeros(4, bool), "terminated"),
    ("truncated", False, "truncated"),
    ("obs", np.zeros((2, 2), np.float32), "obs"),
    ("obs", np.float32(0.0), "obs"),
    ("action", np.zeros(2, np.int64), "action"),
    ("state", (np.zeros((3, 4)), np.zeros((2, 4))), r"state\[1\]"),
], ids=["reward_len", "reward_2d", "terminated_len", "truncated_scalar", "obs_envs", "obs_scalar", "action_envs",
        "state_c_envs"])
def test_step_rejects_wrong_shapes(name, bad, match) -> None:
    builder = SequenceBuilder(3, burn_in=1, trace_length=2, n_step=1, period=2, state_names=STATE_NAMES)
    with pytest.raises(ValueError, match=match):
        builder.step(**(GOOD | {name: bad}))


def test_step_rejects_obs_shape_change() -> None:
    builder = SequenceBuilder(3, burn_in=1, trace_length=2, n_step=1, period=2, state_names=STATE_NAMES)
    builder.step(**GOOD)
    with pytest.raises(ValueError, match="shapes changed"):
        builder.step(**(GOOD | {"obs": np.zeros((3, 5), np.float32)}))


def test_a_batch_of_another_size_is_blamed_on_its_first_field() -> None:
    """A 3-env batch fed to a 2-env builder: every field misfits; obs, the first, is named (not reward)."""
    builder = SequenceBuilder(2, burn_in=1, trace_length=2, n_step=1, period=2, state_names=STATE_NAMES)
    with pytest.raises(ValueError, match=r"^obs must have a leading axis of num_envs=2, got \(3, 2\)"):
        builder.step(**GOOD)


def test_a_missing_state_is_refused_at_the_step_naming_the_state_fields() -> None:
    """Without the check the windows came out without state_h and add_sequences failed later, far from the cause."""
    builder = SequenceBuilder(3, burn_in=1, trace_length=2, n_step=1, period=2, state_names=("state_h",))
    with pytest.raises(ValueError, match=r"state is None, but the builder stores a recurrent state under "
                                         r"\('state_h',\); pass the state"):
        builder.step(**(GOOD | {"state": None}))
