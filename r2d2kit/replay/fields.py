"""Field specs and preallocated ring storage shared by every buffer.

A field spec maps a name to ``(shape, dtype)`` of one item, e.g.
``{"obs": ((4,), "float32"), "action": ((), "int64")}``. Storage for ``capacity`` items is
allocated once, up front, so a buffer's memory use is known (and fails) at construction time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import check_positive_int
from r2d2kit.replay.persistence import JsonValue, Metadata

RESERVED_NAMES = frozenset({"indices", "weights"})

# One field as a caller declares it: (shape, dtype), the shape an int (``4`` for ``(4,)``) or a sequence of ints
FieldDeclaration: TypeAlias = tuple[int | Sequence[int], npt.DTypeLike]
Fields: TypeAlias = Mapping[str, FieldDeclaration]  # {"obs": ((4,), "float32"), "action": ((), "int64")}


@dataclass(frozen=True)
class FieldSpec:
    """Shape and dtype of one item of a field (the leading batch/ring axis is not included)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        """Bytes per item."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def to_json(self) -> list[JsonValue]:
        """``[shape, dtype string]``: how a saved buffer records the field without pickling."""
        return [list(self.shape), self.dtype.str]


def parse_fields(fields: Fields) -> dict[str, FieldSpec]:
    """Validate a ``{"name": (shape, dtype)}`` mapping into ``FieldSpec`` objects.

    ``shape`` may be an int (``4`` means ``(4,)``) or a tuple; ``dtype`` anything ``np.dtype``
    accepts except object and string dtypes, which cannot be stored without pickling.
    """
    if not isinstance(fields, Mapping) or not fields:
        raise ValueError(
            'fields must be a non-empty mapping like {"obs": ((4,), "float32"), "action": ((), "int64")}, '
            f"got {fields!r}"
        )
    specs: dict[str, FieldSpec] = {}
    for name, entry in fields.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"field name {name!r} must be a Python identifier (it becomes a keyword of add())")
        if name in RESERVED_NAMES:
            raise ValueError(f"field name {name!r} is reserved: sample() returns it; rename the field")
        try:
            shape, dtype = entry
        except (TypeError, ValueError):
            raise ValueError(f"fields[{name!r}] must be a (shape, dtype) pair, got {entry!r}") from None
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        try:
            shape = tuple(check_positive_int(f"fields[{name!r}] shape entry",
                                             int(d) if isinstance(d, np.integer) else d)
                          for d in shape)
        except TypeError:
            raise ValueError(f"fields[{name!r}] shape must be a tuple of positive ints, got {entry[0]!r}") from None
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"fields[{name!r}] dtype {entry[1]!r} is not a numpy dtype") from None
        if dtype.hasobject or dtype.kind in "OUSVMT":  # T: numpy's variable-width StringDType
            raise ValueError(f"fields[{name!r}] dtype {dtype} cannot be stored; use a numeric or bool dtype")
        specs[name] = FieldSpec(name, shape, dtype)
    return specs


def fields_from_json(data: Metadata) -> dict[str, tuple[tuple[int, ...], str]]:
    """Inverse of ``{name: spec.to_json()}`` (as written by ``save``): a field mapping for a constructor."""
    return {name: (tuple(shape), dtype) for name, (shape, dtype) in data.items()}


MAX_SAVED_DIMS = 32  # numpy's arrays have at most 64 axes; a field of a saved buffer has a few


def fields_from_saved(path: str, data: object, label: str) -> dict[str, FieldSpec]:
    """The field specs a file's metadata field ``label`` declares (``{name: [shape, dtype]}``, as ``save``
    writes them), checked as a constructor checks them; a refusal names the file."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{path!r}: malformed metadata: field {label!r} must map field names to [shape, dtype]; "
                         "the file is corrupt")
    fields = {}
    for name, entry in data.items():
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], list) \
                or len(entry[0]) > MAX_SAVED_DIMS or not isinstance(entry[1], str):
            raise ValueError(f"{path!r}: malformed metadata: field '{label}.{name:.40}' must be [shape, dtype] with at "
                             f"most {MAX_SAVED_DIMS} dimensions, got {entry!r:.80}; the file is corrupt")
        fields[name] = (tuple(entry[0]), entry[1])
    try:
        return parse_fields(fields)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{path!r}: malformed metadata: field {label!r}: {error}") from None


def item_bytes(specs: Mapping[str, FieldSpec]) -> int:
    """Bytes of one item of every field (Python integers: a shape read from a file cannot overflow them)."""
    return sum(math.prod(spec.shape) * spec.dtype.itemsize for spec in specs.values())


def check_cast(spec: FieldSpec, array: np.ndarray) -> np.ndarray:
    """Return ``array`` in the field's dtype if the conversion loses no kind of information."""
    if array.dtype == spec.dtype or np.can_cast(array.dtype, spec.dtype, casting="safe"):
        return array
    both_integer = array.dtype.kind in "iu" and spec.dtype.kind in "iu"
    if not both_integer and np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
        return array  # e.g. float64 -> float32, int -> float: no kind of information is lost
    if both_integer and array.size:
        info = np.iinfo(spec.dtype)
        low, high = array.min(), array.max()
        if info.min <= low and high <= info.max:
            return array
        raise ValueError(
            f"field {spec.name!r}: values {low} .. {high} do not fit dtype {spec.dtype} ({info.min} .. {info.max})"
        )
    if both_integer:
        return array
    raise TypeError(
        f"field {spec.name!r} has dtype {spec.dtype} but got {array.dtype}; convert it explicitly "
        f"(e.g. .astype(np.{spec.dtype.name})) if that is what you mean"
    )


class RingStorage:
    """Preallocated ``[capacity, *shape]`` arrays, one per field, written as a ring.

    Only the write position and size live here; priorities are the buffers' business.
    """

    def __init__(self, capacity: int, fields: Fields) -> None:
        self.capacity = check_positive_int("capacity", capacity)
        self.specs = parse_fields(fields)
        self.arrays = {
            name: np.zeros((self.capacity,) + spec.shape, dtype=spec.dtype) for name, spec in self.specs.items()
        }
        self.position = 0  # next slot to write
        self.size = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the field arrays."""
        return sum(array.nbytes for array in self.arrays.values())

    def check_item(self, values: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]:
        """Check one item per field (exact shape) and return it with a leading axis of 1."""
        arrays = self._check_names(values)
        checked = {}
        for name, spec in self.specs.items():
            array = np.asarray(arrays[name])
            if array.shape != spec.shape:
                raise ValueError(
                    f"field {name!r} expects one item of shape {spec.shape}, got shape {array.shape}"
                    + ("; use add_batch() for several items" if array.shape[1:] == spec.shape else "")
                )
            checked[name] = check_cast(spec, array)[np.newaxis]
        return checked

    def check_batch(self, values: Mapping[str, npt.ArrayLike]) -> tuple[dict[str, np.ndarray], int]:
        """Check a batch per field (shape ``[n, *shape]``, one ``n`` for all) and return it with ``n``."""
        arrays = self._check_names(values)
        checked = {}
        count = None
        for name, spec in self.specs.items():
            array = np.asarray(arrays[name])
            if array.ndim != len(spec.shape) + 1 or array.shape[1:] != spec.shape:
                raise ValueError(f"field {name!r} expects a batch of shape (n, {', '.join(map(str, spec.shape))}"
                                 f"{',' if len(spec.shape) == 1 else ''}), got shape {array.shape}")
            if count is None:
                count = array.shape[0]
                first = name
            elif array.shape[0] != count:
                raise ValueError(
                    f"field {name!r} has {array.shape[0]} items but field {first!r} has {count}; "
                    "every field needs the same leading batch size"
                )
            checked[name] = check_cast(spec, array)
        assert count is not None  # a storage has a field: parse_fields refuses none
        return checked, int(count)

    def _check_names(self, values: Mapping[str, npt.ArrayLike]) -> Mapping[str, npt.ArrayLike]:
        missing = [name for name in self.specs if name not in values]
        unknown = [name for name in values if name not in self.specs]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing field(s) {missing}")
            if unknown:
                parts.append(f"unknown field(s) {unknown}")
            raise ValueError("; ".join(parts) + f" (the buffer's fields are {list(self.specs)})")
        return values

    def write(self, batch: Mapping[str, np.ndarray], count: int) -> list[tuple[int, int]]:
        """Write ``count`` items at the ring position; return the written ``[start, stop)`` slot ranges.

        Writing more items than the capacity keeps the last ``capacity`` ones, exactly as adding
        them one at a time would.
        """
        if count == 0:
            return []
        capacity = self.capacity
        skip = max(0, count - capacity)
        kept = count - skip
        start = (self.position + skip) % capacity
        first_len = min(kept, capacity - start)
        segments = [(start, start + first_len)]
        if kept > first_len:
            segments.append((0, kept - first_len))
        for name, source in self.arrays.items():
            values = batch[name]
            offset = skip
            for seg_start, seg_stop in segments:
                length = seg_stop - seg_start
                source[seg_start:seg_stop] = values[offset:offset + length]
                offset += length
        self.position = (self.position + count) % capacity
        self.size = min(capacity, self.size + count)
        return segments

    def gather(self, indices: np.ndarray, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Field values at ``indices``: fresh arrays, or written into ``out`` (``[n, *shape]`` per field).

        ``indices`` must be valid slots (the samplers' are): ``mode="clip"`` skips numpy's range
        check, which with ``out`` would gather into a hidden buffer and copy it again.
        """
        if out is None:
            return {name: array.take(indices, axis=0) for name, array in self.arrays.items()}
        for name, array in self.arrays.items():
            np.take(array, indices, axis=0, out=out[name], mode="clip")
        return out
