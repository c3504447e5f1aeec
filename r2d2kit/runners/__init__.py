"""Where actors and learners run: ``local`` (one process); process and Ray runners build on it."""

from r2d2kit.runners.local import LocalRunConfig, RunResult, evaluate, train_local

__all__ = ["LocalRunConfig", "RunResult", "evaluate", "train_local"]
