"""save/load: an exact round trip for every buffer class, and refusal of every file that is not one.

"Exact" is checked by behaviour: after ``load`` the copy and the original, fed the same calls
(sample, add, update, sort, sample), return identical arrays, so data, priorities, heap order, max
priority, write position and random state all survived.
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from r2d2kit.replay import ReplayBuffer
from r2d2kit.replay.persistence import META_KEY

CLASSES = {"uniform": ReplayBuffer, "per": functools.partial(ReplayBuffer, sampler="proportional"),
           "rank": functools.partial(ReplayBuffer, sampler="rank")}
KINDS = list(CLASSES)
FIELDS = {"obs": ((3,), "float32"), "action": ((), "int64"), "done": ((), "bool"), "frame": ((2, 2), "uint8")}
PARAMS = {"uniform": {}, "per": {"alpha": 0.7, "eps": 0.01}, "rank": {"alpha": 0.6, "sort_every": 5}}


def make(kind: str, capacity: int = 11, seed=0):
    return CLASSES[kind](capacity, FIELDS, seed=seed, **PARAMS[kind])


def random_batch(rng: np.random.Generator, count: int) -> dict[str, np.ndarray]:
    return {
        "obs": rng.normal(size=(count, 3)).astype(np.float32),
        "action": rng.integers(-5, 5, size=count),
        "done": rng.random(count) < 0.3,
        "frame": rng.integers(0, 256, size=(count, 2, 2)).astype(np.uint8),
    }


def populate(buf, items: int, seed: int) -> None:
    """Adds, priority updates and samples (which advance the random state) in a fixed pattern."""
    rng = np.random.default_rng(seed)
    remaining = items
    while remaining > 0:
        count = min(remaining, int(rng.integers(1, 6)))
        buf.add_batch(**random_batch(rng, count))
        remaining -= count
        sample = buf.sample(4, beta=0.5)
        buf.update_priorities(sample["indices"], rng.exponential(2.0, size=4))


def continuation(buf, seed: int) -> list[np.ndarray]:
    """The same calls on original and copy; everything they return, flattened into a list of arrays."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = [np.array(len(buf))]
    for round_ in range(4):
        buf.add_batch(**random_batch(rng, int(rng.integers(0, 8))))
        buf.add(**{name: value[0] for name, value in random_batch(rng, 1).items()})
        for beta in (0.0, 0.6):
            sample = buf.sample(9, beta=beta)
            out.extend(sample[key] for key in sorted(sample))
        count = 2 if round_ % 2 == 0 else 9  # a short update may or may not reach sort_every
        buf.update_priorities(sample["indices"][:count], rng.exponential(3.0, size=count))
        if buf.sampler.name == "rank":
            out.append(buf.sampler.ranks(np.arange(len(buf))))
            if round_ == 2:
                buf.sampler.sort()
        if buf.sampler.name == "proportional":
            out.append(buf.sampler.tree.get(np.arange(buf.capacity)))
        out.append(np.array(len(buf)))
    return out


def internal_state(buf) -> dict:
    """Public state worth comparing directly after a round trip."""
    state = {"len": len(buf), "capacity": buf.capacity, "fields": buf.fields, "class": type(buf),
             "sampler": buf.sampler.params()}
    if buf.sampler.name == "proportional":
        state.update(alpha=buf.sampler.alpha, eps=buf.sampler.eps, max_priority=buf.max_priority,
                     leaves=buf.sampler.tree.get(np.arange(buf.capacity)).tolist(), total=buf.sampler.tree.total(),
                     min=buf.sampler.tree.min())
    if buf.sampler.name == "rank":
        state.update(alpha=buf.sampler.alpha, sort_every=buf.sampler.sort_every, max_priority=buf.max_priority,
                     ranks=buf.sampler.ranks(np.arange(len(buf))).tolist())
    return state


def assert_same_behaviour(original, copy, seed: int = 99) -> None:
    assert internal_state(copy) == internal_state(original)
    first, second = continuation(original, seed), continuation(copy, seed)
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert internal_state(copy) == internal_state(original)


# =====================================================================================================
# Round trips
# =====================================================================================================


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("items", [0, 1, 6, 11, 30], ids=["empty", "one", "partial", "exactly-full", "wrapped"])
def test_round_trip_is_exact(tmp_path, kind, items):
    original = make(kind)
    populate(original, items, seed=items)
    path = tmp_path / "buffer.npz"
    original.save(path)
    copy = ReplayBuffer.load(path)
    assert type(copy) is ReplayBuffer and copy.sampler.params() == original.sampler.params()
    assert_same_behaviour(original, copy)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_with_a_caller_generator_of_another_bit_generator(tmp_path, kind):
    original = make(kind, seed=np.random.Generator(np.random.MT19937(5)))
    populate(original, 15, seed=1)
    original.save(tmp_path / "b.npz")
    assert_same_behaviour(original, ReplayBuffer.load(tmp_path / "b.npz"))


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_accepts_str_paths_and_keeps_the_exact_name(tmp_path, kind):
    original = make(kind)
    populate(original, 7, seed=2)
    path = str(tmp_path / "replay.bin")  # no .npz suffix is added
    original.save(path)
    assert sorted(os.listdir(tmp_path)) == ["replay.bin"]
    assert_same_behaviour(original, ReplayBuffer.load(path))


def test_round_trip_keeps_zero_priorities_out_of_the_minimum(tmp_path):
    original = ReplayBuffer(6, FIELDS, alpha=0.5, eps=0.0, seed=3, sampler="proportional")
    original.add_batch(**random_batch(np.random.default_rng(0), 5))
    original.update_priorities([0, 1, 2, 3, 4], [0.0, 2.0, 0.0, 0.5, 9.0])
    original.save(tmp_path / "z.npz")
    copy = ReplayBuffer.load(tmp_path / "z.npz")
    assert copy.sampler.tree.min() == original.sampler.tree.min() == 0.5**0.5
    assert_same_behaviour(original, copy)


@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), capacity=st.integers(1, 9), items=st.integers(0, 25),
       seed=st.integers(0, 2**16), continuation_seed=st.integers(0, 2**16))
def test_round_trip_random_states(tmp_path, kind, capacity, items, seed, continuation_seed):
    original = CLASSES[kind](capacity, FIELDS, seed=seed, **PARAMS[kind])
    populate(original, items, seed=seed)
    path = tmp_path / f"h-{kind}-{capacity}-{items}-{seed}.npz"
    original.save(path)
    assert_same_behaviour(original, ReplayBuffer.load(path), seed=continuation_seed)
    path.unlink()


# =====================================================================================================
# Atomic save
# =====================================================================================================


@pytest.mark.parametrize("kind", KINDS)
def test_saving_over_an_existing_file_replaces_it_and_leaves_no_temp_files(tmp_path, kind):
    path = tmp_path / "buffer.npz"
    first = make(kind)
    populate(first, 3, seed=4)
    first.save(path)
    second = make(kind)
    populate(second, 20, seed=5)
    second.save(path)
    assert sorted(os.listdir(tmp_path)) == ["buffer.npz"]
    assert_same_behaviour(second, ReplayBuffer.load(path))


def test_a_failed_save_leaves_no_temp_file_and_the_old_file_intact(tmp_path):
    buf = make("per")
    populate(buf, 5, seed=6)
    (tmp_path / "a_directory").mkdir()
    with pytest.raises(OSError):
        buf.save(tmp_path / "a_directory")  # cannot replace a directory with a file
    assert sorted(os.listdir(tmp_path)) == ["a_directory"]
    assert os.listdir(tmp_path / "a_directory") == []


# =====================================================================================================
# Files that are not a buffer of this class
# =====================================================================================================


@pytest.fixture
def saved(tmp_path):
    buf = make("per")
    populate(buf, 14, seed=7)
    path = tmp_path / "good.npz"
    buf.save(path)
    return path


def rewrite(source, target, meta_changes=None, array_changes=None) -> None:
    """Copy a saved buffer with some metadata entries or arrays replaced (``None`` deletes an array)."""
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


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        ReplayBuffer.load(tmp_path / "nope.npz")


def test_truncated_files_raise_value_error(saved, tmp_path):
    data = saved.read_bytes()
    cuts = sorted(set(range(1, 40)) | set(range(40, len(data), 53)) | {len(data) // 2, len(data) - 1})
    target = tmp_path / "cut.npz"
    for cut in cuts:  # keep the first len - cut bytes
        target.write_bytes(data[:len(data) - cut])
        with pytest.raises(ValueError, match="cut.npz"):
            ReplayBuffer.load(target)
    target.write_bytes(b"")
    with pytest.raises(ValueError, match="cut.npz"):
        ReplayBuffer.load(target)


def test_foreign_npz(tmp_path):
    path = tmp_path / "foreign.npz"
    rng = np.random.default_rng(0)
    np.savez(path, a=rng.normal(size=(3, 4)), b=rng.integers(0, 9, size=7))
    with pytest.raises(ValueError, match="not an r2d2kit buffer"):
        ReplayBuffer.load(path)


@pytest.mark.parametrize("meta", ['{"hello": 1}', '[1, 2]', '"text"', "not json at all", "42"])
def test_npz_with_foreign_metadata(tmp_path, meta):
    path = tmp_path / "foreign_meta.npz"
    np.savez(path, **{META_KEY: np.array(meta)}, x=np.zeros(3))
    with pytest.raises(ValueError, match="foreign_meta.npz"):
        ReplayBuffer.load(path)


@pytest.mark.parametrize("writer", ["text", "npy", "pickle", "random"])
def test_files_that_are_not_zip_archives(tmp_path, writer):
    path = tmp_path / "not_a_zip.npz"
    if writer == "text":
        path.write_text("this is not a buffer\n")
    elif writer == "npy":
        with open(path, "wb") as handle:
            np.save(handle, np.arange(10))
    elif writer == "pickle":
        import pickle

        path.write_bytes(pickle.dumps({"capacity": 4}))
    else:
        path.write_bytes(np.random.default_rng(1).integers(0, 256, 500, dtype=np.uint8).tobytes())
    with pytest.raises(ValueError, match="not_a_zip.npz"):
        ReplayBuffer.load(path)


@pytest.mark.parametrize("kind", KINDS)
def test_load_restores_the_saved_sampler(tmp_path, kind):
    path = tmp_path / "other.npz"
    buf = make(kind)
    populate(buf, 4, seed=8)
    buf.save(path)
    assert ReplayBuffer.load(path).sampler.params() == buf.sampler.params()


class _Explodes:
    """Unpickling this creates ``marker`` (a directory): proof that a pickle was executed."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.mark.parametrize("where", ["field", "meta"])
def test_files_are_never_unpickled(saved, tmp_path, where):
    marker = tmp_path / "unpickled"
    bomb = np.empty(14, dtype=object)
    bomb[:] = [_Explodes(str(marker))] * 14
    path = tmp_path / "bomb.npz"
    if where == "field":
        rewrite(saved, path, array_changes={"field.action": bomb})
    else:
        with np.load(saved, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files if name != META_KEY}
        np.savez(path, **{META_KEY: np.array([_Explodes(str(marker))], dtype=object)}, **arrays)
    # the crafted file really is a pickle bomb: loading it with pickle allowed sets it off
    with np.load(path, allow_pickle=True) as archive:
        archive["field.action" if where == "field" else META_KEY]
    assert marker.is_dir()
    marker.rmdir()
    with pytest.raises(ValueError, match="bomb.npz"):
        ReplayBuffer.load(path)
    assert not marker.exists()


@pytest.mark.parametrize("meta_changes, array_changes, pattern", [
    ({"format": "something.else"}, None, "not an r2d2kit buffer"),
    ({"format_version": 99}, None, "version"),
    ({"size": 20}, None, "size"),
    ({"position": 11}, None, "position"),
    ({"capacity": "eleven"}, None, "malformed|capacity"),
    ({"params": {"alpha": 0.7, "eps": 0.01, "gamma": 0.9}}, None, "malformed|gamma"),
    ({"rng": {"bit_generator": "NotAGenerator", "state": {}}}, None, "bit generator"),
    ({"sampler": {"max_priority": float("nan")}}, None, "max_priority"),
    ({"sampler": {}}, None, "malformed|max_priority"),
    (None, {"sampler.tree": None}, "sampler.tree"),
    (None, {"field.obs": None}, "field.obs"),
    (None, {"field.obs": np.zeros((3, 3), np.float32)}, "field.obs"),
    (None, {"sampler.tree": np.full(11, -1.0)}, "priorit"),
    (None, {"sampler.alive": np.array([0, 0, 1])}, "live slots"),
])
def test_tampered_files_raise_value_error(saved, tmp_path, meta_changes, array_changes, pattern):
    path = tmp_path / "tampered.npz"
    rewrite(saved, path, meta_changes, array_changes)
    with pytest.raises(ValueError, match=pattern):
        ReplayBuffer.load(path)


def test_tampered_rank_heap_is_refused(tmp_path):
    buf = make("rank")
    populate(buf, 6, seed=9)
    buf.save(tmp_path / "rank.npz")
    rewrite(tmp_path / "rank.npz", tmp_path / "bad.npz", array_changes={"sampler.heap": np.array([0, 0, 1, 2, 3, 4])})
    with pytest.raises(ValueError, match="live slots"):
        ReplayBuffer.load(tmp_path / "bad.npz")
