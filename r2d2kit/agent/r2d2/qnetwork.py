"""Recurrent Q-network: encoder -> [prev action one-hot, prev reward] -> memory core -> dueling head.

The core is an LSTM (R2D2's), a GRU, a user's Keras cell or none (a feed-forward network, DQN's;
``models/cores.py``); its recurrent state is a tuple of tensors (empty without a core) described
once by :meth:`QNetwork.state_spec`. One set of layers serves
two Keras models:

* the **sequence model** (learner): any batch, any length; explicit initial state and a row
  mask, so stored states from replay go straight in and padded rows leave the state untouched;
* the **actor** (:class:`StatefulActor`): one step for a static batch of ``num_envs``, the state
  of each env kept in numpy arrays between calls; a numpy forward of the same weights for the
  built-in MLP encoder with an LSTM or GRU core (``models/numpy_actor.py``), else one compiled
  Keras call over the same cell and head layers.

The Keras models call the very same weights (no copies), which ``tests/models`` checks, together
with the equality of a step-by-step actor unroll (numpy and Keras) and a sequence-model unroll
from the same state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TypedDict

import keras
import numpy as np
import numpy.typing as npt

from r2d2kit.agent.r2d2.numpy_actor import NumpyForward, UnsupportedNetwork
from r2d2kit.agent.seam import WindowFields
from r2d2kit.models.backend import compile_function
from r2d2kit.models.cores import (
    BUILT_IN_CORES,
    Core,
    StateField,
    make_cell,
    q_and_state,
    reset_state,
    state_spec,
    zero_state,
)
from r2d2kit.models.encoders import ImageModel, MLPModel


def _float32(x):
    """``x`` as float32: the recurrent state leaves the models in float32 under any dtype policy (no-op in float32)."""
    return x if x.dtype == "float32" else keras.ops.cast(x, "float32")


class NetworkConfig(TypedDict):
    """What a :class:`QNetwork` was built with (``network.config``): its constructor's arguments but the name."""

    obs_shape: tuple[int, ...]
    num_actions: int
    encoder: ImageModel
    obs_dtype: str
    core: Core
    core_units: int
    dueling: bool
    head_units: int
    prev_action_reward: bool
    layer_norm: bool


class QNetwork:
    """Layers and models of a recurrent (optionally dueling) Q-network.

    Args:
        obs_shape: shape of one observation.
        num_actions: discrete actions.
        encoder: an :class:`ImageModel`; default :class:`MLPModel` (vector observations).
        obs_dtype: dtype of observations (``"uint8"`` images are scaled to [0, 1] by the encoders).
        core: the memory core: ``"lstm"`` (R2D2's), ``"gru"``, ``"none"`` (no memory: the head reads the
            features of each row, as DQN's network does), ``"package.module:factory"`` or the factory
            itself (a function ``factory(units)`` returning a Keras RNN cell; see ``models/cores.py``).
        core_units: the core's width (R2D2: 512); a user's factory gets it as ``units``; unused without a core.
        dueling: use a dueling head, ``Q = V + A - mean(A)`` (R2D2: yes).
        head_units: hidden units of each head stream (0: linear head).
        prev_action_reward: feed the previous action (one-hot) and reward to the core, as R2D2 does.
        layer_norm: layer-normalise the core's output and each head's hidden layer (before its ReLU), which
            bounds the features TD targets chase (as in PQN, Gallici et al. 2024; not in R2D2). Off by
            default: on ``CartPoleNoVel-v1`` it learned slower (benchmarks/experiments/README.md).
        name: prefix of the Keras names (e.g. "online", "target").

    The layers by role are public, so other forwards of the same weights (the actors' numpy step,
    :class:`~r2d2kit.agent.r2d2.numpy_actor.NumpyForward`) read them without knowing how they were built:
    ``encoder`` (Keras model, time folded into the batch), ``cell`` (the core's Keras cell, None without a core),
    ``core_norm``
    (LayerNormalization of the core's output, or None), ``value_layers`` and ``advantage_layers`` (each
    head stream's layers in call order, the last one the output; ``value_layers`` unused without
    ``dueling``).
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, encoder: ImageModel | None = None, *,
                 obs_dtype: str = "float32", core: Core = "lstm", core_units: int = 512, dueling: bool = True,
                 head_units: int = 512, prev_action_reward: bool = True, layer_norm: bool = False,
                 name: str = "online") -> None:
        if not isinstance(num_actions, (int, np.integer)) or num_actions < 1:
            raise ValueError(f"num_actions must be a positive int, got {num_actions!r}")
        self.config = NetworkConfig(obs_shape=tuple(obs_shape), num_actions=int(num_actions),
                                    encoder=encoder or MLPModel(), obs_dtype=str(np.dtype(obs_dtype)), core=core,
                                    core_units=int(core_units), dueling=bool(dueling), head_units=int(head_units),
                                    prev_action_reward=bool(prev_action_reward), layer_norm=bool(layer_norm))
        self.obs_shape = tuple(obs_shape)
        self.obs_dtype = str(np.dtype(obs_dtype))
        self.num_actions = int(num_actions)
        self.core = core
        self.core_units = int(core_units)
        self.dueling = bool(dueling)
        self.prev_action_reward = bool(prev_action_reward)
        self.name = name
        self.encoder = self.config["encoder"].build(self.obs_shape, self.obs_dtype)
        self.cell = make_cell(core, self.core_units, name)
        self._state_spec = state_spec(self.cell, core)
        self.layer_norm = bool(layer_norm)
        self.core_norm = (keras.layers.LayerNormalization(name=f"{name}_{self._rnn_label()}_norm") if self.layer_norm
                          else None)
        # hidden layers first, then the outputs: Keras draws each initializer's seed when the layer is
        # made, so this order keeps the weights (and recorded runs) of a given seed unchanged
        self.value_layers = self._hidden(int(head_units), f"{name}_value")
        self.advantage_layers = self._hidden(int(head_units), f"{name}_advantage")
        # the output layers compute in float32 under any global dtype policy (e.g. "mixed_bfloat16"), so Q,
        # the dueling sum and the loss keep float32 precision (Keras' mixed-precision guide)
        self.value_layers.append(keras.layers.Dense(1, name=f"{name}_value", dtype="float32"))
        self.advantage_layers.append(keras.layers.Dense(self.num_actions, name=f"{name}_advantage", dtype="float32"))
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
        if self.core_norm is not None:
            hidden = self.core_norm(hidden)
        advantage = hidden
        for layer in self.advantage_layers:
            advantage = layer(advantage)  # [B, T, A]
        if not self.dueling:
            return advantage
        value = hidden
        for layer in self.value_layers:
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
        initial = [keras.Input(shape=field.shape, name=f"{field.name}0") for field in self._state_spec]
        q, final = self._unroll(self._rnn(f"{self.name}_{self._rnn_label()}"), obs, prev_action, prev_reward,
                                initial, obs_mask)
        model = keras.Model([obs, prev_action, prev_reward, obs_mask, *initial], [q, *final],
                            name=f"{self.name}_sequence")
        if self.core not in BUILT_IN_CORES:
            self._check_user_cell(model)
        return model

    def _check_user_cell(self, model: keras.Model) -> None:
        """One step of a user's cell on zeros: Keras builds a model whose cell's states do not match its
        state_size, and the first update would then fail deep inside Keras."""
        zeros = [np.zeros((1, 1) + self.obs_shape, self.obs_dtype), np.zeros((1, 1), np.int32),
                 np.zeros((1, 1), np.float32), np.ones((1, 1), bool), *self.zero_state(1)]
        try:
            _, *final = model(zeros)
        except Exception as error:  # noqa: BLE001  (a user's cell fails however Keras or TensorFlow report it)
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ValueError(f"core {self.core!r}: one step of its cell failed ({first_line[:200]}); its call(inputs, "
                             f"states) must return (output, new_states) with one tensor per state_size entry "
                             f"{[field.shape for field in self._state_spec]}") from None
        returned = [tuple(part.shape[1:]) for part in final]
        declared = [field.shape for field in self._state_spec]
        if returned != declared:
            raise ValueError(f"core {self.core!r}: its cell returns states of shapes {returned}, but its state_size "
                             f"declares {declared}")

    def _rnn_label(self) -> str:
        return self.core if self.core in BUILT_IN_CORES else "core"

    def _rnn(self, name: str) -> keras.layers.RNN | None:
        """The core unrolled over time, or None for a feed-forward network (``core="none"``)."""
        if self.cell is None:
            return None
        return keras.layers.RNN(self.cell, return_sequences=True, return_state=True, name=name)

    def _unroll(self, rnn, obs, prev_action, prev_reward, initial, obs_mask=None):
        """Q ``[B, T, A]`` and the final state (a list in :meth:`state_spec` order, float32) from ``initial``.

        Without a core (``rnn`` None) every row is computed on its own and there is no state."""
        if rnn is None:
            return self._head(self._features(obs, prev_action, prev_reward)), []
        outputs = rnn(self._features(obs, prev_action, prev_reward), mask=obs_mask, initial_state=list(initial))
        hidden, final = outputs[0], outputs[1:]
        return self._head(hidden), [_float32(part) for part in final]

    # ------------------------------------------------------------------ public
    @property
    def variables(self) -> list:
        """All weights (the sequence model's; the actor model uses the same objects)."""
        return self.model.weights

    def state_spec(self) -> tuple[StateField, ...]:
        """The recurrent state, one :class:`~r2d2kit.models.cores.StateField` per tensor in the core's order:
        what actors keep, windows store (as ``state_<name>``) and the learner starts from."""
        return self._state_spec

    def zero_state(self, batch: int) -> tuple[np.ndarray, ...]:
        """The state at an episode start: zeros ``[batch, *shape]`` for every tensor of :meth:`state_spec`."""
        return zero_state(self._state_spec, batch)

    def window_fields(self) -> WindowFields:
        """What replay windows of this network hold: its observations, action indices (int64) and state."""
        return WindowFields(tuple(self.obs_shape), self.obs_dtype, (), "int64", self._state_spec)

    def clone(self, name: str = "target") -> QNetwork:
        """A network of the same architecture with its own weights (e.g. the target network)."""
        c = self.config
        return QNetwork(c["obs_shape"], c["num_actions"], c["encoder"], obs_dtype=c["obs_dtype"], core=c["core"],
                        core_units=c["core_units"], dueling=c["dueling"], head_units=c["head_units"],
                        prev_action_reward=c["prev_action_reward"], layer_norm=c["layer_norm"], name=name)

    def copy_weights_from(self, other: QNetwork) -> None:
        """Set every weight to ``other``'s (same architecture)."""
        for mine, theirs in zip(self.variables, other.variables, strict=True):
            mine.assign(theirs)

    def actor(self, num_envs: int, *, backend: str = "auto", follow_weights: bool = True) -> StatefulActor:
        """A one-step actor for ``num_envs`` environments acting with this network's weights.

        Args:
            num_envs: envs stepped together (the batch of every call).
            backend: ``"auto"`` (numpy forward where supported, else one compiled Keras call),
                ``"numpy"`` (an error if unsupported) or ``"keras"``.
            follow_weights: read the weights before every step (an actor sharing them with a learner
                in this process); False: only when built and at :meth:`StatefulActor.refresh_weights`
                (actor processes, which load published weights and then call it).
        """
        return StatefulActor(self, num_envs, backend=backend, follow_weights=follow_weights)


class StatefulActor:
    """One-step Q-values for a batch of envs, with the recurrent state of each env kept between calls.

    The state is a tuple of numpy arrays ``[num_envs, *shape]`` (the network's :meth:`QNetwork.state_spec`)
    owned here: :meth:`get_state` / :meth:`set_state` copy it out and in (SequenceBuilder stores it at
    window starts) and
    :meth:`reset` zeroes the rows of envs whose episode ended, doing nothing when none did.

    Two ways to compute a step (``backend`` picks, ``self.backend`` says which runs):

    * ``"numpy"``: :class:`~r2d2kit.agent.r2d2.numpy_actor.NumpyForward`, for the built-in MLP
      encoder, an LSTM or GRU core and the standard head; tens of microseconds for small nets where a Keras call costs
      about a millisecond of fixed overhead. It acts on a numpy copy of the weights, read again
      (one compiled call) before every step when ``follow_weights`` (nothing can go stale), else
      only before the first step after :meth:`refresh_weights`, which whoever changes the weights
      calls (actor processes after loading published weights, the local pool's ``publish``).
    * ``"keras"``: one compiled function of fixed shape (``tf.function`` or ``jax.jit``) over the same layers
      (the sequence model's RNN with one step, the state passed in and returned), for everything else, e.g. image
      encoders or a user's core; it always reads the live variables.

    ``"auto"`` (the default) takes numpy when the network is supported, else keras; the reason is in
    ``backend_reason``.
    """

    BACKENDS = ("auto", "numpy", "keras")

    def __init__(self, network: QNetwork, num_envs: int, *, backend: str = "auto", follow_weights: bool = True) -> None:
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if backend not in self.BACKENDS:
            raise ValueError(f"backend must be one of {self.BACKENDS}, got {backend!r}")
        self.network = network
        self.num_envs = int(num_envs)
        self.follow_weights = bool(follow_weights)
        self._obs_shape = (self.num_envs,) + tuple(network.obs_shape)
        self._state = network.zero_state(self.num_envs)  # [E, *shape] per state tensor
        self._numpy: NumpyForward | None = None
        self._model: keras.Model | None = None
        self._step: Callable[..., tuple[object, tuple[object, ...]]] | None = None
        self._stale = False  # weights changed since the numpy copy was read (refresh_weights)
        self.backend_reason = "backend='keras' asked for" if backend == "keras" else ""
        if backend != "keras":
            try:
                self._numpy = NumpyForward(network)
            except UnsupportedNetwork as error:
                if backend == "numpy":
                    raise ValueError(f"backend='numpy': {error}; use backend='auto' to fall back to Keras") from None
                self.backend_reason = str(error)
        self.backend = "numpy" if self._numpy is not None else "keras"
        if self.backend == "keras":
            self._step = self._compile_keras_step()

    # ------------------------------------------------------------------ keras path
    @property
    def model(self) -> keras.Model:
        """The Keras one-step model ``[obs, prev_action, prev_reward, *state] -> [Q, *state]`` (built on first use)."""
        if self._model is None:
            network, envs = self.network, self.num_envs
            obs, prev_action, prev_reward = network._inputs(envs, 1)
            initial = [keras.Input(batch_shape=(envs,) + field.shape, name=f"{field.name}0")
                       for field in network.state_spec()]
            q, final = network._unroll(network._rnn(f"{network.name}_actor_{network._rnn_label()}"), obs,
                                       prev_action, prev_reward, initial)
            self._model = keras.Model([obs, prev_action, prev_reward, *initial], [q, *final],
                                      name=f"{network.name}_actor")
        return self._model

    def _compile_keras_step(self) -> Callable[..., tuple[object, tuple[object, ...]]]:
        model = self.model
        envs = self.num_envs
        state_signature = tuple(((envs,) + field.shape, field.dtype) for field in self.network.state_spec())
        signature = [(self._obs_shape, self.network.obs_dtype), ((envs,), "int32"), ((envs,), "float32"),
                     state_signature]

        def step(obs, prev_action, prev_reward, state):
            q, final = q_and_state(model([obs[:, None], prev_action[:, None], prev_reward[:, None], *state]))
            return q[:, 0], tuple(final)  # [E, A], the next state

        return compile_function(step, model.variables, signature)

    # ------------------------------------------------------------------ public
    def q_values(self, obs: npt.ArrayLike, prev_action: npt.ArrayLike, prev_reward: npt.ArrayLike) -> np.ndarray:
        """Q-values ``[num_envs, A]`` for one step; advances the recurrent state of every env."""
        obs = np.asarray(obs, dtype=self.network.obs_dtype)
        prev_action = np.asarray(prev_action).astype(np.int32, copy=False)
        prev_reward = np.asarray(prev_reward).astype(np.float32, copy=False)
        if obs.shape != self._obs_shape or prev_action.shape != (self.num_envs,) or \
                prev_reward.shape != (self.num_envs,):
            raise ValueError(f"q_values: obs {obs.shape}, prev_action {prev_action.shape}, prev_reward "
                             f"{prev_reward.shape}; expected {self._obs_shape}, ({self.num_envs},), "
                             f"({self.num_envs},) for this actor of {self.num_envs} envs")
        if prev_action.min() < 0 or prev_action.max() >= self.network.num_actions:
            raise ValueError(f"q_values: prev_action {prev_action.tolist()} outside [0, {self.network.num_actions})")
        if self._numpy is None:
            step = self._step
            if step is None:
                raise RuntimeError("an actor without a numpy forward compiles its Keras step when it is made")
            q, state = step(obs, prev_action, prev_reward, self._state)
            self._state = tuple(np.asarray(part) for part in state)
            return np.asarray(q)
        if self.follow_weights or self._stale:
            self._numpy.refresh()
            self._stale = False
        q, self._state = self._numpy.step(obs, prev_action, prev_reward, self._state)
        return q

    def refresh_weights(self) -> None:
        """Say the network's weights changed: the next step reads them again (call it after changing them).

        Only the numpy backend holds a copy (the Keras step reads the live variables); with
        ``follow_weights`` it reads them before every step anyway.
        """
        self._stale = True

    @contextlib.contextmanager
    def fixed_weights(self) -> Iterator[StatefulActor]:
        """Within the block, act with the weights as they are now, read once (e.g. an evaluation)."""
        follow = self.follow_weights
        self.refresh_weights()
        self.follow_weights = False
        try:
            yield self
        finally:
            self.follow_weights = follow

    def get_state(self) -> tuple[np.ndarray, ...]:
        """The current state (copies), one ``[num_envs, *shape]`` array per tensor of the network's state spec."""
        return tuple(part.copy() for part in self._state)

    def set_state(self, state: Sequence[npt.ArrayLike]) -> None:
        """Overwrite the recurrent state (e.g. with stored states): one ``[num_envs, *shape]`` array per tensor
        of the network's state spec, in its order."""
        spec = self.network.state_spec()
        if isinstance(state, np.ndarray) or len(state) != len(spec):
            names = [field.name for field in spec]
            raise ValueError(f"set_state: expected a sequence of {len(spec)} arrays ({names}, the network's "
                             f"state_spec()), got {type(state).__name__}"
                             f"{'' if isinstance(state, np.ndarray) else ' of ' + str(len(state))}")
        parts = tuple(np.array(part, field.dtype) for part, field in zip(state, spec, strict=True))
        for part, field in zip(parts, spec, strict=True):
            if part.shape != (self.num_envs,) + field.shape:
                raise ValueError(f"set_state: state {field.name!r} has shape {part.shape}; expected "
                                 f"{(self.num_envs,) + field.shape}")
        self._state = parts

    def reset(self, mask: npt.ArrayLike | None = None) -> None:
        """Zero the state of envs where ``mask`` is true (all envs if ``mask`` is None); no work if none is."""
        if mask is None:
            self._state = self.network.zero_state(self.num_envs)
            return
        self._state = reset_state(self._state, mask, self.num_envs)
