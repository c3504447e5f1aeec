"""r2d2kit: Numba-accelerated recurrent (R2D2) and goal (HER) replay for deep RL with Keras 3.

The package is grouped by job: ``kernels`` (Numba) under ``SumTree``/``MinTree`` (here), ``replay``
(buffers), ``models`` (Keras encoders and the Q-network), ``agent`` (learner, targets, policies),
``runners`` (where actors run), ``training`` (configs, trainer, checkpoints), ``envs``; the entry
points are ``python -m r2d2kit.train`` and ``python -m r2d2kit.evaluate``.

Importing ``r2d2kit`` or ``r2d2kit.replay`` does not import TensorFlow; only ``as_dataset``,
the models and the learner do.
"""

from r2d2kit.sumtree import MinTree, SumTree

__version__ = "0.1.0"
__all__ = ["SumTree", "MinTree", "__version__"]
