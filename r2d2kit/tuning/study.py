"""The Optuna study behind ``python -m r2d2kit.tune``: where it is stored, how it samples and prunes, and whether
this worker may join it.

A study lives in a database named by an Optuna storage URL: by default a SQLite file in the output
folder (``sqlite:///tune/cue_memory/study.db``); any URL SQLAlchemy reads (``postgresql://...``,
``mysql://...``) lets workers on several machines share one. Every worker asks the storage for a
trial and tells it the result, so the trial numbers are the study's, unique across workers.

Workers on one SQLite file take queued trials (``study.enqueue_trial``) under a file lock beside it:
SQLite has no ``SELECT ... FOR UPDATE``, and two workers asking at the same moment were both handed
the first queued trial (measured: 2 processes popping 20 queued trials, trial 0 went to both). Server
databases lock the row themselves.

The study remembers what its trials measured: the base config (after ``--set``), the search space
and the objective's ``--last``. A worker joining it with ``--resume`` must measure the same thing,
or its trials would be ranked against incomparable ones (a longer budget scores higher); it is
refused, with the keys that differ.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from r2d2kit.training.config import ConfigError

if TYPE_CHECKING:
    import optuna

__all__ = ["storage_url", "open_study", "ask", "setting_differences"]

SETTINGS_ATTR = "r2d2kit"  # the study's user attribute holding its StudySettings
SQLITE_TIMEOUT_S = 60  # how long a SQLite writer waits for another worker's lock before failing
OPEN_ATTEMPTS = 3  # workers creating one SQLite file at the same moment can race on its tables: try again

# What trials of one study must share: {"base": nested config, "space": {key: entry}, "last": K}
StudySettings = dict[str, dict | int]


def storage_url(out: Path, storage: str | None) -> str:
    """``--storage`` as given, else the SQLite file ``OUT/study.db``."""
    return storage or f"sqlite:///{out / 'study.db'}"


def open_study(url: str, name: str, resume: bool, settings: StudySettings, trials_dir: Path, seed: int,
               startup_trials: int, prune_after_trials: int, prune_after_steps: int) -> optuna.Study:
    """Create the study ``name`` at ``url``, or join it with ``resume``; maximise with TPE (``seed``, random for the
    first ``startup_trials``) and prune with the median rule (after ``prune_after_trials`` finished trials and
    ``prune_after_steps`` env steps of a trial).

    Raises:
        ConfigError: the storage cannot be opened; the study exists and ``resume`` is not set; it was created
            with other settings; or it is new and ``trials_dir`` (where its trials' runs go, by number) already
            holds another study's runs.
    """
    import optuna

    storage = _storage(url)
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        study_id = None
    if study_id is not None and not resume:
        trials = len(storage.get_all_trials(study_id, deepcopy=False))
        raise ConfigError(f"study {name!r} already exists in {url} ({trials} trials); pass --resume to add trials to "
                          "it, or --study-name NAME (or --out DIR) to start another")
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=prune_after_trials, n_warmup_steps=prune_after_steps)
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize", sampler=sampler,
                                pruner=pruner, load_if_exists=resume)
    stored = study.user_attrs.get(SETTINGS_ATTR)
    if stored is None:
        study.set_user_attr(SETTINGS_ATTR, _plain(settings))
        stored = study.user_attrs.get(SETTINGS_ATTR, _plain(settings))
    differences = setting_differences(stored, _plain(settings))
    if differences:
        raise ConfigError(f"study {name!r} in {url} was created with other settings ({'; '.join(differences[:5])}); "
                          "its trials would not be comparable with these: join it with the same CONFIG, --set, "
                          "--space and --last, or start another with --study-name NAME")
    return study


def ask(study: optuna.Study, url: str) -> optuna.Trial:
    """The study's next trial (a queued one first), taken by this worker alone: on a SQLite ``url`` under an
    exclusive lock on ``DB.lock``, so that two workers never take the same queued trial."""
    database = _sqlite_file(url)
    if database is None:
        return study.ask()
    with open(database.with_name(database.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return study.ask()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sqlite_file(url: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URL; None for an in-memory or server database."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url == prefix or url.endswith(":memory:"):
        return None
    return Path(url[len(prefix):])


def setting_differences(stored: Mapping[str, object], ours: Mapping[str, object], prefix: str = "") -> list[str]:
    """What differs between two settings mappings, as ``key: stored -> ours`` lines (nested keys dotted)."""
    differences = []
    for key in sorted(set(stored) | set(ours), key=str):
        a, b = stored.get(key), ours.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            differences.extend(setting_differences(a, b, prefix=f"{name}."))
        elif a != b:
            differences.append(f"{name}: {json.dumps(a)} in the study, {json.dumps(b)} here")
    return differences


def _plain(settings: StudySettings) -> StudySettings:
    """The settings as the study's JSON storage returns them (so that a comparison sees no tuple-vs-list change)."""
    return json.loads(json.dumps(settings))


def _storage(url: str) -> optuna.storages.BaseStorage:
    import optuna
    import sqlalchemy.exc

    engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}} if url.startswith("sqlite") else {}
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
        except sqlalchemy.exc.ArgumentError as error:
            raise ConfigError(f"--storage {url!r} is not a database URL ({error}); write e.g. "
                              "sqlite:///tune/study.db or postgresql://user@host/db") from None
        except ImportError as error:
            raise ConfigError(f"--storage {url!r}: its database driver is not installed ({error}); install it, "
                              "e.g. pip install psycopg2-binary for postgresql://") from None
        except sqlalchemy.exc.OperationalError as error:
            if attempt + 1 == OPEN_ATTEMPTS:
                raise ConfigError(f"--storage {url!r}: cannot open the database: {error.orig}; check the path or "
                                  "server, and that its folder exists") from None
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")
