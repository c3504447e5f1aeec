"""Loaders for the peer libraries the replay benchmark compares against.

Each ``load_*`` returns what the benchmark needs or raises :class:`PeerUnavailable` with a short
reason; the benchmark prints that reason in its table instead of failing. None of these peers is
a dependency of r2d2kit (see ``benchmarks/requirements.txt``).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

from .machine import dist_version, machine_line
from .seed_segment_tree import MinSegmentTree as SeedMinSegmentTree
from .seed_segment_tree import SumSegmentTree as SeedSumSegmentTree

__all__ = [
    "PeerUnavailable",
    "SeedMinSegmentTree",
    "SeedSumSegmentTree",
    "dist_version",
    "machine_line",
    "load_cpprb",
    "load_tianshou_segment_tree",
    "load_torchrl",
]


class PeerUnavailable(RuntimeError):
    """A peer library cannot be used here; the message says why (one line)."""


def _short(error: BaseException, limit: int = 110) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_cpprb() -> ModuleType:
    try:
        import cpprb
    except Exception as error:  # noqa: BLE001 - any import failure makes the peer unavailable
        raise PeerUnavailable(_short(error)) from error
    return cpprb


def load_tianshou_segment_tree() -> tuple[type, str]:
    """Tianshou's Numba ``SegmentTree`` and how it was loaded.

    ``import tianshou`` imports the whole library (pandas, pettingzoo, tensorboard, ...). When
    tianshou is installed without those (``--no-deps``, as ``benchmarks/requirements.txt`` does),
    its ``tianshou/data/utils/segtree.py`` is loaded on its own: that file needs only numpy and
    numba, and it is the same code.
    """
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
        file_spec = importlib.util.spec_from_file_location("_tianshou_segtree_standalone", path)
        module = importlib.util.module_from_spec(file_spec)
        try:
            file_spec.loader.exec_module(module)
        except Exception as inner:  # noqa: BLE001
            raise PeerUnavailable(_short(inner)) from inner
        return module.SegmentTree, "segtree.py loaded standalone (import tianshou needs its full deps)"


def _build_torchrl_trees() -> ModuleType:
    """Compile TorchRL's own C++ segment trees (the ``csrc`` its wheel ships) against this torch.

    TorchRL's prebuilt ``_torchrl`` extension only loads with the torch it was built against. The
    sources in ``torchrl/csrc`` are compiled once with ``torch.utils.cpp_extension`` (about 35 s
    on 2 cores, needs g++ and ninja) and cached under ``~/.cache/torch_extensions``.
    """
    import torchrl
    from torch.utils.cpp_extension import load

    csrc = Path(torchrl.__file__).parent / "csrc"
    sources = [csrc / "pybind.cpp", csrc / "utils.cpp"]
    if not all(p.is_file() for p in sources):
        raise PeerUnavailable(f"torchrl._torchrl does not load and {csrc} has no sources to rebuild it")
    print("[bench] TorchRL's prebuilt C++ extension does not load with this torch: using its csrc "
          "compiled here (the first time takes ~35 s, then it is cached)", file=sys.stderr, flush=True)
    return load(name="_torchrl", sources=[str(p) for p in sources], extra_cflags=["-O3"], verbose=False)


@functools.lru_cache(maxsize=None)
def load_torchrl(allow_build: bool = True) -> dict:
    """torch, tensordict, torchrl and TorchRL's C++ trees (``SumSegmentTreeFp64`` and friends).

    Returns a dict with the modules, the tree module and a note on where the trees came from.
    When the trees had to be rebuilt, TorchRL's ``PrioritizedSampler`` is pointed at them (it looks
    the classes up in its module at construction time).
    """
    os.environ.setdefault("RL_WARNINGS", "0")  # no extension warning: we handle it here
    try:
        import tensordict
        import torch
        import torchrl
        from torchrl.data.replay_buffers.samplers import prioritized
    except Exception as error:  # noqa: BLE001
        raise PeerUnavailable(_short(error)) from error
    logging.getLogger("torchrl").setLevel(logging.WARNING)  # no INFO line per storage created
    try:
        import torchrl._torchrl as trees
        note = "prebuilt torchrl._torchrl"
    except ImportError as error:
        if not allow_build:
            raise PeerUnavailable(f"torchrl._torchrl does not load ({_short(error, 60)}); "
                                  "rebuild disabled") from error
        try:
            trees = _build_torchrl_trees()
        except PeerUnavailable:
            raise
        except Exception as build_error:  # noqa: BLE001
            raise PeerUnavailable(f"torchrl._torchrl does not load and rebuilding it failed: "
                                  f"{_short(build_error, 60)}") from build_error
        note = f"C++ trees rebuilt from torchrl/csrc against torch {torch.__version__} (-O3)"
        for name in ("SumSegmentTreeFp32", "SumSegmentTreeFp64", "MinSegmentTreeFp32", "MinSegmentTreeFp64"):
            setattr(prioritized, name, getattr(trees, name))
    return {"torch": torch, "tensordict": tensordict, "torchrl": torchrl, "trees": trees, "note": note}
