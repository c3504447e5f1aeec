"""R2D2's training-health diagnostics: the Q-network's signals that say why a run stops improving.

What every agent's update computes (TD errors, the gradient norm, importance weights) is summarised by
:class:`~r2d2kit.training.update_statistics.UpdateStatistics` through the learner seam; the Q-specific
part is here. :class:`HealthCheck` draws one extra batch per log interval and measures, without updating:
  the R2D2 paper's stale-state discrepancy delta-Q, the online Q of taken actions against the
  discounted return actually obtained, the action gap and how often the online and target
  networks disagree on the greedy action (policy churn, beside the target's age in updates), dead ReLU units,
  LSTM/GRU gate saturation and how far prioritisation concentrates the draws.

``docs/training.md`` ("Reading a run") explains each value and what a bad one looks like.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import keras
import numpy as np

from r2d2kit.agent.r2d2.learner import R2D2Learner
from r2d2kit.agent.r2d2.losses import inverse_value_rescale, taken
from r2d2kit.models.backend import compile_function
from r2d2kit.models.cores import BUILT_IN_CORES, q_and_state
from r2d2kit.replay.sequence import SequenceReplayBuffer
from r2d2kit.replay.window_record import NETWORK_ROWS

SATURATION_MARGIN = 0.01  # a gate is saturated when its output is within 1% of its range's edge


def is_relu(layer: keras.layers.Layer) -> bool:
    """Whether ``layer`` outputs a ReLU (a ``ReLU`` layer or any layer with ``activation="relu"``): the units
    ``health/dead_relu_share`` and ``benchmarks/unit_activity.py`` count."""
    return isinstance(layer, keras.layers.ReLU) or getattr(layer, "activation", None) is keras.activations.relu


class HealthCheck:
    """Measures a learner's online network on one fresh batch from replay, without updating it.

    Args:
        learner: an :class:`~r2d2kit.agent.r2d2.learner.R2D2Learner`.
        context_rows: rows of each window's episode before its start that are unrolled from a zero
            state to recompute its start state (all of them when the episode started within reach).
        return_horizon: rows walked past a window to find its episode's end for the obtained return.
        seed: seed of the generator that draws the diagnostic batches (never the replay's own, so a
            run draws the same training batches with diagnostics on or off).
    """

    def __init__(self, learner: R2D2Learner, context_rows: int = 80, return_horizon: int = 10_000,
                 seed: int = 0) -> None:
        if context_rows < 1 or return_horizon < 0:
            raise ValueError(f"context_rows must be >= 1 and return_horizon >= 0, got {context_rows} and "
                             f"{return_horizon}")
        self.learner = learner
        self.context_rows = int(context_rows)
        self.return_horizon = int(return_horizon)
        self._rng = np.random.default_rng(seed)
        network = learner.online
        encoder = network.encoder
        relu_layers = [layer for layer in encoder.layers if is_relu(layer)]
        self._encoder_units = (keras.Model(encoder.inputs, [layer.output for layer in relu_layers],
                                           name="health_encoder") if relu_layers else None)
        self._rnn = (keras.layers.RNN(network.cell, return_sequences=True, name="health_core")
                     if network.cell is not None else None)  # None: a feed-forward network's head reads the features
        self._measure = compile_function(self._forward, [*network.model.variables, *learner.target.model.variables])

    # ------------------------------------------------------------------ the measurements (keras.ops)
    def _forward(self, batch, context):
        """Every measurement of one batch (compiled as one call by :func:`~r2d2kit.models.backend.compile_function`)."""
        learner, network = self.learner, self.learner.online
        state = learner.stored_state(batch)
        q_stored, _ = learner._unroll(network.model, batch, slice(0, None), state)  # [B, L, A]
        features = network._features(batch["obs"], batch["prev_action"], batch["prev_reward"])  # [B, L, F]
        hidden = (self._rnn(features, mask=batch["obs_mask"], initial_state=state) if self._rnn is not None
                  else features)  # [B, L, U]: what the head reads
        outputs = {"difference": self._stale_state_difference(batch, context, q_stored),
                   "scale": keras.ops.max(keras.ops.abs(q_stored), axis=-1),
                   "dead_share": self._dead_relu_share(batch, hidden),
                   "saturation": self._gate_saturation(batch, features, hidden)}
        outputs.update(self._taken_actions(batch, q_stored))
        return outputs

    def _stale_state_difference(self, batch, context, q_stored):
        """``||Q(stored state) - Q(recomputed state)||`` per row ``[B, L]``; the recomputed state unrolls the
        context rows from a zero state with the current weights."""
        learner, network = self.learner, self.learner.online
        if network.cell is None:  # no state: nothing to go stale
            return keras.ops.zeros_like(q_stored[..., 0])
        zeros = [keras.ops.zeros_like(part) for part in learner.stored_state(batch)]
        _, fresh = q_and_state(network.model([context["obs"], context["prev_action"], context["prev_reward"],
                                              context["obs_mask"], *zeros]))
        q_fresh, _ = learner._unroll(network.model, batch, slice(0, None), fresh)
        return keras.ops.norm(q_stored - q_fresh, axis=-1)

    def _taken_actions(self, batch, q_stored):
        """Unrescaled Q of the taken actions, the action gap and online/target disagreement on the trace rows."""
        learner = self.learner
        cfg, layout = learner.config, learner.layout
        trace = slice(layout.burn_in, layout.burn_in + layout.trace_length)
        actions = keras.ops.cast(batch["action"][:, trace], "int32")
        q_trace = q_stored[:, trace]  # [B, T, A]
        if cfg.value_rescaling:
            q_trace = inverse_value_rescale(q_trace, cfg.rescale_eps)
        q_taken = taken(q_trace, actions)  # [B, T]
        if q_trace.shape[-1] > 1:
            top, _ = keras.ops.top_k(q_trace, k=2)
            action_gap = top[..., 0] - top[..., 1]
        else:
            action_gap = keras.ops.zeros_like(q_taken)
        q_target, _ = learner._unroll(learner.target.model, batch, slice(0, None), learner.stored_state(batch))
        differs = keras.ops.argmax(q_stored[:, trace], axis=-1) != keras.ops.argmax(q_target[:, trace], axis=-1)
        return {"q_taken": q_taken, "action_gap": action_gap, "disagree": keras.ops.cast(differs, "float32")}

    def _dead_relu_share(self, batch, hidden):
        """Share of ReLU units (encoder and head) never above zero on the batch's present rows."""
        network = self.learner.online
        present = keras.ops.reshape(batch["obs_mask"], [-1, 1])  # [N, 1]: rows folded, as the encoder folds them
        unit_activity = []
        if self._encoder_units is not None:
            outputs = self._encoder_units(batch["obs"])
            for output in (outputs if isinstance(outputs, (list, tuple)) else [outputs]):
                unit_activity.append(self._ever_active(output, present))
        streams = [network.advantage_layers] + ([network.value_layers] if network.dueling else [])
        for stream in streams:
            x = network.core_norm(hidden) if network.core_norm is not None else hidden
            for layer in stream[:-1]:
                x = layer(x)
                if is_relu(layer):
                    unit_activity.append(self._ever_active(x, present))
        if not unit_activity:
            return keras.ops.convert_to_tensor(math.nan, "float32")
        return 1.0 - keras.ops.mean(keras.ops.cast(keras.ops.concatenate(unit_activity, axis=0), "float32"))

    @staticmethod
    def _ever_active(output, present):
        """Per unit ``[units]``: above zero on some present row of ``output`` ``[rows..., ..., units]`` (a conv
        filter is one unit); masked rows count as zero, which is never above it."""
        units = output.shape[-1]
        rows = keras.ops.reshape(output, [keras.ops.shape(present)[0], -1, units])  # [N, positions, units]
        on_present = keras.ops.where(keras.ops.expand_dims(present, -1), rows, 0.0)
        return keras.ops.max(keras.ops.reshape(on_present, [-1, units]), axis=0) > 0.0

    def _gate_saturation(self, batch, features, hidden):
        """Share of the core's gate outputs within ``SATURATION_MARGIN`` of their range's edge on present rows,
        from each row's input and the previous row's output (an LSTM's or GRU's h); NaN for a user's core."""
        network = self.learner.online
        cell = network.cell
        if cell is None or network.core not in BUILT_IN_CORES:  # no core, or a user's cell: its gates are its own
            return keras.ops.convert_to_tensor(math.nan, "float32")
        previous = keras.ops.concatenate([self.learner.stored_state(batch)[0][:, None], hidden[:, :-1]], axis=1)
        from_input = keras.ops.matmul(keras.ops.cast(features, "float32"), cell.kernel)
        if network.core == "lstm":
            z = from_input + keras.ops.matmul(previous, cell.recurrent_kernel) + cell.bias
            z_input, z_forget, z_candidate, z_output = keras.ops.split(z, 4, axis=-1)  # Keras' gate order
            unit_range = keras.ops.concatenate(
                [keras.ops.sigmoid(z_input), keras.ops.sigmoid(z_forget), (keras.ops.tanh(z_candidate) + 1.0) / 2.0,
                 keras.ops.sigmoid(z_output)], axis=-1)  # every gate on [0, 1]
        else:  # Keras' GRU, reset_after: the reset gate scales the recurrent candidate term
            x_update, x_reset, x_candidate = keras.ops.split(from_input + cell.bias[0], 3, axis=-1)
            r_update, r_reset, r_candidate = keras.ops.split(
                keras.ops.matmul(previous, cell.recurrent_kernel) + cell.bias[1], 3, axis=-1)
            reset = keras.ops.sigmoid(x_reset + r_reset)
            unit_range = keras.ops.concatenate(
                [keras.ops.sigmoid(x_update + r_update), reset,
                 (keras.ops.tanh(x_candidate + reset * r_candidate) + 1.0) / 2.0], axis=-1)
        edge = (unit_range < SATURATION_MARGIN) | (unit_range > 1.0 - SATURATION_MARGIN)
        saturated = keras.ops.cast(edge, "float32")
        row_mask = keras.ops.cast(batch["obs_mask"], "float32")[..., None]
        rows = keras.ops.maximum(keras.ops.sum(row_mask) * unit_range.shape[-1], 1.0)
        return keras.ops.sum(saturated * row_mask) / rows

    # ------------------------------------------------------------------ public
    def measure(self, replay: SequenceReplayBuffer) -> dict[str, float]:
        """Diagnostics on one batch drawn from ``replay`` as the learner draws them (names as logged)."""
        cfg = self.learner.config
        return self.measure_batch(replay, replay.sample(cfg.batch_size, beta=cfg.importance_exponent, rng=self._rng))

    def measure_batch(self, replay: SequenceReplayBuffer, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        """:meth:`measure` on a given ``replay.sample()`` batch."""
        indices = batch["indices"]
        context = replay.preceding_rows(indices, self.context_rows)
        inputs = self.learner.inputs(batch)
        context_inputs = {name: keras.ops.convert_to_tensor(context[name]) for name in NETWORK_ROWS}
        context_inputs["prev_action"] = keras.ops.cast(context_inputs["prev_action"], "int32")
        out = {key: np.asarray(value) for key, value in self._measure(inputs, context_inputs).items()}
        values = {"health/dead_relu_share": float(out["dead_share"]),
                  "health/gate_saturation": float(out["saturation"]),
                  "health/priority_spread": replay.sampler.probability_spread()}
        layout = self.learner.layout
        trained = batch["mask"][:, layout.burn_in:layout.burn_in + layout.trace_length]
        if trained.any():
            values["health/action_gap"] = float(out["action_gap"][trained].mean())
            values["health/greedy_disagreement"] = float(out["disagree"][trained].mean())
        # the disagreement grows from 0 as the online network moves away from its last copy: read it at its age
        values["health/target_age"] = float(self.learner.target_age)
        values.update(self._delta_q(batch, context, out))
        values.update(self._overestimation(replay, batch, out["q_taken"]))
        return values

    def _delta_q(self, batch, context, out) -> dict[str, float]:
        """delta-Q at each window's first stored row and at its first trained row, over windows that have
        rows before them, as a share of the batch's largest |Q| (the R2D2 paper's normalisation)."""
        present = batch["obs_mask"]
        has_context = context["obs_mask"].any(axis=1)
        scale = float(np.max(np.where(present, out["scale"], 0.0)))
        first = present.argmax(axis=1)
        rows = np.arange(present.shape[0])
        at_start = out["difference"][rows, first]
        burn_in = self.learner.layout.burn_in
        after = present[:, burn_in] & has_context
        values = {"health/delta_q_start": math.nan, "health/delta_q_after_burn_in": math.nan,
                  "health/context_share": float(has_context.mean())}
        if has_context.any() and scale > 0.0:
            values["health/delta_q_start"] = float(at_start[has_context].mean() / scale)
        if after.any() and scale > 0.0:
            values["health/delta_q_after_burn_in"] = float(out["difference"][after, burn_in].mean() / scale)
        return values

    def _overestimation(self, replay, batch, q_taken) -> dict[str, float]:
        """Mean online Q of the taken actions against the discounted return obtained, on rows whose
        episode end is in replay."""
        cfg = self.learner.config
        if replay.relabels_rewards:  # the stored rewards are not the relabelled ones trained on
            return {"health/return_known_share": 0.0, "health/q_taken": math.nan, "health/return_obtained": math.nan,
                    "health/overestimation": math.nan}
        returns, known = replay.episode_returns(batch["indices"], cfg.gamma, self.return_horizon)
        layout = self.learner.layout
        trace = slice(layout.burn_in, layout.burn_in + layout.trace_length)
        returns, known = returns[:, trace], known[:, trace]
        trained = batch["mask"][:, trace]
        values = {"health/return_known_share": float(known.sum() / max(trained.sum(), 1)),
                  "health/q_taken": math.nan, "health/return_obtained": math.nan, "health/overestimation": math.nan}
        if known.any():
            q = float(q_taken[known].mean())
            obtained = float(returns[known].mean())
            values.update({"health/q_taken": q, "health/return_obtained": obtained,
                           "health/overestimation": q - obtained})
        return values
