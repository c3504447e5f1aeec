"""The replay contract: every buffer kind x every sampler runs the same checks.

One table, ``CASES``, maps ``(kind, sampler)`` to a case: how to build a small seeded buffer, how to
feed it ``n`` known items (``fill``), how to load a saved copy, and the sampler's brute-force
probabilities. Every check below is parametrized over that table, so a buffer kind that gains a
sampler only adds a row (and, for a new kind, a ``fill``). The checks follow ``replay/protocol.py``:

    1. ``add`` then ``len()`` and ``isinstance(buffer, SampledBuffer)``
    2. the sampling distribution against ``reference_buffers`` (chi-square, fixed seeds)
    3. ``update_priorities``: the distribution follows the new priorities (uniform: validated no-op)
    4. ``save``/``load``: the copy samples exactly the batches the original samples
    5. ``as_dataset`` yields what ``sample`` of a saved twin yields
    6. bad input is refused with an error naming the argument
    7. ``sample`` returns fresh arrays, or fills the caller's ``out=`` arrays; ``beta`` defaults to ``DEFAULT_BETA``

Expectations come from the brute-force modules (``reference_buffers``, ``reference_her``,
``reference_sequence_her``), never from the code under test.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from reference import chi_square_test
from reference_buffers import exact_ranks, per_probabilities, rank_probabilities
from reference_her import distance_reward as her_reward
from reference_her import scripted_rollout
from reference_sequence_her import ReferenceSequenceHer, fixed_episodes
from reference_sequence_her import distance_reward as window_reward

from r2d2kit.replay import (
    HerReplayBuffer,
    ReplayBuffer,
    SampledBuffer,
    SequenceBuilder,
    SequenceHerReplayBuffer,
    SequenceReplayBuffer,
)
from r2d2kit.replay.protocol import DEFAULT_BETA

ITEMS = 20  # items (transitions or windows) every check feeds
FIELDS = {"obs": ((2,), "float32"), "action": ((), "int64")}
STATE = {"state_h": ((2,), "float32"), "state_c": ((2,), "float32")}
WINDOW = dict(burn_in=1, trace_length=2, n_step=1, period=2)

# Sampler parameters, and the brute-force probability of each stored item given its raw priority.
SAMPLERS: dict[str, dict[str, float]] = {
    "uniform": {},
    "proportional": {"alpha": 0.6, "eps": 1e-3},
    "rank": {"alpha": 0.7},
}


def expected_probabilities(sampler: str, priorities: np.ndarray) -> np.ndarray:
    """P(item) under ``sampler`` for raw ``priorities`` (one per stored item, in fill order)."""
    priorities = np.asarray(priorities, dtype=np.float64)
    params = SAMPLERS[sampler]
    if sampler == "uniform":
        return np.full(priorities.size, 1.0 / priorities.size)
    if sampler == "proportional":
        return per_probabilities(priorities + params["eps"], params["alpha"])
    if sampler == "rank":
        return rank_probabilities(exact_ranks(priorities), params["alpha"])
    raise ValueError(sampler)


def neighbour_probabilities(sampler: str, priorities: np.ndarray) -> np.ndarray:
    """A nearby wrong hypothesis the counts must reject: a smaller exponent (uniform: a slight tilt)."""
    priorities = np.asarray(priorities, dtype=np.float64)
    params = SAMPLERS[sampler]
    if sampler == "uniform":
        return per_probabilities(priorities, 0.1)
    if sampler == "proportional":
        return per_probabilities(priorities + params["eps"], 0.8 * params["alpha"])
    return rank_probabilities(exact_ranks(priorities), 0.8 * params["alpha"])


# =====================================================================================================
# Feeding known items, per kind
# =====================================================================================================


def fill_transitions(buffer: Any, n: int) -> np.ndarray:
    """Items 0 .. n - 1 (every field spells the id) into slots 0 .. n - 1."""
    ids = np.arange(n)
    buffer.add_batch(obs=np.stack([ids, ids + 0.5], axis=1).astype(np.float32), action=ids)
    return ids


def fill_her(buffer: HerReplayBuffer, n: int) -> np.ndarray:
    """``n`` transitions of one env's scripted episodes (the autoreset calls add none)."""
    written: list[int] = []
    for call in scripted_rollout(3, 1, 4 * n, max_len=5):
        if len(written) == n:
            break
        index = buffer.add(call["obs"], call["action"], call["reward"], call["next_obs"], call["terminated"],
                           call["truncated"], call["infos"])
        written.extend(int(i) for i in np.ravel(index) if i >= 0)
    assert len(written) == n, "the scripted rollout is too short"
    return np.asarray(written, dtype=np.int64)


def fill_windows(buffer: Any, n: int, goals: bool) -> np.ndarray:
    """``n`` windows of one env's fixed episodes, built by ``SequenceBuilder`` (goal rows with ``goals``)."""
    reference = ReferenceSequenceHer(fixed_episodes([[5, 3, 7]], 400), **WINDOW)
    builder = SequenceBuilder(1, *WINDOW.values(), state_names=("state_h", "state_c"))
    slots: list[int] = []
    step = 0
    while len(slots) < n:
        s = reference.vector_step(step)
        step += 1
        out = builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], s["state"],
                           extras=s["extras"] if goals else None)
        if out is not None:
            keep = n - len(slots)
            slots.extend(int(i) for i in buffer.add_sequences({key: value[:keep] for key, value in out.items()}))
    return np.asarray(slots, dtype=np.int64)


# =====================================================================================================
# The factory table: (kind, sampler) -> buffer
# =====================================================================================================


@dataclass(frozen=True)
class Case:
    kind: str
    sampler: str
    make: Callable[[int], Any]  # seed -> an empty buffer
    fill: Callable[[Any, int], np.ndarray]  # (buffer, n) -> the sample index of each of the n items fed
    load: Callable[[Any], Any]  # path -> the buffer saved there

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.sampler}"


def params(sampler: str) -> dict[str, Any]:
    """The buffer arguments of ``sampler``; rank re-sorts on every update (``sort_every=1``), so its ranks
    are exact when sampling."""
    return dict(sampler=sampler, **SAMPLERS[sampler], **({"sort_every": 1} if sampler == "rank" else {}))


def transition_case(sampler: str) -> Case:
    return Case("transitions", sampler, lambda seed: ReplayBuffer(32, FIELDS, seed=seed, **params(sampler)),
                fill_transitions, ReplayBuffer.load)


def her_case(sampler: str) -> Case:
    return Case("her", sampler,
                lambda seed: HerReplayBuffer(64, ((4,), "float32"), ((3,), "float32"), compute_reward=her_reward,
                                             seed=seed, **params(sampler)),
                fill_her, lambda path: HerReplayBuffer.load(path, compute_reward=her_reward))


def window_case(sampler: str) -> Case:
    return Case("windows", sampler,
                lambda seed: SequenceReplayBuffer(200, {"obs": ((6,), "float32"), "action": ((), "int64")}, STATE,
                                                  seed=seed, **params(sampler), **WINDOW),
                lambda buffer, n: fill_windows(buffer, n, goals=False), SequenceReplayBuffer.load)


def her_window_case(sampler: str) -> Case:
    return Case("her_windows", sampler,
                lambda seed: SequenceHerReplayBuffer(200, ((3,), "float32"), ((3,), "float32"), ((), "int64"), STATE,
                                                     compute_reward=window_reward, seed=seed, **params(sampler),
                                                     **WINDOW),
                lambda buffer, n: fill_windows(buffer, n, goals=True),
                lambda path: SequenceHerReplayBuffer.load(path, compute_reward=window_reward))


CASES = [make_case(sampler) for make_case in (transition_case, her_case, window_case, her_window_case)
         for sampler in SAMPLERS]
ALL = pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])


def filled(case: Case, seed: int = 0) -> tuple[Any, np.ndarray]:
    buffer = case.make(seed)
    return buffer, case.fill(buffer, ITEMS)


def log_spread(count: int, seed: int) -> np.ndarray:
    """Distinct priorities 0.1 .. 10, shuffled over the items."""
    return np.random.default_rng(seed).permutation(np.logspace(-1, 1, count))


def draw_counts(buffer: Any, indices: np.ndarray, draws: int = 300, batch_size: int = 64) -> np.ndarray:
    """How often each fed item (in fill order) was sampled; nothing else may be sampled."""
    sampled = np.concatenate([buffer.sample(batch_size)["indices"] for _ in range(draws)])
    position = {int(index): k for k, index in enumerate(indices)}
    assert set(np.unique(sampled).tolist()) <= set(position), "sampled an index that holds no fed item"
    return np.bincount([position[int(i)] for i in sampled], minlength=indices.size)


def assert_batches_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert set(a) == set(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def saved_twin(case: Case, buffer: Any, tmp_path) -> Any:
    path = tmp_path / f"{case.id}.npz"
    buffer.save(path)
    return case.load(path)


# =====================================================================================================
# 1. add and len()
# =====================================================================================================


@ALL
def test_add_counts_what_the_protocol_says(case):
    buffer = case.make(0)
    assert isinstance(buffer, SampledBuffer)
    assert len(buffer) == 0
    indices = case.fill(buffer, ITEMS)
    assert np.unique(indices).size == ITEMS, "each fed item has its own index"
    assert len(buffer) == ITEMS  # no item was overwritten: every one can be sampled


# =====================================================================================================
# 2. Sampling distribution against the brute-force probabilities
# =====================================================================================================


@ALL
def test_sampling_distribution_matches_the_reference(case):
    buffer, indices = filled(case, seed=11)
    priorities = log_spread(ITEMS, seed=1)
    buffer.update_priorities(indices, priorities)
    counts = draw_counts(buffer, indices)
    statistic, dof, p_value = chi_square_test(counts, expected_probabilities(case.sampler, priorities))
    assert dof >= 10
    assert p_value > 1e-4, (statistic, dof)
    # power: the same counts reject a nearby hypothesis
    assert chi_square_test(counts, neighbour_probabilities(case.sampler, priorities))[2] < 1e-9


# =====================================================================================================
# 3. update_priorities
# =====================================================================================================


@ALL
def test_sampling_follows_updated_priorities(case):
    buffer, indices = filled(case, seed=12)
    first = log_spread(ITEMS, seed=2)
    buffer.update_priorities(indices, first)
    second = first[::-1].copy()
    second[3] = 50.0  # one item far ahead of the rest
    buffer.update_priorities(indices, second)
    counts = draw_counts(buffer, indices)
    statistic, dof, p_value = chi_square_test(counts, expected_probabilities(case.sampler, second))
    assert p_value > 1e-4, (statistic, dof)
    if case.sampler != "uniform":  # the old priorities are gone
        assert chi_square_test(counts, expected_probabilities(case.sampler, first))[2] < 1e-9


@ALL
def test_update_priorities_repeated_index_last_value_wins(case):
    buffer, indices = filled(case, seed=13)
    priorities = log_spread(ITEMS, seed=3)
    buffer.update_priorities(indices, priorities)
    buffer.update_priorities([indices[0], indices[0]], [100.0, priorities[0]])  # ends where it started
    counts = draw_counts(buffer, indices, draws=200)
    assert chi_square_test(counts, expected_probabilities(case.sampler, priorities))[2] > 1e-4


# =====================================================================================================
# 4. save / load
# =====================================================================================================


@ALL
def test_loaded_copy_samples_the_same_batches(case, tmp_path):
    buffer, indices = filled(case, seed=14)
    buffer.update_priorities(indices, log_spread(ITEMS, seed=4))
    for _ in range(3):  # move the random state away from the seed
        buffer.sample(5)
    copy = saved_twin(case, buffer, tmp_path)
    assert len(copy) == len(buffer)
    rng = np.random.default_rng(5)
    for _ in range(5):
        a, b = buffer.sample(16, beta=0.6), copy.sample(16, beta=0.6)
        assert_batches_equal(a, b)
        priorities = rng.exponential(2.0, 16)
        buffer.update_priorities(a["indices"], priorities)
        copy.update_priorities(b["indices"], priorities)
    assert_batches_equal(buffer.sample(16), copy.sample(16))


# =====================================================================================================
# 5. as_dataset
# =====================================================================================================


@ALL
def test_as_dataset_yields_what_sample_of_a_saved_twin_yields(case, tmp_path):
    from dataset_checks import assert_dataset_matches_sample

    buffer, indices = filled(case, seed=15)
    buffer.update_priorities(indices, log_spread(ITEMS, seed=5))
    copy = saved_twin(case, buffer, tmp_path)
    assert_dataset_matches_sample(buffer, copy, 8, beta=0.5)


# =====================================================================================================
# 6. Bad input refused, naming the argument
# =====================================================================================================


@ALL
@pytest.mark.parametrize("call, error, pattern", [
    (lambda buffer, indices: buffer.sample(0), ValueError, "batch_size"),
    (lambda buffer, indices: buffer.sample(4, beta=1.5), ValueError, "beta"),
    (lambda buffer, indices: buffer.update_priorities(indices[:2], [1.0, math.nan]), ValueError,
     r"priorities\[1\]"),
    (lambda buffer, indices: buffer.update_priorities(indices[:2], [1.0, -1.0]), ValueError, r"priorities\[1\]"),
    (lambda buffer, indices: buffer.update_priorities([indices[0], 10**6], [1.0, 1.0]), IndexError,
     r"indices\[1\]"),
], ids=["batch_size 0", "beta 1.5", "nan priority", "negative priority", "index out of range"])
def test_bad_input_is_refused_naming_the_argument(case, call, error, pattern, tmp_path):
    buffer, indices = filled(case, seed=16)
    twin = saved_twin(case, buffer, tmp_path)
    with pytest.raises(error, match=pattern):
        call(buffer, indices)
    assert_batches_equal(buffer.sample(8), twin.sample(8))  # the refused call changed nothing


# =====================================================================================================
# 7. Fresh arrays and the beta default
# =====================================================================================================


@ALL
def test_sample_returns_fresh_arrays(case):
    buffer, _ = filled(case, seed=17)
    first, second = buffer.sample(8), buffer.sample(8)
    for a in first.values():
        for b in second.values():
            assert not np.shares_memory(a, b)
    kept = {key: value.copy() for key, value in first.items()}
    buffer.sample(8)
    assert_batches_equal(first, kept)


@ALL
def test_beta_defaults_to_the_protocol_default(case, tmp_path):
    buffer, indices = filled(case, seed=18)
    assert inspect.signature(type(buffer).sample).parameters["beta"].default == DEFAULT_BETA
    buffer.update_priorities(indices, log_spread(ITEMS, seed=6))
    twin = saved_twin(case, buffer, tmp_path)
    assert_batches_equal(buffer.sample(16), twin.sample(16, beta=DEFAULT_BETA))


@ALL
def test_sampling_into_out_arrays_fills_them_with_what_fresh_arrays_get(case, tmp_path):
    buffer, indices = filled(case, seed=19)
    buffer.update_priorities(indices, log_spread(ITEMS, seed=7))
    twin = saved_twin(case, buffer, tmp_path)
    out = buffer.sample_buffers(8)
    assert buffer.sample(8, out=out) is out
    assert_batches_equal(out, twin.sample(8))
    with pytest.raises(ValueError, match="out"):
        buffer.sample(4, out=out)  # arrays of another batch size are refused


def test_the_table_covers_every_buffer_class_with_every_sampler():
    """A new buffer class joins the contract by a row in ``CASES``; every class takes every sampler."""
    from r2d2kit.replay.protocol import SAMPLERS as LIBRARY_SAMPLERS

    covered = {(type(case.make(0)), case.make(0).sampler.name) for case in CASES}
    classes = {ReplayBuffer, HerReplayBuffer, SequenceReplayBuffer, SequenceHerReplayBuffer}
    assert covered == {(cls, sampler) for cls in classes for sampler in LIBRARY_SAMPLERS}
