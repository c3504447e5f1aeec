"""Replay buffers with one interface (:class:`~r2d2kit.replay.SampledBuffer`, in ``replay/protocol.py``):
``sample``, ``update_priorities``, ``save``/``load``, ``as_dataset``, the same ``beta`` default and one
meaning of ``len()``. Importing this package does not import TensorFlow.
"""

from r2d2kit.replay.base import BaseReplayBuffer
from r2d2kit.replay.batch_pool import BatchPool
from r2d2kit.replay.goals import GoalSelectionStrategy
from r2d2kit.replay.her import HerReplayBuffer
from r2d2kit.replay.nstep import NStepAccumulator
from r2d2kit.replay.prioritized import PrioritizedReplayBuffer
from r2d2kit.replay.protocol import SampledBuffer
from r2d2kit.replay.rank_based import RankBasedReplayBuffer
from r2d2kit.replay.schedules import LinearSchedule
from r2d2kit.replay.sequence import SequenceReplayBuffer, sequence_priorities
from r2d2kit.replay.sequence_builder import SequenceBuilder
from r2d2kit.replay.sequence_her import SequenceHerReplayBuffer
from r2d2kit.replay.uniform import ReplayBuffer

__all__ = [
    "BaseReplayBuffer",
    "BatchPool",
    "GoalSelectionStrategy",
    "HerReplayBuffer",
    "ReplayBuffer",
    "PrioritizedReplayBuffer",
    "RankBasedReplayBuffer",
    "SampledBuffer",
    "NStepAccumulator",
    "LinearSchedule",
    "SequenceBuilder",
    "SequenceReplayBuffer",
    "SequenceHerReplayBuffer",
    "sequence_priorities",
]
