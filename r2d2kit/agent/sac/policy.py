"""The acting side of recurrent SAC: :class:`SACPolicy`, one step of the policy model for ``num_envs`` envs.

Each env's recurrent state (the actor core's and, with separate cores, the critic core's, which windows
store for the critic's burn-in) is kept in numpy between calls. Acting samples the squashed Gaussian
with the policy's own seeded generator; ``deterministic=True`` (evaluation) takes the squashed mean.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import keras
import numpy as np
import numpy.typing as npt

from r2d2kit.agent.sac.networks import SACNetworks
from r2d2kit.models.backend import compile_function
from r2d2kit.models.cores import StateField, reset_state

__all__ = ["SACPolicy", "SACPolicyFactory", "make_sac_policy"]


class SACPolicy:
    """Implements :class:`~r2d2kit.agent.seam.Policy` for :class:`~r2d2kit.agent.sac.networks.SACNetworks`.

    Args:
        networks: the networks whose policy model it runs (a learner's, sharing its weights, or an actor
            process's own copy that takes published weights through :meth:`load_weights`).
        num_envs: envs acted in per call.
        seed: seeds the exploration noise.
        deterministic: act with ``center + scale * tanh(mean)`` (evaluation) instead of sampling.
    """

    def __init__(self, networks: SACNetworks, num_envs: int, *, seed: int | None = None,
                 deterministic: bool = False) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        self.networks = networks
        self._num_envs = int(num_envs)
        self.deterministic = bool(deterministic)
        self.rng = np.random.default_rng(seed)
        self._state = networks.zero_state(self._num_envs)
        self._obs_shape = (self._num_envs,) + networks.obs_shape
        self._step = self._compile()

    def _compile(self) -> Callable[..., tuple[object, object, tuple[object, ...]]]:
        """One compiled function of fixed shape (``tf.function`` or ``jax.jit``): a one-row sequence through the
        policy model."""
        nets, envs = self.networks, self._num_envs
        model = nets.policy_model
        signature = [(self._obs_shape, nets.obs_dtype), ((envs, nets.action_size), "float32"), ((envs,), "float32"),
                     tuple(((envs,) + field.shape, field.dtype) for field in nets.state_spec())]

        def step(obs, prev_action, prev_reward, state):
            ones = keras.ops.ones((envs, 1), "bool")
            outputs = model([obs[:, None], prev_action[:, None], prev_reward[:, None], ones, *state])
            return outputs[0][:, 0], outputs[1][:, 0], tuple(outputs[2:])

        return compile_function(step, model.variables, signature)

    @property
    def num_envs(self) -> int:
        """Envs acted in per call."""
        return self._num_envs

    def state_spec(self) -> tuple[StateField, ...]:
        """The recurrent state per env: the networks' :meth:`~SACNetworks.state_spec`."""
        return self.networks.state_spec()

    def distribution(self, obs: npt.ArrayLike, prev_action: npt.ArrayLike,
                     prev_reward: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """The Gaussian's ``mean`` and ``log_std`` ``[num_envs, A]`` before the squash; advances the state."""
        nets, envs = self.networks, self._num_envs
        obs = np.asarray(obs, dtype=nets.obs_dtype)
        prev_action = np.asarray(prev_action, dtype=np.float32)
        prev_reward = np.asarray(prev_reward, dtype=np.float32)
        if obs.shape != self._obs_shape or prev_action.shape != (envs, nets.action_size) or \
                prev_reward.shape != (envs,):
            raise ValueError(f"act: obs {obs.shape}, prev_action {prev_action.shape}, prev_reward {prev_reward.shape}; "
                             f"expected {self._obs_shape}, {(envs, nets.action_size)}, ({envs},) for this policy of "
                             f"{envs} envs (prev_action: the previous action vectors, zeros at an episode's start)")
        mean, log_std, state = self._step(obs, prev_action, prev_reward, self._state)
        self._state = tuple(np.asarray(part) for part in state)
        return np.asarray(mean), np.asarray(log_std)

    def act(self, obs: npt.ArrayLike, prev_action: npt.ArrayLike, prev_reward: npt.ArrayLike) -> np.ndarray:
        """Actions ``[num_envs, A]`` float32 inside the Box's bounds: sampled, or the squashed mean when
        ``deterministic``; advances every env's state."""
        mean, log_std = self.distribution(obs, prev_action, prev_reward)
        u = mean if self.deterministic else mean + np.exp(log_std) * self.rng.standard_normal(mean.shape)
        nets = self.networks
        action = nets.action_center + nets.action_scale * np.tanh(u)
        return np.clip(action, nets.action_low, nets.action_high).astype(np.float32)  # rounding stays in the Box

    def get_state(self) -> tuple[np.ndarray, ...]:
        """The recurrent state before the next :meth:`act` (copies), one array per :meth:`state_spec` field."""
        return tuple(part.copy() for part in self._state)

    def set_state(self, state: Sequence[npt.ArrayLike]) -> None:
        """Replace the recurrent state: one ``[num_envs, *shape]`` array per :meth:`state_spec` field, in order."""
        spec = self.state_spec()
        if isinstance(state, np.ndarray) or len(state) != len(spec):
            raise ValueError(f"set_state: expected {len(spec)} arrays ({[field.name for field in spec]}, the "
                             f"policy's state_spec()), got {type(state).__name__}")
        parts = tuple(np.array(part, field.dtype) for part, field in zip(state, spec, strict=True))
        for part, field in zip(parts, spec, strict=True):
            if part.shape != (self._num_envs,) + field.shape:
                raise ValueError(f"set_state: state {field.name!r} has shape {part.shape}; expected "
                                 f"{(self._num_envs,) + field.shape}")
        self._state = parts

    def reset(self, mask: npt.ArrayLike | None = None) -> None:
        """Zero the state of the envs where ``mask`` is true (all envs if None): their episodes start over."""
        if mask is None:
            self._state = self.networks.zero_state(self._num_envs)
            return
        self._state = reset_state(self._state, mask, self._num_envs)

    def load_weights(self, vector: np.ndarray) -> None:
        """Take a published weight vector (``flatten_weights(learner.actor_variables())``)."""
        from r2d2kit.runners.weights import load_flat_weights

        load_flat_weights(self.networks.policy_variables(), np.asarray(vector, dtype=np.float32).reshape(-1))

    def refresh_weights(self) -> None:
        """Nothing to do: every step reads the live Keras variables."""

    @contextlib.contextmanager
    def fixed_weights(self) -> Iterator[SACPolicy]:
        """Within the block the weights are not changed by this policy (it reads the live variables)."""
        yield self


def make_sac_policy(networks_factory: Callable[[], SACNetworks], num_envs: int, *, seed: int | None = None,
                    deterministic: bool = False) -> SACPolicy:
    """Build the networks (e.g. :func:`~r2d2kit.agent.sac.networks.sac_networks_factory`'s partial, in an actor
    process) and a policy on them; publish weights into it with :meth:`SACPolicy.load_weights`."""
    return SACPolicy(networks_factory(), num_envs, seed=seed, deterministic=deterministic)


@dataclass(frozen=True)
class SACPolicyFactory:
    """Builds actor ``actor_id``'s sampling :class:`SACPolicy` (a :class:`~r2d2kit.agent.seam.PolicyFactory`).

    ``make_networks`` is a module-level function or ``functools.partial`` (so the factory pickles into actor
    processes and Ray actors; the local pool passes one returning the learner's own networks).
    """

    make_networks: Callable[[], SACNetworks]
    envs_per_actor: int

    def __call__(self, actor_id: int, seed: int) -> SACPolicy:
        return SACPolicy(self.make_networks(), self.envs_per_actor, seed=seed)
