"""Training checkpoints: written atomically, verified on load, never unpickled.

A checkpoint is one directory under ``<run>/checkpoints``::

    ckpt-000050000/
        ...                   what the learner saves of itself (:meth:`~r2d2kit.agent.seam.Learner.save`);
                              R2D2's: online.weights.h5, target.weights.h5 (Keras weights) and
                              optimizer.npz (its variables, allow_pickle=False)
        state.json            counters: env steps, updates, episodes, next evaluation, ...
        replay.npz            the replay buffer (only with checkpoints.save_replay)
        MANIFEST.json         size and SHA-256 of every file above, written last

Nothing here knows an agent: learners write and read their own files with :func:`save_keras_weights`,
:func:`load_keras_weights`, :func:`save_optimizer` and :func:`load_optimizer`, which name the file and the
fix when it does not fit.

Everything is written into a hidden temporary directory which is renamed into place only when
complete, so a crash mid-save leaves the previous checkpoint as the newest one, and a save that fails
(a full disk) is a :class:`CheckpointWriteError` naming that checkpoint, after the temporary directory
is removed; temporary directories a killed run left are removed by the next save. Loading checks the
manifest first: a truncated or altered file is a :class:`CheckpointError` that names the file and
says what to do, never a stack trace from deep inside h5py or numpy.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from r2d2kit.training.run_directory import run_path

if TYPE_CHECKING:
    import keras

    from r2d2kit.agent.seam import Learner
    from r2d2kit.replay.sequence import SequenceReplayBuffer

MANIFEST = "MANIFEST.json"
FORMAT = "r2d2kit.checkpoint"  # the manifest format tag (kept when the module moved to training/)
_NAME = re.compile(r"^ckpt-(\d{9,})$")
_TMP_PREFIX = ".tmp-ckpt-"  # a checkpoint being written; never a checkpoint (_NAME does not match it)
_OLD_PREFIX = ".old-ckpt-"  # holds a checkpoint while a save of the same step replaces it


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the fix."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk, an I/O error); the message names the newest good one."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    """``<run>/checkpoints`` (refused if it is a link out of the run)."""
    return run_path(run_dir, "checkpoints")


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temporary directories and links are ignored)."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in root.iterdir()
             if path.is_dir() and not path.is_symlink() and (match := _NAME.match(path.name))]
    return [path for _, path in sorted(found)]


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest checkpoint directory of a run, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(run_dir: str | os.PathLike, learner: Learner, state: dict[str, Any],
                    replay: SequenceReplayBuffer | None = None, keep: int = 2) -> Path:
    """Write a checkpoint of ``learner`` (what its ``save`` writes), ``state`` and optionally ``replay``.

    Args:
        run_dir: the run directory; the checkpoint goes to ``<run>/checkpoints/ckpt-<env steps>``.
        learner: any agent's :class:`~r2d2kit.agent.seam.Learner`.
        state: JSON-serialisable counters; must hold ``env_steps``.
        replay: a buffer with ``save(path)``, or None.
        keep: newest checkpoints to keep; older ones are deleted after this one is in place.

    Returns:
        The checkpoint directory.
    """
    root = checkpoint_dir(run_dir)
    final = root / f"ckpt-{int(state['env_steps']):09d}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        _clean_leftovers(root)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=root))
    except OSError as error:
        raise _write_error(run_dir, final, error) from error
    try:
        learner.save(tmp)
        (tmp / "state.json").write_text(json.dumps(state, indent=2))
        if replay is not None:
            replay.save(tmp / "replay.npz")
        files = {path.name: {"bytes": path.stat().st_size, "sha256": _sha256(path)}
                 for path in sorted(tmp.iterdir())}
        (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT, "version": 1, "files": files}, indent=2))
        for path in tmp.iterdir():
            _fsync(path, os.O_RDONLY)
        _fsync(tmp, os.O_RDONLY)  # the files' data and names reach the disk before the rename publishes them
        if final.exists():  # the same step saved twice (e.g. Ctrl-C right after a periodic save): swap, then drop
            replaced = Path(tempfile.mkdtemp(prefix=_OLD_PREFIX, dir=root))
            os.rename(final, replaced / final.name)
            os.rename(tmp, final)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync(root, os.O_RDONLY)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, OSError):
            raise _write_error(run_dir, final, error) from error
        raise
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync(path: Path, flags: int) -> None:
    """fsync a file or a directory (its entries: the files written, a rename)."""
    descriptor = os.open(path, flags)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _clean_leftovers(root: Path) -> None:
    """Remove what a killed save left: half-written temporary directories, and a replaced checkpoint
    (put back if the kill came between its swap's two renames). One trainer writes a run directory."""
    for stale in root.glob(f"{_TMP_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    for held in root.glob(f"{_OLD_PREFIX}*"):
        for checkpoint in held.iterdir():
            if _NAME.match(checkpoint.name) and not (root / checkpoint.name).exists():
                os.rename(checkpoint, root / checkpoint.name)
        shutil.rmtree(held, ignore_errors=True)


def _write_error(run_dir: str | os.PathLike, final: Path, error: OSError) -> CheckpointWriteError:
    """The named error of a failed save: which checkpoint, why, and which one ``--resume`` picks instead."""
    newest = latest_checkpoint(run_dir)
    kept = (f"the newest complete checkpoint is still {newest.name}, the one --resume picks" if newest is not None
            else "no earlier checkpoint exists")
    reason = error.strerror or str(error)
    return CheckpointWriteError(f"could not write checkpoint {final.name} into {final.parent} ({reason}, errno "
                                f"{error.errno}); nothing of it was kept and {kept}; free space on that disk "
                                f"(or move the run) before resuming")


def verify_checkpoint(path: str | os.PathLike, only: Collection[str] | None = None,
                      fix: str | None = None) -> dict[str, Any]:
    """Check the files against the manifest and return ``state.json``; raise :class:`CheckpointError`.

    Args:
        path: the checkpoint directory.
        only: check just these files (and ``state.json``), which must be listed: evaluation reads the
            policy's weights and needs no replay, so a damaged ``replay.npz`` must not stop it. Default: every
            file the manifest lists.
        fix: the advice a refusal ends with (default: how to resume from an earlier checkpoint).
    """
    path = Path(path)
    fix = fix or f"delete {path} to resume from the checkpoint before it, or start a new run without --resume"
    manifest_path = path / MANIFEST
    links = sorted(entry.name for entry in [path, *path.iterdir()] if entry.is_symlink()) if path.is_dir() else []
    if path.is_symlink() or links:
        raise CheckpointError(f"checkpoint {path}: {', '.join(links)} is a symbolic link; a checkpoint is read only "
                              f"from its own files: {fix}")
    if not manifest_path.is_file():
        raise CheckpointError(f"checkpoint {path} is incomplete: it has no {MANIFEST}; {fix}")
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}")
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupted ({error}); {fix}") from None
    for name, expected in files.items():
        if only is not None and name not in only and name != "state.json":
            continue
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint {path} is missing {name}; {fix}")
        if file.stat().st_size != expected["bytes"] or _sha256(file) != expected["sha256"]:
            raise CheckpointError(f"checkpoint {path}: {name} is corrupted (its size or SHA-256 differs from "
                                  f"{MANIFEST}); {fix}")
    for name in ("state.json", *(only or ())):
        if name not in files:
            raise CheckpointError(f"checkpoint {path} does not list {name} in {MANIFEST}; {fix}")
    # a learner reads its own files (and names one that is missing): none may be one the manifest did not verify
    unlisted = sorted(entry.name for entry in path.iterdir() if entry.is_file() and entry.name not in files
                      and entry.name != MANIFEST)
    if unlisted:
        raise CheckpointError(f"checkpoint {path} holds {', '.join(unlisted)}, which {MANIFEST} does not list (a file "
                              f"added or renamed after the checkpoint was written); {fix}")
    try:
        state = json.loads((path / "state.json").read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"checkpoint {path}: state.json is not JSON ({error}); {fix}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path}: state.json holds {type(state).__name__}, not the run's counters; "
                              f"{fix}")
    return state


def restore_learner(path: str | os.PathLike, learner: Learner) -> dict[str, Any]:
    """Verify a checkpoint, load what the learner saved into ``learner``; return the checkpoint's state."""
    path = Path(path)
    state = verify_checkpoint(path)
    learner.restore(path)
    learner.updates = int(state.get("updates", 0))
    return state


def save_keras_weights(model: keras.Model, path: Path) -> None:
    """A Keras ``.weights.h5`` file of ``model`` (no pickle, no code)."""
    model.save_weights(str(path))


def load_policy_weights(model: keras.Model, path: Path) -> None:
    """Load an evaluation's weights file (``save_policy_weights``'s: a checkpoint's policy file, ``best.weights.h5``)
    into ``model``, a network an agent builder made from the run's config.

    Raises:
        CheckpointError: the file is not an HDF5 weights file, or holds another network's weights.
    """
    try:
        model.load_weights(str(path))
    except (OSError, ValueError) as error:  # h5py: not an HDF5 file; Keras: another network's weights
        raise CheckpointError(f"{path} cannot be loaded into the network the run's config builds ({error})") from None


def load_keras_weights(model: keras.Model, path: Path) -> None:
    """Load a :func:`save_keras_weights` file of a checkpoint into ``model``.

    Raises:
        CheckpointError: the file is not an HDF5 weights file, or holds another network's weights.
    """
    checkpoint = path.parent
    try:
        model.load_weights(str(path))
    except ValueError as error:
        raise CheckpointError(f"checkpoint {checkpoint} does not fit this network ({error}); resume with the run's "
                              "own config.yaml") from None
    except OSError as error:  # h5py: not an HDF5 file, truncated inside
        raise CheckpointError(f"checkpoint {checkpoint}: {path.name} is not a readable weights file ({error}); delete "
                              f"{checkpoint} to resume from the checkpoint before it") from None


def save_optimizer(optimizer: keras.optimizers.Optimizer, path: Path) -> None:
    """The optimizer's variables (moments, iteration count) in one ``.npz``, in the optimizer's order."""
    arrays = {f"v{i:04d}": np.asarray(v.numpy()) for i, v in enumerate(optimizer.variables)}
    np.savez(path, allow_pickle=False, **arrays)


def load_optimizer(optimizer: keras.optimizers.Optimizer, trainable: list[keras.Variable], path: Path) -> None:
    """Load a :func:`save_optimizer` file into ``optimizer`` (built for ``trainable`` first if it is not).

    Raises:
        CheckpointError: the file is no optimizer state r2d2kit wrote, or its variables do not fit.
    """
    checkpoint = path.parent
    if not optimizer.built:
        optimizer.build(trainable)
    try:
        with np.load(path, allow_pickle=False) as saved:
            values = [saved[f"v{i:04d}"] for i in range(len(saved.files))]
    except (ValueError, KeyError, OSError, zipfile.BadZipFile) as error:  # object arrays, odd names, not a zip
        raise CheckpointError(f"checkpoint {checkpoint}: {path.name} is not an optimizer state r2d2kit wrote "
                              f"({error}); delete {checkpoint} to resume from the checkpoint before it") from None
    variables = optimizer.variables
    if len(values) != len(variables) or any(v.shape != tuple(x.shape) or x.dtype.kind not in "biuf"
                                            for v, x in zip(variables, values)):
        raise CheckpointError(f"checkpoint {checkpoint}: the optimizer state ({len(values)} variables) does not fit "
                              f"this optimizer ({len(variables)}); resume with the run's own config.yaml")
    for variable, value in zip(variables, values):
        variable.assign(value)
