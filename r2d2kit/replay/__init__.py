"""Replay buffers with one interface (:class:`~r2d2kit.replay.SampledBuffer`, in ``replay/protocol.py``):
``sample``, ``update_priorities``, ``save``/``load``, ``as_dataset``, the same ``beta`` default and one
meaning of ``len()``. Every buffer kind (transitions, HER transitions, R2D2 windows, HER windows) takes
the same ``sampler``: ``"uniform"``, ``"proportional"`` or ``"rank"`` (``replay/samplers.py``).
Importing this package does not import TensorFlow.
"""

from r2d2kit.replay.batch_pool import BatchPool
from r2d2kit.replay.goals import GoalSelectionStrategy
from r2d2kit.replay.her import HerReplayBuffer
from r2d2kit.replay.nstep import NStepAccumulator
from r2d2kit.replay.protocol import SampledBuffer
from r2d2kit.replay.samplers import ProportionalSampler, RankSampler, Sampler, UniformSampler
from r2d2kit.replay.schedules import LinearSchedule
from r2d2kit.replay.sequence import SequenceReplayBuffer, sequence_priorities
from r2d2kit.replay.sequence_builder import SequenceBuilder
from r2d2kit.replay.sequence_her import SequenceHerReplayBuffer
from r2d2kit.replay.transitions import ReplayBuffer

__all__ = [
    "BatchPool",
    "GoalSelectionStrategy",
    "HerReplayBuffer",
    "ReplayBuffer",
    "Sampler",
    "UniformSampler",
    "ProportionalSampler",
    "RankSampler",
    "SampledBuffer",
    "NStepAccumulator",
    "LinearSchedule",
    "SequenceBuilder",
    "SequenceReplayBuffer",
    "SequenceHerReplayBuffer",
    "sequence_priorities",
]
