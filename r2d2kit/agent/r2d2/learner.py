"""R2D2 learner: one compiled train step on a batch of windows from SequenceReplayBuffer.

Reads like Acme's TF ``_step``: load stored states -> burn in (no gradient) -> unroll the trace
(with gradient) -> value-rescaled n-step double-Q targets from the target network -> importance
weighted loss over valid rows -> |TD| per row -> priority ``eta * max + (1 - eta) * mean``.

The maths (:meth:`R2D2Learner.forward`) is written on ``keras.ops`` (:mod:`~r2d2kit.agent.r2d2.losses`) and
serves every Keras backend; what differentiates and compiles it is the backend's own
(:func:`~r2d2kit.agent.update.compile_update`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import keras
import numpy as np
import numpy.typing as npt

from r2d2kit.agent.batches import ReplayBatches
from r2d2kit.agent.loss_group import LossGroup
from r2d2kit.agent.priorities import masked_priorities
from r2d2kit.agent.r2d2.config import R2D2Config
from r2d2kit.agent.r2d2.losses import nstep_targets, row_loss, taken
from r2d2kit.agent.r2d2.qnetwork import QNetwork
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.agent.update import compile_update
from r2d2kit.models.cores import q_and_state
from r2d2kit.replay.sequence import SequenceReplayBuffer
from r2d2kit.replay.window_record import LEARNER_ROWS, NETWORK_ROWS

ModelCall = Callable[[list[Any]], Any]  # a sequence model's call: [rows..., state...] -> Q (and the state after)


class R2D2Learner:
    """Owns the online and target networks, the optimiser and the compiled train step
    (:func:`~r2d2kit.agent.update.compile_update`).

    Args:
        network: the online :class:`QNetwork` (actors built from it share its weights).
        target: the target network, of ``network``'s architecture (its weights are set to the online's);
            default ``network.clone()``.
        config: hyper-parameters; the paper's by default.
        layout: the rows of the replay's windows (:class:`~r2d2kit.agent.seam.WindowLayout`); the paper's by default.
        optimizer: default :meth:`make_optimizer` (``config.optimizer``, Adam by default) with global-norm
            clipping; with
            ``learning_rate_decay_updates > 0`` its rate falls linearly from ``learning_rate`` to
            ``final_learning_rate`` over that many updates and then stays there.
    """

    ROW_KEYS = (*LEARNER_ROWS, "weights")  # the window rows it trains on and the sample's importance weights

    def __init__(self, network: QNetwork, config: R2D2Config | None = None, layout: WindowLayout | None = None,
                 optimizer: keras.optimizers.Optimizer | None = None, *, target: QNetwork | None = None) -> None:
        self.config = config or R2D2Config()
        self.layout = layout or WindowLayout()
        self.online = network
        self.target = target if target is not None else network.clone(name=f"{network.name}_target")
        self.target.copy_weights_from(self.online)
        self.state_keys = tuple(field.key for field in network.state_spec())  # the windows' stored state, in order
        self.optimizer = optimizer or self.make_optimizer(self.config)
        self.updates = 0
        self.batches = ReplayBatches(self.config.batch_size, self.config.importance_exponent)  # train_from's draws
        online, target = self.online.model, self.target.model
        self._compiled = compile_update(  # the backend's differentiated, compiled update
            self.forward, [LossGroup("loss", online.trainable_variables, self.optimizer)],
            [*online.non_trainable_variables, *target.variables], sync=self.update_target)

    @classmethod
    def make_optimizer(cls, config: R2D2Config) -> keras.optimizers.Optimizer:
        """``config.optimizer`` with its rate schedule and global-norm clipping: Adam, or RMSprop as the MinAtar
        paper's DQN (centered, rho 0.95)."""
        rate = cls.learning_rate_schedule(config)
        if config.optimizer == "rmsprop":
            return keras.optimizers.RMSprop(learning_rate=rate, rho=0.95, centered=True,
                                            epsilon=config.rmsprop_epsilon, global_clipnorm=config.max_gradient_norm)
        return keras.optimizers.Adam(learning_rate=rate, epsilon=config.adam_epsilon,
                                     global_clipnorm=config.max_gradient_norm)

    @staticmethod
    def learning_rate_schedule(config: R2D2Config):
        """``config.learning_rate``, or a linear decay to ``final_learning_rate`` (Keras schedule)."""
        if not config.learning_rate_decay_updates:
            return config.learning_rate
        return keras.optimizers.schedules.PolynomialDecay(
            config.learning_rate, config.learning_rate_decay_updates, end_learning_rate=config.final_learning_rate,
            power=1.0)

    # ------------------------------------------------------------------ the maths (keras.ops)
    def _unroll(self, model: ModelCall, batch: Mapping[str, Any], rows: slice, state: list[Any]):
        """Q ``[B, rows, A]`` and the state after ``rows`` (a list), unrolled by ``model`` from ``state``."""
        return q_and_state(model([*(batch[name][:, rows] for name in NETWORK_ROWS), *state]))

    def stored_state(self, batch: Mapping[str, Any]) -> list[Any]:
        """The recurrent state stored with each window, in the network's state-spec order."""
        return [batch[key] for key in self.state_keys]

    def forward(self, batch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The loss (``{"loss": ...}``) and the update's outputs (per-row TD, priorities, ...) of a batch of
        :meth:`inputs`' tensors; the backend's update differentiates the loss w.r.t. the online weights."""
        online, target = self.online.model, self.target.model
        cfg, layout = self.config, self.layout
        burn, rest = slice(0, layout.burn_in), slice(layout.burn_in, None)
        state = self.stored_state(batch)
        q_target = self._target_q(target, batch, burn, rest, state)  # [B, T + n, A]
        q_online = self._unroll_after_burn_in(online, batch, burn, rest, state)  # [B, T + n, A], with gradient
        targets = keras.ops.stop_gradient(
            self._targets(batch, rest, keras.ops.stop_gradient(q_online), q_target))  # [B, T]

        # --- importance-weighted loss over the rows that hold transitions
        trace = slice(0, layout.trace_length)
        actions = keras.ops.cast(batch["action"][:, rest][:, trace], "int32")  # [B, T]
        q_taken = taken(q_online[:, trace], actions)  # [B, T]
        mask = keras.ops.cast(batch["mask"][:, rest][:, trace], "float32")  # [B, T]
        td = (targets - q_taken) * mask
        valid = keras.ops.maximum(keras.ops.sum(mask, axis=1), 1.0)  # [B]
        per_sequence = keras.ops.sum(row_loss(td, cfg.loss), axis=1) / valid  # [B]
        loss = keras.ops.mean(keras.ops.cast(batch["weights"], "float32") * per_sequence)
        abs_td = keras.ops.abs(td)
        return {"loss": loss}, {
            "loss": loss,
            "abs_td": abs_td,
            "priorities": masked_priorities(abs_td, mask, cfg.eta),
            "q_mean": keras.ops.sum(q_taken * mask) / keras.ops.maximum(keras.ops.sum(mask), 1.0),
            "trained_rows": keras.ops.sum(mask),
            "mask": mask,
            "weights": batch["weights"],
        }

    def _unroll_after_burn_in(self, model: ModelCall, batch: Mapping[str, Any], burn: slice, rest: slice,
                              state: list[Any]):
        """Q ``[B, T + n, A]`` of ``model`` over the rows after burn-in: the core starts from the stored
        state and is warmed up over the burn-in rows, which get no gradient."""
        if self.layout.burn_in > 0:
            _, state = self._unroll(model, batch, burn, state)
            state = [keras.ops.stop_gradient(part) for part in state]
        q, _ = self._unroll(model, batch, rest, state)
        return q

    def _target_q(self, target: ModelCall, batch: Mapping[str, Any], burn: slice, rest: slice, state: list[Any]):
        """Target-network Q ``[B, T + n, A]`` over the rows after burn-in (a subclass may vary the network)."""
        return self._unroll_after_burn_in(target, batch, burn, rest, state)

    def _targets(self, batch: Mapping[str, Any], rest: slice, q_online, q_target):
        """Value-rescaled n-step double-Q targets ``[B, T]`` for the rows after burn-in (a subclass may vary them)."""
        cfg, layout = self.config, self.layout
        q_select = q_online if cfg.double_q else q_target  # picks the bootstrap action; q_target values it
        return nstep_targets(
            batch["reward"][:, rest], batch["mask"][:, rest], batch["terminated"][:, rest], q_select, q_target,
            gamma=cfg.gamma, n_step=layout.n_step, burn_in=0, trace_length=layout.trace_length, eps=cfg.rescale_eps,
            rescale=cfg.value_rescaling)

    def update_target(self) -> None:
        """Move the target network to the online one: a copy (``target_update_tau`` 1, the paper's), else a
        Polyak step ``target <- target + tau (online - target)``."""
        tau = self.config.target_update_tau
        if tau == 1.0:  # the paper's hard copy, bit for bit
            self.target.copy_weights_from(self.online)
            return
        for target, online in zip(self.target.variables, self.online.variables, strict=True):
            target.assign_add(tau * (online - target))

    # ------------------------------------------------------------------ the seam
    @property
    def target_age(self) -> int:
        """Updates since the target network last took the online weights (0: the update that copied them)."""
        return self.updates % self.config.target_update_period

    @property
    def logged_metrics(self) -> tuple[str, ...]:
        """The scalars of :meth:`train_from` logged as ``learner/<name>`` means."""
        return ("loss", "q_mean", "priority_mean")

    def actor_variables(self) -> list[keras.Variable]:
        """The online network's variables: what a policy acts with, in published-vector order."""
        return self.online.variables

    def save(self, directory: Path) -> None:
        """``online.weights.h5``, ``target.weights.h5`` (Keras weights) and ``optimizer.npz`` into ``directory``."""
        from r2d2kit.training.checkpoint import save_keras_weights, save_optimizer

        save_keras_weights(self.online.model, directory / "online.weights.h5")
        save_keras_weights(self.target.model, directory / "target.weights.h5")
        save_optimizer(self.optimizer, directory / "optimizer.npz")

    def restore(self, directory: Path) -> None:
        """Load what :meth:`save` wrote (a ``CheckpointError`` naming the file if it does not fit)."""
        from r2d2kit.training.checkpoint import load_keras_weights, load_optimizer

        load_keras_weights(self.online.model, directory / "online.weights.h5")
        load_keras_weights(self.target.model, directory / "target.weights.h5")
        load_optimizer(self.optimizer, self.online.model.trainable_variables, directory / "optimizer.npz")

    def is_finite(self) -> bool:
        """Whether both networks and the optimizer hold finite numbers (a checkpoint of them is worth keeping)."""
        variables = [*self.online.model.weights, *self.target.model.weights, *self.optimizer.variables]
        return all(np.all(np.isfinite(np.asarray(v.numpy()))) for v in variables)

    def save_policy_weights(self, path: Path) -> None:
        """The online network's weights: what an evaluation's greedy policy loads."""
        self.online.model.save_weights(str(path))

    def inputs(self, batch: Mapping[str, npt.ArrayLike]) -> dict[str, Any]:
        """The tensors the compiled step takes from a ``replay.sample()`` batch (rows, stored state, weights)."""
        keys = self.ROW_KEYS + self.state_keys
        missing = [key for key in keys if key not in batch]
        if missing:
            raise ValueError(f"batch is missing {missing}; pass SequenceReplayBuffer.sample() output of a replay "
                             f"whose windows store the network's state as {list(self.state_keys)} "
                             "(training.builders.make_sequence_replay makes one)")
        inputs = {key: keras.ops.convert_to_tensor(batch[key]) for key in keys}
        inputs["prev_action"] = keras.ops.cast(inputs["prev_action"], "int32")
        return inputs

    def gradients(self, batch: Mapping[str, npt.ArrayLike]) -> tuple[float, list[np.ndarray]]:
        """Loss and gradients w.r.t. the online weights, without applying them (diagnostics, tests)."""
        return self._compiled.gradients(self.inputs(batch))

    def train(self, batch: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]:
        """One update on a sampled batch (``SequenceReplayBuffer.sample`` output).

        Returns numpy ``loss``, ``abs_td`` ``[B, T]`` (0 on rows that are not transitions),
        ``priorities`` ``[B]`` (feed them to ``update_priorities``), ``q_mean``, ``mask`` ``[B, T]`` and
        ``trained_rows`` (the rows that held transitions), the batch's importance ``weights`` and
        ``gradient_norm`` (the global norm before clipping). Copies the online weights into the target network
        every ``target_update_period`` updates (moves it ``target_update_tau`` of the way there).
        """
        out = self._compiled.update(self.inputs(batch))
        out["priority_mean"] = np.mean(out["priorities"])
        self.updates += 1
        if self.target_age == 0:
            self._compiled.sync()
        return out

    def prepare(self, replay: SequenceReplayBuffer) -> None:
        """Trace the update for ``replay``'s batches now, without running it (no weight or optimizer step).

        Why: tracing takes seconds (more on busy cores), and the first :meth:`train_from` pays it inside the
        trainer's update loop, where nothing else runs meanwhile (actor failures wait); the trainer calls this
        while its actor processes start and it has nothing to do. A batch of another shape traces again.
        """
        self._compiled.trace(self.inputs(replay.sample_buffers(self.config.batch_size)))

    def train_from(self, replay: SequenceReplayBuffer) -> dict[str, np.ndarray]:
        """One R2D2 update from ``replay``: sample a batch by priority, train, write the priorities back.

        Returns :meth:`train`'s outputs. ``replay`` is typically
        :func:`r2d2kit.training.builders.make_sequence_replay`'s. Every update samples into the same
        arrays (``replay.sample_buffers``): a batch is consumed before the next is drawn.
        """
        return self.batches.train_from(replay, self.train)
