"""Recurrent SAC learner: one compiled update on a batch of R2D2 windows, behind the Learner seam.

Reads like :class:`~r2d2kit.agent.r2d2.learner.R2D2Learner`: each window's stored states (the actor core's and
the critic core's) -> burn-in without gradient -> the trained rows and the ``n_step`` rows after them.
Then, on those rows (Haarnoja et al. 2018, SB3's SAC, pomdp-baselines' recurrent SAC):

* n-step soft targets ``y_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) V(s_{t+m})`` with
  ``m = min(n_step, transitions left)`` and ``V(s) = min_i Q_targ_i(s, a') - alpha log pi(a'|s)``,
  ``a' ~ pi(.|s)`` from the current actor (a truncated episode bootstraps from its final observation);
* the twin critics' importance-weighted squared TD error over the rows that hold transitions;
* the actor's ``alpha log pi(a|s) - min_i Q_i(s, a)``, ``a`` reparameterised;
* the temperature's ``-log_alpha (log pi(a|s) + target_entropy)``;
* a Polyak step of the target critic after every update.

The maths is written on ``keras.ops``; the backend's own update
(:func:`~r2d2kit.agent.update.compile_update`: ``tf.function`` or ``jax.jit``) differentiates and compiles it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import numpy.typing as npt

from r2d2kit.agent.batches import ReplayBatches
from r2d2kit.agent.loss_group import LossGroup
from r2d2kit.agent.priorities import masked_priorities
from r2d2kit.agent.sac.config import SACConfig
from r2d2kit.agent.sac.networks import SACNetworks, squashed_sample
from r2d2kit.agent.seam import WindowLayout
from r2d2kit.agent.update import compile_update
from r2d2kit.replay.sequence import SequenceReplayBuffer
from r2d2kit.replay.window_record import LEARNER_ROWS

__all__ = ["SACLearner", "soft_nstep_targets"]

from r2d2kit.agent.sac.files import POLICY_WEIGHTS_FILE, STATE_FILE, WEIGHT_FILES


def soft_nstep_targets(reward, mask, terminated, values, *, gamma: float, n_step: int, trace_length: int):
    """n-step targets ``[B, trace_length]`` from ``[B, trace_length + n_step]`` rows (those after burn-in).

    ``values``: the bootstrap value of every row (SAC: ``min Q_targ - alpha log pi`` of a fresh action). Row
    ``t`` sums the rewards of its episode's next ``m = min(n_step, transitions left)`` rows and adds
    ``gamma^m values[t + m]`` unless a termination came first; rows that hold no transition get 0.
    """
    dtype = values.dtype
    reward = keras.ops.cast(reward, dtype)
    mask = keras.ops.cast(mask, dtype)
    not_terminated = 1.0 - keras.ops.cast(terminated, dtype)
    window = slice(0, trace_length)
    total = keras.ops.zeros_like(reward[:, window])  # [B, T]
    discount = keras.ops.ones_like(total)
    alive = mask[:, window]
    offset = keras.ops.zeros_like(total)
    for k in range(n_step):
        rows = slice(k, k + trace_length)
        valid = alive * mask[:, rows]  # row t + k is a transition of t's episode, reached without an end
        total = total + valid * discount * reward[:, rows]
        discount = valid * discount * gamma * not_terminated[:, rows] + (1.0 - valid) * discount
        offset = offset + valid
        alive = valid
    row = keras.ops.arange(trace_length, dtype="int32")[None, :] + keras.ops.cast(offset, "int32")  # [B, T]
    bootstrap = keras.ops.take_along_axis(values, row, axis=1)  # [B, T]
    return (total + discount * bootstrap) * mask[:, window]


class SACLearner:
    """Owns the SAC networks' optimisers, the temperature and the compiled update; implements
    :class:`~r2d2kit.agent.seam.Learner`.

    Args:
        networks: the :class:`~r2d2kit.agent.sac.networks.SACNetworks` (an acting policy in this process
            built on them shares their weights).
        config: hyper-parameters (SB3's by default).
        layout: the replay windows' rows (burn-in, trace, n-step); the replay must have the same.
        seed: seeds the actions sampled inside the update.
    """

    ROW_KEYS = (*LEARNER_ROWS, "weights")

    def __init__(self, networks: SACNetworks, config: SACConfig | None = None, layout: WindowLayout | None = None,
                 *, seed: int | None = None) -> None:
        self.networks = networks
        self.config = config or SACConfig()
        self.layout = layout or WindowLayout()
        self.updates = 0
        spec = networks.state_spec()
        self.state_keys = tuple(field.key for field in spec)
        self._actor_keys = self.state_keys[:networks.actor_state_size]
        self._critic_keys = self._actor_keys if networks.shared_core else self.state_keys[networks.actor_state_size:]
        self.target_entropy = self.config.target_entropy_for(networks.action_scale)
        self.log_alpha = keras.Variable(math.log(self.config.init_alpha), dtype="float32", name="log_alpha")
        cfg = self.config
        self.actor_optimizer = keras.optimizers.Adam(cfg.actor_learning_rate, global_clipnorm=cfg.max_gradient_norm)
        self.critic_optimizer = keras.optimizers.Adam(cfg.critic_learning_rate, global_clipnorm=cfg.max_gradient_norm)
        self.alpha_optimizer = keras.optimizers.Adam(cfg.alpha_learning_rate)
        self._critic_variables = [v for model in networks.critic_models() for v in model.trainable_weights]
        actor_models = [networks.policy_head] if networks.shared_core else [networks.actor_body, networks.policy_head]
        self._actor_variables = [v for model in actor_models for v in model.trainable_weights]
        self._target_pairs = [(target, online) for t_model, o_model in
                              zip(networks.target_models(), networks.critic_models(), strict=True)
                              for target, online in zip(t_model.weights, o_model.weights, strict=True)]
        # built now, so that save() finds every slot and restore() has somewhere to put them
        self.actor_optimizer.build(self._actor_variables)
        self.critic_optimizer.build(self._critic_variables)
        self.alpha_optimizer.build([self.log_alpha])
        self.seed_generator = keras.random.SeedGenerator(seed)
        self._center = keras.ops.convert_to_tensor(networks.action_center)
        self._scale = keras.ops.convert_to_tensor(networks.action_scale)
        self.batches = ReplayBatches(self.config.batch_size, self.config.importance_exponent)  # train_from's draws
        groups = [LossGroup("critic", self._critic_variables, self.critic_optimizer),
                  LossGroup("actor", self._actor_variables, self.actor_optimizer),
                  LossGroup("alpha", [self.log_alpha], self.alpha_optimizer)]
        state = [*(v for model in self._models().values() for v in model.weights), self.seed_generator.state]
        self._compiled = compile_update(self.forward, groups, state, after=self.update_target)

    @property
    def logged_metrics(self) -> tuple[str, ...]:
        """The scalar outputs of :meth:`train_from` logged as ``learner/<name>`` means (``loss`` first)."""
        return ("loss", "critic_loss", "actor_loss", "alpha", "entropy", "q_mean")

    @property
    def alpha(self) -> float:
        """The entropy temperature now."""
        return float(np.exp(self.log_alpha.numpy()))

    # ------------------------------------------------------------------ the maths (keras.ops)
    def _unroll(self, body: keras.Model, batch: Mapping[str, Any], keys: Sequence[str]):
        """``hidden [B, T + n, H]`` of ``body`` over the rows after burn-in, started from the stored state
        ``keys`` and warmed up over the burn-in rows (which get no gradient)."""
        burn_in = self.layout.burn_in
        state = [batch[key] for key in keys]
        rows = ("obs", "prev_action", "prev_reward", "obs_mask")
        if burn_in > 0 and keys:  # a body without a core has no state to warm up
            outputs = body([*(batch[name][:, :burn_in] for name in rows), *state])
            state = [keras.ops.stop_gradient(part) for part in outputs[1:]]
        outputs = body([*(batch[name][:, burn_in:] for name in rows), *state])
        return outputs[0] if keys else outputs

    def _trained(self, array):
        """The trained rows ``[:, :trace_length]`` of rows after burn-in."""
        return array[:, :self.layout.trace_length]

    def forward(self, batch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The ``critic``, ``actor`` and ``alpha`` (temperature) losses and the update's outputs for a batch
        (the backend's update differentiates each w.r.t. its own variables)."""
        cfg, nets, layout = self.config, self.networks, self.layout
        rest = slice(layout.burn_in, None)
        critic_hidden = self._unroll(nets.critic_body, batch, self._critic_keys)  # [B, T + n, H]
        target_hidden = keras.ops.stop_gradient(self._unroll(nets.target_critic_body, batch, self._critic_keys))
        if nets.shared_core:
            actor_hidden = keras.ops.stop_gradient(critic_hidden)  # the actor's loss does not train the shared core
        else:
            actor_hidden = self._unroll(nets.actor_body, batch, self._actor_keys)
        mean, log_std = nets.policy_head(actor_hidden)  # [B, T + n, A]
        noise = keras.random.normal(keras.ops.shape(mean), seed=self.seed_generator)
        action, log_prob = squashed_sample(mean, log_std, noise, self._center, self._scale)  # [B, T + n, A], [B, T + n]
        alpha = keras.ops.exp(self.log_alpha)
        fixed_alpha = keras.ops.stop_gradient(alpha)

        # --- soft n-step targets from the target critics and a fresh action of the current actor
        q1_next, q2_next = nets.target_q_head([target_hidden, keras.ops.stop_gradient(action)])
        values = keras.ops.minimum(q1_next, q2_next) - fixed_alpha * keras.ops.stop_gradient(log_prob)
        targets = keras.ops.stop_gradient(soft_nstep_targets(
            batch["reward"][:, rest], batch["mask"][:, rest], batch["terminated"][:, rest], values, gamma=cfg.gamma,
            n_step=layout.n_step, trace_length=layout.trace_length))  # [B, T]

        # --- twin critics, importance weighted, over the rows that hold transitions
        mask = keras.ops.cast(self._trained(batch["mask"][:, rest]), "float32")  # [B, T]
        taken = keras.ops.cast(self._trained(batch["action"][:, rest]), "float32")  # [B, T, A]
        q1, q2 = nets.q_head([self._trained(critic_hidden), taken])
        td1, td2 = (targets - q1) * mask, (targets - q2) * mask
        valid = keras.ops.maximum(keras.ops.sum(mask, axis=1), 1.0)  # [B]
        per_window = keras.ops.sum(0.5 * keras.ops.square(td1) + 0.5 * keras.ops.square(td2), axis=1) / valid
        weights = keras.ops.cast(batch["weights"], "float32")
        critic_loss = keras.ops.mean(weights * per_window)
        abs_td = 0.5 * (keras.ops.abs(td1) + keras.ops.abs(td2))  # [B, T]: the critics' mean |TD|

        # --- actor and temperature over the same rows
        rows = keras.ops.maximum(keras.ops.sum(mask), 1.0)
        new_log_prob = self._trained(log_prob)
        q1_pi, q2_pi = nets.q_head([keras.ops.stop_gradient(self._trained(critic_hidden)), self._trained(action)])
        actor_loss = keras.ops.sum(mask * (fixed_alpha * new_log_prob - keras.ops.minimum(q1_pi, q2_pi))) / rows
        alpha_loss = -keras.ops.sum(
            mask * self.log_alpha * keras.ops.stop_gradient(new_log_prob + self.target_entropy)) / rows
        outputs = {
            "loss": critic_loss,
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "alpha_loss": alpha_loss,
            "alpha": fixed_alpha,
            "entropy": -keras.ops.sum(mask * keras.ops.stop_gradient(new_log_prob)) / rows,
            "q_mean": keras.ops.sum(mask * 0.5 * (q1 + q2)) / rows,
            "abs_td": abs_td,
            "priorities": masked_priorities(abs_td, mask, cfg.eta),
            "mask": mask,
            "trained_rows": keras.ops.sum(mask),
            "weights": weights,
        }
        return {"critic": critic_loss, "actor": actor_loss, "alpha": alpha_loss}, outputs

    def trained_outputs(self, batch: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]:
        """The networks' outputs on the trained rows of a batch, unrolled as an update unrolls them (stored
        state, burn-in): ``mean`` and ``log_std`` ``[B, T, A]`` of the actor, ``q1`` and ``q2`` ``[B, T]`` of the
        critics at the taken actions (diagnostics, tests)."""
        inputs = self.inputs(batch)
        nets = self.networks
        critic_hidden = self._trained(self._unroll(nets.critic_body, inputs, self._critic_keys))
        actor_hidden = (critic_hidden if nets.shared_core else
                        self._trained(self._unroll(nets.actor_body, inputs, self._actor_keys)))
        mean, log_std = nets.policy_head(actor_hidden)
        taken = self._trained(inputs["action"][:, self.layout.burn_in:])
        q1, q2 = nets.q_head([critic_hidden, taken])
        return {"mean": np.asarray(mean), "log_std": np.asarray(log_std), "q1": np.asarray(q1), "q2": np.asarray(q2)}

    def update_target(self) -> None:
        """One Polyak step of the target critic: ``target <- target + tau (online - target)``."""
        tau = self.config.tau
        for target, online in self._target_pairs:
            target.assign(target + tau * (online - target))

    # ------------------------------------------------------------------ public
    def inputs(self, batch: Mapping[str, npt.ArrayLike]) -> dict[str, Any]:
        """The tensors an update reads from a sampled batch (actions as float32 vectors)."""
        keys = self.ROW_KEYS + self.state_keys
        missing = [key for key in keys if key not in batch]
        if missing:
            raise ValueError(f"batch is missing {missing}; pass SequenceReplayBuffer.sample() output of a replay "
                             f"whose windows store the SAC policy's state as {list(self.state_keys)}")
        inputs = {key: keras.ops.convert_to_tensor(batch[key]) for key in keys}
        for key in ("action", "prev_action", "prev_reward", "reward", "weights"):
            inputs[key] = keras.ops.cast(inputs[key], "float32")
        return inputs

    def train(self, batch: Mapping[str, npt.ArrayLike]) -> dict[str, np.ndarray]:
        """One update on a sampled batch; returns :data:`~r2d2kit.agent.seam.UPDATE_OUTPUTS` and
        :attr:`logged_metrics` (numpy)."""
        out = self._compiled.update(self.inputs(batch))
        self.updates += 1
        return out

    def prepare(self, replay: SequenceReplayBuffer) -> None:
        """Trace the update for ``replay``'s batches without running it (no weight, optimizer or alpha step):
        the trainer calls it while actors start, so the first update does not pay the tracing."""
        self._check_replay(replay)
        self._compiled.trace(self.inputs(replay.sample_buffers(self.config.batch_size)))

    def train_from(self, replay: SequenceReplayBuffer) -> dict[str, np.ndarray]:
        """One update from ``replay`` (by priority, or uniformly, as the replay samples); the priorities
        are written back. Every update samples into the same arrays."""
        self._check_replay(replay)
        return self.batches.train_from(replay, self.train)

    def _check_replay(self, replay: SequenceReplayBuffer) -> None:
        layout = self.layout
        theirs = (replay.burn_in, replay.trace_length, replay.n_step)
        if theirs != (layout.burn_in, layout.trace_length, layout.n_step):
            raise ValueError(f"the replay's windows have burn_in, trace_length, n_step = {theirs}, the learner's "
                             f"layout {(layout.burn_in, layout.trace_length, layout.n_step)}; build both from the "
                             "same replay section")

    def actor_variables(self) -> list[keras.Variable]:
        """What the acting policy reads, in the published vector's order: the policy model's weights (the
        actor's body and head, and the critic's body when it is separate, whose state windows store)."""
        return self.networks.policy_variables()

    def _models(self) -> dict[str, keras.Model]:
        nets = self.networks
        models = {"actor_body": nets.actor_body, "policy_head": nets.policy_head, "q_head": nets.q_head,
                  "target_critic_body": nets.target_critic_body, "target_q_head": nets.target_q_head}
        if not nets.shared_core:
            models["critic_body"] = nets.critic_body
        return models

    def _optimizers(self) -> dict[str, keras.optimizers.Optimizer]:
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer, "alpha": self.alpha_optimizer}

    def save(self, directory: Path) -> None:
        """Write each network's ``.weights.h5`` and the optimiser slots, ``log_alpha`` and the update count
        (``sac_learner.npz``, plain arrays) into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for key, model in self._models().items():
            model.save_weights(directory / f"{WEIGHT_FILES[key]}.weights.h5")
        arrays: dict[str, np.ndarray] = {"log_alpha": np.asarray(self.log_alpha.numpy(), np.float32),
                  "updates": np.asarray(self.updates, np.int64)}
        for name, optimizer in self._optimizers().items():
            for i, variable in enumerate(optimizer.variables):
                arrays[f"{name}_{i}"] = np.asarray(variable.numpy())
        np.savez(directory / STATE_FILE, allow_pickle=False, **arrays)
        self.save_policy_weights(directory / POLICY_WEIGHTS_FILE)  # what an evaluation of the checkpoint loads

    def restore(self, directory: Path) -> None:
        """Load what :meth:`save` wrote; :class:`~r2d2kit.training.checkpoint.CheckpointError` naming the file
        when it is missing or does not fit these networks."""
        from r2d2kit.training.checkpoint import CheckpointError

        directory = Path(directory)
        for key, model in self._models().items():
            path = directory / f"{WEIGHT_FILES[key]}.weights.h5"
            if not path.is_file():
                raise CheckpointError(f"{path}: missing; the checkpoint was not written by a SAC learner of this "
                                      f"architecture (shared_core={self.networks.shared_core})")
            try:
                model.load_weights(path)
            except (ValueError, KeyError, OSError) as error:
                raise CheckpointError(f"{path}: does not fit the {key} network ({error}); restore with the "
                                      "architecture the checkpoint was written with") from None
        path = directory / STATE_FILE
        try:
            with np.load(path, allow_pickle=False) as saved:
                arrays = {name: saved[name] for name in saved.files}
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{path}: cannot be read as plain arrays ({error})") from None
        expected = {"log_alpha": ((), np.float32), "updates": ((), np.int64)}
        for name, optimizer in self._optimizers().items():
            for i, variable in enumerate(optimizer.variables):
                expected[f"{name}_{i}"] = (tuple(variable.shape), np.dtype(variable.dtype))
        if set(arrays) != set(expected):
            raise CheckpointError(f"{path}: holds {sorted(set(arrays) - set(expected))[:5]} extra and lacks "
                                  f"{sorted(set(expected) - set(arrays))[:5]} arrays; restore with the architecture "
                                  "the checkpoint was written with")
        for name, (shape, _) in expected.items():
            if arrays[name].shape != shape:
                raise CheckpointError(f"{path}: array {name!r} has shape {arrays[name].shape}, expected {shape}")
        for name, optimizer in self._optimizers().items():
            for i, variable in enumerate(optimizer.variables):
                variable.assign(arrays[f"{name}_{i}"].astype(np.dtype(variable.dtype)))
        self.log_alpha.assign(arrays["log_alpha"].astype(np.float32))
        self.updates = int(arrays["updates"])

    def is_finite(self) -> bool:
        """Whether every weight, optimiser slot and the temperature are finite."""
        variables = [v for model in self._models().values() for v in model.weights]
        variables += [v for optimizer in self._optimizers().values() for v in optimizer.variables]
        variables.append(self.log_alpha)
        return all(bool(np.all(np.isfinite(np.asarray(v.numpy(), np.float64)))) for v in variables
                   if np.issubdtype(np.dtype(v.dtype), np.floating))

    def save_policy_weights(self, path: Path) -> None:
        """Write the acting policy's weights (the policy model's ``.weights.h5``) for an evaluation."""
        self.networks.policy_model.save_weights(Path(path))
