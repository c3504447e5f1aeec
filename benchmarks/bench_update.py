"""Learner update benchmark: r2d2kit's R2D2 update beside a PyTorch twin of the same update, and recurrent
SAC's update (``agent: sac``; no twin) beside it, per update and per env step.

    flock /tmp/r2d2kit-bench.lock python benchmarks/bench_update.py --markdown --only pong
    python benchmarks/bench_update.py --quick           # smoke run: ~1 min of CPU, small batches
    python benchmarks/bench_update.py --only cartpole --updates 50 --omp-wait-policy passive
    python benchmarks/bench_update.py --only sac_pendulum         # recurrent SAC only (no twin, no check)
    python benchmarks/bench_update.py --backend jax               # r2d2kit's children on Keras' JAX backend

Each framework in its own subprocess, after a check that the twin computes the same loss, gradients and
priorities. Method, and the GFLOP per update formula: benchmarks/README.md.
"""

import copy
import os
import time
from pathlib import Path
from typing import Any

import harness
import numpy as np
from harness import REPO_ROOT, command_line, cores, fmt, format_load, median_s, table

SIZES = {
    "pong": {"name": "Pong-size", "config": REPO_ROOT / "configs" / "pong.yaml", "paper": (64, 40, 80, 5),
             "warmup": 1, "updates": 3,  # --quick: 4 windows of 10 + 20 + 5 rows (tracing costs about as much)
             "quick": ["learner.batch_size=4", "replay.burn_in=10", "replay.trace_length=20", "replay.period=10"]},
    "cartpole": {"name": "CartPole-size", "config": REPO_ROOT / "configs" / "cartpole_pomdp.yaml", "paper": None,
                 "warmup": 3, "updates": 20, "quick": ["learner.batch_size=16"]},
    "minatar": {"name": "MinAtar-size", "config": REPO_ROOT / "configs" / "minatar" / "breakout.yaml", "paper": None,
                "warmup": 3, "updates": 20, "quick": ["learner.batch_size=8"]},
}
# recurrent SAC's updates (agent: sac), timed as R2D2's are; they have no twin
SAC_SIZES = {
    "sac_pendulum": {"name": "SAC PendulumNoVel-size", "config": REPO_ROOT / "configs" / "sac" / "pendulum_novel.yaml",
                     "warmup": 3, "updates": 20, "quick": ["learner.batch_size=8"]},
    "sac_halfcheetah": {"name": "SAC HalfCheetah-P-size",
                        "config": REPO_ROOT / "configs" / "sac" / "halfcheetah_p.yaml",
                        "warmup": 3, "updates": 20, "quick": ["learner.batch_size=8"]},
}
# the equivalence check's small instance: the row's layers, a few short windows
CHECK_OVERRIDES = ["learner.batch_size=3", "replay.burn_in=3", "replay.trace_length=5", "replay.period=3",
                   "replay.n_step=2"]
# (filters, kernel, stride) of the image encoders the twin builds: DQNImageModel, MinAtarImageModel
CONVS = {"dqn": ((32, 8, 4), (64, 4, 2), (64, 3, 1)), "minatar": ((16, 3, 1),)}
SGEMM_N = 2048
# the targets: >= 2x faster than the Pong-size update before the encoder change (7.4 s, 2 cores), within 3 GiB
BEFORE_SECONDS, RSS_GIB, SPEEDUP = 7.4, 3.0, 2.0


# --- shared helpers (numpy only)
def fill_replay(replay: Any, spec: dict, windows: int, seed: int) -> None:
    """Add ``windows`` random windows, each its own (env, episode), no padding; one in four terminates inside."""
    rng = np.random.default_rng(seed)
    learner, length, units = spec["learner"], spec["length"], spec["model"]["core_units"]
    shape, dtype = tuple(spec["obs_shape"]), spec["obs_dtype"]
    for start in range(0, windows, 16):  # a few windows per call keeps the temporary arrays small
        count = min(16, windows - start)
        size = (count, length)
        obs = (rng.integers(0, 256, size=size + shape, dtype=np.uint8) if np.dtype(dtype) == np.uint8
               else rng.random(size + shape) < 0.1 if np.dtype(dtype) == bool  # MinAtar's sparse channels
               else (0.1 * rng.standard_normal(size + shape)).astype(dtype))
        action = rng.integers(0, spec["num_actions"], size=size)
        reward = rng.choice(np.array([-1.0, 0.0, 1.0], np.float32), size=size, p=[0.05, 0.9, 0.05])
        terminated, mask = np.zeros(size, bool), np.ones(size, bool)
        for w in range(count):
            if rng.random() < 0.25:
                row = learner["burn_in"] + int(rng.integers(0, learner["trace_length"]))
                terminated[w, row], mask[w, row + 1:] = True, False

        def previous(x: np.ndarray, count: int = count) -> np.ndarray:  # [count, length], shifted one row later
            return np.concatenate([np.zeros((count, 1), x.dtype), x[:, :-1]], axis=1)

        def state(count: int = count) -> np.ndarray:  # [count, units]
            return (0.1 * rng.standard_normal((count, units))).astype(np.float32)

        replay.add_sequences(dict(
            obs=obs, action=action, prev_action=previous(action), reward=reward, prev_reward=previous(reward),
            terminated=terminated, truncated=np.zeros(size, bool), mask=mask, obs_mask=np.ones(size, bool),
            env=np.arange(start, start + count), episode=np.zeros(count, np.int64), start=np.zeros(count, np.int64),
            state_h=state(), state_c=state()))


def forward_macs(spec: dict) -> list[int]:
    """Multiply-adds of one row (frame) through each layer, from the architecture (no framework)."""
    model, actions, shape = spec["model"], spec["num_actions"], tuple(spec["obs_shape"])
    layers: list[int] = []
    if model["encoder"] in CONVS:
        height, width, channels = shape[0], shape[1], shape[2] if len(shape) == 3 else 1
        for filters, kernel, stride in CONVS[model["encoder"]]:
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            layers.append(height * width * filters * kernel * kernel * channels)
            channels = filters
        sizes = [height * width * channels, model["dense_units"]]
    else:
        sizes = [int(np.prod(shape)), *model["hidden"]]
    layers += [i * o for i, o in zip(sizes, sizes[1:])]
    lstm_in, units = sizes[-1] + (actions + 1 if model["prev_action_reward"] else 0), model["core_units"]
    layers.append(4 * units * (lstm_in + units))
    head, hidden = model["head_units"], units
    if head:
        layers.append((2 if model["dueling"] else 1) * units * head)  # one hidden layer per stream
        hidden = head
    layers.append(hidden * actions + (hidden if model["dueling"] else 0))
    return layers


def update_gflop(spec: dict) -> tuple[float, float]:
    """(GFLOP per update: B x [F x burn_in + (3F - F1) x (trace + n_step) + F x window], forward MFLOP per row)."""
    layers, lrn = forward_macs(spec), spec["learner"]
    forward, first = 2.0 * sum(layers), 2.0 * layers[0]
    after = lrn["trace_length"] + lrn["n_step"]
    rows = forward * lrn["burn_in"] + (3.0 * forward - first) * after + forward * spec["length"]
    return lrn["batch_size"] * rows / 1e9, forward / 1e6


def time_updates(learner, replay: Any, spec: dict, job: dict, warmup: int, matmul) -> dict:
    """Fill the replay; seconds of the first update, of the others, of ``replay.sample`` alone; RSS, load, GFLOP/s."""
    gemm, lrn, load_start = 2.0 * SGEMM_N ** 3 / median_s(matmul, 10) / 1e9, spec["learner"], format_load()
    fill_replay(replay, spec, 2 * lrn["batch_size"], seed=1)
    rss_ready, times = harness.process_peak_rss_mb("self", "VmRSS") / 1024, []
    for _ in range(warmup + job["updates"]):
        began = time.perf_counter()
        learner.train_from(replay)
        times.append(time.perf_counter() - began)
    sample_seconds = median_s(lambda: replay.sample(lrn["batch_size"], beta=lrn["importance_exponent"]),
                              max(job["updates"], 5), warmup=0)
    return {"first_seconds": times[0], "seconds": float(np.median(times[warmup:])),
            "all_seconds": times[warmup:], "sample_seconds": sample_seconds, "rss_ready": rss_ready,
            "load_start": load_start, "load_end": format_load(), "gemm": gemm}


# --- r2d2kit (Keras / TensorFlow) side
def build_keras(config: str | Path, overrides: list[str]) -> tuple[Any, dict]:
    """(R2D2Learner, spec: the plain data the twin is built from) from a config file, as the trainer builds them."""
    from r2d2kit.agent.r2d2.builder import build_q_network
    from r2d2kit.agent.r2d2.learner import R2D2Learner
    from r2d2kit.training.config import load_config

    settings = load_config(config, overrides)
    network = build_q_network(settings)
    encoder, learner, layout = network.config["encoder"], settings.learner, settings.replay.layout
    scale = getattr(encoder, "input_scale", None)
    model = {"encoder": settings.model.encoder, "core_units": network.core_units,
             "head_units": settings.model.head_units, "dueling": network.dueling,
             "prev_action_reward": network.prev_action_reward, "layer_norm": network.layer_norm,
             "dense_units": getattr(encoder, "dense_units", None), "hidden": list(getattr(encoder, "units", ())),
             "input_scale": None if scale is None else np.asarray(scale, np.float32).tolist()}
    keys = ("gamma", "value_rescaling", "rescale_eps", "batch_size", "priority_exponent", "importance_exponent", "eta",
            "learning_rate", "adam_epsilon", "max_gradient_norm", "target_update_period")
    windows = {k: getattr(layout, k) for k in ("burn_in", "trace_length", "n_step", "period")}
    return R2D2Learner(network, learner, layout), {
        "obs_shape": list(network.obs_shape), "obs_dtype": network.obs_dtype, "num_actions": network.num_actions,
        "model": model, "learner": {**windows, **{k: getattr(learner, k) for k in keys}}, "length": layout.length}


def fill_windows(replay: Any, fields: Any, length: int, windows: int, action_bounds: tuple, seed: int) -> None:
    """Add ``windows`` random windows of an agent's ``fields`` (float observations, Box actions inside
    ``action_bounds``, random stored states), each its own (env, episode), no padding."""
    rng = np.random.default_rng(seed)
    low, high = (np.asarray(bound, np.float32) for bound in action_bounds)
    for start in range(0, windows, 16):
        count = min(16, windows - start)
        size = (count, length)
        action = rng.uniform(low, high, size=size + fields.action_shape).astype(np.float32)
        reward = rng.standard_normal(size).astype(np.float32)

        def previous(x: np.ndarray, count: int = count) -> np.ndarray:  # one row later, zeros first
            return np.concatenate([np.zeros((count, 1) + x.shape[2:], x.dtype), x[:, :-1]], axis=1)

        states = {field.key: (0.1 * rng.standard_normal((count,) + field.shape)).astype(field.dtype)
                  for field in fields.state}
        replay.add_sequences(dict(
            obs=rng.standard_normal(size + fields.obs_shape).astype(fields.obs_dtype), action=action,
            prev_action=previous(action), reward=reward, prev_reward=previous(reward),
            terminated=np.zeros(size, bool), truncated=np.zeros(size, bool), mask=np.ones(size, bool),
            obs_mask=np.ones(size, bool), env=np.arange(start, start + count), episode=np.zeros(count, np.int64),
            start=np.zeros(count, np.int64), **states))


def keras_gemm():
    """A call of one SGEMM_N^2 float32 matmul on Keras' backend (the bracket beside each update)."""
    import keras

    a, b = (keras.random.normal((SGEMM_N, SGEMM_N), seed=seed) for seed in (1, 2))
    return lambda: np.asarray(keras.ops.matmul(a, b))


def backend_threads() -> str:
    """The threads Keras' backend computes with, as the table's notes name them."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return f"{keras.backend.backend()}: XLA's own CPU thread pool"
    import tensorflow as tf

    return (f"TF intra {tf.config.threading.get_intra_op_parallelism_threads()} inter "
            f"{tf.config.threading.get_inter_op_parallelism_threads()}")


def sac_child(job: dict) -> dict:
    """Recurrent SAC's update as ``python -m r2d2kit.train`` builds it (the agent builder), timed on random
    windows; seconds per env step = seconds per update x the config's updates per env step."""
    import keras

    from r2d2kit.training.agents import agent_builder
    from r2d2kit.training.builders import make_sequence_replay, probe_spaces
    from r2d2kit.training.config import load_config

    gemm_call = keras_gemm()
    keras.utils.set_random_seed(0)
    config = load_config(job["config"], job["overrides"])
    spaces = probe_spaces(config)
    agent = agent_builder(config.agent).build(config, spaces)
    layout, learner = config.replay.layout, agent.learner
    batch = config.learner.batch_size
    replay = make_sequence_replay(agent.fields, layout, 2 * batch * layout.length, seed=0, sampler="uniform")
    gemm, load_start = 2.0 * SGEMM_N ** 3 / median_s(gemm_call, 10) / 1e9, format_load()
    fill_windows(replay, agent.fields, layout.length, 2 * batch, (spaces.action_space.low, spaces.action_space.high),
                 seed=1)
    rss_ready, times = harness.process_peak_rss_mb("self", "VmRSS") / 1024, []
    warmup = max(job["warmup"], 1)  # the first update traces the step: never timed
    for _ in range(warmup + job["updates"]):
        began = time.perf_counter()
        learner.train_from(replay)
        times.append(time.perf_counter() - began)
    seconds = float(np.median(times[warmup:]))
    return {"seconds": seconds, "all_seconds": times[warmup:], "first_seconds": times[0], "rss_ready": rss_ready,
            "updates_per_env_step": config.run.updates_per_env_step,
            "seconds_per_env_step": seconds * config.run.updates_per_env_step, "batch": batch,
            "rows": f"{layout.burn_in} + {layout.trace_length} + {layout.n_step}", "gemm": gemm,
            "load_start": load_start, "load_end": format_load()}


def keras_child(job: dict) -> dict:
    import keras

    from r2d2kit.training.builders import make_sequence_replay

    gemm_call = keras_gemm()
    keras.utils.set_random_seed(0)
    learner, spec = build_keras(job["config"], job["overrides"])
    replay = make_sequence_replay(learner.online.window_fields(), learner.layout, seed=0,
                                  priority_exponent=learner.config.priority_exponent,
                                  capacity=2 * spec["learner"]["batch_size"] * spec["length"])
    # the first update traces the step: never timed
    return dict(time_updates(learner, replay, spec, job, max(job["warmup"], 1), gemm_call), spec=spec,
                threads=backend_threads())


# --- the PyTorch twin
def make_twin(spec: dict):
    """A ``torch.nn.Module`` with the layers of r2d2kit's QNetwork for ``spec`` (dqn, minatar or mlp encoder)."""
    import torch
    from torch import nn

    model, actions, shape = spec["model"], spec["num_actions"], tuple(spec["obs_shape"])
    if model["layer_norm"]:
        raise ValueError("the twin has no layer norm: set model.layer_norm to false for this benchmark")
    if model["encoder"] not in (*CONVS, "mlp"):
        raise ValueError(f"the twin builds model.encoder {', '.join(CONVS)} or mlp, got {model['encoder']!r}")

    class TwinQNetwork(nn.Module):
        """Encoder (time folded into the batch) -> [one-hot prev action, prev reward] -> nn.LSTM -> dueling head."""

        def __init__(self) -> None:
            super().__init__()
            self.image, self.dueling = model["encoder"] in CONVS, model["dueling"]
            layers = []
            if self.image:
                height, width, channels = shape[0], shape[1], shape[2] if len(shape) == 3 else 1
                for filters, kernel, stride in CONVS[model["encoder"]]:
                    layers.append(nn.Conv2d(channels, filters, kernel, stride))
                    height, width, channels = (height - kernel) // stride + 1, (width - kernel) // stride + 1, filters
                self.conv_out = (channels, height, width)
                sizes = [channels * height * width, model["dense_units"]]
            else:
                scale = model["input_scale"]
                self.register_buffer("input_scale", torch.tensor(1.0 if scale is None else scale, dtype=torch.float32))
                sizes = [int(np.prod(shape)), *model["hidden"]]
            # Keras' layer order, each layer followed by a ReLU
            self.encoder = nn.ModuleList(layers + [nn.Linear(i, o) for i, o in zip(sizes, sizes[1:])])
            units, head = model["core_units"], model["head_units"]
            self.lstm = nn.LSTM(sizes[-1] + (actions + 1 if model["prev_action_reward"] else 0), units,
                                batch_first=True)
            self.value_hidden = nn.Linear(units, head) if head and self.dueling else None
            self.advantage_hidden = nn.Linear(units, head) if head else None
            self.value = nn.Linear(head or units, 1) if self.dueling else None
            self.advantage = nn.Linear(head or units, actions)

        def encode(self, obs):  # [N, *obs] -> [N, F]
            if self.image:
                x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
                x = x.unsqueeze(1) if x.dim() == 3 else x.permute(0, 3, 1, 2)  # [N, C, H, W]
            else:
                x = obs.float().flatten(1) * self.input_scale
            for layer in self.encoder:
                x = torch.relu(layer(x.flatten(1) if isinstance(layer, nn.Linear) else x))
            return x

        def head(self, hidden):  # [B, T, U] -> [B, T, A]
            def stream(hidden_layer, out):
                return out(torch.relu(hidden_layer(hidden)) if hidden_layer else hidden)

            advantage = stream(self.advantage_hidden, self.advantage)
            if not self.dueling:
                return advantage
            return stream(self.value_hidden, self.value) + advantage - advantage.mean(dim=-1, keepdim=True)

        def forward(self, obs, prev_action, prev_reward, h, c):
            """Q ``[B, T, A]`` and the final (h, c) from the initial state (h, c) ``[B, U]``."""
            batch, steps = obs.shape[:2]
            x = self.encode(obs.reshape((batch * steps,) + tuple(obs.shape[2:]))).reshape(batch, steps, -1)
            if model["prev_action_reward"]:
                one_hot = torch.nn.functional.one_hot(prev_action.long(), actions).float()  # [B, T, A]
                x = torch.cat([x, one_hot, prev_reward.float().unsqueeze(-1)], dim=-1)
            hidden, (h, c) = self.lstm(x, (h.unsqueeze(0), c.unsqueeze(0)))
            return self.head(hidden), h[0], c[0]

    return TwinQNetwork()


class TwinLearner:
    """The PyTorch twin of ``R2D2Learner``: online + target networks, Adam, the same update."""

    def __init__(self, spec: dict, device: str = "cpu") -> None:
        import torch

        self.config = spec["learner"]
        self.device = torch.device(device)
        self.online = make_twin(spec).to(self.device)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        # Adam with the learner's rate and epsilon (a linear decay, if configured, changes nothing of the cost)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=self.config["learning_rate"],
                                          eps=self.config["adam_epsilon"])
        self.updates = 0

    def targets(self, reward, mask, terminated, q_online, q_target):
        """R2D2's value-rescaled n-step double-Q targets ``[B, T]`` over the rows after burn-in (as r2d2kit's)."""
        import torch

        cfg, trace, eps = self.config, self.config["trace_length"], self.config["rescale_eps"]
        not_terminated, window = 1.0 - terminated.float(), slice(0, trace)
        total = torch.zeros_like(reward[:, window])
        discount, alive, offset = torch.ones_like(total), mask[:, window], torch.zeros_like(total)
        for k in range(cfg["n_step"]):
            rows = slice(k, k + trace)
            valid = alive * mask[:, rows]
            total = total + valid * discount * reward[:, rows]
            discount = valid * discount * cfg["gamma"] * not_terminated[:, rows] + (1.0 - valid) * discount
            offset = offset + valid
            alive = valid
        chosen = q_target.gather(2, q_online.argmax(dim=-1, keepdim=True)).squeeze(2)  # [B, L]
        bootstrap = chosen.gather(1, torch.arange(trace, device=chosen.device).unsqueeze(0) + offset.long())  # [B, T]
        if not cfg["value_rescaling"]:
            return (total + discount * bootstrap) * mask[:, window]
        # h^-1 (exact, eps = 0 included), then h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x
        d = 2.0 * bootstrap.abs() / (torch.sqrt(1.0 + 4.0 * eps * (bootstrap.abs() + 1.0 + eps)) + 1.0 + 2.0 * eps)
        x = total + discount * torch.sign(bootstrap) * d * (d + 2.0)
        return (torch.sign(x) * x.abs() / (torch.sqrt(x.abs() + 1.0) + 1.0) + eps * x) * mask[:, window]

    def forward(self, batch: dict) -> tuple[Any, dict]:
        """Loss and priorities ``[B]`` of a batch of numpy arrays."""
        import torch

        cfg, burn, trace = self.config, self.config["burn_in"], self.config["trace_length"]
        if not np.all(batch["obs_mask"]):
            raise ValueError("the twin unrolls nn.LSTM over every row: batch['obs_mask'] must be all true "
                             "(this benchmark's windows have no padding)")
        t = {key: torch.from_numpy(np.ascontiguousarray(batch[key])).to(self.device) for key in
             ("obs", "action", "reward", "prev_action", "prev_reward", "terminated", "mask", "state_h", "state_c",
              "weights")}
        inputs = [t[key] for key in ("obs", "prev_action", "prev_reward")]

        def unroll(network):  # burn-in without gradient from the stored state, then the rows after it: [B, T + n, A]
            h, c = t["state_h"], t["state_c"]
            if burn:
                with torch.no_grad():
                    _, h, c = network(*(x[:, :burn] for x in inputs), h, c)
            return network(*(x[:, burn:] for x in inputs), h, c)[0]

        q_online = unroll(self.online)
        with torch.no_grad():
            targets = self.targets(t["reward"][:, burn:], t["mask"][:, burn:].float(), t["terminated"][:, burn:],
                                   q_online.detach(), unroll(self.target))
        q_taken = q_online[:, :trace].gather(2, t["action"][:, burn:burn + trace].long().unsqueeze(-1)).squeeze(-1)
        mask = t["mask"][:, burn:burn + trace].float()  # [B, T]
        td = (targets - q_taken) * mask
        valid = mask.sum(dim=1).clamp(min=1.0)
        loss = (t["weights"].float() * ((0.5 * td.square()).sum(dim=1) / valid)).mean()
        masked = td.detach().abs()  # zero where masked
        priorities = cfg["eta"] * masked.max(dim=1).values + (1.0 - cfg["eta"]) * masked.sum(dim=1) / valid
        return loss, {"priorities": priorities.cpu().numpy()}  # back to the host, as the replay needs them

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
        batch = replay.sample(self.config["batch_size"], beta=self.config["importance_exponent"])
        out = self.train(batch)
        replay.update_priorities(batch["indices"], out["priorities"])
        return out


def twin_replay(spec: dict, capacity: int):
    """The replay ``make_sequence_replay`` builds, made without importing TensorFlow."""
    from r2d2kit.replay import SequenceReplayBuffer

    lrn, units = spec["learner"], spec["model"]["core_units"]
    return SequenceReplayBuffer(
        capacity, {"obs": (tuple(spec["obs_shape"]), spec["obs_dtype"]), "action": ((), "int64")},
        {"state_h": ((units,), "float32"), "state_c": ((units,), "float32")}, alpha=lrn["priority_exponent"], seed=0,
        **{key: lrn[key] for key in ("burn_in", "trace_length", "n_step", "period")})


def torch_child(job: dict) -> dict:
    import torch

    device = job.get("twin_device", "cpu")
    a, b, out = (torch.randn(SGEMM_N, SGEMM_N, device=device) for _ in range(3))
    torch.manual_seed(0)
    spec = job["spec"]
    replay = twin_replay(spec, 2 * spec["learner"]["batch_size"] * spec["length"])

    def gemm() -> None:
        torch.mm(a, b, out=out)
        if device != "cpu":
            torch.cuda.synchronize()

    return dict(time_updates(TwinLearner(spec, device), replay, spec, job, job["warmup"], gemm),
                threads=f"torch {torch.get_num_threads()} (interop {torch.get_num_interop_threads()}) on {device}")


# --- equivalence check: Keras weights copied into the twin, loss / gradients / priorities compared
def copy_keras_into_twin(network: Any, twin: Any) -> list[tuple[Any, Any, Any, Any]]:
    """Copy every weight; (Keras variable, torch parameter, keras->torch array, torch grad->keras array) each."""
    import torch

    same, transpose = (lambda x: x), (lambda x: x.T)
    conv_in, conv_out = (lambda x: x.transpose(3, 2, 0, 1)), (lambda g: g.transpose(2, 3, 1, 0))  # [kh, kw, in, out]
    encoder = list(network.encoder.trainable_variables)  # kernel, bias per layer, in layer order
    if len(encoder) != 2 * len(twin.encoder):
        raise ValueError(f"the Keras encoder has {len(encoder)} weights; the twin expects kernel + bias for "
                         f"each of its layers")
    pairs = []
    for index, layer in enumerate(twin.encoder):
        kernel, bias = encoder[2 * index], encoder[2 * index + 1]
        if isinstance(layer, torch.nn.Conv2d):
            pairs.append((kernel, layer.weight, conv_in, conv_out))
        elif twin.image and isinstance(twin.encoder[index - 1], torch.nn.Conv2d):  # Keras flattens (h, w, c)
            (c, h, w), u = twin.conv_out, layer.out_features
            pairs.append((kernel, layer.weight,
                          lambda x, h=h, w=w, c=c, u=u: x.reshape(h, w, c, u).transpose(3, 2, 0, 1).reshape(u, -1),
                          lambda g, h=h, w=w, c=c, u=u: g.reshape(u, c, h, w).transpose(2, 3, 1, 0).reshape(-1, u)))
        else:
            pairs.append((kernel, layer.weight, transpose, transpose))
        pairs.append((bias, layer.bias, same, same))
    cell = network.cell  # Keras gates (i, f, c, o) = torch's (i, f, g, o); one bias -> bias_ih, bias_hh = 0
    pairs += [(cell.kernel, twin.lstm.weight_ih_l0, transpose, transpose),
              (cell.recurrent_kernel, twin.lstm.weight_hh_l0, transpose, transpose),
              (cell.bias, twin.lstm.bias_ih_l0, same, same)]
    by_path = {tuple(v.path.split("/")[-2:]): v for v in network.model.trainable_variables}
    for stream in ("value_hidden", "advantage_hidden", "value", "advantage"):
        if getattr(twin, stream) is not None:
            name = f"{network.name}_{stream}"
            pairs += [(by_path[(name, "kernel")], getattr(twin, stream).weight, transpose, transpose),
                      (by_path[(name, "bias")], getattr(twin, stream).bias, same, same)]
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
    from torch import nn

    total = [0]

    def count(module, inputs, output):
        if isinstance(module, nn.Conv2d):
            total[0] += output.numel() * module.in_channels * module.kernel_size[0] * module.kernel_size[1]
        elif isinstance(module, nn.Linear):
            total[0] += output.numel() // module.out_features * module.in_features * module.out_features
        else:
            total[0] += 4 * module.hidden_size * (module.input_size + module.hidden_size)

    handles = [m.register_forward_hook(count) for m in twin.modules() if isinstance(m, (nn.Conv2d, nn.Linear, nn.LSTM))]
    units = spec["model"]["core_units"]
    obs = torch.zeros((1, 1, *spec["obs_shape"]), dtype=getattr(torch, spec["obs_dtype"]))
    with torch.no_grad():
        twin(obs, torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1), torch.zeros(1, units), torch.zeros(1, units))
    for handle in handles:
        handle.remove()
    return total[0]


def rel_error(mine: Any, theirs: Any) -> float:
    """Largest absolute difference over the largest magnitude of ``theirs``."""
    return float(np.max(np.abs(np.asarray(mine) - theirs))) / max(float(np.max(np.abs(theirs))), 1e-12)


def check_one(config: Path) -> dict:
    """Build a small instance of a row in both frameworks with the same weights and compare an update."""
    import keras

    keras.utils.set_random_seed(0)
    learner, spec = build_keras(config, CHECK_OVERRIDES)
    rng = np.random.default_rng(2)
    for variable in learner.target.variables:  # a target that differs from the online network
        variable.assign(variable.numpy() + 0.05 * np.std(variable.numpy()) * rng.standard_normal(variable.shape)
                        .astype(np.float32))
    twin = TwinLearner(spec)
    pairs = copy_keras_into_twin(learner.online, twin.online)
    copy_keras_into_twin(learner.target, twin.target)
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
    errors = {variable.path: rel_error(to_keras(parameter.grad.numpy()), grads[id(variable)])
              for variable, parameter, _, to_keras in pairs}
    worst = max(errors, key=errors.get)
    keras_out, twin_out = learner.train(batch), twin.train(batch)  # outputs are computed before the Adam step
    return {"config": str(config.relative_to(REPO_ROOT)), "loss_keras": keras_loss, "loss_twin": float(loss.detach()),
            "loss_rel_error": rel_error(float(loss.detach()), keras_loss), "grad_rel_error": errors[worst],
            "grad_worst": worst, "weights": len(pairs), "small": " ".join(CHECK_OVERRIDES),
            "priority_rel_error": rel_error(twin_out["priorities"], keras_out["priorities"]),
            "params_keras": int(sum(np.prod(v.shape) for v in learner.online.model.trainable_variables)),
            "params_twin": sum(p.numel() for p in twin.online.parameters()) - twin.online.lstm.bias_hh_l0.numel(),
            "macs_twin": twin_measured_macs(twin.online, spec), "macs_formula": sum(forward_macs(spec))}


# --- the parent: children, table
def child(job: dict) -> dict:
    """One child process's work: ``job["kind"]`` is keras, torch or check."""
    if job["kind"] != "torch":  # the twin's process never imports TensorFlow
        from r2d2kit.models.process_setup import setup_process

        setup_process(threads=job["threads"])
    if job["kind"] in ("torch", "check"):
        import torch

        torch.set_num_threads(job["threads"])
        torch.set_num_interop_threads(job["threads"])  # before any torch work in this fresh process
    if job["kind"] == "check":
        return {"checks": [check_one(Path(config)) for config in job["configs"]]}
    return {"keras": keras_child, "torch": torch_child, "sac": sac_child}[job["kind"]](job)


def run_child(job: dict, env: dict[str, str] | None = None) -> dict:
    """:func:`child` in a fresh Python (``env``: extra variables; r2d2kit's children get ``KERAS_BACKEND`` from
    ``job["backend"]``); its result, or ``error``."""
    if job["kind"] != "torch":
        env = dict(env or {}, KERAS_BACKEND=job["backend"])
    result = harness.run_job(__file__, job, env=env)
    return {"error": f"{job['kind']} child {result['error']}"} if "error" in result else result


def measure_size(key: str, args) -> dict:
    size = SIZES[key]
    job = dict(warmup=args.warmup if args.warmup is not None else (1 if args.quick else size["warmup"]),
               updates=args.updates if args.updates is not None else (2 if args.quick else size["updates"]),
               threads=args.threads, backend=args.backend)
    print(f"{size['name']}: r2d2kit ({size['config'].relative_to(REPO_ROOT)}) ...", flush=True)
    keras_result = run_child(dict(job, kind="keras", config=str(size["config"]),
                                  overrides=size["quick"] if args.quick else []))
    row = dict(key=key, name=size["name"], keras=keras_result, warmup=job["warmup"], updates=job["updates"],
               torch={"error": "skipped: the r2d2kit child failed"})
    if "error" not in keras_result:
        row["gflop"], row["row_mflop"] = update_gflop(keras_result["spec"])
        print(f"{size['name']}: PyTorch twin ...", flush=True)
        policy = {"OMP_WAIT_POLICY": args.omp_wait_policy.upper()} if args.omp_wait_policy else None
        row["torch"] = run_child(dict(job, kind="torch", spec=keras_result["spec"], twin_device=args.twin_device),
                                 policy)
    return row


def measure_sac(key: str, args) -> dict:
    size = SAC_SIZES[key]
    job = dict(kind="sac", threads=args.threads, backend=args.backend, config=str(size["config"]),
               overrides=size["quick"] if args.quick else [],
               warmup=args.warmup if args.warmup is not None else (1 if args.quick else size["warmup"]),
               updates=args.updates if args.updates is not None else (2 if args.quick else size["updates"]))
    print(f"{size['name']}: r2d2kit ({size['config'].relative_to(REPO_ROOT)}) ...", flush=True)
    return dict(key=key, name=size["name"], sac=run_child(job))


def sac_report(sac_rows: list[dict], r2d2_rows: list[dict], markdown: bool) -> str:
    """Recurrent SAC's update beside R2D2's, per update and per env step (each config's own update ratio)."""
    header = ["update", "windows x rows", "s/update", "updates per env step", "ms per env step", "peak RSS"]
    cells = []
    for row in r2d2_rows:
        k = row["keras"]
        if "error" in k:
            continue
        ratio = float(load_config_ratio(SIZES[row["key"]]["config"]))
        lrn = k["spec"]["learner"]
        rows = f"{lrn['batch_size']} x {lrn['burn_in']} + {lrn['trace_length']} + {lrn['n_step']}"
        cells.append([f"R2D2 {row['name']}", rows, fmt(k["seconds"], ".3f"), f"{ratio:g}",
                      fmt(1e3 * k["seconds"] * ratio, ".1f"), f"{k['peak_rss_mb'] / 1024:.2f} GiB"])
    lines = []
    for row in sac_rows:
        s = row["sac"]
        if "error" in s:
            lines.append(f"- {row['name']}: {s['error']}")
            continue
        cells.append([row["name"], f"{s['batch']} x {s['rows']}", fmt(s["seconds"], ".3f"),
                      f"{s['updates_per_env_step']:g}", fmt(1e3 * s["seconds_per_env_step"], ".1f"),
                      f"{s['peak_rss_mb'] / 1024:.2f} GiB"])
        times = s["all_seconds"]
        lines.append(f"- {row['name']}: min {min(times):.3f} / median {float(np.median(times)):.3f} / max "
                     f"{max(times):.3f} s; first {s['first_seconds']:.2f} s (tracing); load average "
                     f"{s['load_start']} -> {s['load_end']}; {SGEMM_N}^2 sgemm GFLOP/s {s['gemm']:.0f}")
    return "\n".join([table(header, cells, markdown), ""] + lines)


def load_config_ratio(config: Path) -> float:
    """A config's ``run.updates_per_env_step`` (read without building anything)."""
    from r2d2kit.training.config import load_config

    return load_config(config).run.updates_per_env_step


def child_lines(row: dict) -> list[str]:
    """The notes under the table for one row: its windows, then per framework timings, RSS, threads and load."""
    k = row["keras"]
    lrn = k["spec"]["learner"]
    lines = [f"- {row['name']}: windows of {lrn['burn_in']} burn-in + {lrn['trace_length']} "
             f"trace + {lrn['n_step']} n-step = {k['spec']['length']} rows, batch {lrn['batch_size']}; forward "
             f"{row['row_mflop']:.2f} MFLOP per row; median of {row['updates']} updates after {row['warmup']} warm-up"]
    paper, got = SIZES[row["key"]]["paper"], (lrn["batch_size"], lrn["burn_in"], lrn["trace_length"], lrn["n_step"])
    if paper:
        lines.append(f"  the R2D2 paper's batch {paper[0]}, {paper[1]} + {paper[2]} + {paper[3]} rows: "
                     + ("yes" if got == paper else f"no (this run: batch {got[0]}, {got[1]} + {got[2]} + {got[3]})"))
    for label, c in (("r2d2kit", k), ("twin", row["torch"])):
        if "error" not in c:
            times = c["all_seconds"]
            lines.append(
                f"  {label}: min {min(times):.3f} / median {float(np.median(times)):.3f} / max {max(times):.3f} s; "
                f"first {c['first_seconds']:.2f} s (r2d2kit: tracing); child process {c['wall_seconds']:.0f} s; "
                f"replay.sample alone {1e3 * c['sample_seconds']:.1f} ms; RSS before the first update "
                f"{c['rss_ready']:.2f} GiB; threads: {c['threads']}; load average {c['load_start']} -> "
                f"{c['load_end']}; {SGEMM_N}^2 sgemm GFLOP/s {c['gemm']:.0f}")
    twin = row["torch"]
    if (row["key"], got) == ("pong", paper):  # the targets, at the paper's sizes
        speedup, rss = BEFORE_SECONDS / k["seconds"], k["peak_rss_mb"] / 1024
        lines.append(f"- targets (Pong-size): >= {SPEEDUP:.0f}x faster than {BEFORE_SECONDS} s: {speedup:.2f}x, "
                     f"{'met' if speedup >= SPEEDUP else 'not met'}; peak RSS <= {RSS_GIB:.0f} GiB: {rss:.2f} GiB, "
                     f"{'met' if rss <= RSS_GIB else 'not met'}"
                     + (f"; at least level with the twin: twin / r2d2kit {twin['seconds'] / k['seconds']:.2f}, "
                        f"{'met' if twin['seconds'] >= k['seconds'] else 'not met'}" if "error" not in twin else "")
                     + " (one run on a shared machine: check the load line)")
    return lines


def rate(gflops: float) -> str:
    """GFLOP/s with 3 significant digits below 100 (the CartPole-size update is tiny)."""
    return f"{gflops:.0f}" if gflops >= 100 else f"{gflops:.3g}"


def report(rows: list[dict], checks: dict, markdown: bool) -> str:
    header = ["update", "GFLOP/update", "r2d2kit s/update", "twin s/update", "twin / r2d2kit",
              "r2d2kit GFLOP/s (Keras gemm)", "twin GFLOP/s (torch gemm)", "r2d2kit peak RSS", "twin peak RSS"]
    cells, lines, loads = [], [], [0.0]
    for row in rows:
        k, t, gflop = row["keras"], row["torch"], row.get("gflop")
        ks, ts = k.get("seconds"), t.get("seconds")
        batch = f" (batch {k['spec']['learner']['batch_size']})" if "spec" in k else ""
        cells.append([row["name"] + batch, fmt(gflop, ".1f"), fmt(ks, ".3f"), fmt(ts, ".3f"),
                      fmt(ts / ks if ks and ts else None, ".2f"),
                      *(f"{rate(gflop / s)} ({c['gemm']:.0f})" if s else "-" for s, c in ((ks, k), (ts, t))),
                      *(f"{c['peak_rss_mb'] / 1024:.2f} GiB" if "error" not in c else "-" for c in (k, t))])
        failed = [c["error"] for c in (k, t) if "error" in c]
        lines += [f"- {row['name']}: " + "; ".join(failed)] if failed else []
        lines += [] if "error" in k else child_lines(row)
        loads += [float(c[key]) for c in (k, t) for key in ("load_start", "load_end") if c.get(key, "n/a") != "n/a"]
    lines.append(f"- equivalence check: {checks['error']}" if "error" in checks else
                 f"- equivalence check: its child process (Keras and torch) took {checks['wall_seconds']:.0f} s")
    for c in checks.get("checks", []):
        lines.append(f"- equivalence, float32 ({c['config']}, small instance {c['small']}; Keras weights copied into "
                     f"the twin, target perturbed): loss {c['loss_keras']:.6g} vs {c['loss_twin']:.6g} (rel. error "
                     f"{c['loss_rel_error']:.1e}); worst gradient over {c['weights']} weights: rel. error "
                     f"{c['grad_rel_error']:.1e} ({c['grad_worst']}); priorities {c['priority_rel_error']:.1e}; "
                     f"parameters {c['params_keras']:,} vs {c['params_twin']:,}; MACs per row: formula "
                     f"{c['macs_formula']:,}, twin's hooks {c['macs_twin']:,}")
    if max(loads) > cores() + 0.5:  # the highest load any timing child saw at its start or end
        lines.append(f"- WARNING: load average up to {max(loads):.2f} on {cores()} cores: other work shared "
                     "the machine (the twin's OpenMP threads suffer most); rerun on a quiet machine, or compare with "
                     "--omp-wait-policy passive.")
    lines.append("- twin / r2d2kit above 1: r2d2kit is faster. GFLOP/update: benchmarks/README.md's formula; in "
                 f"brackets: a {SGEMM_N}^2 float32 matmul, same process and framework. Timed: one "
                 "train_from(replay) per update, each framework in its own process (its peak RSS, ru_maxrss).")
    return "\n".join([table(header, cells, markdown), ""] + lines)


def main(argv=None) -> dict:
    harness.serve_job(child)
    p = harness.arg_parser(__doc__, "quick", "markdown", "json")
    p.add_argument("--only", choices=sorted(SIZES) + sorted(SAC_SIZES), default=None, help="one row only")
    p.add_argument("--threads", type=int, default=cores(),
                   help="TF intra/inter-op and torch threads (default: the cores this process may use)")
    p.add_argument("--warmup", type=int, default=None, help="untimed updates first (default: Pong 1, CartPole 3)")
    p.add_argument("--updates", type=int, default=None, help="timed updates (default: Pong 3, CartPole 20)")
    p.add_argument("--omp-wait-policy", choices=("passive", "active"), default=None,
                   help="OMP_WAIT_POLICY for the twin's process (default: torch's own; passive is steadier on a "
                        "loaded machine, slower on small updates)")
    p.add_argument("--backend", choices=("tensorflow", "jax"), default=os.environ.get("KERAS_BACKEND", "tensorflow"),
                   help="Keras' backend for r2d2kit's children (default: KERAS_BACKEND, else tensorflow); on jax "
                        "--threads limits only the twin (XLA sizes its own CPU thread pool)")
    p.add_argument("--twin-device", choices=("cpu", "cuda"), default="cpu",
                   help="where the PyTorch twin trains (r2d2kit's learner takes the GPU its backend sees)")
    args = p.parse_args(argv)
    for name, least in (("threads", 1), ("warmup", 0), ("updates", 1)):
        if getattr(args, name) is not None and getattr(args, name) < least:
            p.error(f"--{name} must be >= {least}, got {getattr(args, name)}")
    began, load_start = harness.start(("numpy", "tensorflow", "keras", "torch", "r2d2kit"))
    print(f"Keras backend {args.backend}; threads {args.threads} for TF (intra and inter-op) and torch"
          f"{'; twin OMP_WAIT_POLICY=' + args.omp_wait_policy.upper() if args.omp_wait_policy else ''}; "
          f"load average at start {load_start} on {os.cpu_count()} CPUs", flush=True)
    keys = [args.only] if args.only else list(SIZES) + list(SAC_SIZES)
    r2d2_keys = [key for key in keys if key in SIZES]
    rows, checks = [], {}
    if r2d2_keys:
        print("equivalence check (Keras weights into the twin, small instances) ...", flush=True)
        checks = run_child(dict(kind="check", threads=args.threads, backend=args.backend,
                                configs=[str(SIZES[k]["config"]) for k in r2d2_keys]))
        rows = [measure_size(key, args) for key in r2d2_keys]
        print("\n" + report(rows, checks, args.markdown))
    sac_rows = [measure_sac(key, args) for key in keys if key in SAC_SIZES]
    if sac_rows:
        print("\n" + sac_report(sac_rows, rows, args.markdown))
    print(f"- total benchmark time {time.perf_counter() - began:.0f} s; load average at end {format_load()} "
          f"(on {os.cpu_count()} CPUs; it counts this benchmark's own {args.threads} busy threads too)")
    result = {"rows": rows, "sac_rows": sac_rows, "checks": checks, "command": command_line()}
    harness.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
