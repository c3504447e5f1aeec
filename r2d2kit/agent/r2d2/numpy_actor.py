"""One actor step of a small recurrent Q-network in numpy: actor inference at numpy speed.

For the CartPole network (MLP 64 -> LSTM 64 -> dueling head 64) and 2 envs, a compiled Keras call
costs about 1 ms, nearly all of it fixed per-call overhead; the same arithmetic in numpy takes a
few tens of microseconds. :class:`NumpyForward` runs that arithmetic for the networks whose layers
it knows, and :class:`~r2d2kit.agent.r2d2.StatefulActor` falls back to one compiled Keras call for the
rest (image encoders, custom :class:`~r2d2kit.models.ImageModel` subclasses).

One step, for ``E`` envs (``U`` core units, ``A`` actions), with an LSTM core::

    obs [E, *obs] --(uint8: /255)--(* input_scale)--flatten--> Dense ... Dense --> f [E, F]
        (coded observations, CodeEncoder(MLPModel): obs = codes [E, code_size], first one-hot
         encoded by the layout's gather plan; a float32 input then, so no /255)
    z = f @ K[:F] + K[F + prev_action] + prev_reward * K[F + A] + h @ R + b        [E, 4U]
        (the LSTM input is [f, one_hot(prev_action), prev_reward]: the one-hot's product with
         the kernel is a row gather, so nothing is concatenated)
    i, f, g, o = sigmoid(z_i), sigmoid(z_f), tanh(z_g), sigmoid(z_o)             (Keras' gate order)
    c' = f * c + i * g;   h' = o * tanh(c')
      (a GRU core, Keras' reset_after form: x_z, x_r, x_h = f K + b_in;  r_z, r_r, r_h = h R + b_rec
       z = sigmoid(x_z + r_z);  r = sigmoid(x_r + r_r);  h' = z * h + (1 - z) * tanh(x_h + r * r_h))
      (no core, ``core="none"``: h' = [f, one_hot(prev_action), prev_reward], or f; no state)
    x = LayerNorm(h') if layer_norm else h'
    A(x), V(x): each stream its hidden layers, then its output layer
    Q = V + A - mean(A)  (dueling)   or   Q = A

The weights are read from the Keras layers by role (the encoder's Dense layers, the core's cell, the
norm, each head stream's layers), checked against the network's config, and the whole step is then
compared once with the Keras sequence model on random inputs: a network this module misreads is
refused (:class:`UnsupportedNetwork`), never run with wrong numbers.

The numpy weights are a copy: :meth:`NumpyForward.refresh` reads them again, all in one compiled
call. :class:`~r2d2kit.agent.r2d2.StatefulActor` decides when (before every step, or when an actor
process has loaded published weights).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import keras
import numpy as np

from r2d2kit.models.backend import compile_function
from r2d2kit.models.code_encoding import CodeEncoder
from r2d2kit.models.cores import q_and_state
from r2d2kit.models.encoders import MLPModel

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from r2d2kit.models.cores import StateField

__all__ = ["NumpyForward", "UnsupportedNetwork"]

_Step = Callable[[list[np.ndarray], np.ndarray], np.ndarray]  # one layer's numpy forward: (weight values, x) -> y


class ForwardNetwork(Protocol):
    """What :class:`NumpyForward` reads of a :class:`~r2d2kit.agent.r2d2.QNetwork` (which imports this module, so it
    cannot be imported here)."""

    @property
    def config(self) -> Mapping[str, object]: ...

    @property
    def obs_shape(self) -> tuple[int, ...]: ...

    @property
    def obs_dtype(self) -> DTypeLike: ...

    @property
    def num_actions(self) -> int: ...

    @property
    def core_units(self) -> int: ...

    @property
    def dueling(self) -> bool: ...

    @property
    def prev_action_reward(self) -> bool: ...

    @property
    def encoder(self) -> keras.Model: ...

    @property
    def cell(self) -> keras.layers.Layer | None: ...

    @property
    def core_norm(self) -> keras.layers.Layer | None: ...

    @property
    def value_layers(self) -> Sequence[keras.layers.Layer]: ...

    @property
    def advantage_layers(self) -> Sequence[keras.layers.Layer]: ...

    @property
    def model(self) -> keras.Model: ...

    def state_spec(self) -> tuple[StateField, ...]: ...


class UnsupportedNetwork(ValueError):
    """The network has a part the numpy forward does not implement (the actor then runs Keras)."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * np.tanh(np.float32(0.5) * x) + np.float32(0.5)  # no overflow for large |x|


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0.0))


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda x: x,
    "relu": _relu,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
}


def _activation(layer: keras.layers.Layer, key: str = "activation") -> Callable[[np.ndarray], np.ndarray]:
    name = layer.get_config().get(key)
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise UnsupportedNetwork(f"layer {layer.name!r}: {key} {name!r} (numpy forward knows {sorted(ACTIVATIONS)})")
    return ACTIVATIONS[name]


class _Weights:
    """Keras variables read into numpy in one compiled call; ``add`` returns a slot for one of them."""

    def __init__(self) -> None:
        self.variables: list[keras.Variable] = []
        self.values: list[np.ndarray] = []
        self._read: Callable[[], object] | None = None  # set by compile

    def add(self, variable: keras.Variable) -> int:
        self.variables.append(variable)
        return len(self.variables) - 1

    def compile(self) -> None:
        variables = self.variables

        def read_all():
            return keras.ops.concatenate([keras.ops.reshape(v, [-1]) for v in variables], axis=0)

        self._read = compile_function(read_all, variables)
        self.refresh()

    def refresh(self) -> None:
        read = self._read
        if read is None:
            raise RuntimeError("_Weights.refresh before compile")
        flat = np.asarray(read())  # one call, one float32 vector of every weight used
        values, offset = [], 0
        for variable in self.variables:
            size = int(np.prod(variable.shape))
            values.append(flat[offset:offset + size].reshape(tuple(variable.shape)))  # a view
            offset += size
        self.values = values


def _dense(layer: keras.layers.Layer, weights: _Weights) -> _Step:
    if type(layer) is not keras.layers.Dense or getattr(layer, "lora_enabled", False):
        raise UnsupportedNetwork(f"layer {layer.name!r} ({type(layer).__name__}) is not a plain Dense layer")
    activation = _activation(layer)
    kernel = weights.add(layer.kernel)
    if layer.use_bias:
        bias = weights.add(layer.bias)
        return lambda w, x: activation(x @ w[kernel] + w[bias])
    return lambda w, x: activation(x @ w[kernel])


def _layer_norm(layer: keras.layers.Layer, weights: _Weights) -> _Step:
    config = layer.get_config()
    if type(layer) is not keras.layers.LayerNormalization or config.get("rms_scaling") or \
            list(np.atleast_1d(config.get("axis"))) != [-1]:
        raise UnsupportedNetwork(f"layer {layer.name!r}: only LayerNormalization over the last axis is supported")
    epsilon = np.float32(layer.epsilon)
    gamma = weights.add(layer.gamma) if layer.scale else None
    beta = weights.add(layer.beta) if layer.center else None

    def norm(w: list[np.ndarray], x: np.ndarray) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        centred = x - mean
        out = centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + epsilon)
        if gamma is not None:
            out = out * w[gamma]
        return out + w[beta] if beta is not None else out

    return norm


def _relu_layer(layer: keras.layers.Layer, weights: _Weights) -> _Step:
    config = layer.get_config()
    if config.get("max_value") is not None or config.get("negative_slope") or config.get("threshold"):
        raise UnsupportedNetwork(f"layer {layer.name!r}: only a plain ReLU is supported")
    return lambda w, x: _relu(x)


LAYERS: dict[type, Callable[[keras.layers.Layer, _Weights], _Step]] = {
    keras.layers.Dense: _dense,
    keras.layers.LayerNormalization: _layer_norm,
    keras.layers.ReLU: _relu_layer,
}


def _stack(layers: Sequence[keras.layers.Layer], weights: _Weights) -> list[_Step]:
    out = []
    for layer in layers:
        build = LAYERS.get(type(layer))
        if build is None:
            raise UnsupportedNetwork(f"layer {layer.name!r} ({type(layer).__name__}) has no numpy forward")
        out.append(build(layer, weights))
    return out


def _run(stack: Sequence[_Step], w: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    for layer in stack:
        x = layer(w, x)
    return x


def _mlp_spec(network: ForwardNetwork) -> tuple[MLPModel, tuple[np.ndarray, np.ndarray] | None]:
    """The MLPModel behind the network's encoder and, for a CodeEncoder around it, its gather plan."""
    spec: object = network.config["encoder"]
    plan: tuple[np.ndarray, np.ndarray] | None = None
    if type(spec) is CodeEncoder:
        source, category = spec.layout.encoding_plan()
        spec, plan = spec.encoder, (np.asarray(source, np.intp), np.asarray(category, np.float32))
    if type(spec) is not MLPModel:  # a subclass may override create_image_model: run it in Keras
        raise UnsupportedNetwork(f"encoder {type(spec).__name__}: the numpy forward implements MLPModel "
                                 "(optionally inside a CodeEncoder) only")
    return spec, plan


def _encoder_dense_layers(network: ForwardNetwork, spec: MLPModel) -> list[keras.layers.Dense]:
    """The MLP encoder's Dense layers, in order; refused unless they hold every encoder weight."""
    dense = [layer for layer in _walk(network.encoder) if isinstance(layer, keras.layers.Dense)]
    units = [int(layer.units) for layer in dense]
    if units != list(spec.units):
        raise UnsupportedNetwork(f"MLPModel encoder: Dense widths {units} in the model, {list(spec.units)} "
                                 "in its config")
    owned = {id(v) for layer in dense for v in layer.weights}
    extra = [v.path for v in network.encoder.weights if id(v) not in owned]
    if extra:
        raise UnsupportedNetwork(f"MLPModel encoder: weights outside its Dense layers: {extra}")
    return dense


def _walk(layer: keras.layers.Layer) -> Iterator[keras.layers.Layer]:
    """Every layer inside ``layer`` (nested models too), depth first. Encoders fold time into the
    batch, so no TimeDistributed wrapper hides a layer; any other weights are refused by the caller."""
    for child in getattr(layer, "layers", []):
        yield child
        yield from _walk(child)


class NumpyForward:
    """One step of a :class:`~r2d2kit.agent.r2d2.QNetwork` in numpy: Q-values and the next recurrent state.

    Built only for what it implements (see the module docstring); anything else raises
    :class:`UnsupportedNetwork`, and the actor runs the compiled Keras step instead.

    Args:
        network: the Q-network whose weights to read (their current values; :meth:`refresh` reads
            them again).
        check: compare one step with the Keras sequence model on random inputs at construction
            and refuse the network if they differ (the guard against a misread layer).
    """

    def __init__(self, network: ForwardNetwork, check: bool = True) -> None:
        self.network = network
        self.obs_shape, self.obs_dtype = tuple(network.obs_shape), np.dtype(network.obs_dtype)
        self.num_actions = int(network.num_actions)
        self.units = int(network.core_units)
        self._weights = weights = _Weights()
        try:
            self._read_layers(network, weights)
        except (AttributeError, KeyError, TypeError) as error:  # a QNetwork laid out otherwise: run it in Keras
            raise UnsupportedNetwork(f"cannot read the network's layers by role ({type(error).__name__}: "
                                     f"{error})") from None
        weights.compile()
        if check:
            self.check_against_keras()

    def _read_layers(self, network: ForwardNetwork, weights: _Weights) -> None:
        spec, self._code_plan = _mlp_spec(network)  # first: refuses all but MLPModel
        self._encoder = _stack(_encoder_dense_layers(network, spec), weights)
        self._scale_uint8 = self.obs_dtype == np.uint8 and self._code_plan is None  # codes arrive as float32
        self._input_scale = None if spec.input_scale is None else np.asarray(spec.input_scale, np.float32)
        inputs = self._code_plan[0].size if self._code_plan is not None else int(np.prod(self.obs_shape))
        self._features = int(spec.units[-1]) if spec.units else int(inputs)
        self._cell_slots = self._core_slots(network.cell, weights) if network.cell is not None else None
        self._norm = _stack([network.core_norm], weights) if network.core_norm is not None else []
        self._advantage = _stack(list(network.advantage_layers), weights)
        self._value = _stack(list(network.value_layers), weights) if network.dueling else []

    def _core_slots(self, cell: keras.layers.Layer, weights: _Weights) -> tuple[int, int, int]:
        kind = type(cell)
        if kind not in (keras.layers.LSTMCell, keras.layers.GRUCell) or not cell.use_bias:
            raise UnsupportedNetwork(f"the recurrent cell {cell.name!r} ({kind.__name__}) is not a Keras LSTMCell "
                                     "or GRUCell with a bias")
        if _activation(cell) is not np.tanh or _activation(cell, "recurrent_activation") is not _sigmoid:
            raise UnsupportedNetwork(f"{kind.__name__} {cell.name!r}: only activation='tanh', recurrent_activation="
                                     "'sigmoid' (the Keras defaults) are supported")
        self._gru = kind is keras.layers.GRUCell
        if self._gru and not cell.reset_after:
            raise UnsupportedNetwork(f"GRUCell {cell.name!r}: only reset_after=True (the Keras default) is supported")
        gates = 3 if self._gru else 4
        extra = self.num_actions + 1 if self.network.prev_action_reward else 0
        if tuple(cell.kernel.shape) != (self._features + extra, gates * self.units):
            raise UnsupportedNetwork(f"{kind.__name__} {cell.name!r}: kernel {tuple(cell.kernel.shape)}, expected "
                                     f"{(self._features + extra, gates * self.units)} from the encoder and prev "
                                     "action/reward")
        return weights.add(cell.kernel), weights.add(cell.recurrent_kernel), weights.add(cell.bias)

    # ------------------------------------------------------------------ public
    @property
    def variables(self) -> list[keras.Variable]:
        """The Keras variables this forward reads, in reading order."""
        return list(self._weights.variables)

    def refresh(self) -> None:
        """Read the network's current weights again (one compiled call)."""
        self._weights.refresh()

    def step(self, obs: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray,
             state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """Q-values ``[E, A]`` and the next state (``(h, c)`` for an LSTM, ``(h,)`` for a GRU, each ``[E, U]``)
        for one step of ``E`` envs.

        Inputs are taken as given (the actor validates them): ``obs`` ``[E, *obs_shape]`` of the
        network's dtype, ``prev_action`` int ``[E]`` in ``[0, A)``, ``prev_reward`` float32 ``[E]``.
        """
        w = self._weights.values
        x = obs.astype(np.float32)  # [E, *obs]
        if self._code_plan is not None:  # CodeEncoding: one gather, then one-hot slots compare
            source, category = self._code_plan
            gathered = x[..., source]  # [E, encoded_size]
            x = np.where(category < 0, gathered, (gathered == category).astype(np.float32))
        if self._scale_uint8:
            x = x / np.float32(255.0)
        if self._input_scale is not None:
            x = x * self._input_scale
        x = _run(self._encoder, w, x.reshape(len(x), -1))  # [E, F]
        next_state: tuple[np.ndarray, ...]
        if self._cell_slots is None:  # no core: the head reads the features (and previous action and reward)
            next_state = ()
            hidden = self._features_with_previous(x, prev_action, prev_reward)
        else:
            kernel, recurrent, bias = (w[slot] for slot in self._cell_slots)
            if self._gru:
                next_state = self._gru_step(x, prev_action, prev_reward, state[0], kernel, recurrent, bias)
            else:
                next_state = self._lstm_step(x, prev_action, prev_reward, state, kernel, recurrent, bias)
            hidden = next_state[0]
        hidden = _run(self._norm, w, hidden)
        advantage = _run(self._advantage, w, hidden)  # [E, A]
        if not self._value:
            return advantage, next_state
        value = _run(self._value, w, hidden)  # [E, 1]
        return value + advantage - advantage.mean(axis=-1, keepdims=True), next_state

    def _features_with_previous(self, x: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray) -> np.ndarray:
        """``[x, one_hot(prev_action), prev_reward]`` (the sequence model's features), or ``x`` without them."""
        if not self.network.prev_action_reward:
            return x
        one_hot = np.zeros((len(x), self.num_actions), np.float32)
        one_hot[np.arange(len(x)), prev_action] = 1.0
        return np.concatenate([x, one_hot, prev_reward[:, None].astype(np.float32)], axis=1)

    def _with_previous(self, z: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray,
                       kernel: np.ndarray) -> np.ndarray:
        """``z`` plus the kernel's share of ``[one_hot(prev_action), prev_reward]``: a row gather, nothing
        concatenated."""
        if not self.network.prev_action_reward:
            return z
        features = self._features
        return z + kernel[features + prev_action] + prev_reward[:, None] * kernel[features + self.num_actions]

    def _lstm_step(self, x: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray, state: tuple[np.ndarray, ...],
                   kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h_prev, c_prev = state
        z = x @ kernel[:self._features] + h_prev @ recurrent + bias  # [E, 4U]
        z = self._with_previous(z, prev_action, prev_reward, kernel)
        u = self.units
        gates = _sigmoid(z)  # i, f, o used; g is tanh'd below
        c_next = gates[:, u:2 * u] * c_prev + gates[:, :u] * np.tanh(z[:, 2 * u:3 * u])  # [E, U]
        h_next = gates[:, 3 * u:] * np.tanh(c_next)  # [E, U]
        return h_next, c_next

    def _gru_step(self, x: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray, h: np.ndarray,
                  kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray]:
        u = self.units
        from_input = self._with_previous(x @ kernel[:self._features] + bias[0], prev_action, prev_reward,
                                         kernel)  # [E, 3U]
        from_state = h @ recurrent + bias[1]  # [E, 3U]
        gates = _sigmoid(from_input[:, :2 * u] + from_state[:, :2 * u])  # z, r
        update, reset = gates[:, :u], gates[:, u:]
        candidate = np.tanh(from_input[:, 2 * u:] + reset * from_state[:, 2 * u:])  # [E, U]
        return (update * h + (np.float32(1.0) - update) * candidate,)

    def check_against_keras(self, batch: int = 3, seed: int = 0) -> None:
        """Compare one step with the Keras sequence model on random inputs; :class:`UnsupportedNetwork` if they
        differ."""
        rng = np.random.default_rng(seed)
        if self._code_plan is not None:  # codes: small integers hit the one-hot slots
            top = int(max(1.0, float(self._code_plan[1].max()))) + 1
            obs = rng.integers(0, top + 1, (batch,) + self.obs_shape).astype(self.obs_dtype)
        elif self._scale_uint8:
            obs = rng.integers(0, 256, (batch,) + self.obs_shape).astype(np.uint8)
        else:
            obs = rng.normal(size=(batch,) + self.obs_shape).astype(self.obs_dtype)
        prev_action = rng.integers(0, self.num_actions, batch).astype(np.int32)
        prev_reward = rng.normal(size=batch).astype(np.float32)
        spec = self.network.state_spec()
        state = tuple(rng.normal(size=(batch,) + field.shape).astype(np.float32) for field in spec)
        q_mine, state_mine = self.step(obs, prev_action, prev_reward, state)
        q, state_keras = q_and_state(self.network.model([obs[:, None], prev_action[:, None], prev_reward[:, None],
                                                         np.ones((batch, 1), bool), *state]))
        mine = (q_mine, *state_mine)
        theirs = (keras.ops.convert_to_numpy(q)[:, 0], *(keras.ops.convert_to_numpy(part) for part in state_keras))
        names = ("Q-values", *(f"state {field.name!r}" for field in spec))
        for name, a, b in zip(names, mine, theirs, strict=True):
            finite = np.abs(b[np.isfinite(b)])
            scale = max(1.0, float(finite.max())) if finite.size else 1.0  # diverged (NaN) weights: NaN both ways
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-4 * scale, equal_nan=True):
                raise UnsupportedNetwork(f"numpy forward disagrees with the Keras model on {name} "
                                         "(max difference "
                                         f"{np.max(np.abs(a - b)) if a.shape == b.shape else 'shape'}): "
                                         "the network has a part it does not read")
