"""Recurrent SAC networks: a squashed-Gaussian actor and twin critics over R2D2 windows.

Each *body* is ``encoder -> [features, previous action (the Box vector), previous reward] -> core``, a
Keras sequence model ``[obs, prev_action, prev_reward, obs_mask, *state] -> [hidden, *final state]``
over ``[B, T, ...]`` (the encoder folds time into the batch, as :class:`~r2d2kit.agent.r2d2.QNetwork`'s
does; padded rows leave the state untouched). The heads act on every row:

* the **policy head**: ``hidden -> MLP -> mean, log_std`` (log_std clipped), a Gaussian over ``u`` squashed
  by ``tanh`` and scaled to the action bounds, ``a = center + scale * tanh(u)``;
* the **twin Q heads**: ``[hidden, action] -> MLP -> Q`` twice (the current action joins after the core,
  as in pomdp-baselines' recurrent critic, so the core's state does not depend on the action asked about).

``shared_core=False`` (pomdp-baselines'): the actor and the critics have bodies of their own; the acting
policy steps both, because windows store both states (the critic's burn-in starts from its own).
``shared_core=True``: one body feeds both heads, and only the critics' loss trains it.

The target critic is a body and Q heads of the critic's architecture with their own weights.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import numpy.typing as npt

from r2d2kit.agent.seam import WindowFields
from r2d2kit.models.cores import Core, StateField, check_core_name, make_cell, state_spec, zero_state
from r2d2kit.models.encoders import ImageModel, MLPModel

__all__ = ["SACNetworks", "make_sac_networks", "sac_networks_factory", "squash", "squashed_log_prob",
           "squashed_sample"]

_LOG_2PI = math.log(2.0 * math.pi)


# ---------------------------------------------------------------------------- the squashed Gaussian (keras.ops)
def squash(u, center, scale):
    """The env action of a pre-squash sample ``u``: ``center + scale * tanh(u)`` (inside the bounds)."""
    return center + scale * keras.ops.tanh(u)


def squashed_log_prob(u, mean, log_std, scale):
    """``log pi(a)`` of ``a = center + scale * tanh(u)``, ``u ~ N(mean, exp(log_std)^2)``, summed over the last axis.

    The density of the env action: the Gaussian's, minus ``log(1 - tanh(u)^2)`` (the tanh's Jacobian, written
    ``2 (log 2 - u - softplus(-2u))`` so it stays finite where ``tanh(u)`` rounds to 1) and ``log(scale)``.
    """
    z = (u - mean) * keras.ops.exp(-log_std)
    gaussian = -0.5 * keras.ops.square(z) - log_std - 0.5 * _LOG_2PI
    log_jacobian = 2.0 * (math.log(2.0) - u - keras.ops.softplus(-2.0 * u)) + keras.ops.log(scale)
    return keras.ops.sum(gaussian - log_jacobian, axis=-1)


def squashed_sample(mean, log_std, noise, center, scale):
    """A reparameterised action ``center + scale * tanh(mean + exp(log_std) * noise)`` and its log-probability."""
    u = mean + keras.ops.exp(log_std) * noise
    return squash(u, center, scale), squashed_log_prob(u, mean, log_std, scale)


# ---------------------------------------------------------------------------- the networks
class _DropMask(keras.layers.Layer):
    """The identity, without the row mask the core attaches to its output (the heads act on every row)."""

    def call(self, x):
        return keras.ops.copy(x)  # a new tensor: an eager one would carry the core's mask along as an attribute

    def compute_mask(self, inputs, mask=None):
        return None


def _outputs(outputs) -> tuple[Any, list[Any]]:
    """The first output and the rest (the state) of a body call: a one-output model returns its output bare."""
    if isinstance(outputs, (list, tuple)):
        return outputs[0], list(outputs[1:])
    return outputs, []


class SACNetworks:
    """The actor, the twin critics and the target critics of recurrent SAC, and the policy model actors run.

    Args:
        obs_shape: one observation's shape.
        action_low, action_high: the Box's finite bounds, one entry per action entry (flat).
        encoder: an :class:`~r2d2kit.models.encoders.ImageModel` (each body builds its own copy); default
            :class:`~r2d2kit.models.encoders.MLPModel`.
        obs_dtype: the observations' dtype.
        core: ``"lstm"``, ``"gru"``, ``"none"``, ``"package.module:factory"`` or the factory
            (:func:`r2d2kit.models.cores.make_cell`).
        core_units: the core's width.
        hidden_units: the widths of each head's hidden layers (ReLU).
        shared_core: one body for actor and critics (True) or one each (False, pomdp-baselines').
        log_std_min, log_std_max: the policy's log standard deviation is clipped to this range.
        name: prefix of the Keras names.

    Attributes:
        actor_body, critic_body, target_critic_body: the bodies (``critic_body is actor_body`` when shared).
        policy_head: ``hidden [B, T, H] -> [mean, log_std]``, each ``[B, T, A]``.
        q_head, target_q_head: ``[hidden, action] -> [q1, q2]``, each ``[B, T]``.
        policy_model: one step (or a sequence) of what an acting policy needs: ``[obs, prev_action,
            prev_reward, obs_mask, *state] -> [mean, log_std, *final state]`` with the state of
            :meth:`state_spec` (the actor's, then the critic's when separate).
    """

    def __init__(self, obs_shape: tuple[int, ...], action_low: npt.ArrayLike, action_high: npt.ArrayLike,
                 encoder: ImageModel | None = None, *, obs_dtype: str = "float32", core: Core = "lstm",
                 core_units: int = 128, hidden_units: Sequence[int] = (256, 256), shared_core: bool = False,
                 log_std_min: float = -20.0, log_std_max: float = 2.0, name: str = "sac") -> None:
        low = np.asarray(action_low, dtype=np.float32).reshape(-1)
        high = np.asarray(action_high, dtype=np.float32).reshape(-1)
        if low.shape != high.shape or low.size == 0:
            raise ValueError(f"action_low {low.shape} and action_high {high.shape} must be the same non-empty flat "
                             "bounds of the Box action space (r2d2kit.spaces.box_action_layout gives them)")
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
            raise ValueError(f"action bounds must be finite with high > low, got low {low.tolist()} high "
                             f"{high.tolist()}; fix: wrap the env so that its Box action space has finite bounds "
                             "(r2d2kit.spaces.box_action_layout says how)")
        if isinstance(core_units, bool) or not isinstance(core_units, (int, np.integer)) or core_units < 1:
            raise ValueError(f"core_units must be an integer >= 1, got {core_units!r}")
        if not log_std_min < log_std_max:
            raise ValueError(f"log_std_min ({log_std_min}) must be < log_std_max ({log_std_max})")
        self.obs_shape = tuple(int(n) for n in obs_shape)
        self.obs_dtype = str(np.dtype(obs_dtype))
        self.action_low, self.action_high = low, high
        self.action_size = int(low.size)
        self.action_center = (high + low) / 2.0
        self.action_scale = (high - low) / 2.0
        self.core = check_core_name(core)
        self.core_units = int(core_units)
        self.hidden_units = tuple(int(n) for n in hidden_units)
        self.shared_core = bool(shared_core)
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        self.name = name
        encoder = encoder or MLPModel()
        self.actor_body, actor_spec = self._body(encoder, f"{name}_{'shared' if self.shared_core else 'actor'}")
        if self.shared_core:
            self.critic_body, critic_spec = self.actor_body, actor_spec
        else:
            self.critic_body, critic_spec = self._body(encoder, f"{name}_critic")
        self.target_critic_body, _ = self._body(encoder, f"{name}_target_critic")
        hidden_size = int(self.actor_body.outputs[0].shape[-1])
        self.policy_head = self._policy_head(hidden_size, f"{name}_policy")
        self.q_head = self._q_head(int(self.critic_body.outputs[0].shape[-1]), f"{name}_q")
        self.target_q_head = self._q_head(int(self.critic_body.outputs[0].shape[-1]), f"{name}_target_q")
        self._actor_core_spec, self._critic_core_spec = actor_spec, critic_spec
        if self.shared_core:
            self._state_spec = actor_spec
        else:
            self._state_spec = (tuple(StateField(f"actor_{f.name}", f.shape, f.dtype) for f in actor_spec)
                                + tuple(StateField(f"critic_{f.name}", f.shape, f.dtype) for f in critic_spec))
        self.policy_model = self._policy_model()
        self.copy_target_weights()

    # ------------------------------------------------------------------ building
    def _body(self, encoder: ImageModel, name: str) -> tuple[keras.Model, tuple[StateField, ...]]:
        """A body model and its core's state spec (the core's own field names)."""
        obs, prev_action, prev_reward, obs_mask = self._row_inputs(name)
        cell = make_cell(self.core, self.core_units, name)
        spec = state_spec(cell, self.core)
        initial = [keras.Input(shape=field.shape, name=f"{name}_{field.name}0") for field in spec]
        features = keras.ops.concatenate(
            [keras.ops.cast(encoder.build(self.obs_shape, self.obs_dtype)(obs), "float32"), prev_action,
             keras.ops.expand_dims(prev_reward, -1)], axis=-1)
        if cell is None:
            return keras.Model([obs, prev_action, prev_reward, obs_mask], features, name=f"{name}_body"), spec
        rnn = keras.layers.RNN(cell, return_sequences=True, return_state=True, name=f"{name}_rnn")
        hidden, *final = rnn(features, mask=obs_mask, initial_state=list(initial))
        hidden = _DropMask(name=f"{name}_rows")(hidden)
        final = [keras.ops.cast(part, "float32") for part in final]
        return keras.Model([obs, prev_action, prev_reward, obs_mask, *initial], [hidden, *final],
                           name=f"{name}_body"), spec

    def _row_inputs(self, name: str):
        obs = keras.Input(shape=(None,) + self.obs_shape, dtype=self.obs_dtype, name=f"{name}_obs")
        prev_action = keras.Input(shape=(None, self.action_size), dtype="float32", name=f"{name}_prev_action")
        prev_reward = keras.Input(shape=(None,), dtype="float32", name=f"{name}_prev_reward")
        obs_mask = keras.Input(shape=(None,), dtype="bool", name=f"{name}_obs_mask")
        return obs, prev_action, prev_reward, obs_mask

    def _mlp(self, x, name: str):
        for i, width in enumerate(self.hidden_units):
            x = keras.layers.Dense(width, activation="relu", name=f"{name}_hidden{i}")(x)
        return x

    def _policy_head(self, hidden_size: int, name: str) -> keras.Model:
        hidden = keras.Input(shape=(None, hidden_size), name=f"{name}_hidden")
        x = self._mlp(hidden, name)
        mean = keras.layers.Dense(self.action_size, name=f"{name}_mean", dtype="float32")(x)
        log_std = keras.layers.Dense(self.action_size, name=f"{name}_log_std", dtype="float32")(x)
        log_std = keras.ops.clip(log_std, self.log_std_min, self.log_std_max)
        return keras.Model(hidden, [mean, log_std], name=f"{name}_head")

    def _q_head(self, hidden_size: int, name: str) -> keras.Model:
        hidden = keras.Input(shape=(None, hidden_size), name=f"{name}_hidden")
        action = keras.Input(shape=(None, self.action_size), name=f"{name}_action")
        joined = keras.ops.concatenate([keras.ops.cast(hidden, "float32"), action], axis=-1)
        qs = []
        for twin in (1, 2):
            x = self._mlp(joined, f"{name}{twin}")
            q = keras.layers.Dense(1, name=f"{name}{twin}_out", dtype="float32")(x)
            qs.append(keras.ops.squeeze(q, -1))
        return keras.Model([hidden, action], qs, name=f"{name}_head")

    def _policy_model(self) -> keras.Model:
        name = f"{self.name}_policy_step"
        rows = self._row_inputs(name)
        actor_state = [keras.Input(shape=f.shape, name=f"{name}_{f.name}0") for f in self._actor_core_spec]
        hidden, actor_final = _outputs(self.actor_body([*rows, *actor_state]))
        mean, log_std = self.policy_head(hidden)
        if self.shared_core:
            return keras.Model([*rows, *actor_state], [mean, log_std, *actor_final], name=name)
        critic_state = [keras.Input(shape=f.shape, name=f"{name}_critic_{f.name}0") for f in self._critic_core_spec]
        _, critic_final = _outputs(self.critic_body([*rows, *critic_state]))
        return keras.Model([*rows, *actor_state, *critic_state], [mean, log_std, *actor_final, *critic_final],
                           name=name)

    # ------------------------------------------------------------------ public
    def state_spec(self) -> tuple[StateField, ...]:
        """What windows store and the acting policy keeps: the actor core's fields (``actor_<name>``), then the
        critic core's (``critic_<name>``); a shared core's own names (``h``, ``c``); none without a core."""
        return self._state_spec

    @property
    def actor_state_size(self) -> int:
        """How many of :meth:`state_spec`'s fields are the actor core's (the rest are the critic's)."""
        return len(self._actor_core_spec)

    def zero_state(self, batch: int) -> tuple[np.ndarray, ...]:
        """The state at an episode start, ``[batch, *shape]`` zeros per field of :meth:`state_spec`."""
        return zero_state(self._state_spec, batch)

    def window_fields(self) -> WindowFields:
        """What replay windows of these networks hold: observations, flat float32 actions and both cores' state."""
        return WindowFields(self.obs_shape, self.obs_dtype, (self.action_size,), "float32", self._state_spec)

    def critic_models(self) -> list[keras.Model]:
        """The online critic's models (the body, then the Q heads), as the target mirrors them."""
        return [self.critic_body, self.q_head]

    def target_models(self) -> list[keras.Model]:
        """The target critic's models, in :meth:`critic_models`' order."""
        return [self.target_critic_body, self.target_q_head]

    def copy_target_weights(self) -> None:
        """Set the target critic's weights to the online critic's."""
        for target, online in zip(self.target_models(), self.critic_models(), strict=True):
            for mine, theirs in zip(target.weights, online.weights, strict=True):
                mine.assign(theirs)

    def policy_variables(self) -> list[keras.Variable]:
        """The variables the acting policy reads (the policy model's, in its order): the published vector's."""
        return list(self.policy_model.weights)


def make_sac_networks(obs_shape: Sequence[int], action_low: Sequence[float], action_high: Sequence[float], *,
                      obs_dtype: str = "float32", encoder: ImageModel | None = None, core: Core = "lstm",
                      core_units: int = 128, hidden_units: Sequence[int] = (256, 256), shared_core: bool = False,
                      log_std_min: float = -20.0, log_std_max: float = 2.0, name: str = "sac") -> SACNetworks:
    """Build :class:`SACNetworks` from plain values (what an actor process is sent to rebuild them)."""
    return SACNetworks(tuple(obs_shape), action_low, action_high, encoder, obs_dtype=obs_dtype, core=core,
                       core_units=core_units, hidden_units=hidden_units, shared_core=shared_core,
                       log_std_min=log_std_min, log_std_max=log_std_max, name=name)


def sac_networks_factory(obs_shape: Sequence[int], action_low: npt.ArrayLike, action_high: npt.ArrayLike,
                         **kwargs: Any) -> functools.partial[SACNetworks]:
    """A picklable zero-argument factory of :class:`SACNetworks`: :func:`make_sac_networks` with its arguments
    turned into plain tuples and floats (``encoder`` and ``core`` must be picklable: a built-in encoder, a
    core's name or a module-level factory)."""
    low = tuple(float(x) for x in np.asarray(action_low, dtype=np.float64).reshape(-1))
    high = tuple(float(x) for x in np.asarray(action_high, dtype=np.float64).reshape(-1))
    if "hidden_units" in kwargs:
        kwargs["hidden_units"] = tuple(int(n) for n in kwargs["hidden_units"])
    return functools.partial(make_sac_networks, tuple(int(n) for n in obs_shape), low, high, **kwargs)
