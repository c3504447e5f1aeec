"""How a run that must stop on a failure ends: which failure, which exit status, what was saved.

:meth:`r2d2kit.training.trainer.Trainer.fit` stops on a failure it cannot train through the way it
stops on Ctrl-C: it closes the actors (every process reaped, every shared-memory segment unlinked),
writes a final checkpoint when its state is sound, and raises :class:`TrainingFailed`, whose message
is one line: what failed, what was saved, and how to resume. ``python -m r2d2kit.train`` prints that
line and exits with the failure's status (``--debug`` or ``R2D2KIT_DEBUG=1`` adds the traceback):

| status | kind | stops on |
|---|---|---|
| 0 | | the budget, Ctrl-C, SIGTERM, a callback: not failures |
| 2 | | a bad config, checkpoint or run directory, before training starts |
| 3 | actors | an actor crash loop, too many restarts too fast, actors that stopped delivering |
| 4 | learner | an error in an update, in replay, in a ring, an evaluation or a callback (a broken invariant) |
| 5 | disk | a checkpoint or another run file that could not be written (a full disk, ENOSPC) |
"""

from __future__ import annotations

import errno
from pathlib import Path

EXIT_ACTORS = 3
EXIT_LEARNER = 4
EXIT_DISK = 5
EXIT_CODES = {"actors": EXIT_ACTORS, "learner": EXIT_LEARNER, "disk": EXIT_DISK}
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG})


class TrainingFailed(RuntimeError):
    """Training stopped on a failure after a clean stop; the message is the one line to show.

    Attributes:
        kind: ``"actors"``, ``"learner"`` or ``"disk"``.
        exit_code: the command's exit status for ``kind`` (3, 4 or 5).
        checkpoint: the checkpoint written at the stop, or None when the state was not sound
            (or the disk refused it).
    """

    def __init__(self, message: str, kind: str, checkpoint: Path | None) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_code = EXIT_CODES[kind]
        self.checkpoint = checkpoint


def is_disk_error(error: BaseException) -> bool:
    """True for an error of writing to disk (a full disk, a quota, an I/O error), wherever it was raised."""
    from r2d2kit.training.checkpoint import CheckpointWriteError

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:  # the cause chain: h5py wraps the OSError
        if isinstance(current, CheckpointWriteError) or (isinstance(current, OSError)
                                                          and current.errno in DISK_ERRNOS):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
