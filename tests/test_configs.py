"""Every shipped config loads, and the optional-env configs (Pong, MiniGrid, POPGym, MinAtar) run a tiny budget end
to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2d2kit.training.config import ConfigError, load_config
from r2d2kit.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
TRAIN_CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
POPGYM_CONFIGS = sorted((ROOT / "configs" / "popgym").glob("*.yaml"))
MINATAR_CONFIGS = sorted((ROOT / "configs" / "minatar").glob("*.yaml"))
SMOKE = ["actors.runner=local", "run.total_env_steps=160", "run.warmup_steps=80", "run.eval_every=0",
         "replay.burn_in=2", "replay.trace_length=8", "replay.period=4", "replay.n_step=1",
         "learner.batch_size=4", "logging.progress=false", "logging.tensorboard=false", "replay.capacity=2000"]


@pytest.mark.parametrize("path", TRAIN_CONFIGS + MINATAR_CONFIGS, ids=lambda path: path.name)
def test_every_train_config_loads(path):
    config = load_config(path)
    assert config.env.id and config.run.total_env_steps > 0


@pytest.mark.slow
@pytest.mark.parametrize("name, runner, obs_shape, obs_dtype", [
    ("pong.yaml", "local", (84, 84), "uint8"),
    ("minigrid_memory.yaml", "processes", (7, 7, 3), "uint8"),
    ("minatar/breakout.yaml", "processes", (10, 10, 4), "bool"),
], ids=["pong", "minigrid", "minatar"])
def test_optional_env_configs_train_a_few_steps(tmp_path, name, runner, obs_shape, obs_dtype):
    """Wrappers from the config (AtariPreprocessing; MiniGrid's index image; MinAtar's bool channels) feed the
    configured encoder; the image kinds also cross the actor processes' shared memory as they are stored."""
    overrides = SMOKE + ([f"actors.runner={runner}", "actors.num_actors=1"] if runner == "processes" else [])
    trainer = Trainer(load_config(ROOT / "configs" / name, overrides), tmp_path)
    assert (trainer.agent.network.obs_shape, trainer.agent.network.obs_dtype) == (obs_shape, obs_dtype)
    summary = trainer.fit()
    assert summary["runner"] == runner and summary["env_steps"] >= 160 and summary["updates"] > 0


def test_a_missing_optional_package_names_the_extra(tmp_path, monkeypatch):
    import r2d2kit.envs

    monkeypatch.setitem(r2d2kit.envs.OPTIONAL_PACKAGES, "Fancy-", ("no_such_module_r2d2kit", "fancy"))
    path = tmp_path / "c.yaml"
    path.write_text("env: {id: Fancy-v0}\n")
    with pytest.raises(ConfigError, match=r"env\.id 'Fancy-v0'.*pip install 'r2d2kit\[fancy\]'"):
        load_config(path)


def test_an_env_registered_by_its_own_module_is_named_module_colon_id(tmp_path, monkeypatch):
    """gymnasium's "module:EnvId" form: the module is imported (here and in actors), then the id is made."""
    from r2d2kit.training.builders import make_env

    (tmp_path / "my_envs_r2d2kit_test.py").write_text(
        "import gymnasium\n"
        "if 'MyCue-v0' not in gymnasium.envs.registry:\n"
        "    gymnasium.register('MyCue-v0', entry_point='r2d2kit.envs.memory:CueMemoryEnv', kwargs={'delay': 2})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "c.yaml"
    path.write_text("env: {id: 'my_envs_r2d2kit_test:MyCue-v0'}\n")
    config = load_config(path)
    env = make_env(config)
    assert env.unwrapped.delay == 2
    env.close()
    path.write_text("env: {id: 'no_such_module_r2d2kit:MyCue-v0'}\n")
    with pytest.raises(ConfigError, match=r"env id module 'no_such_module_r2d2kit' cannot be imported"):
        load_config(path)


# (observation space, stored code shape and dtype, actions) of each POPGym config, written by hand
POPGYM_SPACES = {
    "RepeatFirstEasy.yaml": ("Discrete(4)", (1,), "uint8", 4),
    "RepeatPreviousEasy.yaml": ("Discrete(4)", (1,), "uint8", 4),
    "RepeatPreviousMedium.yaml": ("Discrete(4)", (1,), "uint8", 4),
    "CountRecallEasy.yaml": ("MultiDiscrete([2 2])", (2,), "uint8", 27),
    "PositionOnlyCartPoleEasy.yaml": ("Box", (2,), "float32", 2),
    "NoisyPositionOnlyCartPoleEasy.yaml": ("Box", (2,), "float32", 2),
}


def test_every_popgym_config_is_checked():
    assert sorted(path.name for path in POPGYM_CONFIGS) == sorted(POPGYM_SPACES)


@pytest.mark.parametrize("path", POPGYM_CONFIGS, ids=lambda path: path.name)
def test_popgym_configs_build_their_network(path):
    """Build-only: the id registers on demand, the spaces become codes, the encoder takes the one-hots."""
    from r2d2kit.agent.r2d2.builder import build_q_network
    from r2d2kit.training.builders import make_env

    config = load_config(path)
    # small-task sizes, not the paper's 512-unit LSTM and 125-row windows (RepeatPreviousMedium: 105 rows)
    assert config.env.id.startswith("popgym-") and config.model.core_units <= 128 and config.replay.layout.length <= 105
    space, code_shape, dtype, actions = POPGYM_SPACES[path.name]
    env = make_env(config)
    assert str(env.unwrapped.observation_space).startswith(space)
    env.close()
    network = build_q_network(config)
    assert (network.obs_shape, network.obs_dtype, network.num_actions) == (code_shape, dtype, actions)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["RepeatPreviousEasy.yaml", "CountRecallEasy.yaml"])
def test_popgym_configs_train_a_few_steps(tmp_path, name):
    """A Discrete and a MultiDiscrete observation env, end to end (the Box ones share configs/cartpole's path)."""
    trainer = Trainer(load_config(ROOT / "configs" / "popgym" / name, SMOKE), tmp_path)
    summary = trainer.fit()
    assert summary["env_steps"] == 160 and summary["updates"] > 0


# (observation shape, actions) of each MinAtar game's v1 id, from the MinAtar 1.0.15 sources
MINATAR_SPACES = {"asterix.yaml": ((10, 10, 4), 5), "breakout.yaml": ((10, 10, 4), 3), "freeway.yaml": ((10, 10, 7), 3),
                  "seaquest.yaml": ((10, 10, 10), 6), "space_invaders.yaml": ((10, 10, 6), 4)}


def test_every_minatar_config_is_checked():
    assert sorted(path.name for path in MINATAR_CONFIGS) == sorted(MINATAR_SPACES)


@pytest.mark.parametrize("path", MINATAR_CONFIGS, ids=lambda path: path.name)
def test_minatar_configs_build_their_network(path):
    """Build-only: the MinAtar id registers on demand and its bool channels reach the paper's conv unchanged."""
    from r2d2kit.agent.r2d2.builder import build_q_network
    from r2d2kit.models import MinAtarImageModel
    from r2d2kit.training.networks import build_encoder

    config = load_config(path)
    assert config.env.id.startswith("MinAtar/") and isinstance(build_encoder(config), MinAtarImageModel)
    shape, actions = MINATAR_SPACES[path.name]
    network = build_q_network(config)
    assert (network.obs_shape, network.obs_dtype, network.num_actions) == (shape, "bool", actions)
    assert network.encoder.output_shape == (None, None, 128)
