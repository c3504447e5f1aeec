"""The run directory's one rule: nothing is read or written through a link that leaves it.

A run directory is often shared, copied or handed over (``--resume`` someone's run). A
``summary.json`` or ``weights.weights.h5`` that is a symbolic link to ``~/.bashrc`` would have the
trainer overwrite that file, and a checkpoint directory linked from elsewhere would be loaded as if
it were the run's own. Every path the trainer reads or writes under a run goes through
:func:`run_path`; :func:`check_run_directory` looks at the whole tree once, before a run starts.
"""

from __future__ import annotations

import os
from pathlib import Path


class RunDirectoryError(RuntimeError):
    """A run directory that cannot be used safely; the message names the path and the fix."""


def _leaves(link: Path, root: Path) -> bool:
    target = link.resolve()
    return target != root and root not in target.parents


def _refuse(link: Path, run_dir: str | os.PathLike) -> RunDirectoryError:
    return RunDirectoryError(
        f"{link} is a symbolic link to {link.resolve()}, outside the run directory {run_dir}; r2d2kit never reads "
        "or writes through such a link: remove the link (or copy the file in its place)")


def run_path(run_dir: str | os.PathLike, *parts: str) -> Path:
    """``run_dir / parts``, refused if an existing component below ``run_dir`` is a link leaving the run."""
    root = Path(run_dir).resolve()
    path = Path(run_dir)
    for part in parts:
        path = path / part
        if path.is_symlink() and _leaves(path, root):
            raise _refuse(path, run_dir)
    return path


def check_run_directory(run_dir: str | os.PathLike[str]) -> None:
    """Refuse a run directory holding any link that leaves it (the links themselves are not followed)."""
    root = Path(run_dir).resolve()
    for folder, subfolders, files in os.walk(run_dir, followlinks=False):
        for name in subfolders + files:
            path = Path(folder, name)
            if path.is_symlink() and _leaves(path, root):
                raise _refuse(path, run_dir)


def holds_run(run_dir: str | os.PathLike[str]) -> bool:
    """Whether ``run_dir`` already holds a run (its checkpoints or its evaluations): a new run must not write there."""
    return (Path(run_dir) / "checkpoints").exists() or (Path(run_dir) / "metrics.csv").exists()


def existing_run_message(run_dir: str | os.PathLike[str]) -> str:
    """What to do instead of starting a new run in ``run_dir``, which already holds one (one wording everywhere)."""
    return (f"run directory {run_dir} already holds a run; continue it with --resume {run_dir} "
            "(Trainer(..., resume=True)), or pick another --run-dir / --name")
