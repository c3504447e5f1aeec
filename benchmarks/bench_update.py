"""Learner update benchmark: r2d2kit's R2D2 update beside a PyTorch twin of the same update.

    flock /tmp/r2d2kit-bench.lock python benchmarks/bench_update.py               # both sizes, ~3 min
    flock /tmp/r2d2kit-bench.lock python benchmarks/bench_update.py --markdown --only pong
    python benchmarks/bench_update.py --quick           # smoke run: ~1 min of CPU, small batches
    python benchmarks/bench_update.py --updates 5 --warmup 2 --threads 2 --json update.json
    flock /tmp/r2d2kit-bench.lock python benchmarks/bench_update.py --precision float32 mixed_bfloat16

Times one whole ``learner.train_from(replay)`` (sample, train step, priorities written back) for the
models of configs/pong.yaml and configs/cartpole_pomdp.yaml, and the same loop for the twin, each
framework in its own subprocess (its own peak RSS); before timing, a small instance of each row checks
that the twin computes the same loss, gradients and priorities. Per update::

    GFLOP/update = B x [ F x burn_in                     online burn-in, no gradient
                       + (3 F - F1) x (trace + n_step)   online unroll, forward + backward
                       + F x (burn_in + trace + n_step) ] target network, forward only

(``F``: forward FLOPs of one row, ``F1``: the first layer's share). Method: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import REPO_ROOT, cores, fmt, format_load, machine_line, run_script, table, write_child_result

SIZES = {
    "pong": {"name": "Pong-size", "config": REPO_ROOT / "configs" / "pong.yaml", "paper": (64, 40, 80, 5),
             "warmup": 1, "updates": 3,
             # --quick: 4 windows of 10 + 20 + 5 rows (tracing the step costs about as much as the rows it holds)
             "quick": ["learner.batch_size=4", "learner.burn_in=10", "learner.trace_length=20", "learner.period=10"]},
    "cartpole": {"name": "CartPole-size", "config": REPO_ROOT / "configs" / "cartpole_pomdp.yaml", "paper": None,
                 "warmup": 3, "updates": 20, "quick": ["learner.batch_size=16"]},
}
# the equivalence check's small instance: the row's layers, a few short windows
CHECK_OVERRIDES = ["learner.batch_size=3", "learner.burn_in=3", "learner.trace_length=5", "learner.period=3",
                   "learner.n_step=2"]
NATURE_CNN = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (filters, kernel, stride): r2d2kit's DQNImageModel
SGEMM_N = 2048
PRECISIONS = ("float32", "mixed_bfloat16")  # --precision: Keras' global dtype policy; the twin's torch.autocast
# the targets: the Pong-size update was 7.4 s (12.0 GiB peak RSS) before the encoder change, on 2 cores with
# 2 threads; it must run >= 2x faster within 3 GiB
BEFORE_SECONDS, RSS_GIB, SPEEDUP = 7.4, 3.0, 2.0


# ---------------------------------------------------------------------------------------------
# shared helpers (numpy only)


def current_rss_gib() -> float:
    """This process's resident set size now (``VmRSS``) in GiB, 0 where /proc is missing."""
    try:
        return next(int(line.split()[1]) / 2**20 for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0.0


def fill_replay(replay: Any, spec: dict, windows: int, seed: int) -> None:
    """Add ``windows`` random windows, each its own (env, episode), no padding; one in four terminates at a
    random trained row (the n-step targets' termination path runs too)."""
    rng = np.random.default_rng(seed)
    learner, length = spec["learner"], spec["length"]
    shape, dtype, actions = tuple(spec["obs_shape"]), spec["obs_dtype"], spec["num_actions"]
    units = spec["model"]["lstm_units"]
    for start in range(0, windows, 16):  # a few windows per call keeps the temporary arrays small
        count = min(16, windows - start)
        if np.dtype(dtype) == np.uint8:
            obs = rng.integers(0, 256, size=(count, length) + shape, dtype=np.uint8)
        else:
            obs = (0.1 * rng.standard_normal((count, length) + shape)).astype(dtype)
        action = rng.integers(0, actions, size=(count, length))
        reward = rng.choice(np.array([-1.0, 0.0, 1.0], np.float32), size=(count, length), p=[0.05, 0.9, 0.05])
        terminated = np.zeros((count, length), bool)
        mask = np.ones((count, length), bool)
        for w in range(count):
            if rng.random() < 0.25:
                row = learner["burn_in"] + int(rng.integers(0, learner["trace_length"]))
                terminated[w, row] = True
                mask[w, row + 1:] = False
        replay.add_sequences({
            "obs": obs, "action": action, "prev_action": np.concatenate([np.zeros((count, 1), np.int64),
                                                                         action[:, :-1]], axis=1),
            "reward": reward, "prev_reward": np.concatenate([np.zeros((count, 1), np.float32), reward[:, :-1]], axis=1),
            "terminated": terminated, "truncated": np.zeros((count, length), bool), "mask": mask,
            "obs_mask": np.ones((count, length), bool), "env": np.arange(start, start + count),
            "episode": np.zeros(count, np.int64), "start": np.zeros(count, np.int64),
            "state_h": (0.1 * rng.standard_normal((count, units))).astype(np.float32),
            "state_c": (0.1 * rng.standard_normal((count, units))).astype(np.float32)})


def forward_macs(spec: dict) -> list[tuple[str, int]]:
    """Multiply-adds of one row (frame) through each layer, from the architecture (no framework)."""
    model, actions = spec["model"], spec["num_actions"]
    shape = tuple(spec["obs_shape"])
    layers: list[tuple[str, int]] = []
    if model["encoder"] == "dqn":
        height, width = shape[:2]
        channels = shape[2] if len(shape) == 3 else 1
        for filters, kernel, stride in NATURE_CNN:
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            layers.append((f"conv {filters}x{kernel}x{kernel}/{stride}", height * width * filters * kernel * kernel
                           * channels))
            channels = filters
        features = model["dense_units"]
        layers.append((f"dense {height * width * channels}->{features}", height * width * channels * features))
    else:
        inputs = int(np.prod(shape))
        for units in model["hidden"]:
            layers.append((f"dense {inputs}->{units}", inputs * units))
            inputs = units
        features = inputs
    lstm_in = features + (actions + 1 if model["prev_action_reward"] else 0)
    units = model["lstm_units"]
    layers.append((f"lstm {lstm_in}+{units}->{units}", 4 * units * (lstm_in + units)))
    head, hidden = model["head_units"], units
    if head:
        layers.append((f"head hidden {units}->{head} x{2 if model['dueling'] else 1}",
                       (2 if model["dueling"] else 1) * units * head))
        hidden = head
    layers.append(("head out", hidden * actions + (hidden if model["dueling"] else 0)))
    return layers


def update_gflop(spec: dict, batch: int) -> tuple[float, float]:
    """(GFLOP per update by the module docstring's formula, forward MFLOP per row)."""
    layers = forward_macs(spec)
    forward = 2.0 * sum(macs for _, macs in layers)
    first = 2.0 * layers[0][1]
    lrn = spec["learner"]
    after = lrn["trace_length"] + lrn["n_step"]
    rows = forward * lrn["burn_in"] + (3.0 * forward - first) * after + forward * spec["length"]
    return batch * rows / 1e9, forward / 1e6


# ---------------------------------------------------------------------------------------------
# r2d2kit (Keras / TensorFlow) side


def keras_spec(settings: Any, network: Any) -> dict:
    """The plain-data description the twin is built from (read off the config and the built network)."""
    encoder = network.config["encoder"]
    learner = settings.learner
    model = {"encoder": settings.model.encoder, "lstm_units": network.lstm_units,
             "head_units": settings.model.head_units, "dueling": network.dueling,
             "prev_action_reward": network.prev_action_reward, "layer_norm": network.layer_norm,
             "dense_units": getattr(encoder, "dense_units", None), "hidden": list(getattr(encoder, "units", ())),
             "input_scale": None if getattr(encoder, "input_scale", None) is None
             else np.asarray(encoder.input_scale, np.float32).tolist()}
    keys = ("burn_in", "trace_length", "n_step", "period", "gamma", "value_rescaling", "rescale_eps", "batch_size",
            "priority_exponent", "importance_exponent", "eta", "learning_rate", "adam_epsilon", "max_gradient_norm",
            "target_update_period", "learning_rate_decay_updates")
    return {"obs_shape": list(network.obs_shape), "obs_dtype": network.obs_dtype, "num_actions": network.num_actions,
            "model": model, "learner": {k: getattr(learner, k) for k in keys}, "length": learner.length}


def build_keras(config: Path, overrides: list[str]) -> tuple[Any, Any, dict]:
    """(R2D2Learner, settings, spec) from a config file, the way the trainer builds them."""
    from r2d2kit.agent.learner import R2D2Learner
    from r2d2kit.training.builders import build_network
    from r2d2kit.training.config import load_config

    settings = load_config(config, overrides)
    network = build_network(settings)
    learner = R2D2Learner(network, settings.learner)
    return learner, settings, keras_spec(settings, network)


def gemm_gflops(matmul, repeats: int = 10) -> float:
    """GFLOP/s of ``matmul()`` (a ``SGEMM_N``^2 matmul): its median over ``repeats`` calls after one."""
    matmul()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        matmul()
        times.append(time.perf_counter() - began)
    return 2.0 * SGEMM_N ** 3 / float(np.median(times)) / 1e9


def time_updates(learner, replay: Any, spec: dict, args: argparse.Namespace, load_start: str) -> dict:
    """Fill the replay; the seconds of the first update, the median of ``--updates`` after ``--warmup``, the
    median of ``replay.sample`` alone, and the RSS and load around them."""
    lrn = spec["learner"]
    fill_replay(replay, spec, 2 * lrn["batch_size"], seed=1)
    rss_ready, first, times, samples = current_rss_gib(), None, [], []
    for i in range(args.warmup + args.updates):
        began = time.perf_counter()
        learner.train_from(replay)
        if i < args.warmup:
            first = time.perf_counter() - began if first is None else first
        else:
            times.append(time.perf_counter() - began)
    for _ in range(max(args.updates, 5)):
        began = time.perf_counter()
        replay.sample(lrn["batch_size"], beta=lrn["importance_exponent"])
        samples.append(time.perf_counter() - began)
    return {"first_seconds": first, "seconds": float(np.median(times)), "all_seconds": times,
            "sample_seconds": float(np.median(samples)), "rss_ready": rss_ready, "load_start": load_start,
            "load_end": format_load()}


def run_keras_child(args: argparse.Namespace) -> dict:
    from r2d2kit.models.tf_setup import setup_tensorflow
    from r2d2kit.training.builders import make_sequence_replay

    setup_tensorflow(threads=args.threads)
    import keras
    import tensorflow as tf

    load_start = format_load()
    gemm = {}
    for dtype in ("float32", "bfloat16"):  # float32: sgemm; bfloat16: the bf16 bound
        a, b = (tf.cast(tf.random.normal((SGEMM_N, SGEMM_N)), dtype) for _ in range(2))
        gemm[dtype] = gemm_gflops(lambda: tf.matmul(a, b).numpy())
    keras.mixed_precision.set_global_policy(args.precision[0])  # before the networks are built
    keras.utils.set_random_seed(0)
    learner, _settings, spec = build_keras(Path(args.config), args.set)
    replay = make_sequence_replay(learner.online, learner.config, capacity=2 * spec["learner"]["batch_size"]
                                  * spec["length"], seed=0)
    return dict(time_updates(learner, replay, spec, args, load_start), spec=spec, sgemm_gflops=gemm["float32"],
                bf16_gemm_gflops=gemm["bfloat16"], policy=keras.mixed_precision.global_policy().name,
                threads={"intra": tf.config.threading.get_intra_op_parallelism_threads(),
                         "inter": tf.config.threading.get_inter_op_parallelism_threads()})


# ---------------------------------------------------------------------------------------------
# the PyTorch twin


def make_twin(spec: dict):
    """A ``torch.nn.Module`` with the layers of r2d2kit's QNetwork for ``spec`` (dqn or mlp encoder)."""
    import torch
    from torch import nn

    class TwinQNetwork(nn.Module):
        """Encoder (time folded into the batch) -> [one-hot prev action, prev reward] -> nn.LSTM -> dueling head."""

        def __init__(self) -> None:
            super().__init__()
            model = spec["model"]
            if model["layer_norm"]:
                raise ValueError("the twin has no layer norm: set model.layer_norm to false for this benchmark")
            self.actions = spec["num_actions"]
            self.obs_shape = tuple(spec["obs_shape"])
            self.image = model["encoder"] == "dqn"
            self.prev_action_reward = model["prev_action_reward"]
            self.dueling = model["dueling"]
            if self.image:
                height, width = self.obs_shape[:2]
                channels = self.obs_shape[2] if len(self.obs_shape) == 3 else 1
                convs = []
                for filters, kernel, stride in NATURE_CNN:
                    convs.append(nn.Conv2d(channels, filters, kernel, stride))
                    height, width, channels = (height - kernel) // stride + 1, (width - kernel) // stride + 1, filters
                self.convs = nn.ModuleList(convs)
                self.conv_out = (channels, height, width)
                self.dense = nn.ModuleList([nn.Linear(channels * height * width, model["dense_units"])])
                features = model["dense_units"]
            elif model["encoder"] == "mlp":
                scale = model["input_scale"]
                self.register_buffer("input_scale", torch.tensor(1.0 if scale is None else scale, dtype=torch.float32))
                inputs, dense = int(np.prod(self.obs_shape)), []
                for units in model["hidden"]:
                    dense.append(nn.Linear(inputs, units))
                    inputs = units
                self.dense = nn.ModuleList(dense)
                features = inputs
            else:
                raise ValueError(f"the twin builds model.encoder 'dqn' or 'mlp', got {model['encoder']!r}")
            units, head = model["lstm_units"], model["head_units"]
            self.lstm = nn.LSTM(features + (self.actions + 1 if self.prev_action_reward else 0), units,
                                batch_first=True)
            self.value_hidden = nn.Linear(units, head) if head and self.dueling else None
            self.advantage_hidden = nn.Linear(units, head) if head else None
            self.value = nn.Linear(head or units, 1) if self.dueling else None
            self.advantage = nn.Linear(head or units, self.actions)

        def encode(self, obs):  # [N, *obs] -> [N, F]
            if self.image:
                x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
                x = x.unsqueeze(1) if x.dim() == 3 else x.permute(0, 3, 1, 2)  # [N, C, H, W]
                for conv in self.convs:
                    x = torch.relu(conv(x))
                return torch.relu(self.dense[0](x.flatten(1)))
            x = obs.float().flatten(1) * self.input_scale
            for layer in self.dense:
                x = torch.relu(layer(x))
            return x

        def head(self, hidden):  # [B, T, U] -> [B, T, A]
            advantage = self.advantage(torch.relu(self.advantage_hidden(hidden)) if self.advantage_hidden else hidden)
            if not self.dueling:
                return advantage
            value = self.value(torch.relu(self.value_hidden(hidden)) if self.value_hidden else hidden)
            return value + advantage - advantage.mean(dim=-1, keepdim=True)

        def forward(self, obs, prev_action, prev_reward, h, c):
            """Q ``[B, T, A]`` and the final (h, c) from the initial state (h, c) ``[B, U]``."""
            batch, steps = obs.shape[:2]
            x = self.encode(obs.reshape((batch * steps,) + tuple(obs.shape[2:]))).reshape(batch, steps, -1)
            if self.prev_action_reward:
                one_hot = torch.nn.functional.one_hot(prev_action.long(), self.actions).float()  # [B, T, A]
                x = torch.cat([x, one_hot, prev_reward.float().unsqueeze(-1)], dim=-1)
            hidden, (h, c) = self.lstm(x, (h.unsqueeze(0), c.unsqueeze(0)))
            return self.head(hidden), h[0], c[0]

    return TwinQNetwork()


def torch_value_rescale(x, eps: float):
    import torch

    magnitude = x.abs()
    return torch.sign(x) * magnitude / (torch.sqrt(magnitude + 1.0) + 1.0) + eps * x


def torch_inverse_value_rescale(x, eps: float):
    import torch

    magnitude = x.abs()
    if eps == 0.0:
        return torch.sign(x) * magnitude * (magnitude + 2.0)
    root = torch.sqrt(1.0 + 4.0 * eps * (magnitude + 1.0 + eps))
    d = 2.0 * magnitude / (root + 1.0 + 2.0 * eps)
    return torch.sign(x) * d * (d + 2.0)


def torch_nstep_targets(reward, mask, terminated, q_online, q_target, *, gamma, n_step, trace_length, eps, rescale):
    """R2D2's value-rescaled n-step double-Q targets ``[B, T]`` over the rows after burn-in (as r2d2kit's)."""
    import torch

    mask = mask.float()
    not_terminated = 1.0 - terminated.float()
    window = slice(0, trace_length)
    total = torch.zeros_like(reward[:, window])
    discount = torch.ones_like(total)
    alive = mask[:, window]
    offset = torch.zeros_like(total)
    for k in range(n_step):
        rows = slice(k, k + trace_length)
        valid = alive * mask[:, rows]
        total = total + valid * discount * reward[:, rows]
        discount = valid * discount * gamma * not_terminated[:, rows] + (1.0 - valid) * discount
        offset = offset + valid
        alive = valid
    chosen = q_target.gather(2, q_online.argmax(dim=-1, keepdim=True)).squeeze(2)  # [B, L]
    bootstrap_row = torch.arange(trace_length).unsqueeze(0) + offset.long()  # [B, T]
    bootstrap = chosen.gather(1, bootstrap_row)
    if rescale:
        targets = torch_value_rescale(total + discount * torch_inverse_value_rescale(bootstrap, eps), eps)
    else:
        targets = total + discount * bootstrap
    return targets * mask[:, window]


class TwinLearner:
    """The PyTorch twin of ``R2D2Learner``: online + target networks, Adam, the same update (``mixed_bfloat16``:
    both unrolls under ``torch.autocast("cpu", torch.bfloat16)``; weights, targets, loss and Adam in float32)."""

    def __init__(self, spec: dict, precision: str = "float32") -> None:
        import copy

        import torch

        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.spec, self.config = spec, spec["learner"]
        self.bfloat16 = precision == "mixed_bfloat16"
        self.online = make_twin(spec)
        self.target = copy.deepcopy(self.online)
        for parameter in self.target.parameters():
            parameter.requires_grad_(False)
        # Adam with the learner's rate and epsilon (a linear decay, if configured, changes nothing of the cost)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=self.config["learning_rate"],
                                          eps=self.config["adam_epsilon"])
        self.updates = 0

    def _unroll_after_burn_in(self, network, batch, h, c):
        import torch

        burn = self.config["burn_in"]
        if burn:
            with torch.no_grad():
                _, h, c = network(batch["obs"][:, :burn], batch["prev_action"][:, :burn],
                                  batch["prev_reward"][:, :burn], h, c)
        q, _, _ = network(batch["obs"][:, burn:], batch["prev_action"][:, burn:], batch["prev_reward"][:, burn:], h, c)
        return q  # [B, T + n, A]

    def forward(self, batch: dict) -> tuple[Any, dict]:
        """Loss and outputs (abs_td [B, T], priorities [B]) of a batch of numpy arrays."""
        import torch

        cfg = self.config
        if not np.all(batch["obs_mask"]):
            raise ValueError("the twin unrolls nn.LSTM over every row: batch['obs_mask'] must be all true "
                             "(this benchmark's windows have no padding)")
        tensors = {key: torch.from_numpy(np.ascontiguousarray(batch[key])) for key in
                   ("obs", "action", "reward", "prev_action", "prev_reward", "terminated", "mask", "state_h",
                    "state_c", "weights")}
        h, c = tensors["state_h"], tensors["state_c"]
        burn, trace = cfg["burn_in"], cfg["trace_length"]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bfloat16):
            with torch.no_grad():
                q_target = self._unroll_after_burn_in(self.target, tensors, h, c)
            q_online = self._unroll_after_burn_in(self.online, tensors, h, c)
        q_target, q_online = q_target.float(), q_online.float()  # [B, T + n, A]: targets and loss in float32
        with torch.no_grad():
            targets = torch_nstep_targets(
                tensors["reward"][:, burn:], tensors["mask"][:, burn:], tensors["terminated"][:, burn:],
                q_online.detach(), q_target, gamma=cfg["gamma"], n_step=cfg["n_step"], trace_length=trace,
                eps=cfg["rescale_eps"], rescale=cfg["value_rescaling"])
        actions = tensors["action"][:, burn:burn + trace].long()  # [B, T]
        q_taken = q_online[:, :trace].gather(2, actions.unsqueeze(-1)).squeeze(-1)  # [B, T]
        mask = tensors["mask"][:, burn:burn + trace].float()
        td = (targets - q_taken) * mask
        valid = mask.sum(dim=1).clamp(min=1.0)
        per_sequence = (0.5 * td.square()).sum(dim=1) / valid
        loss = (tensors["weights"].float() * per_sequence).mean()
        abs_td = td.detach().abs()
        masked = abs_td * mask
        priorities = cfg["eta"] * masked.max(dim=1).values + (1.0 - cfg["eta"]) * masked.sum(dim=1) / valid
        return loss, {"abs_td": abs_td.numpy(), "priorities": priorities.numpy()}

    def train(self, batch: dict) -> dict:
        import torch

        loss, out = self.forward(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.online.parameters(), self.config["max_gradient_norm"])
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.config["target_update_period"] == 0:
            self.target.load_state_dict(self.online.state_dict())
        return dict(out, loss=float(loss.detach()))

    def train_from(self, replay: Any) -> dict:
        cfg = self.config
        batch = replay.sample(cfg["batch_size"], beta=cfg["importance_exponent"])
        out = self.train(batch)
        replay.update_priorities(batch["indices"], out["priorities"])
        return out


def twin_replay(spec: dict, capacity: int):
    """The replay ``make_sequence_replay`` builds, made without importing TensorFlow."""
    from r2d2kit.replay import SequenceReplayBuffer

    lrn, units = spec["learner"], spec["model"]["lstm_units"]
    return SequenceReplayBuffer(
        capacity, {"obs": (tuple(spec["obs_shape"]), spec["obs_dtype"]), "action": ((), "int64")},
        {"state_h": ((units,), "float32"), "state_c": ((units,), "float32")}, burn_in=lrn["burn_in"],
        trace_length=lrn["trace_length"], n_step=lrn["n_step"], period=lrn["period"],
        alpha=lrn["priority_exponent"], seed=0)


def set_torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # already set in this process
        pass


def run_torch_child(args: argparse.Namespace) -> dict:
    import torch

    set_torch_threads(args.threads)
    load_start = format_load()
    gemm = {}
    for dtype in ("float32", "bfloat16"):  # float32: sgemm; bfloat16: the bf16 bound
        kind = getattr(torch, dtype)
        a, b = torch.randn(SGEMM_N, SGEMM_N).to(kind), torch.randn(SGEMM_N, SGEMM_N).to(kind)
        out = torch.empty(SGEMM_N, SGEMM_N, dtype=kind)
        gemm[dtype] = gemm_gflops(lambda: torch.mm(a, b, out=out))
    spec = json.loads(Path(args.spec).read_text())
    torch.manual_seed(0)
    learner = TwinLearner(spec, args.precision[0])
    replay = twin_replay(spec, 2 * spec["learner"]["batch_size"] * spec["length"])
    return dict(time_updates(learner, replay, spec, args, load_start), sgemm_gflops=gemm["float32"],
                bf16_gemm_gflops=gemm["bfloat16"], threads={"intra": torch.get_num_threads(),
                                                            "inter": torch.get_num_interop_threads()})


# ---------------------------------------------------------------------------------------------
# equivalence check: Keras weights copied into the twin, loss / gradients / priorities compared


def weight_pairs(network: Any, twin: Any, spec: dict) -> list[tuple[Any, Any, Any, Any]]:
    """(Keras variable, torch parameter, keras->torch array, torch grad->keras array) for every weight."""
    import torch

    same, transpose = (lambda x: x), (lambda x: x.T)
    conv_in, conv_out = (lambda x: x.transpose(3, 2, 0, 1)), (lambda g: g.transpose(2, 3, 1, 0))  # [kh, kw, in, out]

    pairs = []
    encoder = list(network.encoder.trainable_variables)  # kernel, bias per layer, in layer order
    if len(encoder) != 2 * (len(twin.convs) + len(twin.dense) if twin.image else len(twin.dense)):
        raise ValueError(f"the Keras encoder has {len(encoder)} weights; the twin expects kernel + bias for "
                         f"each of its layers")
    torch_layers = (list(twin.convs) if twin.image else []) + list(twin.dense)
    for index, layer in enumerate(torch_layers):
        kernel, bias = encoder[2 * index], encoder[2 * index + 1]
        if isinstance(layer, torch.nn.Conv2d):
            pairs.append((kernel, layer.weight, conv_in, conv_out))
        elif twin.image and index == len(twin.convs):  # dense after the convs: Keras flattens (h, w, c)
            channels, height, width = twin.conv_out
            units = layer.out_features

            def flat_in(x, c=channels, h=height, w=width, u=units):
                return x.reshape(h, w, c, u).transpose(3, 2, 0, 1).reshape(u, c * h * w)

            def flat_out(g, c=channels, h=height, w=width, u=units):
                return g.reshape(u, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, u)

            pairs.append((kernel, layer.weight, flat_in, flat_out))
        else:
            pairs.append((kernel, layer.weight, transpose, transpose))
        pairs.append((bias, layer.bias, same, same))
    cell = network.cell  # Keras gates (i, f, c, o) = torch's (i, f, g, o); one bias -> bias_ih, bias_hh = 0
    pairs += [(cell.kernel, twin.lstm.weight_ih_l0, transpose, transpose),
              (cell.recurrent_kernel, twin.lstm.weight_hh_l0, transpose, transpose),
              (cell.bias, twin.lstm.bias_ih_l0, same, same)]
    by_path = {tuple(v.path.split("/")[-2:]): v for v in network.model.trainable_variables}
    for stream, layer in (("value_hidden", twin.value_hidden), ("advantage_hidden", twin.advantage_hidden),
                          ("value", twin.value), ("advantage", twin.advantage)):
        if layer is None:
            continue
        name = f"{network.name}_{stream}"
        pairs += [(by_path[(name, "kernel")], layer.weight, transpose, transpose),
                  (by_path[(name, "bias")], layer.bias, same, same)]
    return pairs


def copy_keras_into_twin(network: Any, twin: Any, spec: dict) -> list:
    import torch

    pairs = weight_pairs(network, twin, spec)
    with torch.no_grad():
        for variable, parameter, to_torch, _ in pairs:
            value = to_torch(np.asarray(variable.numpy()))
            if tuple(value.shape) != tuple(parameter.shape):
                raise ValueError(f"Keras weight {variable.path} {tuple(variable.shape)} does not fit the twin's "
                                 f"{tuple(parameter.shape)}")
            parameter.copy_(torch.from_numpy(np.ascontiguousarray(value)))
        twin.lstm.bias_hh_l0.zero_()
    return pairs


def twin_measured_macs(twin: Any, spec: dict) -> int:
    """Multiply-adds of one row through the twin, counted by forward hooks (checks :func:`forward_macs`)."""
    import torch

    total = [0]

    def count(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            total[0] += output.numel() * module.in_channels * module.kernel_size[0] * module.kernel_size[1]
        elif isinstance(module, torch.nn.Linear):
            total[0] += output.numel() // module.out_features * module.in_features * module.out_features
        elif isinstance(module, torch.nn.LSTM):
            total[0] += 4 * module.hidden_size * (module.input_size + module.hidden_size)

    handles = [m.register_forward_hook(count) for m in twin.modules()
               if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.LSTM))]
    units = spec["model"]["lstm_units"]
    obs = torch.zeros((1, 1) + tuple(spec["obs_shape"]), dtype=getattr(torch, spec["obs_dtype"]))
    with torch.no_grad():
        twin(obs, torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1), torch.zeros(1, units), torch.zeros(1, units))
    for handle in handles:
        handle.remove()
    return total[0]


def check_one(config: Path) -> dict:
    """Build a small instance of a row in both frameworks with the same weights and compare an update."""
    import keras
    import torch

    keras.utils.set_random_seed(0)
    learner, _settings, spec = build_keras(config, CHECK_OVERRIDES)
    rng = np.random.default_rng(2)
    for variable in learner.target.variables:  # a target that differs from the online network
        variable.assign(variable.numpy() + 0.05 * np.std(variable.numpy()) * rng.standard_normal(variable.shape)
                        .astype(np.float32))
    twin = TwinLearner(spec)
    pairs = copy_keras_into_twin(learner.online, twin.online, spec)
    copy_keras_into_twin(learner.target, twin.target, spec)
    windows = 4 * spec["learner"]["batch_size"]
    replay = twin_replay(spec, windows * spec["length"])
    fill_replay(replay, spec, windows, seed=3)
    batch = replay.sample(spec["learner"]["batch_size"], beta=spec["learner"]["importance_exponent"])
    batch["weights"] = rng.uniform(0.3, 1.0, batch["weights"].shape).astype(np.float32)  # not all equal

    keras_loss, keras_grads = learner.gradients(batch)
    loss, _ = twin.forward(batch)
    twin.online.zero_grad(set_to_none=True)
    loss.backward()
    grads = {id(v): g for v, g in zip(learner.online.model.trainable_variables, keras_grads)}
    worst, worst_name = 0.0, ""
    for variable, parameter, _, to_keras in pairs:
        mine = to_keras(parameter.grad.numpy())
        theirs = grads[id(variable)]
        scale = max(float(np.abs(theirs).max()), 1e-12)
        error = float(np.abs(mine - theirs).max()) / scale
        if error > worst:
            worst, worst_name = error, variable.path
    keras_out = learner.train(batch)  # outputs are computed before its Adam step
    twin_out = twin.train(batch)
    priority_error = float(np.max(np.abs(keras_out["priorities"] - twin_out["priorities"]))
                           / max(np.abs(keras_out["priorities"]).max(), 1e-12))
    return {"config": str(config.relative_to(REPO_ROOT)), "loss_keras": keras_loss, "loss_twin": float(loss.detach()),
                "loss_rel_error": abs(keras_loss - float(loss.detach())) / max(abs(keras_loss), 1e-12),
                "grad_rel_error": worst, "grad_worst": worst_name, "weights": len(pairs),
                "params_keras": int(sum(np.prod(v.shape) for v in learner.online.model.trainable_variables)),
                "params_twin": int(sum(p.numel() for p in twin.online.parameters()))
                - int(twin.online.lstm.bias_hh_l0.numel()),
                "priority_rel_error": priority_error, "macs_twin": twin_measured_macs(twin.online, spec),
                "macs_formula": int(sum(m for _, m in forward_macs(spec))), "small": " ".join(CHECK_OVERRIDES),
                "torch_threads": torch.get_num_threads()}


def run_check_child(args: argparse.Namespace) -> dict:
    from r2d2kit.models.tf_setup import setup_tensorflow

    setup_tensorflow(threads=args.threads)
    set_torch_threads(args.threads)
    return {"checks": [check_one(Path(config).resolve()) for config in args.config.split(",")]}


# ---------------------------------------------------------------------------------------------
# the parent: children, table


def run_child(kind: str, extra: list[str], threads: int, env: dict[str, str] | None = None) -> dict:
    """Run this script as ``--child kind`` in a fresh Python (``env``: extra variables) and return its JSON."""
    result = run_script(__file__, ["--child", kind, "--threads", str(threads)] + extra, env=env)
    if "error" in result:
        return {"error": f"{kind} child {result['error']}"}
    return result


def measure_size(key: str, precision: str, args: argparse.Namespace) -> dict:
    size = SIZES[key]
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else size["warmup"])
    updates = args.updates if args.updates is not None else (2 if args.quick else size["updates"])
    overrides = list(size["quick"]) if args.quick else []
    if args.batch:
        overrides.append(f"learner.batch_size={args.batch}")
    common = ["--warmup", str(warmup), "--updates", str(updates), "--precision", precision]
    print(f"{size['name']}, {precision}: r2d2kit ({size['config'].relative_to(REPO_ROOT)}) ...", flush=True)
    keras_result = run_child("keras", ["--config", str(size["config"])] + common
                             + [f"--set={o}" for o in overrides], args.threads)
    row = {"key": key, "name": size["name"], "precision": precision, "keras": keras_result, "warmup": warmup,
           "updates": updates}
    if "error" in keras_result:
        row["torch"] = {"error": "skipped: the r2d2kit child failed"}
        return row
    spec = keras_result["spec"]
    row["gflop"], row["row_mflop"] = update_gflop(spec, spec["learner"]["batch_size"])
    print(f"{size['name']}, {precision}: PyTorch twin ...", flush=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec, handle)
    try:
        policy = {"OMP_WAIT_POLICY": args.omp_wait_policy.upper()} if args.omp_wait_policy else None
        row["torch"] = run_child("torch", ["--spec", handle.name] + common, args.threads, policy)
    finally:
        os.unlink(handle.name)
    return row


def spread(seconds: list[float]) -> str:
    """``min a / median b / max c s`` of the timed updates."""
    return f"min {min(seconds):.3f} / median {float(np.median(seconds)):.3f} / max {max(seconds):.3f} s"


def busiest_load(rows: list[dict]) -> float:
    """The highest 1-minute load average any timing child saw at its start or end."""
    loads = [float(child[key]) for row in rows for child in (row["keras"], row.get("torch", {}))
             for key in ("load_start", "load_end") if child.get(key, "n/a") != "n/a"]
    return max(loads, default=0.0)


def target_lines(rows: list[dict]) -> list[str]:
    """The targets for a Pong-size row measured with the paper's batch and windows."""
    lines = []
    for row in rows:
        k, t = row["keras"], row.get("torch", {})
        if row["key"] != "pong" or row["precision"] != "float32" or "error" in k:
            continue
        lrn = k["spec"]["learner"]
        if (lrn["batch_size"], lrn["burn_in"], lrn["trace_length"], lrn["n_step"]) != SIZES["pong"]["paper"]:
            continue
        speedup, rss = BEFORE_SECONDS / k["seconds"], k["peak_rss_mb"] / 1024
        lines.append(f"- targets (Pong-size): >= {SPEEDUP:.0f}x faster than {BEFORE_SECONDS} s: "
                     f"{speedup:.2f}x, {'met' if speedup >= SPEEDUP else 'not met'}; peak RSS <= "
                     f"{RSS_GIB:.0f} GiB: {rss:.2f} GiB, {'met' if rss <= RSS_GIB else 'not met'}"
                     + (f"; at least level with the twin: twin / r2d2kit {t['seconds'] / k['seconds']:.2f}, "
                        f"{'met' if t['seconds'] >= k['seconds'] else 'not met'}" if "error" not in t else "")
                     + " (one run on a shared machine: check the load line)")
    return lines


def gemm_bound(child: dict, precision: str) -> float:
    """The matmul bound in the row's precision: float32 sgemm, or the bf16 matmul for mixed_bfloat16."""
    return child["bf16_gemm_gflops"] if precision == "mixed_bfloat16" else child["sgemm_gflops"]


def precision_ratios(rows: list[dict]) -> list[str]:
    """float32 s / mixed_bfloat16 s per size measured in both (above 1: bf16 is faster)."""
    lines = []
    for key in SIZES:
        by = {row["precision"]: row for row in rows if row["key"] == key}
        if set(by) != set(PRECISIONS):
            continue
        parts = []
        for side, label in (("keras", "r2d2kit"), ("torch", "twin")):
            full, mixed = by["float32"].get(side, {}), by["mixed_bfloat16"].get(side, {})
            if "seconds" in full and "seconds" in mixed:
                parts.append(f"{label} {full['seconds'] / mixed['seconds']:.2f}x")
        if parts:
            lines.append(f"- {SIZES[key]['name']}: float32 s / mixed_bfloat16 s (above 1: bf16 faster): "
                         + ", ".join(parts))
    return lines


def rate(gflops: float) -> str:
    """GFLOP/s with 3 significant digits below 100 (the CartPole-size update is tiny)."""
    return f"{gflops:.0f}" if gflops >= 100 else f"{gflops:.3g}"


def report(rows: list[dict], checks: dict, args: argparse.Namespace) -> str:
    header = ["update", "GFLOP/update", "r2d2kit s/update", "twin s/update", "twin / r2d2kit",
              "r2d2kit GFLOP/s (TF gemm)", "twin GFLOP/s (torch gemm)", "r2d2kit peak RSS", "twin peak RSS"]
    cells = []
    for row in rows:
        k, t = row["keras"], row.get("torch", {})
        k_ok, t_ok = "error" not in k, "error" not in t
        gflop = row.get("gflop")
        ks = k.get("seconds") if k_ok else None
        ts = t.get("seconds") if t_ok else None
        batch = k["spec"]["learner"]["batch_size"] if k_ok else None
        precision = row["precision"]
        cells.append([
            f"{row['name']} (batch {batch}, {precision})" if batch else f"{row['name']} ({precision})",
            fmt(gflop, ".1f"), fmt(ks, ".3f"), fmt(ts, ".3f"), fmt(ts / ks if ks and ts else None, ".2f"),
            (f"{rate(gflop / ks)} ({gemm_bound(k, precision):.0f})" if ks else "-"),
            (f"{rate(gflop / ts)} ({gemm_bound(t, precision):.0f})" if ts else "-"),
            f"{k['peak_rss_mb'] / 1024:.2f} GiB" if k_ok else "-",
            f"{t['peak_rss_mb'] / 1024:.2f} GiB" if t_ok else "-",
        ])
    lines = [table(header, cells, args.markdown), ""]
    for row in rows:
        k, t = row["keras"], row.get("torch", {})
        name = f"{row['name']} {row['precision']}"
        if "error" in k or "error" in t:
            lines.append(f"- {name}: " + "; ".join(x["error"] for x in (k, t) if "error" in x))
        if "error" in k:
            continue
        lrn = k["spec"]["learner"]
        lines.append(
            f"- {name}: windows of {lrn['burn_in']} burn-in + {lrn['trace_length']} trace + {lrn['n_step']} "
            f"n-step = {k['spec']['length']} rows, batch {lrn['batch_size']}; forward {row['row_mflop']:.2f} MFLOP "
            f"per row; median of {row['updates']} updates after {row['warmup']} warm-up "
            f"(r2d2kit {spread(k['all_seconds'])}; first {k['first_seconds']:.2f} s with tracing; child process "
            f"{k['wall_seconds']:.0f} s" + (f"; twin {spread(t['all_seconds'])}; first {t['first_seconds']:.2f} s; "
                                            f"child process {t['wall_seconds']:.0f} s" if "error" not in t else "")
            + ")")
        paper = SIZES[row["key"]]["paper"]
        if paper:
            got = (lrn["batch_size"], lrn["burn_in"], lrn["trace_length"], lrn["n_step"])
            paper_verdict = "yes" if got == paper else f"no (this run: batch {got[0]}, {got[1]} + {got[2]} + {got[3]})"
            lines.append(f"  the R2D2 paper's batch {paper[0]}, {paper[1]} + {paper[2]} + {paper[3]} rows: "
                         f"{paper_verdict}")
        lines.append(
            f"  replay.sample alone: r2d2kit {1e3 * k['sample_seconds']:.1f} ms"
            + (f", twin {1e3 * t['sample_seconds']:.1f} ms" if "error" not in t else "")
            + f"; RSS before the first update: r2d2kit {k['rss_ready']:.2f} GiB"
            + (f", twin {t['rss_ready']:.2f} GiB" if "error" not in t else "")
            + f"; threads: TF intra {k['threads']['intra']} inter {k['threads']['inter']}"
            + (f", torch {t['threads']['intra']} (interop {t['threads']['inter']})" if "error" not in t else "")
            + f"; load average r2d2kit {k['load_start']} -> {k['load_end']}"
            + (f", twin {t['load_start']} -> {t['load_end']}" if "error" not in t else "")
            + f"; Keras policy {k['policy']}; {SGEMM_N}^2 matmul GFLOP/s float32 / bf16: TF {k['sgemm_gflops']:.0f} / "
            f"{k['bf16_gemm_gflops']:.0f}" + (f", torch {t['sgemm_gflops']:.0f} / {t['bf16_gemm_gflops']:.0f}"
                                            if "error" not in t else ""))
    lines += precision_ratios(rows)
    if "error" in checks:
        lines.append(f"- equivalence check: {checks['error']}")
    elif checks:
        lines.append(f"- equivalence check: its child process (TF and torch) took {checks['wall_seconds']:.0f} s")
    for c in checks.get("checks", []):
        lines.append(
            f"- equivalence, float32 ({c['config']}, small instance {c['small']}; Keras weights copied into the twin, "
            f"target perturbed): loss {c['loss_keras']:.6g} vs {c['loss_twin']:.6g} (rel. error "
            f"{c['loss_rel_error']:.1e}); worst gradient over {c['weights']} weights: rel. error "
            f"{c['grad_rel_error']:.1e} ({c['grad_worst']}); priorities {c['priority_rel_error']:.1e}; "
            f"parameters {c['params_keras']:,} vs {c['params_twin']:,}; MACs per row: formula "
            f"{c['macs_formula']:,}, twin's hooks {c['macs_twin']:,}")
    lines += target_lines(rows)
    if busiest_load(rows) > cores() + 0.5:
        lines.append(f"- WARNING: load average up to {busiest_load(rows):.2f} on {cores()} cores: other work shared "
                     "the machine (the twin's OpenMP threads suffer most); rerun on a quiet machine, or compare with "
                     "--omp-wait-policy passive.")
    lines.append("- twin / r2d2kit above 1: r2d2kit is faster. GFLOP/update: the module docstring's formula; in "
                 f"brackets: a {SGEMM_N}^2 matmul in the row's precision, same process and framework. Timed: one "
                 "train_from(replay) per update, each framework in its own process (its peak RSS, ru_maxrss).")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=sorted(SIZES), default=None, help="one row only")
    p.add_argument("--quick", action="store_true", help="smoke run (about a minute of CPU): Pong 4 windows of "
                   "10 + 20 + 5 rows, CartPole batch 16; 1 warm-up + 2 timed updates")
    p.add_argument("--precision", nargs="+", choices=PRECISIONS, default=["float32"],
                   help="Keras' global dtype policy (the twin: torch.autocast(bfloat16) for mixed_bfloat16); two "
                        "values: each size in both (default: float32; the equivalence check is float32)")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    p.add_argument("--threads", type=int, default=None,
                   help="TF intra/inter-op and torch threads (default: the cores this process may use)")
    p.add_argument("--warmup", type=int, default=None, help="untimed updates first (default: Pong 1, CartPole 3)")
    p.add_argument("--updates", type=int, default=None, help="timed updates (default: Pong 3, CartPole 20)")
    p.add_argument("--batch", type=int, default=None, help="override the configs' batch size (default: theirs)")
    p.add_argument("--no-check", action="store_true", help="skip the Keras-vs-twin equivalence check")
    p.add_argument("--omp-wait-policy", choices=("passive", "active"), default=None,
                   help="OMP_WAIT_POLICY for the twin's process (default: torch's own; passive is steadier on a "
                        "loaded machine, slower on small updates)")
    p.add_argument("--json", default=None, help="also write every measurement to this JSON file")
    # internal: one framework per process
    p.add_argument("--child", choices=("keras", "torch", "check"), help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)  # config overrides
    args = p.parse_args(argv)
    if args.threads is None:
        args.threads = cores()
    for name in ("threads", "warmup", "updates", "batch"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            p.error(f"--{name} must be {'>= 0' if name == 'warmup' else '>= 1'}, got {value}")
    if args.child and len(args.precision) != 1:
        p.error(f"a child runs one --precision, got {args.precision}")
    if args.child == "keras" and args.warmup is not None and args.warmup < 1:
        args.warmup = 1  # the first update traces the step: never timed
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.child:
        runner = {"keras": run_keras_child, "torch": run_torch_child, "check": run_check_child}[args.child]
        write_child_result(args.child_out, runner(args))
        return {}
    began = time.perf_counter()
    command = shlex.join(["python", os.path.relpath(Path(__file__).resolve(), REPO_ROOT)]
                         + (sys.argv[1:] if argv is None else list(argv)))
    print(machine_line(("numpy", "tensorflow", "keras", "torch", "r2d2kit")), flush=True)
    load_start = format_load()
    print(f"command: {command}  (cwd {REPO_ROOT}); threads {args.threads} for TF (intra and inter-op) and torch"
          f"{'; twin OMP_WAIT_POLICY=' + args.omp_wait_policy.upper() if args.omp_wait_policy else ''}; "
          f"load average at start {load_start} on {os.cpu_count()} CPUs", flush=True)
    keys = [args.only] if args.only else list(SIZES)
    checks: dict = {}
    if not args.no_check:
        print("equivalence check (Keras weights into the twin, small instances) ...", flush=True)
        checks = run_child("check", ["--config", ",".join(str(SIZES[k]["config"]) for k in keys)], args.threads)
    rows = [measure_size(key, precision, args) for key in keys for precision in dict.fromkeys(args.precision)]
    print()
    print(report(rows, checks, args))
    load_end = format_load()
    print(f"- total benchmark time {time.perf_counter() - began:.0f} s; load average at end {load_end} "
          f"(on {os.cpu_count()} CPUs; it counts this benchmark's own {args.threads} busy threads too)")
    result = {"rows": rows, "checks": checks, "command": command}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
