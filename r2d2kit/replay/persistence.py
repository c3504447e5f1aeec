"""Saving buffers as ``.npz`` without pickle: arrays plus one JSON metadata string.

Files are written to a temporary name and renamed into place, so an interrupted save never
leaves a half-written file where a good one was.

Nothing in a file is trusted before it is checked. :func:`read_npz` reads, in this order::

    zip directory     every entry stored uncompressed, none twice, their sizes within the file's
    __meta__          a JSON text of bounded length and nesting, of this format, version and class
    layout_of(meta)   the kind's check of the metadata: every array it implies, with exact shape and
                      dtype, and the memory its claimed capacity would preallocate
    entry names       an entry the layout does not name is refused, never read
    .npy headers      each array's header alone (bounded), checked against the layout and the entry's size
    data              only then; numpy's pickle support is never reached

so the memory a load takes is bounded by the file's own bytes plus what the kind's layout allows
(see ``BufferCore.load``). Every refusal is a ``ValueError`` that names the file and the field or
array (``FileNotFoundError`` for a missing file).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import struct
import tempfile
import tokenize
import zipfile
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, NamedTuple, Protocol, TypeAlias

import numpy as np
from numpy.lib import format as npy_format

FORMAT_NAME = "r2d2kit.replay"
FORMAT_VERSION = 1
META_KEY = "__meta__"
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")

# Limits on what a file may claim before it is parsed. Saved metadata is a few kilobytes (MT19937's
# random state, the largest part, is 7 kB) nested 4 deep; a megabyte and 32 levels leave room for any
# buffer's and refuse a text built to exhaust memory, time or json's recursion (RecursionError).
MAX_META_CHARS = 1_000_000
MAX_META_DEPTH = 32
# numpy writes the header of each saved array in 128 bytes (one numeric dtype, a shape of a few ints);
# numpy's own reader allows 10 000. A header is read only after its length field is checked.
MAX_NPY_HEADER = 4096
# Counters, write indices and episode times are int64 in the kernels, which add up to three of them
# (a goal table origin, a window start and its length): 2**60 leaves that room and is beyond any real
# run (2**60 steps at 10**9 per second take 36 years).
MAX_COUNT = 2**60
# json strings (with their escapes) are removed before nesting is measured: their brackets are text
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
# what a damaged zip or .npy raises while it is read (numpy raises ValueError for a bad header, and
# TokenError where its fallback parser for Python 2 headers meets unbalanced brackets)
_UNREADABLE = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, KeyError, struct.error,
               NotImplementedError, RuntimeError, OverflowError, SyntaxError, TypeError, tokenize.TokenError)

ArraySpec = tuple[tuple[int | None, ...], np.dtype]  # (shape, dtype) of a saved array; None: any length
# A JSON value as ``json.dumps`` takes it and ``json.loads`` returns it
JsonValue: TypeAlias = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
# A saved buffer's metadata as read back. Its values are typed Any because JSON is dynamic: each kind checks
# them (``meta_int``, ``meta_mapping``, ...) in its ``_saved_layout`` before anything else reads them.
Metadata: TypeAlias = Mapping[str, Any]


class SavedLayout(NamedTuple):
    """What a kind's metadata implies, checked before anything is allocated (see :func:`read_npz`).

    Attributes:
        arrays: every array the file must hold: ``{name: (shape, dtype)}``, ``None`` in a shape
            for a length the metadata does not fix (a list whose every entry is in the file).
        preallocated_bytes: what building a buffer of the claimed capacity allocates.
    """

    arrays: Mapping[str, ArraySpec]
    preallocated_bytes: int


class _HasShapeAndDtype(Protocol):
    """An array, or what describes one (an ``.npy`` header)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...


class _Header(NamedTuple):
    """An ``.npy`` entry as its header describes it."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int  # bytes before the data: magic, version, header length and header


class _Refused(Exception):
    """Raised inside :func:`read_npz` by its own checks, whose message is final (never rewritten)."""


def write_npz(path: str | os.PathLike[str], meta: Mapping[str, JsonValue], arrays: Mapping[str, np.ndarray]) -> None:
    """Atomically write ``arrays`` and the JSON ``meta`` to exactly ``path`` (no suffix is added)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    header = dict(meta, format=FORMAT_NAME, format_version=FORMAT_VERSION)
    payload = {META_KEY: np.array(json.dumps(header))}
    payload.update(arrays)
    descriptor, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            np.savez(handle, allow_pickle=False, **payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def read_npz(path: str | os.PathLike[str], expected_class: str,
             layout_of: Callable[[Metadata], Mapping[str, ArraySpec]]) -> tuple[Metadata, dict[str, np.ndarray]]:
    """Read a file written by :func:`write_npz` for a buffer of class ``expected_class``.

    ``layout_of(meta)``: the kind's check of the metadata; it returns every array the file must hold
    as ``{name: (shape, dtype)}`` (or raises ``ValueError``). No array is read before its entry is
    named there and its header matches; see the module docstring for the order of the checks.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is truncated or corrupt, is not an r2d2kit buffer file, holds a buffer of
            another class, or its metadata or arrays are refused (the message names which).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no saved buffer at {path!r}")
    try:
        with _open_archive(path) as archive:
            entries = _directory(path, archive, os.path.getsize(path))
            meta = _read_meta(path, archive, entries, expected_class)
            layout = layout_of(meta)
            _check_entry_names(path, entries, layout, expected_class)
            headers = {name: _read_header(path, archive, entries[f"{name}.npy"]) for name in layout
                       if f"{name}.npy" in entries}
            require_arrays(path, headers, layout)
            arrays = {name: _read_data(path, archive, entries[f"{name}.npy"], headers[name]) for name in layout}
    except _Refused as error:
        raise ValueError(str(error)) from None
    return meta, arrays


@contextlib.contextmanager
def _unreadable(path: str, what: str) -> Iterator[None]:
    """Turn what a damaged zip or ``.npy`` raises into a ``ValueError`` naming the file and the entry."""
    try:
        yield
    except _UNREADABLE as error:
        raise _Refused(f"{path!r} is not a readable r2d2kit buffer file (truncated, corrupt or another format): "
                       f"{what}: {error}") from error


@contextlib.contextmanager
def _open_archive(path: str) -> Iterator[zipfile.ZipFile]:
    """The file as a zip archive (its directory read, no entry yet)."""
    with open(path, "rb") as handle:
        if handle.read(6) == npy_format.MAGIC_PREFIX:
            raise _Refused(f"{path!r} is a single .npy array, not an r2d2kit buffer (.npz)")
        with _unreadable(path, "zip directory"):
            archive = zipfile.ZipFile(handle)
        with archive:
            yield archive


def _directory(path: str, archive: zipfile.ZipFile, file_bytes: int) -> dict[str, zipfile.ZipInfo]:
    """The archive's entries by name: each at most once, stored uncompressed, all within the file's size.

    ``save`` stores arrays uncompressed, so an entry's size is bytes really in the file: no entry can
    inflate a small file (a compressed one is refused, not read).
    """
    entries: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        if info.filename in entries:
            raise _Refused(f"{path!r}: the zip entry {_short(info.filename)} appears twice; the file is corrupt")
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise _Refused(f"{path!r}: the zip entry {_short(info.filename)} is compressed (method "
                           f"{info.compress_type}); save() stores arrays uncompressed, and a compressed entry could "
                           "inflate far beyond the file's size: load only files written by save()")
        entries[info.filename] = info
    claimed = sum(info.file_size for info in entries.values())
    if claimed > file_bytes:
        raise _Refused(f"{path!r}: the zip directory claims {claimed} bytes of entries in a {file_bytes}-byte file; "
                       "the file is truncated or corrupt")
    return entries


def _read_meta(path: str, archive: zipfile.ZipFile, entries: Mapping[str, zipfile.ZipInfo],
               expected_class: str) -> Metadata:
    """The ``__meta__`` JSON object, checked for size and nesting before it is parsed, then for format and class."""
    info = entries.get(f"{META_KEY}.npy")
    if info is None:
        raise _Refused(f"{path!r} is an .npz file but not an r2d2kit buffer (no {META_KEY!r} entry)")
    header = _read_header(path, archive, info)
    if header.dtype.kind != "U" or header.shape != ():
        raise _Refused(f"{path!r}: the {META_KEY!r} entry is a {header.dtype} array of shape {header.shape}, not a "
                       "JSON text; not an r2d2kit buffer")
    if header.dtype.itemsize > 4 * MAX_META_CHARS:
        raise _Refused(f"{path!r}: the {META_KEY!r} text has {header.dtype.itemsize // 4} characters, more than "
                       f"MAX_META_CHARS = {MAX_META_CHARS}; not an r2d2kit buffer")
    raw = _read_data(path, archive, info, header).tobytes()
    with _unreadable(path, META_KEY):  # decoded here: numpy's own str() fails with SystemError on a bad code point
        text = raw.decode("utf-32-be" if header.dtype.byteorder == ">" else "utf-32-le").rstrip("\x00")
    depth = _json_depth(text)
    if depth > MAX_META_DEPTH:
        raise _Refused(f"{path!r}: the {META_KEY!r} JSON nests {depth} levels deep, more than MAX_META_DEPTH = "
                       f"{MAX_META_DEPTH}; not an r2d2kit buffer")
    try:
        meta = json.loads(text)
    except ValueError as error:  # JSONDecodeError, or an integer of more than 4300 digits
        raise _Refused(f"{path!r}: the {META_KEY!r} entry is not valid JSON ({error}); the file is corrupt") from None
    if not isinstance(meta, dict):
        raise _Refused(f"{path!r}: the {META_KEY!r} entry is not a JSON object; not an r2d2kit buffer")
    _check_identity(path, meta, expected_class)
    return meta


def _json_depth(text: str) -> int:
    """Deepest nesting of ``[`` and ``{`` in a JSON text, outside its strings (linear time, no recursion)."""
    bare = np.frombuffer(_JSON_STRING.sub('""', text).encode("utf-8", "replace"), dtype=np.uint8)
    steps = np.isin(bare, (ord("["), ord("{"))).astype(np.int32) - np.isin(bare, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))


def _check_identity(path: str, meta: Metadata, expected_class: str) -> None:
    """The metadata's format, version and class are this reader's."""
    if meta.get("format") != FORMAT_NAME:
        raise _Refused(f"{path!r} is not an r2d2kit buffer file (format {_short(meta.get('format'))})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise _Refused(f"{path!r} has buffer format version {_short(meta.get('format_version'))}, this r2d2kit "
                       f"reads version {FORMAT_VERSION}")
    if meta.get("class") != expected_class:
        saved = _short(meta.get("class"), 40).strip("'")
        raise _Refused(f"{path!r} holds a {saved}, not a {expected_class}; load it with {saved}.load()")


def _check_entry_names(path: str, entries: Mapping[str, zipfile.ZipInfo], layout: Mapping[str, ArraySpec],
                       expected_class: str) -> None:
    """Refuse entries the layout does not name (unread: nothing unknown is ever inflated or parsed)."""
    known = {f"{name}.npy" for name in layout} | {f"{META_KEY}.npy"}
    unknown = sorted(name for name in entries if name not in known)
    if unknown:
        shown = ", ".join(_short(name) for name in unknown[:5]) + (f" and {len(unknown) - 5} more" if
                                                                   len(unknown) > 5 else "")
        raise _Refused(f"{path!r}: unexpected entries {shown} for a saved {expected_class} (not read); the file is "
                       "corrupt or was not written by save()")


def _read_header(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> _Header:
    """An entry's ``.npy`` header, its length checked before it is read (versions 1.0 and 2.0, as numpy writes)."""
    name = info.filename
    with _unreadable(path, name), archive.open(info) as member:
        version = npy_format.read_magic(member)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"unsupported .npy version {version}")
        length_field = _read_exact(member, 2 if version == (1, 0) else 4)
        length = int.from_bytes(length_field, "little")
        if length > MAX_NPY_HEADER:
            raise _Refused(f"{path!r}: the entry {_short(name)} has a {length}-byte .npy header, more than "
                           f"MAX_NPY_HEADER = {MAX_NPY_HEADER}; the file is corrupt (not read)")
        reader = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
        raw = io.BytesIO(length_field + _read_exact(member, length))
        shape, fortran_order, dtype = reader(raw, max_header_size=MAX_NPY_HEADER)
    if any(length < 0 for length in shape):
        raise _Refused(f"{path!r}: the entry {_short(name)} claims the shape {shape}; the file is corrupt")
    return _Header(tuple(shape), dtype, bool(fortran_order), 8 + len(length_field) + length)


def _read_data(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, header: _Header) -> np.ndarray:
    """An entry's array, read only if its header's shape and dtype account for exactly the entry's size."""
    data_bytes = math.prod(header.shape) * header.dtype.itemsize
    if header.data_offset + data_bytes != info.file_size:
        raise _Refused(f"{path!r}: the entry {_short(info.filename)} holds {info.file_size - header.data_offset} "
                       f"data bytes, its header {header.shape} {header.dtype} needs {data_bytes}; the file is "
                       "truncated or corrupt")
    with _unreadable(path, info.filename), archive.open(info) as member:
        _read_exact(member, header.data_offset)
        data = _read_exact(member, data_bytes)
    with _unreadable(path, info.filename):  # (a dtype no buffer holds, such as StringDType, raises here)
        array = np.frombuffer(data, dtype=header.dtype)
        return array.reshape(header.shape, order="F" if header.fortran_order else "C")


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    """Exactly ``size`` bytes, or ``EOFError`` (a stored entry cannot hold more than the file does)."""
    data = stream.read(size)
    if len(data) != size:
        raise EOFError(f"{size} bytes expected, {len(data)} found")
    return data


def require_arrays(path: str, found: Mapping[str, _HasShapeAndDtype], expected: Mapping[str, ArraySpec]) -> None:
    """Check that every expected array is present with exactly the expected shape and dtype.

    ``found`` maps names to anything with ``shape`` and ``dtype`` (``.npy`` headers, or arrays);
    ``None`` in an expected shape takes any length. A dtype is never converted: a value the field
    cannot hold (300 in a ``uint8``, a fraction in an int, an imaginary part) would be changed silently.
    """
    for name, (shape, dtype) in expected.items():
        if name not in found:
            raise ValueError(f"{path!r} is missing the {name!r} array; the file is incomplete")
        given = tuple(found[name].shape)
        if len(given) != len(shape) or any(want is not None and have != want for have, want in zip(given, shape)):
            wanted = "(" + ", ".join("n" if want is None else str(want) for want in shape) + ("," if len(shape) == 1
                                                                                             else "") + ")"
            raise ValueError(f"{path!r}: array {name!r} has shape {given}, expected {wanted}; the file is corrupt or "
                           "its metadata disagrees with it")
        if found[name].dtype != np.dtype(dtype):
            raise ValueError(f"{path!r}: array {name!r} has dtype {found[name].dtype}, expected {np.dtype(dtype)} (its "
                           "field's); arrays are never converted on load: re-save it from a buffer of that dtype")


# ===================================================================================================== metadata
def meta_field(path: str, mapping: object, key: str, label: str | None = None) -> Any:
    """``mapping[key]`` of a file's metadata, or a ``ValueError`` naming the file and the field (``label``)."""
    label = key if label is None else label
    if not isinstance(mapping, Mapping):
        parent = label.rpartition(".")[0] or "the metadata"
        raise ValueError(f"{path!r}: malformed metadata: {parent!r} is not a JSON object; the file is corrupt")
    if key not in mapping:
        raise ValueError(f"{path!r}: malformed metadata: field {label!r} is missing; the file is incomplete or was "
                         "not written by save()")
    return mapping[key]


def meta_int(path: str, mapping: object, key: str, low: int = 0, high: int = MAX_COUNT,
             label: str | None = None) -> int:
    """An integer metadata field within ``[low, high]`` (a JSON integer: not a bool, float or string)."""
    value = meta_field(path, mapping, key, label)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{path!r}: malformed metadata: field {label or key!r} = {_short(value)} must be an integer "
                         f"in [{low}, {high}]; the file is corrupt or was not written by save()")
    return value


def meta_mapping(path: str, mapping: object, key: str, label: str | None = None) -> Metadata:
    """A metadata field that must be a JSON object."""
    value = meta_field(path, mapping, key, label)
    if not isinstance(value, Mapping):
        raise ValueError(f"{path!r}: malformed metadata: field {label or key!r} = {_short(value)} must be a JSON "
                         "object; the file is corrupt or was not written by save()")
    return value


def meta_float(path: str, mapping: object, key: str, low: float, high: float = math.inf,
               label: str | None = None) -> float:
    """A finite real metadata field within ``[low, high]``."""
    value = meta_field(path, mapping, key, label)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"{path!r}: malformed metadata: field {label or key!r} = {_short(value)} must be a finite "
                         f"number in [{low}, {high}]; the file is corrupt or was not written by save()")
    return float(value)


def _short(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: a message never echoes a megabyte of crafted text."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ===================================================================================================== random state
def rng_to_json(rng: np.random.Generator) -> JsonValue:
    """The generator's bit-generator state as plain JSON (arrays become tagged lists)."""

    def encode(value: Any) -> JsonValue:  # Any: numpy types a bit generator's state as dict[str, Any]
        if isinstance(value, dict):
            return {key: encode(item) for key, item in value.items()}
        if isinstance(value, np.ndarray):
            return {"__ndarray__": value.tolist(), "dtype": value.dtype.str}
        if isinstance(value, np.integer):
            return int(value)
        return value

    return encode(rng.bit_generator.state)


def rng_from_json(path: str, state: Any) -> np.random.Generator:
    """Rebuild a generator in exactly the saved state (only numpy's own bit generators, integer arrays).

    Raises:
        ValueError: the saved state is not one numpy's bit generator accepts (the file is named).
    """

    def decode(value: Any) -> Any:  # JSON from the file in, what numpy's state setter takes out
        if isinstance(value, dict):
            if "__ndarray__" in value:
                dtype = np.dtype(value["dtype"])
                if dtype.kind not in "iu":  # bit generator states hold integers only
                    raise ValueError(f"an array of dtype {dtype}")
                return np.array(value["__ndarray__"], dtype=dtype)
            return {key: decode(item) for key, item in value.items()}
        return value

    name = state.get("bit_generator") if isinstance(state, Mapping) else None
    if name not in _BIT_GENERATORS:
        raise ValueError(f"{path!r}: saved random state uses bit generator {_short(name)}; expected one of "
                         f"{_BIT_GENERATORS}; the file is corrupt")
    bit_generator = getattr(np.random, name)()
    try:
        bit_generator.state = decode(dict(state))
    except (ValueError, TypeError, KeyError, OverflowError) as error:
        raise ValueError(f"{path!r}: malformed metadata: field 'rng' is not a {name} state ({error}); the file is "
                         "corrupt") from None
    return np.random.Generator(bit_generator)
