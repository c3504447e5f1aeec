"""Fuzzing ``load``: whatever a file holds, it gets at most a ``ValueError`` naming it, within bounded memory.

Every buffer kind x sampler saves a small buffer whose ring has wrapped (items, and windows too for
the window buffers). Its file is then cut, flipped, re-typed, given inconsistent metadata or tables,
huge claims, extra or compressed entries, huge ``.npy`` headers or deeply nested JSON. Each load must
raise exactly ``ValueError`` naming the file (``FileNotFoundError`` for no file), and peak traced memory
(numpy's allocations included) must stay under ``PEAK_BYTES`` for these few-kB files. A file that is
accepted must then take what a training loop does next (sample, update priorities, add), and the
untouched file samples what the original samples.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import math
import os
import re
import tempfile
import tracemalloc
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_her import distance_reward as her_reward
from reference_her import scripted_rollout
from reference_sequence_her import ReferenceSequenceHer, fixed_episodes
from reference_sequence_her import distance_reward as window_reward

from r2d2kit.replay import (
    HerReplayBuffer,
    ReplayBuffer,
    SequenceBuilder,
    SequenceHerReplayBuffer,
    SequenceReplayBuffer,
)
from r2d2kit.replay.persistence import MAX_META_CHARS, MAX_META_DEPTH, MAX_NPY_HEADER, META_KEY

PEAK_BYTES = 64 * 2**20  # traced peak of one load of a few-kB file, whatever it claims
FIELDS = {"obs": ((2,), "float32"), "action": ((), "int64"), "frame": ((2,), "uint8"), "done": ((), "bool")}
STATE = {"state_h": ((2,), "float32"), "state_c": ((2,), "float32")}
WINDOW = dict(burn_in=1, trace_length=2, n_step=1, period=2)
SAMPLERS = ("uniform", "proportional", "rank")
FAST = settings(derandomize=True, deadline=None, max_examples=12, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DELETE = object()  # a metadata mutation that removes the field


# =====================================================================================================
# Saved buffers: one per kind x sampler, their ring wrapped
# =====================================================================================================


@dataclass
class Saved:
    """A good file, what it holds, and what its buffer does next."""

    kind: str
    sampler: str
    data: bytes
    meta: dict
    arrays: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]  # sample(6, beta=0.5) of the original right after save
    load: Callable[..., Any]  # (path, **kwargs) -> buffer
    feed: Callable[[Any], None]  # what the original was fed next


def transition_batch(rng: np.random.Generator, count: int) -> dict[str, np.ndarray]:
    return {"obs": rng.normal(size=(count, 2)).astype(np.float32), "action": rng.integers(-5, 5, count),
            "frame": rng.integers(0, 256, (count, 2)).astype(np.uint8), "done": rng.random(count) < 0.3}


def transitions(sampler: str) -> tuple[Any, Callable, Callable]:
    """8 items into 5 slots, with priority updates."""
    buffer = ReplayBuffer(5, FIELDS, sampler=sampler, seed=3)
    rng = np.random.default_rng(0)
    for count in (3, 2, 3):
        buffer.add_batch(**transition_batch(rng, count))
        prioritise(buffer, rng)
    return buffer, ReplayBuffer.load, lambda b: b.add_batch(**transition_batch(np.random.default_rng(1), 3))


def her(sampler: str) -> tuple[Any, Callable, Callable]:
    """Two envs' scripted episodes: 22 vector steps into 6 rows."""
    calls = scripted_rollout(2, 2, 30, max_len=4)
    buffer = HerReplayBuffer(12, ((4,), "float32"), ((3,), "float32"), compute_reward=her_reward, num_envs=2,
                             sampler=sampler, seed=3)
    rng = np.random.default_rng(0)

    def feed(target: Any, part: list[dict]) -> None:
        for call in part:
            target.add(call["obs"], call["action"], call["reward"], call["next_obs"], call["terminated"],
                       call["truncated"], call["infos"])

    for start in range(0, 22, 6):
        feed(buffer, calls[start:min(start + 6, 22)])
        prioritise(buffer, rng)
    return (buffer, functools.partial(HerReplayBuffer.load, compute_reward=her_reward),
            functools.partial(feed, part=calls[22:]))


def windows(sampler: str, goals: bool) -> tuple[Any, Callable, Callable]:
    """Two envs' fixed episodes through ``SequenceBuilder``: about 70 windows into 12 slots, 140 rows into 40."""
    reference = ReferenceSequenceHer(fixed_episodes([[5, 3, 7], [4, 6]], 400), **WINDOW)
    builder = SequenceBuilder(2, *WINDOW.values(), state_names=("state_h", "state_c"))
    outputs = []
    for step in range(75):
        s = reference.vector_step(step)
        out = builder.step(s["obs"], s["action"], s["reward"], s["terminated"], s["truncated"], s["state"],
                           extras=s["extras"] if goals else None)
        if out is not None:
            outputs.append(out)
    if goals:
        buffer = SequenceHerReplayBuffer(40, ((3,), "float32"), ((3,), "float32"), ((), "int64"), STATE,
                                         compute_reward=window_reward, max_sequences=12, sampler=sampler, seed=3,
                                         **WINDOW)
        load = functools.partial(SequenceHerReplayBuffer.load, compute_reward=window_reward)
    else:
        buffer = SequenceReplayBuffer(40, {"obs": ((6,), "float32"), "action": ((), "int64")}, STATE,
                                      max_sequences=12, sampler=sampler, seed=3, **WINDOW)
        load = SequenceReplayBuffer.load
    rng = np.random.default_rng(0)
    for out in outputs[:-3]:
        buffer.add_sequences(out)
        prioritise(buffer, rng)

    def feed(target: Any) -> None:
        for out in outputs[-3:]:
            target.add_sequences(out)

    return buffer, load, feed


def prioritise(buffer: Any, rng: np.random.Generator) -> None:
    batch = buffer.sample(4, beta=0.5)
    buffer.update_priorities(batch["indices"], rng.exponential(2.0, 4))


# What does not depend on the sampler is fuzzed with one sampler per kind (each sampler gets kinds);
# the sampler's own arrays and scalars with every sampler
ROTATION = {"transitions": "uniform", "her": "proportional", "windows": "rank", "her_windows": "uniform"}
KINDS = {"transitions": transitions, "her": her, "windows": functools.partial(windows, goals=False),
         "her_windows": functools.partial(windows, goals=True)}
CASES = [f"{kind}-{sampler}" for kind in KINDS for sampler in SAMPLERS]


@functools.cache
def saved(case: str) -> Saved:
    kind, sampler = case.split("-")
    buffer, load, feed = KINDS[kind](sampler)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "good.npz")
        buffer.save(path)
        with open(path, "rb") as handle:
            data = handle.read()
    meta, arrays = unpack(data)
    return Saved(kind, sampler, data, meta, arrays, buffer.sample(6, beta=0.5), load, feed)


def covers(item: Saved, name: str = "") -> bool:
    """Whether ``item`` fuzzes what ``name`` (an array, or '' for the kind's own fields) belongs to."""
    return item.sampler == ROTATION[item.kind] or name.startswith("sampler.")


def unpack(data: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """Metadata and arrays of a file this test wrote (trusted: read with numpy directly)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        meta = json.loads(str(archive[META_KEY]))
        arrays = {name: archive[name] for name in archive.files if name != META_KEY}
    return meta, arrays


def pack(meta: Any, arrays: dict[str, np.ndarray], meta_text: str | None = None) -> bytes:
    """A file as ``save`` writes one, from (possibly mutated) metadata and arrays."""
    stream = io.BytesIO()
    text = json.dumps(meta) if meta_text is None else meta_text
    np.savez(stream, **{META_KEY: np.array(text)}, **arrays)
    return stream.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


def zip_of(entries: list[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> bytes:
    """A zip archive of raw entries, in order (a repeated name is written twice)."""
    stream = io.BytesIO()
    with zipfile.ZipFile(stream, "w", compression=compression) as archive:
        for name, raw in entries:
            archive.writestr(name, raw)
    return stream.getvalue()


def good_entries(item: Saved) -> list[tuple[str, bytes]]:
    meta_text = json.dumps(item.meta)
    return [(f"{META_KEY}.npy", npy_bytes(np.array(meta_text)))] + [(f"{name}.npy", npy_bytes(array))
                                                                    for name, array in item.arrays.items()]


def with_meta(meta: dict, path: tuple[str, ...], value: Any) -> dict:
    """A deep copy of ``meta`` with the field at ``path`` set to ``value`` (``DELETE`` removes it)."""
    changed = copy.deepcopy(meta)
    parent = changed
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return changed


def with_array(arrays: dict[str, np.ndarray], name: str, array: np.ndarray | None) -> dict[str, np.ndarray]:
    changed = dict(arrays)
    if array is None:
        del changed[name]
    else:
        changed[name] = array
    return changed


# =====================================================================================================
# Loading under watch
# =====================================================================================================


def attempt(item: Saved, path: Any, **kwargs: Any) -> tuple[Any, BaseException | None, int]:
    """Load ``path`` with peak memory traced: the buffer or the error, and the peak (both checked)."""
    buffer, error = None, None
    tracemalloc.start()
    try:
        buffer = item.load(path, **kwargs)
    except Exception as caught:  # the type is what is checked
        error = caught
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"loading took {peak} bytes at peak"
    if error is not None:
        assert type(error) is ValueError, f"{type(error).__name__}: {error}"
        assert str(path) in str(error), str(error)
    return buffer, error, peak


def refused(item: Saved, path: Any, *words: str, **kwargs: Any) -> str:
    """Load ``path``, which must be refused with a message holding every one of ``words``."""
    buffer, error, _ = attempt(item, path, **kwargs)
    assert error is not None, "a damaged file was accepted"
    message = str(error)
    for word in words:
        assert word in message, message
    return message


def accepted_or_refused(item: Saved, path: Any) -> None:
    """Either refusal is clean, or the buffer takes what a training loop does next."""
    buffer, error, _ = attempt(item, path)
    if error is None:
        exercise(item, buffer)


def exercise(item: Saved, buffer: Any) -> None:
    """Sample, update priorities, add what the original got next, sample again: only 'empty' may be refused."""
    for round_ in range(2):
        try:
            batch = buffer.sample(4, beta=0.5)
        except ValueError as error:
            assert "cannot sample" in str(error), str(error)
        else:
            buffer.update_priorities(batch["indices"], np.full(4, 2.0))
        if round_ == 0:
            item.feed(buffer)


def write(tmp_path: Any, data: bytes, name: str = "mutated.npz") -> Any:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def assert_batches_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert set(a) == set(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


# =====================================================================================================
# The good file
# =====================================================================================================


@pytest.mark.parametrize("case", CASES)
def test_good_file_loads_and_samples_what_the_original_samples(tmp_path, case):
    item = saved(case)
    path = write(tmp_path, item.data, "good.npz")
    buffer, error, _ = attempt(item, path)
    assert error is None
    assert_batches_equal(buffer.sample(6, beta=0.5), item.expected)
    # max_bytes: too small is refused with the value to pass; that value admits the file
    message = refused(item, path, "max_bytes", max_bytes=1)
    needed = int(re.search(r"max_bytes=(\d+)", message).group(1))
    refused(item, path, "max_bytes", max_bytes=needed - 1)
    again, error, _ = attempt(item, path, max_bytes=needed)
    assert error is None
    assert_batches_equal(again.sample(6, beta=0.5), item.expected)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.npz"):
        ReplayBuffer.load(tmp_path / "nowhere.npz")


# =====================================================================================================
# Damaged bytes
# =====================================================================================================


@pytest.mark.parametrize("case", CASES)
def test_truncated_files(tmp_path, case):
    item = saved(case)
    size = len(item.data)
    for keep in sorted({0, 1, 4, 22, 64, size // 5, size // 3, size // 2, 3 * size // 4, size - 200, size - 22,
                        size - 1}):
        refused(item, write(tmp_path, item.data[:keep]))


@pytest.mark.parametrize("case", CASES)
def test_random_byte_damage(tmp_path, case):
    item = saved(case)

    @FAST
    @given(flips=st.lists(st.tuples(st.integers(0, len(item.data) - 1), st.integers(1, 255)), min_size=1,
                          max_size=3),
           keep=st.one_of(st.none(), st.integers(0, len(item.data))))
    def damage(flips, keep):
        data = bytearray(item.data)
        for position, mask in flips:
            data[position] ^= mask
        accepted_or_refused(item, write(tmp_path, bytes(data if keep is None else data[:keep])))

    damage()


# =====================================================================================================
# Arrays in another dtype
# =====================================================================================================


def retyped(array: np.ndarray) -> list[np.ndarray]:
    """The array in other dtypes, as a careless writer would produce them (values that casting would change)."""
    kind = array.dtype.kind
    out = [array.astype(array.dtype.newbyteorder(">"))] if array.dtype.itemsize > 1 else []
    if kind == "b":
        out.append(array.astype(np.uint8))
    elif kind == "u":
        wider = array.astype(np.uint16)
        wider.flat[:1] = 300  # 44 once cast back to uint8
        out.append(wider)
    elif kind == "i":
        out.extend([array.astype(np.float64) + 0.5, array.astype(np.int32 if array.itemsize == 8 else np.int64)])
    elif kind == "f":
        out.extend([array.astype(np.complex128) + 1j, array.astype(np.float16), array.astype(np.int64)])
    return out


@pytest.mark.parametrize("case", CASES)
def test_every_array_in_another_dtype_is_refused(tmp_path, case):
    item = saved(case)
    for number, (name, array) in enumerate(sorted(item.arrays.items())):
        if covers(item, name):
            variants = retyped(array)
            other = variants[number % len(variants)]  # one per array; the arrays take the variants in turn
            path = write(tmp_path, pack(item.meta, with_array(item.arrays, name, other)))
            refused(item, path, repr(name), "dtype")
    path = write(tmp_path, zip_of([(f"{META_KEY}.npy", npy_bytes(np.array(json.dumps(item.meta).encode())))]
                                  + good_entries(item)[1:]))
    refused(item, path, META_KEY)
    if item.kind == "transitions" and covers(item):  # a field and its array both in numpy's StringDType
        meta = with_meta(item.meta, ("fields", "obs"), [[2], "T"])
        entries = [(name, raw) for name, raw in good_entries(item)[1:] if name != "field.obs.npy"]
        header = {"descr": "T", "fortran_order": False, "shape": item.arrays["field.obs"].shape}
        strings = npy_with_header(header, bytes(16 * item.arrays["field.obs"].size))
        path = write(tmp_path, zip_of([(f"{META_KEY}.npy", npy_bytes(np.array(json.dumps(meta))))] + entries
                                      + [("field.obs.npy", strings)]))
        refused(item, path, "dtype")


# =====================================================================================================
# Metadata and tables that disagree with the arrays
# =====================================================================================================


def meta_mutations(item: Saved) -> list[tuple[tuple[str, ...], Any]]:
    """Metadata values no save writes, each refused (``DELETE``: the field removed)."""
    meta = item.meta
    sampler = meta["params"]["sampler"]
    cases: list[tuple[tuple[str, ...], Any]] = []
    cases += [(("sampler", "max_priority"), value) for value in (0.0, -1.0, 0.5, float("nan"), "1", None, True,
                                                                 DELETE)]
    if sampler == "rank":
        cases += [(("sampler", "updates_since_sort"), value) for value in (-1, 10**9, 1.5, DELETE)]
    if sampler == "uniform":
        cases += [(("sampler", "max_priority"), 2.0)]  # uniform sampling never raises it
    if not covers(item):
        return cases
    cases += [(("capacity",), value) for value in (0, -3, 1.5, "5", True, None, DELETE, 2**63, 10**100)]
    cases += [(("params", "sampler"), value) for value in ("nope", 7, DELETE)]
    cases += [(("params",), DELETE), (("params",), []), (("sampler",), DELETE), (("sampler",), [1]),
              (("rng",), DELETE), (("rng",), {}), (("rng", "state"), "x"), (("rng", "bit_generator"), "Evil"),
              (("rng", "state", "state"), -1), (("rng", "state", "state"), {"__ndarray__": ["a"], "dtype": "U9"}),
              (("class",), "ReplayBuffer" if item.kind != "transitions" else "SequenceReplayBuffer"),
              (("format_version",), 2), (("format",), "npz")]
    if item.kind == "transitions":
        size = meta["size"]
        cases += [(("position",), value) for value in (-1, meta["capacity"], 99, DELETE)]
        cases += [(("size",), value) for value in (-1, size - 1, size + 1, 99, DELETE)]
        cases += [(("fields",), value) for value in ({}, [], {"obs": [[2], "float32"]}, DELETE)]
        cases += [(("fields", "obs"), value) for value in ([[2], "float64"], [[3], "float32"], [[2], "O"],
                                                          [[2], "U3"], [[2], "T"], [[-1], "float32"], [2, "float32"],
                                                          "f4")]
        cases += [(("capacity",), meta["capacity"] + 1)]  # a ring that wrapped at 5 writes next at its size
    if item.kind == "her":
        cases += [(("slots",), value) for value in (-2, meta["slots"] - 1, meta["slots"] + 2, 10**15, DELETE)]
        cases += [(("params", "num_envs"), value) for value in (0, 1, 3, "2", 10**15)]
        cases += [(("specs",), {}), (("specs", "observation"), [[4], "float64"]), (("specs", "action"), [[], "O"])]
        cases += [(("has_compute_terminated",), value) for value in ("yes", True, DELETE)]
    if item.kind in ("windows", "her_windows"):
        rows, sequences = meta["rows_written"], meta["sequences_written"]
        cases += [(("rows_written",), value) for value in (-1, 0, rows - 1, rows + 1, 10**15, 1.5, DELETE)]
        cases += [(("sequences_written",), value) for value in (-1, 0, sequences - 1, sequences + 1, 10**15)]
        cases += [(("params", "max_sequences"), value) for value in (0, 1, 13, 10**15)]
        cases += [(("params", "burn_in"), value) for value in (-1, 2, 10**15)]
        cases += [(("params", "trace_length"), 0), (("params", "n_step"), -1), (("params", "initial_state"), "x"),
                  (("state",), {}), (("state",), []), (("state", "state_h"), [[3], "float32"])]
    if item.kind == "windows":
        cases += [(("fields",), {"obs": [[6], "float32"]}), (("fields", "obs"), [[6], "float64"])]
    if item.kind == "her_windows":
        cases += [(("table_written",), value) for value in (-1, 1.5, "3", DELETE)]
        cases += [(("specs",), {}), (("specs", "goal"), [[2], "float32"])]
        cases += [(("has_compute_terminated",), value) for value in ("yes", True, DELETE)]
    return cases


@pytest.mark.parametrize("case", CASES)
def test_inconsistent_metadata_is_refused(tmp_path, case):
    item = saved(case)
    for field, value in meta_mutations(item):
        path = write(tmp_path, pack(with_meta(item.meta, field, value), item.arrays))
        try:
            refused(item, path)
        except AssertionError as failure:
            raise AssertionError(f"{'.'.join(field)} = {value!r}: {failure}") from None


def table_mutations(item: Saved) -> list[tuple[str, Callable[[np.ndarray], None]]]:
    """In-place edits of one saved table each, every one refused (shapes and dtypes kept, unless said)."""
    meta, arrays = item.meta, item.arrays
    sampler = meta["params"]["sampler"]

    def set_at(index: Any, value: Any) -> Callable[[np.ndarray], None]:
        def edit(array: np.ndarray) -> None:
            array[index] = value
        return edit

    def add_at(index: Any, value: int) -> Callable[[np.ndarray], None]:
        def edit(array: np.ndarray) -> None:
            array[index] += value
        return edit

    cases: list[tuple[str, Callable[[np.ndarray], None]]] = []
    if sampler in ("uniform", "proportional"):
        live = arrays["sampler.alive"]
        slots = meta["capacity"] if item.kind in ("transitions",) else None
        cases += [("sampler.alive", set_at(1, int(live[0]))), ("sampler.alive", set_at(0, -1))]
        if slots is not None:
            cases += [("sampler.alive", set_at(0, slots))]
    if sampler == "proportional":
        first = int(arrays["sampler.alive"][0])
        cases += [("sampler.tree", set_at(first, value)) for value in (-1.0, np.nan, np.inf, 1e300)]
    if sampler == "rank":
        heap = arrays["sampler.heap"]
        cases += [("sampler.heap", set_at(1, int(heap[0]))), ("sampler.heap", set_at(0, -1))]
        priorities = arrays["sampler.priorities"][heap]  # in heap order
        below = np.flatnonzero(priorities[1:] < priorities[(np.arange(1, heap.size) - 1) // 2]) + 1
        if below.size:  # swap a child with its larger parent
            child = int(below[0])
            parent = (child - 1) // 2
            cases += [("sampler.heap", lambda a: a.__setitem__([parent, child], a[[child, parent]]))]
        cases += [("sampler.priorities", set_at(int(heap[0]), value)) for value in (np.nan, -1.0, 1e300)]
    if not covers(item):
        return cases
    if item.kind == "her":
        stored = int(np.flatnonzero(arrays["step_count"] >= 0)[0])
        cases += [("step_count", add_at(stored, 1)), ("step_count", add_at(stored, 6)),
                  ("episode_start", set_at(stored, int(arrays["step_count"][stored]) + 1)),
                  ("episode_end", set_at(stored, -2)), ("env_written", add_at(0, 1)), ("env_written", set_at(0, -1)),
                  ("env_episode_start", add_at(0, 10**6)), ("valid", lambda a: a.__setitem__(0, a[-1])),
                  ("valid", set_at(0, 10**6))]
    if item.kind in ("windows", "her_windows"):
        capacity, rows_written = meta["capacity"], meta["rows_written"]
        live = int(np.flatnonzero(windows_alive(item))[0])
        dead = np.flatnonzero(~windows_alive(item))
        cases += [("row_write_index", add_at(0, capacity)), ("row_previous", set_at(0, rows_written)),
                  ("row_previous", set_at(0, -3)), ("row_next", set_at(0, rows_written)),
                  ("slots", set_at((0, 0), capacity + 1)), ("slots", set_at((0, 0), -1)),
                  ("oldest_write", add_at(live, 1)), ("oldest_write", set_at(live, -1)),
                  ("generation", add_at(0, 1)), ("last_window_rows", set_at((0, 0), rows_written)),
                  ("last_window_rows", set_at((0, 0), -2)), ("last_window_key", set_at((0, 3), 2**62)),
                  ("last_window_key", lambda a: a.__setitem__((1, slice(0, 2)), a[0, :2].copy()))]
        if dead.size:
            cases += [("oldest_write", set_at(int(dead[0]), rows_written))]  # now looks live, but is not
    if item.kind == "her_windows":
        cases += [("her.window_start", set_at(0, 2**62)), ("her.window_transitions", set_at(0, -2)),
                  ("her.table_origin", set_at(0, -(2**62))), ("her.goal_table", set_at(0, meta["rows_written"])),
                  ("her.goal_table", set_at(0, -2)), ("her.episode_key", add_at((0, 5), 1)),
                  ("her.episode_key", set_at((0, 5), -1)),
                  ("her.episode_key", lambda a: a.__setitem__((1, slice(0, 2)), a[0, :2].copy()))]
        if arrays["her.episode_windows"].size:
            cases += [("her.episode_windows", set_at((0, 0), meta["params"]["max_sequences"]))]
        reads = reading_windows(item)
        if reads.size:  # a live finished window whose later rows the goal table no longer holds
            cases += [("her.table_origin", add_at(int(reads[0]), -4 * capacity))]
    return cases


def windows_alive(item: Saved) -> np.ndarray:
    """Which saved window slots are live (from the sampler's arrays)."""
    sequences = item.arrays["slots"].shape[0]
    alive = np.zeros(item.meta["params"]["max_sequences"], dtype=bool)
    alive[item.arrays["sampler.heap" if item.meta["params"]["sampler"] == "rank" else "sampler.alive"]] = True
    return alive[:sequences]


def reading_windows(item: Saved) -> np.ndarray:
    """Live windows of finished episodes that read rows after them from the goal table."""
    length = sum(WINDOW[key] for key in ("burn_in", "trace_length", "n_step"))
    reads = item.arrays["her.window_transitions"] >= item.arrays["her.window_start"] + length
    return np.flatnonzero(reads & windows_alive(item))


@pytest.mark.parametrize("case", CASES)
def test_inconsistent_tables_are_refused(tmp_path, case):
    item = saved(case)
    mutations = table_mutations(item)
    assert len(mutations) >= 2
    for number, (name, edit) in enumerate(mutations):
        array = item.arrays[name].copy()
        edit(array)
        assert not np.array_equal(array, item.arrays[name], equal_nan=True), f"mutation {number} of {name} is a no-op"
        path = write(tmp_path, pack(item.meta, with_array(item.arrays, name, array)))
        try:
            refused(item, path)
        except AssertionError as failure:
            raise AssertionError(f"mutation {number} of {name}: {failure}") from None
    # tables whose lengths disagree: the last-window rows, one row too many or too long
    if item.kind in ("windows", "her_windows") and covers(item):
        rows = item.arrays["last_window_rows"]
        for other in (np.vstack([rows, rows[:1]]), np.hstack([rows, rows[:, :1]])):
            refused(item, write(tmp_path, pack(item.meta, with_array(item.arrays, "last_window_rows", other))),
                    "last_window_rows")
    for name in filter(functools.partial(covers, item), item.arrays):  # every array is required
        refused(item, write(tmp_path, pack(item.meta, with_array(item.arrays, name, None))), repr(name))


@pytest.mark.parametrize("case", CASES)
def test_random_table_values_are_refused_or_usable(tmp_path, case):
    item = saved(case)
    names = sorted(name for name, array in item.arrays.items() if array.size and array.dtype.kind in "biu")

    @FAST
    @given(name=st.sampled_from(names), position=st.integers(0, 10**6),
           value=st.one_of(st.integers(-3, 200), st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1, -(2**63)])))
    def change(name, position, value):
        array = item.arrays[name].copy()
        flat = array.reshape(-1)
        info = np.iinfo(array.dtype) if array.dtype.kind in "iu" else None
        flat[position % flat.size] = bool(value % 2) if info is None else min(max(value, info.min), info.max)
        accepted_or_refused(item, write(tmp_path, pack(item.meta, with_array(item.arrays, name, array))))

    change()


@pytest.mark.parametrize("case", CASES)
def test_random_metadata_counts_are_refused_or_usable(tmp_path, case):
    item = saved(case)
    fields = [path for path, value in leaves(item.meta) if type(value) is int and path[0] != "rng"]

    @FAST
    @given(field=st.sampled_from(fields),
           value=st.one_of(st.integers(-3, 100), st.sampled_from([2**30, 2**31, 10**15, 2**62, 2**63])))
    def change(field, value):
        accepted_or_refused(item, write(tmp_path, pack(with_meta(item.meta, field, value), item.arrays)))

    change()


def leaves(meta: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(meta, dict):
        return [leaf for key, value in meta.items() for leaf in leaves(value, path + (key,))]
    return [(path, meta)]


# =====================================================================================================
# Huge claims
# =====================================================================================================


def huge_fields(kind: str) -> list[tuple[str, ...]]:
    fields = [("capacity",)]
    if kind == "transitions":
        fields += [("size",), ("position",)]
    if kind == "her":
        fields += [("slots",), ("params", "num_envs")]
    if kind in ("windows", "her_windows"):
        fields += [("params", "max_sequences"), ("params", "burn_in"), ("rows_written",), ("sequences_written",)]
    return fields


HUGE = [(case, field, value) for case in CASES for field in huge_fields(case.split("-")[0])
        for value in (2**30, 10**15)]


@pytest.mark.parametrize("case, field, value", HUGE, ids=[f"{c}-{'.'.join(f)}-{v}" for c, f, v in HUGE])
def test_huge_claims_are_refused_before_anything_is_allocated(tmp_path, case, field, value):
    item = saved(case)
    refused(item, write(tmp_path, pack(with_meta(item.meta, field, value), item.arrays)))


# =====================================================================================================
# Zip entries and .npy headers
# =====================================================================================================


@pytest.mark.parametrize("case", CASES)
def test_extra_duplicate_and_compressed_entries_are_refused_unread(tmp_path, case):
    item = saved(case)
    entries = good_entries(item)
    refused(item, write(tmp_path, zip_of(entries + [("extra.npy", npy_bytes(np.arange(3)))])), "extra.npy")
    refused(item, write(tmp_path, zip_of(entries + [("notes.txt", b"hello")])), "notes.txt")
    refused(item, write(tmp_path, zip_of(entries + [("dir/", b"")])), "dir/")
    refused(item, write(tmp_path, zip_of(entries + [("zeros.npy", bytes(8 * 2**20))], zipfile.ZIP_DEFLATED)),
            "compressed")
    refused(item, write(tmp_path, zip_of(entries, zipfile.ZIP_DEFLATED)), "compressed")  # np.savez_compressed
    with pytest.warns(UserWarning, match="Duplicate name"):
        doubled = zip_of(entries + [entries[-1]])
    refused(item, write(tmp_path, doubled), "twice")


def test_a_zip_bomb_entry_is_never_inflated(tmp_path):
    """0.25 MB of deflated zeros that would inflate to 256 MB: refused from the zip directory alone."""
    item = saved("transitions-uniform")
    for name, megabytes in (("bomb.npy", 256), ("field.obs.npy", 32)):  # unknown, and in place of a known array
        path = tmp_path / "bomb.npz"
        with zipfile.ZipFile(path, "w") as archive:
            for entry, raw in good_entries(item):
                if entry != name:
                    archive.writestr(entry, raw)
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(info, "w", force_zip64=True) as entry:
                for _ in range(megabytes):
                    entry.write(bytes(2**20))
        assert path.stat().st_size < 2**20
        _, error, peak = attempt(item, path)
        assert error is not None and "compressed" in str(error)
        assert peak < 8 * 2**20


def npy_with_header(header: dict, data: bytes, version: tuple[int, int] = (1, 0), pad_to: int = 0) -> bytes:
    """An ``.npy`` entry whose header says ``header`` (padded to ``pad_to`` characters), followed by ``data``."""
    text = repr(header).ljust(pad_to) + "\n"
    length = (2 if version == (1, 0) else 4)
    return (np.lib.format.magic(*version) + len(text).to_bytes(length, "little") + text.encode("latin1") + data)


@pytest.mark.parametrize("case", CASES)
def test_huge_npy_headers_are_refused_unread(tmp_path, case):
    item = saved(case)
    entries = good_entries(item)
    for index, (name, _raw) in enumerate(entries[1:], start=1):
        if not covers(item, name[:-4]):
            continue
        array = item.arrays[name[:-4]]
        claim = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False,
                 "shape": (2**40,) + array.shape[1:]}
        changed = entries[:index] + [(name, npy_with_header(claim, array.tobytes()))] + entries[index + 1:]
        refused(item, write(tmp_path, zip_of(changed)), name[:-4])
    name, raw = entries[-1]
    array = item.arrays[name[:-4]]
    header = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False, "shape": array.shape}
    too_long = npy_with_header(header, array.tobytes(), (2, 0), pad_to=MAX_NPY_HEADER + 100)
    claims_4gb = np.lib.format.magic(2, 0) + (2**32 - 1).to_bytes(4, "little") + b"{'descr'"
    nested = npy_with_header(header, b"", pad_to=0).replace(b"'shape'", b"'shape': " + b"(" * 3000 + b")" * 3000
                                                            + b", 'x'")
    for bad in (too_long, claims_4gb, nested, b"\x93NUMPY\x07\x00", b"PK\x03\x04"):
        refused(item, write(tmp_path, zip_of(entries[:-1] + [(name, bad)])), name)
    text_claim = {"descr": "<U1000000000", "fortran_order": False, "shape": ()}
    many_texts = {"descr": "<U4", "fortran_order": False, "shape": (2**40,)}
    for claim in (text_claim, many_texts):
        refused(item, write(tmp_path, zip_of([(f"{META_KEY}.npy", npy_with_header(claim, b""))] + entries[1:])),
                META_KEY)


# =====================================================================================================
# Metadata JSON
# =====================================================================================================


@pytest.mark.parametrize("case", CASES)
def test_deep_long_or_odd_metadata_json_is_refused(tmp_path, case):
    item = saved(case)
    body = json.dumps(item.meta)[:-1]
    for depth, word in ((MAX_META_DEPTH, "nests"), (200_000, "nests")):
        text = body + ', "deep": ' + "[" * depth + "]" * depth + "}"
        refused(item, write(tmp_path, pack(None, item.arrays, meta_text=text)), word)
    long_text = body + ', "long": "' + "x" * (MAX_META_CHARS + 10) + '"}'
    refused(item, write(tmp_path, pack(None, item.arrays, meta_text=long_text)), "MAX_META_CHARS")
    refused(item, write(tmp_path, pack(None, item.arrays, meta_text=body + ', "n": ' + "9" * 5000 + "}")),
            "not valid JSON")
    for text in ("[]", "null", '"text"', body, body + ', "x": NaN, "y": [1e999]}' + "}"):
        refused(item, write(tmp_path, pack(None, item.arrays, meta_text=text)))
    text = np.array(json.dumps(item.meta))
    header = {"descr": text.dtype.str, "fortran_order": False, "shape": ()}
    for code_point in (b"\xff\xff\xff\xff", b"\x00\xd8\x00\x00"):  # beyond Unicode, a lone surrogate
        entry = npy_with_header(header, code_point + text.tobytes()[4:])
        refused(item, write(tmp_path, zip_of([(f"{META_KEY}.npy", entry)] + good_entries(item)[1:])), META_KEY)
    # strings may hold brackets: only structure counts towards the depth
    fine = body + ', "note": "' + "[" * (MAX_META_DEPTH + 5) + '", "shallow": ' + "[" * (MAX_META_DEPTH - 2) \
        + "]" * (MAX_META_DEPTH - 2) + "}"
    buffer, error, _ = attempt(item, write(tmp_path, pack(None, item.arrays, meta_text=fine)))
    assert error is None
    assert_batches_equal(buffer.sample(6, beta=0.5), item.expected)
    assert math.isfinite(buffer.max_priority)


# =====================================================================================================
# The preallocation that max_bytes bounds
# =====================================================================================================


def empty_buffer(kind: str, sampler: str, capacity: int) -> Any:
    if kind == "transitions":
        return ReplayBuffer(capacity, FIELDS, sampler=sampler)
    if kind == "her":
        return HerReplayBuffer(capacity, ((4,), "float32"), ((3,), "float32"), compute_reward=her_reward, num_envs=2,
                               sampler=sampler)
    if kind == "windows":
        return SequenceReplayBuffer(capacity, {"obs": ((6,), "float32"), "action": ((), "int64")}, STATE,
                                    max_sequences=capacity // 4, sampler=sampler, **WINDOW)
    return SequenceHerReplayBuffer(capacity, ((3,), "float32"), ((3,), "float32"), ((), "int64"), STATE,
                                   compute_reward=window_reward, max_sequences=capacity // 4, sampler=sampler,
                                   **WINDOW)


@pytest.mark.parametrize("case", CASES)
def test_the_checked_preallocation_is_what_loading_builds(tmp_path, case):
    """``max_bytes`` is compared with an estimate made before building: what the buffer keeps (up to 64 kB of
    objects of any size), at most half again as much, and loading peaks at no more than twice it (temporaries
    of the constructors)."""
    kind, sampler = case.split("-")
    buffer = empty_buffer(kind, sampler, 2**15)
    path = tmp_path / "empty.npz"
    buffer.save(path)
    meta, _ = unpack(path.read_bytes())
    estimate = type(buffer)._saved_layout(str(path), meta).preallocated_bytes
    load = saved(case).load
    tracemalloc.start()
    try:
        loaded = load(path)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(loaded) == 0
    assert kept - 2**16 <= estimate <= 1.5 * kept
    assert peak <= 2 * estimate
