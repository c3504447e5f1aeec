"""Action selection from Q-values ``[num_envs, A]``: greedy, epsilon-greedy, Ape-X epsilons, a linear
epsilon decay (:class:`EpsilonSchedule`), Boltzmann; and the Q-network's policies behind the agent seam
(:class:`GreedyPolicy` for evaluation, :class:`EpsilonGreedyPolicy` for acting).

Randomness comes from the caller's ``np.random.Generator`` so runs reproduce from a seed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from r2d2kit._validation import check_float, check_positive_int

if TYPE_CHECKING:
    from r2d2kit.agent.r2d2.qnetwork import QNetwork, StatefulActor
    from r2d2kit.models.cores import StateField


def _q_matrix(q_values: npt.ArrayLike) -> np.ndarray:
    q = np.asarray(q_values, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] < 1:
        raise ValueError(f"q_values must be [num_envs, num_actions], got shape {q.shape}")
    return q


def greedy(q_values: npt.ArrayLike) -> np.ndarray:
    """``argmax_a Q`` per env (evaluation)."""
    return _q_matrix(q_values).argmax(axis=1)


def epsilon_greedy(q_values: npt.ArrayLike, epsilon: npt.ArrayLike, rng: np.random.Generator) -> np.ndarray:
    """Random action with probability ``epsilon`` (a scalar or one per env), else greedy."""
    q = _q_matrix(q_values)
    epsilon = np.broadcast_to(np.asarray(epsilon, dtype=np.float64), (q.shape[0],))
    if np.any((epsilon < 0) | (epsilon > 1)):
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    explore = rng.random(q.shape[0]) < epsilon
    random_actions = rng.integers(0, q.shape[1], size=q.shape[0])
    return np.where(explore, random_actions, q.argmax(axis=1))


def apex_epsilons(num_actors: int, epsilon: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """Ape-X per-actor exploration: ``eps_i = epsilon ** (1 + alpha * i / (N - 1))`` (Horgan et al. 2018).

    A single actor gets ``epsilon`` itself.
    """
    num_actors = check_positive_int("num_actors", num_actors)
    epsilon = check_float("epsilon", epsilon, 0.0, 1.0)
    alpha = check_float("alpha", alpha, 0.0)
    if num_actors == 1:
        return np.array([epsilon])
    return epsilon ** (1.0 + alpha * np.arange(num_actors) / (num_actors - 1))


@dataclass(frozen=True)
class EpsilonSchedule:
    """Each env's exploration rate over the run: fixed (Ape-X's per-env rates) or falling linearly from
    ``start`` to ``final`` over the run's first ``decay_env_steps`` env steps (DQN's annealed rate).

    Picklable, so actor processes and Ray actors take it. An actor knows only its own steps: it
    estimates the run's env steps as ``elapsed_env_steps`` (taken before the pool started, e.g. by the
    run it resumes) plus its own env steps times ``run_envs / len(self)``, which holds while actors
    step at one rate. Slicing (``schedule[a:b]``) gives the schedule of some envs, e.g. one actor's.

    Args:
        start: the rate of each env at the run's env step 0 ``[E]`` (or one number for every env).
        final: the rate after the decay (default: ``start``, a fixed rate).
        decay_env_steps: env steps of the whole run over which the rate falls (0: no decay).
        elapsed_env_steps: env steps the run took before these actors started.
        run_envs: envs acting in the whole run (default: ``len(start)``).
    """

    start: np.ndarray
    final: np.ndarray | None = None
    decay_env_steps: int = 0
    elapsed_env_steps: int = 0
    run_envs: int = 0
    _final: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        start = np.atleast_1d(np.asarray(self.start, dtype=np.float64)).copy()
        final = start if self.final is None else np.broadcast_to(np.asarray(self.final, np.float64), start.shape)
        if start.ndim != 1 or np.any((start < 0) | (start > 1)) or np.any((final < 0) | (final > 1)):
            raise ValueError(f"EpsilonSchedule: rates must be one number per env in [0, 1], got start {start} and "
                             f"final {final}")
        for name in ("decay_env_steps", "elapsed_env_steps", "run_envs"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"EpsilonSchedule.{name} must be >= 0, got {getattr(self, name)!r}")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "_final", np.array(final))
        object.__setattr__(self, "run_envs", int(self.run_envs) or len(start))

    @classmethod
    def linear(cls, num_envs: int, start: float, final: float, decay_env_steps: int,
               elapsed_env_steps: int = 0) -> EpsilonSchedule:
        """Every one of ``num_envs`` envs from ``start`` down to ``final`` over ``decay_env_steps`` env steps."""
        num_envs = check_positive_int("num_envs", num_envs)
        return cls(np.full(num_envs, check_float("start", start, 0.0, 1.0)),
                   np.full(num_envs, check_float("final", final, 0.0, 1.0)), decay_env_steps, elapsed_env_steps)

    def __len__(self) -> int:
        return len(self.start)

    def resumed(self, elapsed_env_steps: int) -> EpsilonSchedule:
        """This schedule for actors that start after the run took ``elapsed_env_steps`` env steps."""
        return EpsilonSchedule(self.start, self._final, self.decay_env_steps, elapsed_env_steps, self.run_envs)

    def describe(self) -> str:
        """One line for the start-up summary."""
        if not self.decay_env_steps:
            return f"epsilons {self.start.min():.3g} ... {self.start.max():.3g}"
        return (f"epsilon {self.start.max():.3g} -> {self._final.max():.3g} over {self.decay_env_steps:,} env steps "
                f"(now {self.epsilons().max():.3g})")

    def __getitem__(self, envs: slice) -> EpsilonSchedule:
        if not isinstance(envs, slice):
            raise TypeError(f"an EpsilonSchedule is sliced by envs (schedule[a:b]), got {envs!r}")
        return EpsilonSchedule(self.start[envs], self._final[envs], self.decay_env_steps, self.elapsed_env_steps,
                               self.run_envs)

    def epsilons(self, own_env_steps: int = 0) -> np.ndarray:
        """The rate of each env after its actor took ``own_env_steps`` env steps (over its envs)."""
        if not self.decay_env_steps:
            return self.start
        run_steps = self.elapsed_env_steps + own_env_steps * self.run_envs / len(self.start)
        progress = min(run_steps / self.decay_env_steps, 1.0)
        return self.start + progress * (self._final - self.start)


def as_schedule(epsilons: npt.ArrayLike | EpsilonSchedule) -> EpsilonSchedule:
    """``epsilons`` as a schedule: fixed per-env rates (an array, e.g. :func:`apex_epsilons`'s) or a schedule."""
    return epsilons if isinstance(epsilons, EpsilonSchedule) else EpsilonSchedule(np.asarray(epsilons))


def boltzmann(q_values: npt.ArrayLike, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """Sample ``a ~ softmax(Q / temperature)`` per env."""
    q = _q_matrix(q_values)
    temperature = check_float("temperature", temperature, 0.0, low_inclusive=False)
    logits = (q - q.max(axis=1, keepdims=True)) / temperature
    probabilities = np.exp(logits)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    cumulative = probabilities.cumsum(axis=1)
    draws = rng.random((q.shape[0], 1))
    return np.minimum((draws > cumulative).sum(axis=1), q.shape[1] - 1)


class GreedyPolicy:
    """A :class:`~r2d2kit.agent.seam.Policy` that acts greedily on a Q-network's stateful actor (evaluation)."""

    def __init__(self, actor: StatefulActor) -> None:
        self.actor = actor

    @property
    def num_envs(self) -> int:
        """Envs acted in per call."""
        return self.actor.num_envs

    def state_spec(self) -> tuple[StateField, ...]:
        """The Q-network's recurrent state per env."""
        return self.actor.network.state_spec()

    def act(self, obs: npt.ArrayLike, prev_action: npt.ArrayLike, prev_reward: npt.ArrayLike) -> np.ndarray:
        """``argmax_a Q`` per env; advances every env's state."""
        return greedy(self.actor.q_values(obs, prev_action, prev_reward))

    def get_state(self) -> tuple[np.ndarray, ...]:
        """The recurrent state before the next :meth:`act` (copies)."""
        return self.actor.get_state()

    def set_state(self, state: Sequence[npt.ArrayLike]) -> None:
        """Replace the recurrent state."""
        self.actor.set_state(state)

    def reset(self, mask: npt.ArrayLike | None = None) -> None:
        """Zero the state of the envs in ``mask`` (all if None)."""
        self.actor.reset(mask)

    def load_weights(self, vector: np.ndarray) -> None:
        """Take a published weight vector of the Q-network's variables."""
        from r2d2kit.runners.weights import load_flat_weights

        load_flat_weights(self.actor.network.variables, vector)
        self.actor.refresh_weights()

    def refresh_weights(self) -> None:
        """The shared Q-network's weights changed: read them before the next step."""
        self.actor.refresh_weights()

    @contextlib.contextmanager
    def fixed_weights(self) -> Iterator[GreedyPolicy]:
        """Act with the weights as they are now, read once (an evaluation)."""
        with self.actor.fixed_weights():
            yield self


class EpsilonGreedyPolicy(GreedyPolicy):
    """R2D2's acting policy: a random action with each env's exploration rate, else greedy.

    ``epsilons``: fixed per-env rates (Ape-X's) or an :class:`EpsilonSchedule`, whose rates fall with the
    env steps this policy acted (``env_steps``); ``seed`` seeds the exploration draws.
    """

    def __init__(self, actor: StatefulActor, epsilons: npt.ArrayLike | EpsilonSchedule, seed: int) -> None:
        super().__init__(actor)
        self.schedule = as_schedule(epsilons)
        if len(self.schedule) != actor.num_envs:
            raise ValueError(f"{len(self.schedule)} exploration rates for {actor.num_envs} envs: give one per env")
        self.rng = np.random.default_rng(seed)
        self.env_steps = 0  # acted by this policy, over its envs

    @property
    def epsilons(self) -> np.ndarray:
        """Each env's exploration rate now."""
        return self.schedule.epsilons(self.env_steps)

    def act(self, obs: npt.ArrayLike, prev_action: npt.ArrayLike, prev_reward: npt.ArrayLike) -> np.ndarray:
        """Epsilon-greedy actions per env; advances every env's state and the schedule."""
        q_values = self.actor.q_values(obs, prev_action, prev_reward)
        action = epsilon_greedy(q_values, self.epsilons, self.rng)
        self.env_steps += len(action)
        return action


@dataclass(frozen=True)
class EpsilonGreedyFactory:
    """Builds actor ``actor_id``'s :class:`EpsilonGreedyPolicy` (a :class:`~r2d2kit.agent.seam.PolicyFactory`).

    The actor's network comes from ``make_network`` (a module-level function or ``functools.partial``, so the
    factory pickles into actor processes and Ray actors; the local pool passes one returning the learner's
    own network), and its envs' rates are its slice of ``epsilons`` (every actor's envs, actor-major).
    """

    make_network: Callable[[], QNetwork]
    epsilons: EpsilonSchedule
    envs_per_actor: int

    def __call__(self, actor_id: int, seed: int) -> EpsilonGreedyPolicy:
        n = self.envs_per_actor
        actor = self.make_network().actor(n, follow_weights=False)  # reads weights when told they changed
        return EpsilonGreedyPolicy(actor, self.epsilons[actor_id * n:(actor_id + 1) * n], seed)
