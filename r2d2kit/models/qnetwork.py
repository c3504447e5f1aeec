"""Recurrent Q-network: encoder -> [prev action one-hot, prev reward] -> LSTM -> dueling head.

One set of layers serves two Keras models:

* the **sequence model** (learner): any batch, any length; explicit initial LSTM state and a row
  mask, so stored states from replay go straight in and padded rows leave the state untouched;
* the **actor model** (:class:`StatefulActor`): a Keras *stateful* RNN over the same ``LSTMCell``
  with a static batch of ``num_envs`` and one step per call; its state lives in variables that
  are read, written and reset per env.

Both call the very same weights (no copies), which ``tests/models`` checks, together with the
equality of a stateful step-by-step unroll and a sequence-model unroll from the same state.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from r2d2kit.models.encoders import ImageModel, MLPModel


class QNetwork:
    """Layers and models of a recurrent (optionally dueling) Q-network.

    Args:
        obs_shape: shape of one observation.
        num_actions: discrete actions.
        encoder: an :class:`ImageModel`; default :class:`MLPModel` (vector observations).
        obs_dtype: dtype of observations (``"uint8"`` images are scaled to [0, 1] by the encoders).
        lstm_units: LSTM width (R2D2: 512).
        dueling: use a dueling head, ``Q = V + A - mean(A)`` (R2D2: yes).
        head_units: hidden units of each head stream (0: linear head).
        prev_action_reward: feed the previous action (one-hot) and reward to the LSTM, as R2D2 does.
        layer_norm: layer-normalise the LSTM output and each head's hidden layer (before its ReLU), which
            bounds the features TD targets chase (as in PQN, Gallici et al. 2024; not in R2D2). Off by
            default: on ``CartPoleNoVel-v1`` it learned slower (session 6 of the experiment record,
            benchmarks/experiments/README.md).
        name: prefix of the Keras names (e.g. "online", "target").
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, encoder: ImageModel | None = None, *,
                 obs_dtype: str = "float32", lstm_units: int = 512, dueling: bool = True, head_units: int = 512,
                 prev_action_reward: bool = True, layer_norm: bool = False, name: str = "online") -> None:
        if not isinstance(num_actions, (int, np.integer)) or num_actions < 1:
            raise ValueError(f"num_actions must be a positive int, got {num_actions!r}")
        self.config = dict(obs_shape=tuple(obs_shape), num_actions=int(num_actions), encoder=encoder or MLPModel(),
                           obs_dtype=str(np.dtype(obs_dtype)), lstm_units=int(lstm_units), dueling=bool(dueling),
                           head_units=int(head_units), prev_action_reward=bool(prev_action_reward),
                           layer_norm=bool(layer_norm))
        self.obs_shape = tuple(obs_shape)
        self.obs_dtype = str(np.dtype(obs_dtype))
        self.num_actions = int(num_actions)
        self.lstm_units = int(lstm_units)
        self.dueling = bool(dueling)
        self.prev_action_reward = bool(prev_action_reward)
        self.name = name
        self.encoder = self.config["encoder"].build(self.obs_shape, self.obs_dtype)
        self.cell = keras.layers.LSTMCell(self.lstm_units, name=f"{name}_lstm_cell")
        self.layer_norm = bool(layer_norm)
        self._norm = keras.layers.LayerNormalization(name=f"{name}_lstm_norm") if self.layer_norm else None
        # hidden layers first, then the outputs: Keras draws each initializer's seed when the layer is
        # made, so this order keeps the weights (and recorded runs) of a given seed unchanged
        self._value = self._hidden(int(head_units), f"{name}_value")
        self._advantage = self._hidden(int(head_units), f"{name}_advantage")
        self._value.append(keras.layers.Dense(1, name=f"{name}_value"))
        self._advantage.append(keras.layers.Dense(self.num_actions, name=f"{name}_advantage"))
        self.model = self._build_sequence_model()

    # ------------------------------------------------------------------ shared pieces
    def _hidden(self, units: int, name: str) -> list:
        """A head stream's hidden layer: Dense -> (LayerNorm) -> ReLU; none if ``units`` is 0."""
        if not units:
            return []
        if self.layer_norm:
            return [keras.layers.Dense(units, name=f"{name}_hidden"),
                    keras.layers.LayerNormalization(name=f"{name}_hidden_norm"), keras.layers.ReLU()]
        return [keras.layers.Dense(units, activation="relu", name=f"{name}_hidden")]

    def _features(self, obs, prev_action, prev_reward):
        features = self.encoder(obs)  # [B, T, F]
        if not self.prev_action_reward:
            return features
        one_hot = keras.ops.one_hot(keras.ops.cast(prev_action, "int32"), self.num_actions)  # [B, T, A]
        reward = keras.ops.expand_dims(keras.ops.cast(prev_reward, "float32"), -1)  # [B, T, 1]
        return keras.ops.concatenate([features, one_hot, reward], axis=-1)

    def _head(self, hidden):
        if self._norm is not None:
            hidden = self._norm(hidden)
        advantage = hidden
        for layer in self._advantage:
            advantage = layer(advantage)  # [B, T, A]
        if not self.dueling:
            return advantage
        value = hidden
        for layer in self._value:
            value = layer(value)  # [B, T, 1]
        return value + advantage - keras.ops.mean(advantage, axis=-1, keepdims=True)

    def _inputs(self, batch: int | None, time: int | None):
        obs = keras.Input(batch_shape=(batch, time) + self.obs_shape, dtype=self.obs_dtype, name="obs")
        prev_action = keras.Input(batch_shape=(batch, time), dtype="int32", name="prev_action")
        prev_reward = keras.Input(batch_shape=(batch, time), dtype="float32", name="prev_reward")
        return obs, prev_action, prev_reward

    def _build_sequence_model(self) -> keras.Model:
        obs, prev_action, prev_reward = self._inputs(None, None)
        obs_mask = keras.Input(shape=(None,), dtype="bool", name="obs_mask")
        h0 = keras.Input(shape=(self.lstm_units,), name="h0")
        c0 = keras.Input(shape=(self.lstm_units,), name="c0")
        rnn = keras.layers.RNN(self.cell, return_sequences=True, return_state=True, name=f"{self.name}_lstm")
        hidden, h, c = rnn(self._features(obs, prev_action, prev_reward), mask=obs_mask, initial_state=[h0, c0])
        q = self._head(hidden)
        return keras.Model([obs, prev_action, prev_reward, obs_mask, h0, c0], [q, h, c], name=f"{self.name}_sequence")

    # ------------------------------------------------------------------ public
    @property
    def variables(self) -> list:
        """All weights (the sequence model's; the actor model uses the same objects)."""
        return self.model.weights

    def zero_state(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """LSTM state at an episode start: zeros ``[batch, units]`` for h and c."""
        zeros = np.zeros((batch, self.lstm_units), dtype=np.float32)
        return zeros, zeros.copy()

    def clone(self, name: str = "target") -> "QNetwork":
        """A network of the same architecture with its own weights (e.g. the target network)."""
        config = dict(self.config)
        return QNetwork(config.pop("obs_shape"), config.pop("num_actions"), config.pop("encoder"), name=name, **config)

    def copy_weights_from(self, other: "QNetwork") -> None:
        """Set every weight to ``other``'s (same architecture)."""
        for mine, theirs in zip(self.variables, other.variables, strict=True):
            mine.assign(theirs)

    def actor(self, num_envs: int) -> "StatefulActor":
        """A stateful one-step model for ``num_envs`` environments sharing this network's weights."""
        return StatefulActor(self, num_envs)


class StatefulActor:
    """One-step Q-values for a batch of envs with a Keras stateful LSTM (state kept between calls).

    ``q_values`` is compiled once (``tf.function``): an eager Keras call costs ~10 ms here, a
    compiled one well under a millisecond.
    """

    def __init__(self, network: QNetwork, num_envs: int) -> None:
        self.network = network
        self.num_envs = int(num_envs)
        obs, prev_action, prev_reward = network._inputs(self.num_envs, 1)
        self.rnn = keras.layers.RNN(network.cell, return_sequences=True, stateful=True, name=f"{network.name}_actor_lstm")
        hidden = self.rnn(network._features(obs, prev_action, prev_reward))
        self.model = keras.Model([obs, prev_action, prev_reward], network._head(hidden), name=f"{network.name}_actor")
        self._step = tf.function(self._q_step)

    def _q_step(self, obs, prev_action, prev_reward):
        return self.model([obs[:, None], prev_action[:, None], prev_reward[:, None]])[:, 0]  # [E, A]

    def q_values(self, obs: Any, prev_action: Any, prev_reward: Any) -> np.ndarray:
        """Q-values ``[num_envs, A]`` for one step; advances the LSTM state of every env."""
        obs = np.asarray(obs, dtype=self.network.obs_dtype)
        return self._step(obs, np.asarray(prev_action, np.int32), np.asarray(prev_reward, np.float32)).numpy()

    def get_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Current (h, c), each ``[num_envs, units]`` (copies)."""
        return tuple(np.array(state.numpy()) for state in self.rnn.states)

    def set_state(self, h: Any, c: Any) -> None:
        """Overwrite the LSTM state (e.g. with stored states)."""
        self.rnn.states[0].assign(np.asarray(h, np.float32))
        self.rnn.states[1].assign(np.asarray(c, np.float32))

    def reset(self, mask: Any = None) -> None:
        """Zero the state of envs where ``mask`` is true (all envs if ``mask`` is None)."""
        if mask is None:
            keep = np.zeros((self.num_envs, 1), np.float32)
        else:
            keep = 1.0 - np.asarray(mask, np.float32).reshape(self.num_envs, 1)
        for state in self.rnn.states:
            state.assign(state * keep)
