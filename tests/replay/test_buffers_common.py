"""What every transition buffer shares: ring semantics, validation, random op sequences vs a reference.

All three classes (uniform, proportional PER, rank-based) run the same tests. The expectations come
from ``reference_buffers.ReferenceBuffer`` (a ring of Python objects) or a ``collections.deque``, never
from the code under test.
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from reference_buffers import ReferenceBuffer, is_weights, per_probabilities, rank_probabilities

from r2d2kit.replay import LinearSchedule, ReplayBuffer

CLASSES = {"uniform": ReplayBuffer, "per": functools.partial(ReplayBuffer, sampler="proportional"),
           "rank": functools.partial(ReplayBuffer, sampler="rank")}
KINDS = list(CLASSES)
FIELDS = {"obs": ((2,), "float32"), "action": ((), "int64")}


def make(kind: str, capacity: int, seed: int = 0, **params) -> ReplayBuffer:
    return CLASSES[kind](capacity, FIELDS, seed=seed, **params)


def item(i: int) -> dict[str, np.ndarray]:
    """Item number ``i``: every field identifies it."""
    return {"obs": np.array([i, i + 0.5], dtype=np.float32), "action": np.int64(i)}


def batch(ids) -> dict[str, np.ndarray]:
    ids = np.asarray(ids, dtype=np.int64)
    return {"obs": np.stack([ids, ids + 0.5], axis=1).astype(np.float32).reshape(-1, 2), "action": ids}


def stored_ids(buf) -> list[int]:
    """Item id held in each slot ``0 .. len - 1``.

    One of two places these tests read private state (the other: ``rank_priorities``): the ring
    arrays, to check every slot (sampling reaches only some of them). Both fields must agree on the id.
    """
    arrays = buf._storage.arrays
    actions = arrays["action"][:len(buf)]
    np.testing.assert_array_equal(arrays["obs"][:len(buf)], batch(actions)["obs"])
    return actions.tolist()


def rank_priorities(buf: ReplayBuffer) -> np.ndarray:
    """Raw priority per stored slot of a rank-based buffer (private: the public API shows only ranks)."""
    return buf.sampler.priorities[buf.sampler.alive]


def sampled_ids_match(sample: dict[str, np.ndarray], expected_ids: list[int]) -> None:
    """Every sampled field equals the stored item at the returned index."""
    want = batch(np.array([expected_ids[i] for i in sample["indices"]], dtype=np.int64))
    np.testing.assert_array_equal(sample["action"], want["action"])
    np.testing.assert_array_equal(sample["obs"], want["obs"])


# =====================================================================================================
# Ring semantics vs a deque
# =====================================================================================================


def slots_from_deque(model: collections.deque, total_written: int, capacity: int) -> list[int]:
    """Slot contents implied by a deque of the last ``capacity`` items: item k of ``total`` sits at k % capacity."""
    slots = [None] * len(model)
    first = total_written - len(model)
    for offset, value in enumerate(model):
        slots[(first + offset) % capacity] = value
    return slots


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("capacity", [1, 2, 3, 5, 8, 13])
def test_ring_matches_deque_model(kind, capacity):
    buf = make(kind, capacity)
    model: collections.deque = collections.deque(maxlen=capacity)
    next_id = 0
    sizes = [1, 0, 3, capacity - 1, capacity, capacity + 1, 1, 2 * capacity + 3, 2, 1, 1]
    for step, size in enumerate(sizes):
        ids = list(range(next_id, next_id + size))
        next_id += size
        if size == 1 and step % 2 == 0:
            buf.add(**item(ids[0]))
        else:
            buf.add_batch(**batch(ids))
        model.extend(ids)
        assert len(buf) == len(model)
        assert stored_ids(buf) == slots_from_deque(model, next_id, capacity)


@pytest.mark.parametrize("kind", KINDS)
def test_add_batch_across_the_wrap_point(kind):
    """Capacity 5: ids 0 1 2 one by one, then a batch 3 4 5 6 wraps: slots hold [5 6 2 3 4]."""
    buf = make(kind, 5)
    for i in range(3):
        buf.add(**item(i))
    buf.add_batch(**batch([3, 4, 5, 6]))
    assert len(buf) == 5
    assert stored_ids(buf) == [5, 6, 2, 3, 4]
    buf.add(**item(7))  # the write position continues after the batch: slot 2
    assert stored_ids(buf) == [5, 6, 7, 3, 4]


@pytest.mark.parametrize("kind", KINDS)
def test_add_batch_larger_than_capacity_keeps_the_last_items(kind):
    """Capacity 4, batch 0..9 into an empty buffer: 6 7 8 9 survive, at the slots one-by-one adds give them."""
    buf = make(kind, 4)
    buf.add_batch(**batch(range(10)))
    assert len(buf) == 4
    assert stored_ids(buf) == [8, 9, 6, 7]
    buf.add(**item(10))  # next slot is 10 % 4 = 2
    assert stored_ids(buf) == [8, 9, 10, 7]
    buf.add_batch(**batch(range(11, 20)))  # 9 items from position 3: 11 at 3, 12 at 0, ..., 19 at 3
    assert stored_ids(buf) == [16, 17, 18, 19]


@pytest.mark.parametrize("kind", KINDS)
def test_capacity_one(kind):
    buf = make(kind, 1)
    assert len(buf) == 0
    for i in range(4):
        buf.add(**item(i))
        assert len(buf) == 1 and stored_ids(buf) == [i]
        sample = buf.sample(3, beta=0.5)
        np.testing.assert_array_equal(sample["indices"], [0, 0, 0])
        np.testing.assert_array_equal(sample["action"], [i, i, i])
        np.testing.assert_array_equal(sample["weights"], np.ones(3, np.float32))
    buf.add_batch(**batch([7, 8, 9]))
    assert stored_ids(buf) == [9]


@pytest.mark.parametrize("kind", KINDS)
def test_sample_returns_every_field_with_documented_dtypes(kind):
    buf = make(kind, 6)
    buf.add_batch(**batch(range(4)))
    sample = buf.sample(5, beta=0.4)
    assert set(sample) == {"obs", "action", "indices", "generations", "weights"}
    assert sample["obs"].shape == (5, 2) and sample["obs"].dtype == np.float32
    assert sample["action"].shape == (5,) and sample["action"].dtype == np.int64
    assert sample["indices"].dtype == np.int64 and sample["weights"].dtype == np.float32
    np.testing.assert_array_equal(sample["generations"], np.ones(5, np.int64))  # each slot written once
    assert np.all((sample["indices"] >= 0) & (sample["indices"] < 4))
    sampled_ids_match(sample, [0, 1, 2, 3])


def test_uniform_buffer_weights_are_one_and_all_items_are_reachable():
    buf = ReplayBuffer(7, FIELDS, seed=3)
    buf.add_batch(**batch(range(5)))
    sample = buf.sample(2000, beta=1.0)
    np.testing.assert_array_equal(sample["weights"], np.ones(2000, np.float32))
    assert set(sample["indices"].tolist()) == set(range(5))


# =====================================================================================================
# Random operation sequences vs ReferenceBuffer (all three classes)
# =====================================================================================================


@st.composite
def update_op(draw):
    """Indices drawn small so duplicates are common; values distinct so 'last wins' is observable."""
    values = draw(st.lists(st.integers(0, 3_000_000), unique=True, max_size=8))
    raw_indices = draw(st.lists(st.integers(0, 40), min_size=len(values), max_size=len(values)))
    return ("update", raw_indices, [v / 1000.0 for v in values])


OPS = st.one_of(
    st.tuples(st.just("add")),
    st.tuples(st.just("add_batch"), st.integers(0, 30)),
    update_op(),
    # memory: "drop" the batch, "keep" it (it must never change), or gather into a reused junk-filled "out"
    st.tuples(st.just("sample"), st.integers(1, 24), st.sampled_from([0.0, 0.4, 1.0]),
              st.sampled_from(["drop", "keep", "out"])),
    st.tuples(st.just("sort")),
)


def check_against_model(buf, model: ReferenceBuffer) -> None:
    assert len(buf) == model.size
    assert stored_ids(buf) == model.stored()
    size = model.size
    if model.kind == "per":
        assert buf.max_priority == model.max_priority
        if size:
            leaves = buf.sampler.tree.get(np.arange(size))
            np.testing.assert_allclose(leaves, model.tree_values(), rtol=1e-14, atol=0)
            np.testing.assert_allclose(buf.sampler.tree.total(), model.tree_values().sum(), rtol=1e-12)
            positive = model.tree_values()[model.tree_values() > 0]
            if positive.size:
                np.testing.assert_allclose(buf.sampler.tree.min(), positive.min(), rtol=1e-14)
        if size < buf.capacity:  # slots never written hold no mass
            np.testing.assert_array_equal(buf.sampler.tree.get(np.arange(size, buf.capacity)), 0.0)
    if model.kind == "rank":
        assert buf.max_priority == model.max_priority
        np.testing.assert_array_equal(rank_priorities(buf), model.priorities())
        if size:
            ranks = buf.sampler.ranks(np.arange(size))
            assert sorted(ranks.tolist()) == list(range(1, size + 1))
            heap = np.empty(size, dtype=np.int64)
            heap[ranks - 1] = np.arange(size)  # heap[position] = slot
            priorities = model.priorities()
            for position in range(1, size):  # max-heap property
                assert priorities[heap[(position - 1) // 2]] >= priorities[heap[position]]
            if model.sorted:
                assert np.all(np.diff(priorities[heap]) <= 0), "sorted heap must list priorities high to low"


def check_sample(buf, model: ReferenceBuffer, sample: dict[str, np.ndarray], beta: float) -> None:
    indices, weights = sample["indices"], sample["weights"]
    assert indices.dtype == np.int64 and weights.dtype == np.float32
    assert np.all((0 <= indices) & (indices < model.size))
    sampled_ids_match(sample, model.stored())
    assert np.all(weights > 0) and np.all(weights <= 1)
    if model.kind == "uniform":
        np.testing.assert_array_equal(weights, 1.0)
    elif model.kind == "per":
        probabilities = per_probabilities(model.priorities(), model.alpha)
        assert np.all(probabilities[indices] > 0), "an item without mass was sampled"
        np.testing.assert_allclose(weights, is_weights(probabilities, indices, beta), rtol=1e-6)
    else:
        ranks = buf.sampler.ranks(np.arange(model.size))  # heap positions stand in for ranks
        probabilities = rank_probabilities(ranks, model.alpha)
        np.testing.assert_allclose(weights, is_weights(probabilities, indices, beta), rtol=1e-6)


@settings(deadline=None, max_examples=120)
@given(
    kind=st.sampled_from(KINDS),
    capacity=st.sampled_from([1, 2, 3, 5, 7, 8, 13]),
    alpha=st.sampled_from([0.0, 0.5, 0.6, 1.0]),
    eps=st.sampled_from([0.0, 1e-6, 0.25]),
    sort_every=st.sampled_from([None, 1, 3]),
    seed=st.integers(0, 2**32 - 1),
    ops=st.lists(OPS, max_size=25),
)
# found by hypothesis: at alpha = 0 a zero priority (eps = 0) still has no mass, not 0^0 = 1
@example(kind="per", capacity=1, alpha=0.0, eps=0.0, sort_every=None, seed=0, ops=[("add",), ("update", [0], [0.0])])
# a kept batch is never written by later samples, dropped ones or samples into a junk-filled out
@example(kind="uniform", capacity=3, alpha=0.0, eps=0.0, sort_every=None, seed=0,
         ops=[("add_batch", 3), ("sample", 4, 0.4, "keep"), ("sample", 4, 0.4, "drop"), ("add",),
              ("sample", 4, 0.4, "drop"), ("sample", 4, 0.4, "out"), ("sample", 4, 0.4, "out")])
def test_random_operations_match_reference(kind, capacity, alpha, eps, sort_every, seed, ops):
    params = {}
    if kind == "per":
        params = {"alpha": alpha, "eps": eps}
    elif kind == "rank":
        params = {"alpha": alpha, "sort_every": sort_every}
    buf = make(kind, capacity, seed=seed, **params)
    model = ReferenceBuffer(capacity, kind, alpha=alpha, eps=eps if kind == "per" else 0.0,
                            sort_every=sort_every)
    next_id = 0
    kept, outs = [], {}  # batches the caller keeps (with copies); out dicts per batch size
    for op in ops:
        if op[0] == "add":
            buf.add(**item(next_id))
            model.add(next_id)
            next_id += 1
        elif op[0] == "add_batch":
            ids = list(range(next_id, next_id + op[1]))
            next_id += op[1]
            buf.add_batch(**batch(ids))
            model.add_batch(ids)
        elif op[0] == "update":
            if model.size == 0:
                continue
            indices = [i % model.size for i in op[1]]
            buf.update_priorities(np.array(indices, dtype=np.int64), np.array(op[2]))
            model.update(indices, op[2])
        elif op[0] == "sort":
            if kind == "rank":
                buf.sampler.sort()
                model.sort()
        else:
            _, batch_size, beta, memory = op
            out = None
            if memory == "out":
                out = outs.setdefault(batch_size, buf.sample_buffers(batch_size))
                for array in out.values():
                    array.view(np.uint8)[...] = 0xAB  # every byte must be written again
            if model.size == 0:
                with pytest.raises(ValueError, match="empty"):
                    buf.sample(batch_size, beta=beta)
            elif kind == "per" and not model.tree_values().sum() > 0:
                with pytest.raises(ValueError, match="priority is 0"):
                    buf.sample(batch_size, beta=beta)
            else:
                sample = buf.sample(batch_size, beta=beta, out=out)
                assert out is None or sample is out
                check_sample(buf, model, sample, beta)
                if memory == "keep":
                    kept.append((sample, {key: value.copy() for key, value in sample.items()}))
                del sample
        check_against_model(buf, model)
        for sample, copy in kept:
            for key in copy:
                np.testing.assert_array_equal(sample[key], copy[key], err_msg=f"a kept batch changed: {key}")


# =====================================================================================================
# Validation: every mistake is refused with a message that names it
# =====================================================================================================


@pytest.fixture(params=KINDS)
def filled(request):
    buf = make(request.param, 8)
    buf.add_batch(**batch(range(5)))
    return buf


def test_missing_field_is_named(filled):
    with pytest.raises(ValueError, match=r"missing field\(s\) \['action'\]"):
        filled.add(obs=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"missing field\(s\) \['obs'\]"):
        filled.add_batch(action=np.zeros(3, np.int64))


def test_unknown_field_is_named(filled):
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['reward'\]"):
        filled.add(obs=np.zeros(2, np.float32), action=1, reward=1.0)


@pytest.mark.parametrize("verb, value", [("add", np.zeros(3, np.float32)), ("add", np.zeros((2, 1))),
                                         ("add_batch", np.zeros((4, 3), np.float32)),
                                         ("add_batch", np.zeros(4, np.float32))])
def test_wrong_shape_names_the_field(filled, verb, value):
    action = np.int64(1) if verb == "add" else np.ones(4, np.int64)
    with pytest.raises(ValueError, match=r"field 'obs'.*shape"):
        getattr(filled, verb)(obs=value, action=action)


def test_float_into_int_field_is_a_type_error_naming_the_field(filled):
    with pytest.raises(TypeError, match=r"field 'action'.*int64.*float64"):
        filled.add(obs=np.zeros(2, np.float32), action=1.5)
    with pytest.raises(TypeError, match=r"field 'action'"):
        filled.add_batch(obs=np.zeros((2, 2), np.float32), action=np.array([1.0, 2.0]))


@pytest.mark.parametrize("dtype, bad", [("uint8", 300), ("uint8", -1), ("int8", 300), ("int8", -129),
                                        ("int16", 70_000), ("int32", 2**40), ("uint16", 2**20)])
@pytest.mark.parametrize("kind", KINDS)
def test_integers_that_do_not_fit_the_field_dtype_are_refused(kind, dtype, bad):
    """An int64 value outside the field's range must raise, never wrap around silently."""
    buf = CLASSES[kind](4, {"x": ((), dtype)}, seed=0)
    with pytest.raises(ValueError, match=rf"field 'x'.*{dtype}"):
        buf.add(x=bad)
    with pytest.raises(ValueError, match=rf"field 'x'.*{dtype}"):
        buf.add_batch(x=np.array([1, bad], dtype=np.int64))
    assert len(buf) == 0
    buf.add_batch(x=np.array([0, 5], dtype=np.int64))  # values that fit are fine
    assert len(buf) == 2


def test_add_given_a_batch_points_to_add_batch(filled):
    with pytest.raises(ValueError, match=r"field 'obs'.*add_batch"):
        filled.add(obs=np.zeros((3, 2), np.float32), action=np.zeros(3, np.int64))


def test_add_batch_with_mismatched_leading_sizes(filled):
    with pytest.raises(ValueError, match=r"field 'action' has 2 items but field 'obs' has 3"):
        filled.add_batch(obs=np.zeros((3, 2), np.float32), action=np.zeros(2, np.int64))


@pytest.mark.parametrize("bad, pattern", [(np.nan, r"priorities\[2\].*nan"), (np.inf, r"priorities\[2\].*inf"),
                                          (-np.inf, r"priorities\[2\].*-inf"), (-0.5, r"priorities\[2\].*-0\.5")])
def test_invalid_priority_names_index_and_value(filled, bad, pattern):
    with pytest.raises(ValueError, match=pattern):
        filled.update_priorities([0, 1, 3], [0.5, 2.0, bad])


@pytest.mark.parametrize("indices, pattern", [([0, 5], r"indices\[1\] = 5"), ([7], r"indices\[0\] = 7"),
                                              ([1, -1], r"indices\[1\] = -1")])
def test_index_outside_the_stored_items_is_an_index_error(filled, indices, pattern):
    """len(buf) is 5 in a capacity-8 buffer: slot 5 holds nothing yet."""
    with pytest.raises(IndexError, match=pattern):
        filled.update_priorities(indices, np.ones(len(indices)))


def test_priorities_of_the_wrong_length(filled):
    with pytest.raises(ValueError, match=r"priorities must have shape \(3,\)"):
        filled.update_priorities([0, 1, 2], [1.0, 2.0])


def test_sample_into_out_of_the_wrong_shape_names_the_field(filled):
    out = filled.sample_buffers(4)
    with pytest.raises(ValueError, match=r"out\['obs'\] has shape \(4, 2\).*needs shape \(3, 2\)"):
        filled.sample(3, out=out)
    out["action"] = out["action"].astype(np.int32)
    with pytest.raises(ValueError, match=r"out\['action'\].*dtype int32.*dtype int64.*sample_buffers"):
        filled.sample(4, out=out)


@pytest.mark.parametrize("kind", KINDS)
def test_sample_from_an_empty_buffer(kind):
    with pytest.raises(ValueError, match="empty"):
        make(kind, 4).sample(2)


@pytest.mark.parametrize("batch_size, error", [(0, ValueError), (-3, ValueError), (2.0, TypeError),
                                               (True, TypeError)])
def test_bad_batch_size(filled, batch_size, error):
    with pytest.raises(error, match="batch_size"):
        filled.sample(batch_size)


@pytest.mark.parametrize("beta", [-0.01, 1.01, float("nan"), float("inf")])
def test_beta_outside_unit_interval(filled, beta):
    with pytest.raises(ValueError, match="beta"):
        filled.sample(2, beta=beta)


def test_every_stored_priority_zero_cannot_be_sampled():
    buf = ReplayBuffer(4, FIELDS, alpha=0.6, eps=0.0, seed=0, sampler="proportional")
    buf.add_batch(**batch(range(3)))
    buf.update_priorities([0, 1, 2], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="priority is 0"):
        buf.sample(2)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["indices", "weights"])
def test_reserved_field_names(kind, name):
    with pytest.raises(ValueError, match=rf"'{name}' is reserved"):
        CLASSES[kind](4, {"obs": ((2,), "float32"), name: ((), "int64")})


@pytest.mark.parametrize("fields, pattern", [
    ({}, "non-empty mapping"),
    ([("obs", ((2,), "float32"))], "non-empty mapping"),
    ({"obs": "float32"}, r"fields\['obs'\] must be a \(shape, dtype\) pair"),
    ({"obs": ((2,), "float32", "extra")}, r"fields\['obs'\] must be a \(shape, dtype\) pair"),
    ({"obs": ((0,), "float32")}, r"fields\['obs'\] shape"),
    ({"obs": ((-2,), "float32")}, r"fields\['obs'\] shape"),
    ({"obs": ((2.5,), "float32")}, r"fields\['obs'\] shape"),
    ({"obs": ((2,), "not-a-dtype")}, r"fields\['obs'\] dtype"),
    ({"obs": ((2,), object)}, r"fields\['obs'\] dtype"),
    ({"obs": ((2,), "U8")}, r"fields\['obs'\] dtype"),
    ({"2obs": ((2,), "float32")}, "identifier"),
])
@pytest.mark.parametrize("kind", KINDS)
def test_bad_field_spec(kind, fields, pattern):
    with pytest.raises(ValueError, match=pattern):
        CLASSES[kind](4, fields)


def test_field_shape_may_be_an_int():
    buf = ReplayBuffer(3, {"obs": (4, "float32")}, seed=0)
    assert buf.fields == {"obs": ((4,), np.dtype("float32"))}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("capacity, error", [(0, ValueError), (-1, ValueError), (2.0, TypeError)])
def test_bad_capacity(kind, capacity, error):
    with pytest.raises(error, match="capacity"):
        CLASSES[kind](capacity, FIELDS)


@pytest.mark.parametrize("sampler, params, pattern", [
    ("proportional", {"alpha": -0.1}, "alpha"),
    ("proportional", {"eps": -1e-3}, "eps"),
    ("proportional", {"alpha": float("nan")}, "alpha"),
    ("rank", {"alpha": -1.0}, "alpha"),
    ("rank", {"sort_every": 0}, "sort_every"),
    ("ranked", {}, "sampler must be one of 'uniform', 'proportional', 'rank' or a Sampler, got 'ranked'"),
])
def test_bad_prioritisation_parameters(sampler, params, pattern):
    with pytest.raises(ValueError, match=pattern):
        ReplayBuffer(4, FIELDS, sampler, **params)


@pytest.mark.parametrize("sampler, params, pattern", [
    ("uniform", {"alpha": 0.6}, r"alpha=0\.6 has no effect with sampler='uniform', which draws every item alike; "
                                r"it is used by sampler='proportional' or 'rank'"),
    ("uniform", {"eps": 0.01}, r"eps=0\.01 has no effect with sampler='uniform'.*used by sampler='proportional'"),
    ("rank", {"eps": 0.01}, r"eps=0\.01 has no effect with sampler='rank'; it is used by sampler='proportional'"),
    ("proportional", {"sort_every": 5}, r"sort_every=5 has no effect with sampler='proportional'; .*'rank'"),
])
def test_a_parameter_the_sampler_ignores_is_refused(sampler, params, pattern):
    """ReplayBuffer(capacity, fields, alpha=0.6) used to be uniform without a word."""
    with pytest.raises(ValueError, match=pattern):
        ReplayBuffer(4, FIELDS, sampler, **params)


def test_a_built_sampler_is_used_as_it_is_and_shown_by_repr():
    from r2d2kit.replay import ProportionalSampler, RankSampler, UniformSampler

    sampler = ProportionalSampler(4, alpha=1.0, eps=0.0)
    buf = ReplayBuffer(4, FIELDS, sampler=sampler, seed=0)
    assert buf.sampler is sampler
    buf.add_batch(**batch([0, 1]))
    buf.update_priorities([0, 1], [1.0, 3.0])
    np.testing.assert_array_equal(sampler.tree.get([0, 1, 2, 3]), [1.0, 3.0, 0.0, 0.0])  # (p + 0) ** 1
    assert repr(buf) == ("ReplayBuffer(capacity=4, size=2, fields=['obs', 'action'], "
                         "sampler=ProportionalSampler(4, alpha=1.0, eps=0.0))")
    assert "sampler=UniformSampler(4)" in repr(ReplayBuffer(4, FIELDS))
    assert "sampler=RankSampler(4, alpha=0.7, sort_every=4)" in repr(ReplayBuffer(4, FIELDS, "rank"))
    with pytest.raises(ValueError, match=r"alpha=0\.5 given beside a built RankSampler: pass it to RankSampler"):
        ReplayBuffer(4, FIELDS, sampler=RankSampler(4), alpha=0.5)
    with pytest.raises(ValueError, match=r"the UniformSampler has 8 slots but the buffer needs 4"):
        ReplayBuffer(4, FIELDS, sampler=UniformSampler(8))
    with pytest.raises(ValueError, match=r"already holds 2 items \(another buffer's\?\)"):
        ReplayBuffer(4, FIELDS, sampler=sampler)


# ----------------------------------------------------------------- a failed call changes nothing


def observable_state(buf) -> dict:
    state = {"len": len(buf), "ids": stored_ids(buf)}
    if buf.sampler.name == "proportional":
        state["leaves"] = buf.sampler.tree.get(np.arange(buf.capacity)).tolist()
        state["max"] = buf.max_priority
    if buf.sampler.name == "rank":
        state["ranks"] = buf.sampler.ranks(np.arange(len(buf))).tolist()
        state["max"] = buf.max_priority
    return state


FAILING_CALLS = [
    ("add", lambda b: b.add(obs=np.zeros(2, np.float32), action=2.5)),
    ("add_batch second field", lambda b: b.add_batch(obs=np.zeros((3, 2), np.float32), action=np.ones(2))),
    ("add_batch bad dtype", lambda b: b.add_batch(obs=np.zeros((3, 2), np.float32), action=np.ones(3) * 0.5)),
    ("update nan last", lambda b: b.update_priorities([0, 1, 2], [7.0, 9.0, np.nan])),
    ("update index last", lambda b: b.update_priorities([0, 1, 6], [7.0, 9.0, 3.0])),
    ("update length", lambda b: b.update_priorities([0, 1], [7.0])),
    ("sample", lambda b: b.sample(0)),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name, call", FAILING_CALLS, ids=[name for name, _ in FAILING_CALLS])
def test_failed_call_leaves_buffer_unchanged(kind, name, call):
    """A twin that never saw the failed call must behave identically afterwards (RNG included)."""
    buffers = [make(kind, 6, seed=11), make(kind, 6, seed=11)]
    for buf in buffers:
        buf.add_batch(**batch(range(5)))
        buf.update_priorities([0, 3], [0.25, 4.0])
    before = observable_state(buffers[0])
    with pytest.raises((ValueError, TypeError, IndexError)):
        call(buffers[0])
    assert observable_state(buffers[0]) == before
    for buf in buffers:
        buf.add_batch(**batch([10, 11]))
    first, second = (buf.sample(16, beta=0.5) for buf in buffers)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
    assert observable_state(buffers[0]) == observable_state(buffers[1])


# =====================================================================================================
# LinearSchedule
# =====================================================================================================


@settings(deadline=None, max_examples=60)
@given(start=st.floats(-5, 5), end=st.floats(-5, 5), steps=st.integers(1, 10_000), step=st.integers(-100, 20_000))
def test_linear_schedule_is_linear_then_constant(start, end, steps, step):
    schedule = LinearSchedule(start, end, steps)
    fraction = min(max(step, 0), steps) / steps
    assert schedule(step) == pytest.approx(start + fraction * (end - start), rel=1e-12, abs=1e-12)
    assert min(start, end) - 1e-12 <= schedule(step) <= max(start, end) + 1e-12


def test_linear_schedule_hand_values():
    beta = LinearSchedule(0.4, 1.0, 100)
    assert beta(0) == 0.4
    assert beta(-7) == 0.4
    assert beta(25) == pytest.approx(0.55, abs=1e-15)
    assert beta(50) == pytest.approx(0.7, abs=1e-15)
    assert beta(100) == 1.0
    assert beta(10**9) == 1.0
    epsilon = LinearSchedule(1.0, 0.1, 9)
    assert [round(epsilon(k), 12) for k in range(0, 11)] == [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1]


@pytest.mark.parametrize("start, end, steps", [(1.0, 0.05, 10), (1.0, 0.01, 1000), (0.4, 1.0, 7), (0.3, 0.1, 3)])
def test_linear_schedule_holds_end_exactly(start, end, steps):
    """'...then staying there': after ``steps`` the value is ``end`` itself, not ``end`` plus rounding."""
    schedule = LinearSchedule(start, end, steps)
    assert schedule(steps) == end
    assert schedule(steps + 123) == end


def test_linear_schedule_beta_never_leaves_unit_interval():
    """A beta schedule ending at 1 must always be accepted by sample()."""
    buf = ReplayBuffer(4, FIELDS, seed=0, sampler="proportional")
    buf.add_batch(**batch(range(4)))
    for start in np.linspace(0.0, 1.0, 41):
        schedule = LinearSchedule(float(start), 1.0, 37)
        for step in range(0, 40):
            buf.sample(1, beta=schedule(step))


@pytest.mark.parametrize("args, error", [((0.4, 1.0, 0), ValueError), ((0.4, 1.0, 1.5), TypeError),
                                         ((float("nan"), 1.0, 10), ValueError), ((0.4, "1", 10), TypeError)])
def test_linear_schedule_validation(args, error):
    with pytest.raises(error):
        LinearSchedule(*args)


def test_every_buffer_is_a_sampled_buffer_with_one_beta_default():
    import inspect

    from r2d2kit.replay import HerReplayBuffer, SampledBuffer, SequenceHerReplayBuffer, SequenceReplayBuffer
    from r2d2kit.replay.protocol import DEFAULT_BETA

    classes = [ReplayBuffer, HerReplayBuffer, SequenceReplayBuffer, SequenceHerReplayBuffer]
    for cls in classes:
        for method in ("sample", "as_dataset"):
            assert inspect.signature(getattr(cls, method)).parameters["beta"].default == DEFAULT_BETA == 0.4, cls
    buffers = [make(kind, 8) for kind in ("uniform", "per", "rank")]
    buffers.append(HerReplayBuffer(8, ((2,), "float32"), ((2,), "float32"), compute_reward=lambda a, d, i: 0 * a[:, 0]))
    buffers.append(SequenceReplayBuffer(16, {"obs": ((2,), "float32"), "action": ((), "int64")}, burn_in=1,
                                        trace_length=2, n_step=1))
    assert all(isinstance(buffer, SampledBuffer) for buffer in buffers)
    assert not isinstance(object(), SampledBuffer)


@pytest.mark.parametrize("kind", ["per", "rank"])
def test_a_late_update_with_the_batch_generations_skips_items_written_since(kind):
    """The tf.data route: items arrive between a draw and its priority update; the newcomers in the
    drawn slots keep the priority they were written with, the survivors take the update."""
    buf = make(kind, 6, eps=0.0) if kind == "per" else make(kind, 6)
    buf.add_batch(**batch(range(4)))
    buf.add_batch(**batch(range(4, 18)))  # longer than the ring: items 12 ... 17 kept, in slots 0 ... 5
    drawn = buf.sample(64, beta=0.4)
    assert set(drawn["indices"].tolist()) == set(range(6))  # 64 draws of 6 equal items reach every slot
    np.testing.assert_array_equal(sorted(set(zip(drawn["indices"].tolist(), drawn["generations"].tolist()))),
                                  [(slot, 3) for slot in range(6)])  # items 0 ... 17: three times round the ring
    buf.add_batch(**batch(range(18, 21)))  # items 18, 19, 20 replace 12, 13, 14 in slots 0, 1, 2
    buf.update_priorities(drawn["indices"], np.full(64, 5.0), drawn["generations"])
    if kind == "per":  # tree leaves are priority ** 0.6
        np.testing.assert_allclose(buf.sampler.tree.get(np.arange(6)), [1.0] * 3 + [5.0 ** 0.6] * 3, rtol=1e-12)
    else:
        np.testing.assert_array_equal(buf.sampler.priorities[:6], [1.0, 1.0, 1.0, 5.0, 5.0, 5.0])


@pytest.mark.parametrize("kind", KINDS)
def test_generations_of_another_length_are_refused(kind):
    buf = make(kind, 6)
    buf.add_batch(**batch(range(4)))
    with pytest.raises(ValueError, match=r"generations must be 2 integers, one per index"):
        buf.update_priorities([0, 1], [1.0, 2.0], [1])
    with pytest.raises(ValueError, match=r"generations must be 2 integers"):
        buf.update_priorities([0, 1], [1.0, 2.0], [1.0, 1.0])
