"""r2d2kit: Numba-accelerated recurrent (R2D2) and goal (HER) replay for deep RL with Keras 3.

Importing ``r2d2kit`` or ``r2d2kit.replay`` does not import TensorFlow; only ``as_dataset``,
the models and the learner do.
"""

from r2d2kit.sumtree import MinTree, SumTree

__version__ = "0.1.0"
__all__ = ["SumTree", "MinTree", "__version__"]
