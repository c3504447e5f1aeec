"""The replay benchmark's peers: loaders that return what it needs or raise :class:`PeerUnavailable` (a one-line
reason), and a seed-style pure-Python segment tree. No peer is a dependency of r2d2kit (benchmarks/requirements.txt).
"""

import functools
import importlib.util
import logging
import operator
import os
import random
import sys
from pathlib import Path
from types import ModuleType

from harness import load_module


class PeerUnavailable(RuntimeError):
    """A peer library cannot be used here; the message says why (one line)."""


def _short(error: BaseException, limit: int = 110) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_tianshou_segment_tree() -> tuple[type, str]:
    """Tianshou's Numba ``SegmentTree`` and how it was loaded: its segtree.py alone where tianshou lacks its deps."""
    try:
        from tianshou.data.utils.segtree import SegmentTree
        return SegmentTree, "tianshou.data.utils.segtree"
    except ImportError as error:
        spec = importlib.util.find_spec("tianshou")
        if spec is None or not spec.submodule_search_locations:
            raise PeerUnavailable(_short(error)) from error
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / "utils" / "segtree.py"
        if not path.is_file():
            raise PeerUnavailable(f"{path} not found ({_short(error)})") from error
        try:
            module = load_module(path, "_tianshou_segtree_standalone")
        except Exception as inner:  # noqa: BLE001
            raise PeerUnavailable(_short(inner)) from inner
        return module.SegmentTree, "segtree.py loaded standalone (import tianshou needs its full deps)"


def _build_torchrl_trees() -> ModuleType:
    """Compile TorchRL's C++ segment trees (``torchrl/csrc``, in its wheel) against this torch (~35 s, then cached)."""
    import torchrl
    from torch.utils.cpp_extension import load

    csrc = Path(torchrl.__file__).parent / "csrc"
    sources = [csrc / "pybind.cpp", csrc / "utils.cpp"]
    if not all(p.is_file() for p in sources):
        raise PeerUnavailable(f"torchrl._torchrl does not load and {csrc} has no sources to rebuild it")
    print("[bench] TorchRL's prebuilt C++ extension does not load with this torch: using its csrc "
          "compiled here (the first time takes ~35 s, then it is cached)", file=sys.stderr, flush=True)
    try:
        return load(name="_torchrl", sources=[str(p) for p in sources], extra_cflags=["-O3"], verbose=False)
    except Exception as error:  # noqa: BLE001
        raise PeerUnavailable(f"torchrl._torchrl does not load and rebuilding it failed: {_short(error, 60)}") \
            from error


@functools.cache
def load_torchrl() -> dict:
    """torch, TorchRL's C++ trees and where they came from (rebuilt ones are set where ``PrioritizedSampler`` looks)."""
    os.environ.setdefault("RL_WARNINGS", "0")  # no extension warning: we handle it here
    try:
        import tensordict  # noqa: F401
        import torch
        from torchrl.data.replay_buffers.samplers import prioritized
    except Exception as error:  # noqa: BLE001
        raise PeerUnavailable(_short(error)) from error
    logging.getLogger("torchrl").setLevel(logging.WARNING)  # no INFO line per storage created
    try:
        import torchrl._torchrl as trees
        note = "prebuilt torchrl._torchrl"
    except ImportError:
        trees = _build_torchrl_trees()
        note = f"C++ trees rebuilt from torchrl/csrc against torch {torch.__version__} (-O3)"
        for name in ("SumSegmentTreeFp32", "SumSegmentTreeFp64", "MinSegmentTreeFp32", "MinSegmentTreeFp64"):
            setattr(prioritized, name, getattr(trees, name))
    return {"torch": torch, "trees": trees, "note": note}


class SeedSegmentTree:
    """OpenAI baselines' segment tree: 2 * ``capacity`` (a power of two) list nodes combined with ``operation`` one
    item at a time (the Python loop is what is measured); ``build`` (untimed) pre-fills; ``min, inf``: the min tree."""

    def __init__(self, capacity, operation, neutral_element):
        assert capacity > 0 and capacity & (capacity - 1) == 0, "capacity must be a power of 2"
        self._capacity, self._operation = capacity, operation
        self._value = [neutral_element] * (2 * capacity)

    def build(self, values):
        """Set leaves ``0 .. len(values) - 1`` and recompute every parent once."""
        cap, value, op = self._capacity, self._value, self._operation
        value[cap:cap + len(values)] = [float(v) for v in values]
        for idx in range(cap - 1, 0, -1):
            value[idx] = op(value[2 * idx], value[2 * idx + 1])

    def __setitem__(self, idx, val):
        idx += self._capacity
        self._value[idx] = val
        idx //= 2
        while idx >= 1:
            self._value[idx] = self._operation(self._value[2 * idx], self._value[2 * idx + 1])
            idx //= 2

    def update(self, indices, values):
        """Batched update: one ``__setitem__`` per item."""
        for idx, val in zip(indices, values):
            self[int(idx)] = float(val)


class SeedSumSegmentTree(SeedSegmentTree):
    def __init__(self, capacity):
        super().__init__(capacity, operator.add, 0.0)

    def find_prefixsum_idx(self, prefixsum):
        """Highest index ``i`` with ``sum(arr[:i]) <= prefixsum``."""
        idx = 1
        value, cap = self._value, self._capacity
        while idx < cap:
            if value[2 * idx] > prefixsum:
                idx = 2 * idx
            else:
                prefixsum -= value[2 * idx]
                idx = 2 * idx + 1
        return idx - cap

    def sample(self, batch_size, rng=random):
        """Stratified sample as in baselines' ``_sample_proportional``: one draw per equal slice."""
        every_range_len = self._value[1] / batch_size  # the sum
        return [self.find_prefixsum_idx((rng.random() + i) * every_range_len) for i in range(batch_size)]
