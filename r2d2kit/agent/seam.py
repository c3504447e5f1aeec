"""The seam every agent implements, and the only thing the trainer, the pools, checkpoints and evaluation see.

An agent is three objects (Acme's Actor / Learner / builder split, with SB3's ``predict`` shape for the
policy):

* a :class:`Policy` acts in a batch of envs: it keeps each env's recurrent state and explores as its agent
  does (R2D2's per-env epsilons, SAC's sampling), so the acting loop never knows what an action means;
* a :class:`Learner` trains from a replay and returns named metrics, says which variables its actors
  need, and saves and restores itself into a checkpoint directory;
* an agent builder (:class:`r2d2kit.training.agents.AgentBuilder`, one per agent package, chosen by the
  config's ``agent`` key) makes an :class:`Agent` from the env's spaces and the config: the window
  fields, the networks (the learner receives them), the learner, and the policies that act and evaluate.

The :class:`WindowLayout` is what the runners need of an agent's windows (burn-in, trained rows, the
n-step rows after them, the stride between window starts): it is the replay's geometry, not an
algorithm's hyper-parameter, so every agent's windows are cut by the same code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import gymnasium as gym
    import keras

    from r2d2kit.models.cores import StateField
    from r2d2kit.replay.sequence import SequenceReplayBuffer
    from r2d2kit.spaces import ObservationLayout

__all__ = ["Agent", "Diagnostics", "EnvSpaces", "Learner", "LearnerSection", "Policy", "PolicyFactory",
           "UPDATE_OUTPUTS", "WindowFields", "WindowLayout"]


@dataclass(frozen=True)
class WindowLayout:
    """The rows of one replay window: ``burn_in`` (only warm up the core from the stored state), then
    ``trace_length`` trained rows, then ``n_step`` rows the last targets bootstrap from; consecutive
    windows of an episode start ``period`` rows apart (``period <= trace_length``: every row is trained).
    The defaults are R2D2's (Kapturowski et al. 2019)."""

    burn_in: int = 40
    trace_length: int = 80
    period: int = 40
    n_step: int = 5

    def __post_init__(self) -> None:
        for name in ("trace_length", "period", "n_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.burn_in, bool) or not isinstance(self.burn_in, (int, np.integer)) or self.burn_in < 0:
            raise ValueError(f"burn_in must be an integer >= 0, got {self.burn_in!r}")
        if self.period > self.trace_length:
            raise ValueError(f"period ({self.period}) must be <= trace_length ({self.trace_length}): "
                             "rows between two window starts would never be trained")

    @property
    def length(self) -> int:
        """Rows per window: ``burn_in + trace_length + n_step``."""
        return self.burn_in + self.trace_length + self.n_step


@dataclass(frozen=True)
class WindowFields:
    """What an agent's windows hold beside rewards and flags: each row's observation and action, and the
    policy's recurrent state at the window's start (what shared-memory records and the replay are sized by)."""

    obs_shape: tuple[int, ...]
    obs_dtype: str
    action_shape: tuple[int, ...]  # () for a Discrete action (an index)
    action_dtype: str  # int64 for a Discrete action, float32 for a Box
    state: tuple[StateField, ...]


class LearnerSection(Protocol):
    """What the trainer and the replay read of any agent's ``learner:`` config section (R2D2Config, SACConfig):
    a dataclass with these fields."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    batch_size: int  # windows per update
    importance_exponent: float  # beta of a prioritized replay's importance weights
    priority_exponent: float  # alpha of the prioritized replay
    max_gradient_norm: float  # updates whose gradient norm exceeds it are clipped (counted as clipped_share)


# what every Learner.train_from returns (numpy), beside its own named metrics: the trainer's statistics,
# the health check and the replay's priorities read these and nothing agent-specific
UPDATE_OUTPUTS = ("loss", "priorities", "abs_td", "mask", "trained_rows", "weights", "gradient_norm")


@runtime_checkable
class Policy(Protocol):
    """Acts in ``num_envs`` envs at once, one recurrent state per env, exploring as its agent does."""

    @property
    def num_envs(self) -> int:
        """Envs acted in per call."""

    def state_spec(self) -> tuple[StateField, ...]:
        """The recurrent state per env (empty without memory): what windows store at their first row."""

    def act(self, obs: npt.ArrayLike, prev_action: npt.ArrayLike, prev_reward: npt.ArrayLike) -> np.ndarray:
        """Actions for a batch of observations (exploration included); advances every env's state."""

    def get_state(self) -> tuple[np.ndarray, ...]:
        """The recurrent state before the next :meth:`act` (copies)."""

    def set_state(self, state: Sequence[npt.ArrayLike]) -> None:
        """Replace the recurrent state (one array per :meth:`state_spec` field, batch first)."""

    def reset(self, mask: npt.ArrayLike | None = None) -> None:
        """Zero the state of the envs in ``mask`` (all envs if None): their episodes start over."""

    def load_weights(self, vector: np.ndarray) -> None:
        """Take a published weight vector (:func:`r2d2kit.runners.weights.flatten_weights` of the learner's
        :meth:`Learner.actor_variables`)."""

    def refresh_weights(self) -> None:
        """The weights this policy shares with the learner changed in place: read them before acting again."""

    def fixed_weights(self) -> AbstractContextManager[Policy]:
        """A context manager: the weights do not change inside it (an evaluation), so they are read once."""


@runtime_checkable
class Learner(Protocol):
    """Trains from a replay; what checkpoints, actors and the trainer need of any agent's learner."""

    updates: int  # updates applied so far (a resumed run's included)

    def train_from(self, replay: SequenceReplayBuffer) -> Mapping[str, np.ndarray]:
        """One update from ``replay`` (priorities written back); returns :data:`UPDATE_OUTPUTS` and the
        agent's own named metrics (:attr:`logged_metrics`)."""

    @property
    def logged_metrics(self) -> tuple[str, ...]:
        """The scalar outputs of :meth:`train_from` logged as ``learner/<name>`` means (``loss`` first)."""

    def prepare(self, replay: SequenceReplayBuffer) -> None:
        """Compile the update for ``replay``'s batches without applying it (called while actors start)."""

    def actor_variables(self) -> Sequence[keras.Variable]:
        """The variables a :class:`Policy` acts with, in the order published weight vectors hold them."""

    def save(self, directory: Path) -> None:
        """Write the networks and the optimiser state into ``directory`` (a checkpoint being written)."""

    def restore(self, directory: Path) -> None:
        """Load what :meth:`save` wrote (:class:`~r2d2kit.training.checkpoint.CheckpointError` if it does
        not fit); the checkpoint's files were verified before."""

    def is_finite(self) -> bool:
        """Whether every weight and optimiser slot is finite (a checkpoint of the state is worth writing)."""

    def save_policy_weights(self, path: Path) -> None:
        """Write the weights an evaluation policy needs (``best.weights.h5``, ``weights.weights.h5``)."""


class PolicyFactory(Protocol):
    """Builds actor ``actor_id``'s policy for an incarnation acting with ``seed`` (its exploration draws):
    picklable for the processes and Ray pools, which call it in each actor's own process."""

    def __call__(self, actor_id: int, seed: int) -> Policy: ...


@dataclass(frozen=True)
class EnvSpaces:
    """What an agent's networks and the replay need of the env, read once from a probe env (after
    :func:`r2d2kit.spaces.wrap_spaces`: a Box observation, and a Discrete or a flat float32 Box action)."""

    observation_space: gym.spaces.Box  # what the network reads: the env's Box, or the codes of another space
    action_space: gym.spaces.Discrete | gym.spaces.Box
    layout: ObservationLayout | None  # a non-Box observation space's (stored as codes), else None


class Diagnostics(Protocol):
    """An agent's own training-health values (R2D2's action gap and greedy churn), measured once per log
    interval on a fresh replay batch without updating; the agent-independent ones come from every update's
    outputs (:class:`~r2d2kit.training.update_statistics.UpdateStatistics`)."""

    def measure(self, replay: SequenceReplayBuffer) -> dict[str, float]:
        """Values named as they are logged (``health/<name>``)."""


@runtime_checkable
class Agent(Protocol):
    """One run's agent, made by its :class:`AgentBuilder`: the learner (which owns the networks) and the
    policies around it. The trainer, the pools, checkpoints and evaluation use these members and nothing else."""

    learner: Learner
    fields: WindowFields  # what the replay and the actors' shared-memory records store per row and window

    def acting_policies(self, *, in_process: bool, num_actors: int, env_steps: int) -> PolicyFactory:
        """Each actor's exploring policy. ``in_process``: the actor runs in the learner's process and acts with
        the learner's own networks; else the factory pickles and builds the networks in the actor's process.
        ``env_steps``: the run's env steps so far (a resumed run's exploration schedule goes on from there)."""

    def evaluation_policy(self, num_envs: int) -> Policy:
        """A policy without exploration (greedy, deterministic) on the learner's live weights."""

    def diagnostics(self, seed: int) -> Diagnostics | None:
        """The agent's own health values (None if it has none); ``seed`` draws their batches."""

    def describe_networks(self) -> str:
        """One start-up line on the networks: encoder, core, heads, weight count."""

    def describe_exploration(self, num_actors: int, env_steps: int) -> str:
        """How ``num_actors`` actors explore from ``env_steps`` on (one start-up line)."""

