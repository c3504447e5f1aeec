"""Saving buffers as ``.npz`` without pickle: arrays plus one JSON metadata string.

Files are written to a temporary name and renamed into place, so an interrupted save never
leaves a half-written file where a good one was. Loading uses ``allow_pickle=False`` always.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from typing import Any, Mapping

import numpy as np

FORMAT_NAME = "r2d2kit.replay"
FORMAT_VERSION = 1
META_KEY = "__meta__"
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def write_npz(path: str | os.PathLike, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Atomically write ``arrays`` and the JSON ``meta`` to exactly ``path`` (no suffix is added)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    header = dict(meta, format=FORMAT_NAME, format_version=FORMAT_VERSION)
    payload = {META_KEY: np.array(json.dumps(header))}
    payload.update(arrays)
    descriptor, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            np.savez(handle, **payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def read_npz(path: str | os.PathLike, expected_class: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a file written by :func:`write_npz` for a buffer of class ``expected_class``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is truncated or corrupt, is not an r2d2kit buffer file, or holds a
            buffer of another class.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no saved buffer at {path!r}")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise _Foreign(f"{path!r} is a single .npy array, not an r2d2kit buffer (.npz)")
        with loaded as archive:
            if META_KEY not in archive.files:
                raise _Foreign(f"{path!r} is an .npz file but not an r2d2kit buffer (no {META_KEY!r} entry)")
            meta = json.loads(str(archive[META_KEY]))
            if not isinstance(meta, dict):
                raise _Foreign(f"{path!r}: the {META_KEY!r} entry is not a JSON object; not an r2d2kit buffer")
            arrays = {name: archive[name] for name in archive.files if name != META_KEY}
    except _Foreign as error:
        raise ValueError(str(error)) from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{path!r} is not a readable r2d2kit buffer file (truncated, corrupt or another format): {error}"
        ) from error
    if meta.get("format") != FORMAT_NAME:
        raise ValueError(f"{path!r} is not an r2d2kit buffer file (format {meta.get('format')!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path!r} has buffer format version {meta.get('format_version')}, this r2d2kit reads "
            f"version {FORMAT_VERSION}"
        )
    if meta.get("class") != expected_class:
        raise ValueError(
            f"{path!r} holds a {meta.get('class')}, not a {expected_class}; load it with "
            f"{meta.get('class')}.load()"
        )
    return meta, arrays


class _Foreign(Exception):
    """Raised inside read_npz to tell 'not ours' apart from 'unreadable'."""


def rng_to_json(rng: np.random.Generator) -> dict[str, Any]:
    """The generator's bit-generator state as plain JSON (arrays become tagged lists)."""

    def encode(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: encode(item) for key, item in value.items()}
        if isinstance(value, np.ndarray):
            return {"__ndarray__": value.tolist(), "dtype": value.dtype.str}
        if isinstance(value, np.integer):
            return int(value)
        return value

    return encode(rng.bit_generator.state)


def rng_from_json(state: Mapping[str, Any]) -> np.random.Generator:
    """Rebuild a generator in exactly the saved state (only numpy's own bit generators)."""

    def decode(value: Any) -> Any:
        if isinstance(value, dict):
            if "__ndarray__" in value:
                return np.array(value["__ndarray__"], dtype=np.dtype(value["dtype"]))
            return {key: decode(item) for key, item in value.items()}
        return value

    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ValueError(f"saved random state uses bit generator {name!r}; expected one of {_BIT_GENERATORS}")
    bit_generator = getattr(np.random, name)()
    bit_generator.state = decode(dict(state))
    return np.random.Generator(bit_generator)


def require_arrays(path: str, arrays: Mapping[str, np.ndarray], expected: Mapping[str, tuple]) -> None:
    """Check that every expected array is present with the expected shape (a truncated save fails here);
    ``None`` in a shape takes any length."""
    for name, shape in expected.items():
        if name not in arrays:
            raise ValueError(f"{path!r} is missing the {name!r} array; the file is incomplete")
        given = tuple(arrays[name].shape)
        if len(given) != len(shape) or any(want is not None and have != want for have, want in zip(given, shape)):
            raise ValueError(f"{path!r}: array {name!r} has shape {arrays[name].shape}, expected {tuple(shape)}")
