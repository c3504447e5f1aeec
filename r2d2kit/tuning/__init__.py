"""Hyper-parameter search for a training config: the pieces behind ``python -m r2d2kit.tune``.

``space`` (which config values a trial may change), ``study`` (the Optuna study: storage, sampler,
pruner, who may join), ``trial_process`` and ``worker`` (one spawned process per trial, its
evaluations relayed to the pruner) and ``outputs`` (the trial table, plot and best config). Optuna
is an optional extra (``pip install 'r2d2kit[tune]'``), imported only where a study is used.
"""
