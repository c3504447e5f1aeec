"""Config loading: every promised error names the file, the key and a fix."""

import pytest
import yaml

from r2d2kit.training.config import (
    ConfigError,
    apply_overrides,
    build_config,
    load_config,
    save_config,
)

ENV = "env: {id: CueMemory-v0}\n"  # every config names its env (one without is refused)


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name,text,message", [
    ("unknown section", "learnr: {}\n", r"c\.yaml: unknown section 'learnr'; did you mean 'learner'"),
    ("unknown key", "learner: {batch_sise: 3}\n", r"unknown key learner\.batch_sise; did you mean 'batch_size'"),
    ("wrong type", "learner: {batch_size: many}\n", r"learner\.batch_size must be int, got 'many'"),
    ("word for a float", "learner: {learning_rate: fast}\n", r"learner\.learning_rate must be float, got 'fast'"),
    ("bool is not an int", "replay: {n_step: true}\n", r"replay\.n_step must be an integer"),
    ("a window key under learner", "learner: {burn_in: 2}\n",
     r"unknown key learner\.burn_in; it is a key of section 'replay': write replay\.burn_in"),
    ("out of range", "learner: {gamma: 1.5}\n", r"section 'learner'.*gamma must be in \[0, 1\]"),
    ("tau outside (0, 1]", "learner: {target_update_tau: 0}\n", r"target_update_tau must be in \(0, 1\]"),
    ("period longer than trace", "replay: {trace_length: 4, period: 8}\n", r"period \(8\) must be <= trace_length"),
    ("unknown env id", "env: {id: CartPol-v1}\n",
     r"env\.id 'CartPol-v1' is not a registered gymnasium id; did you mean 'CartPole-v1'"),
    ("unknown env id, nothing near", "env: {id: MyMaze-v0}\n",
     r"env\.id 'MyMaze-v0' is not a registered gymnasium id; write it as 'package\.module:EnvId'"),
    ("unknown sampler", "replay: {sampler: ranked}\n",
     r"section 'replay'.*sampler must be one of uniform, proportional, rank, got 'ranked'"),
    ("section not a mapping", "run: 5\n", r"section 'run' must be a mapping"),
    ("top level not a mapping", "- a\n- b\n", r"top level must be a mapping"),
    ("not yaml", "learner: {a: [\n", r"not valid YAML"),
    ("nan learning rate", "learner: {learning_rate: .nan}\n",
     r"learner\.learning_rate must be a finite number, got nan"),
    ("infinite update ratio", "run: {updates_per_env_step: .inf}\n",
     r"run\.updates_per_env_step must be a finite number, got inf"),
    ("huge int for a float", f"run: {{updates_per_env_step: {10 ** 400}}}\n", r"must be a finite number, got inf"),
    ("negative clip norm", "learner: {max_gradient_norm: -1}\n", r"max_gradient_norm must be > 0, got -1"),
    ("zero adam epsilon", "learner: {adam_epsilon: 0}\n", r"adam_epsilon must be > 0, got 0"),
    ("negative priority exponent", "learner: {priority_exponent: -2}\n", r"priority_exponent must be in \[0, 1\]"),
    ("importance exponent above 1", "learner: {importance_exponent: 7}\n",
     r"importance_exponent must be in \[0, 1\]"),
    ("astronomic capacity", f"replay: {{capacity: {10 ** 30}}}\n", r"capacity must be in \[1, 2147483648\] steps"),
])
def test_bad_configs_produce_the_promised_messages(tmp_path, name, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "{}\n"], ids=["empty", "blank", "comments", "{}"])
def test_an_empty_config_file_is_refused_with_its_name(tmp_path, text):
    """An empty file used to train CartPoleNoVel-v1 with the paper's defaults, silently."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"{path}: the file holds no settings \(it is empty or only comments\); "
                                          r"a config names at least the env, e\.g\. 'env: \{id: CartPoleNoVel-v1\}'"):
        load_config(path, ["run.seed=1"])  # overrides do not make an empty file a config


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="no config file at"):
        load_config(tmp_path / "nope.yaml")


def test_omitted_keys_keep_the_paper_defaults_and_ints_are_accepted_for_floats(tmp_path):
    config = load_config(write(tmp_path, "env: {id: CueMemory-v0}\nreplay: {burn_in: 2}\nlearner: {gamma: 1}\n"))
    assert config.replay.burn_in == 2 and config.learner.gamma == 1.0
    assert (config.replay.trace_length, config.replay.n_step, config.learner.target_update_period) == (80, 5, 2500)


def test_exponent_floats_without_a_dot_are_floats(tmp_path):
    # PyYAML (YAML 1.1) reads 1e-3 as the string '1e-3'; float fields take it as the number
    assert yaml.safe_load("x: 1e-3")["x"] == "1e-3"
    config = load_config(write(tmp_path, f"{ENV}learner: {{learning_rate: 1e-3, adam_epsilon: 5E-7}}\n"),
                         ["learner.final_learning_rate=-0e+0", "learner.rescale_eps=.5e-2"])
    assert config.learner.learning_rate == 1e-3 and config.learner.adam_epsilon == 5e-7
    assert config.learner.final_learning_rate == 0.0 and config.learner.rescale_eps == 0.005
    assert load_config(write(tmp_path, f"{ENV}learner: {{batch_size: 1e3}}\n")).learner.batch_size == 1000


def test_overrides_parse_as_yaml_and_win(tmp_path):
    config = load_config(write(tmp_path, f"{ENV}model: {{hidden: [8]}}\nlearner: {{batch_size: 8}}\n"),
                         ["learner.batch_size=32", "model.hidden=[16, 16]", "run.seed=3"])
    assert config.learner.batch_size == 32 and config.model.hidden == [16, 16] and config.run.seed == 3
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides({}, ["batch_size=3"])


def test_resolved_config_round_trips(tmp_path):
    config = build_config({"env": {"id": "CueMemory-v0", "kwargs": {"delay": 2}}, "replay": {"burn_in": 1}})
    save_config(config, tmp_path / "resolved.yaml")
    assert load_config(tmp_path / "resolved.yaml") == config


@pytest.mark.parametrize("sections, gpu, named", [
    ("env: {id: CueMemory-v0}\n", False, ["model.core_units=512", ("125-row windows (replay.burn_in=40 + "
                                                                    "trace_length=80 + n_step=5)")]),
    (ENV + "model: {core_units: 64}\n", False, ["125-row windows"]),
    (ENV + "replay: {burn_in: 10, trace_length: 20, period: 10}\n", False, ["model.core_units=512"]),
    (ENV + "model: {core_units: 64}\nreplay: {burn_in: 10, trace_length: 20, period: 10}\n", False, None),
    ("env: {id: CueMemory-v0}\n", True, None),
], ids=["no learner section", "paper windows", "paper lstm", "small", "gpu"])
def test_paper_sizes_without_a_gpu_are_warned_about_naming_the_overrides(tmp_path, sections, gpu, named):
    from r2d2kit.train import size_warning

    warning = size_warning(load_config(write(tmp_path, sections)), gpu=gpu)
    if named is None:
        assert warning is None
        return
    for part in named:
        assert part in warning
    assert "no GPU is visible" in warning and "--set model.core_units=64" in warning
    assert "--set replay.burn_in=10 --set replay.trace_length=20" in warning


ALIAS_BOMB = """env:
  id: CueMemory-v0
  kwargs:
    a: &a [x, x, x, x, x, x, x, x, x]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]
"""


@pytest.mark.parametrize("name,text,message", [
    ("alias bomb", ALIAS_BOMB, r"holds more than 10000 values once its aliases are expanded"),
    ("deep nesting", "x: " + "[" * 5000 + "]" * 5000 + "\n", r"nested too deeply to read"),
    ("nesting past the limit", "env: {kwargs: " + "[" * 40 + "]" * 40 + "}\n", r"nested deeper than 32 levels"),
])
def test_yaml_that_expands_or_nests_without_bound_is_refused_before_use(tmp_path, name, text, message):
    """A 0.4 KB alias bomb used to pass and expand to millions of values when saved or printed."""
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_a_few_aliases_are_fine(tmp_path):
    config = load_config(write(tmp_path, "env: {id: CueMemory-v0, kwargs: &k {delay: 2}}\nmodel: {hidden: [8]}\n"))
    assert config.env.kwargs == {"delay": 2}


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path):
    path = write(tmp_path, "env: {id: CueMemory-v0}\n" + "#" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match=r"bytes is not a config"):
        load_config(path)


@pytest.mark.parametrize("override,message", [
    ("learner.batch_size=[1", r"--set 'learner\.batch_size=\[1': not valid YAML"),
    ("learner.batch_size=!!python/object/apply:os.system [echo]", r"--set .*: not valid YAML: could not determine a "
                                                                  r"constructor"),
    ("learner.batchsize=3", r"--set 'learner\.batchsize=3': unknown key learner\.batchsize; did you mean 'batch_size'"),
    ("lerner.batch_size=3", r"--set 'lerner\.batch_size=3': unknown section 'lerner'; did you mean 'learner'"),
    ("replay.hr.n_sampled_goal=3", r"unknown key replay\.hr; did you mean 'her'"),
    ("learner.batch_size=many", r"^--set: learner\.batch_size must be int, got 'many'"),
    ("learner.gamma=2", r"c\.yaml \(with --set learner\.gamma\): section 'learner'.*gamma must be in \[0, 1\]"),
])
def test_a_bad_override_is_blamed_on_the_override_not_the_file(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, "env: {id: CueMemory-v0}\nlearner: {batch_size: 8}\n"), [override])


def test_a_bad_value_in_the_file_is_still_blamed_on_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"c\.yaml: learner\.batch_size must be int"):
        load_config(write(tmp_path, "learner: {batch_size: many}\n"), ["learner.gamma=0.9"])


@pytest.mark.parametrize("override, message", [
    ("run.seed=2.5", r"--set: run\.seed must be an integer, got 2\.5 \(= 2\.5, not a whole number\)"),
    ("run.total_env_steps=1e-3", r"must be an integer, got '1e-3' \(= 0\.001, not a whole number\)"),
    ("model.hidden=64,64", r"--set: model\.hidden must be a list, got '64,64' \(str\); write it as a YAML list, "
                           r"e\.g\. \[64,64\] \(in a shell, quote it: --set 'model\.hidden=\[64,64\]'\)"),
    ("model.hidden=64", r"model\.hidden must be a list, got 64 \(int\); write it as a YAML list, e\.g\. \[64\]"),
    ("learner.learning_rate=-1", r"R2D2Config\.learning_rate must be > 0, got -1\.0$"),
    ("learner.final_learning_rate=-1", r"R2D2Config\.final_learning_rate must be >= 0, got -1\.0$"),
], ids=["fraction", "small exponent", "comma list", "bare number for a list", "learning rate", "final learning rate"])
def test_override_messages_carry_the_fix(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, ENV), [override])


def test_whole_numbers_written_as_exponents_or_floats_are_integers(tmp_path):
    config = load_config(write(tmp_path, ENV + "learner: {batch_size: 64.0}\n"), ["run.total_env_steps=1e4"])
    assert config.run.total_env_steps == 10_000 and type(config.run.total_env_steps) is int
    assert config.learner.batch_size == 64 and type(config.learner.batch_size) is int


@pytest.mark.parametrize("text", ["replay: {burn_in: 2}\n", "env:\nmodel: {core: gru}\n"], ids=["absent", "empty"])
def test_a_config_without_an_env_is_refused_as_the_empty_file_is(tmp_path, text):
    """It used to train CartPoleNoVel-v1 with the paper's 512-unit network, silently."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"{path}: no 'env:' section; .*a config names at least the env"):
        load_config(path)
    assert load_config(path, ["env.id=CueMemory-v0"]).env.id == "CueMemory-v0"  # --set can name it


def test_the_agent_key_picks_the_learner_section_and_round_trips(tmp_path):
    from r2d2kit.agent.r2d2.config import R2D2Config
    from r2d2kit.agent.sac.config import SACConfig

    assert isinstance(load_config(write(tmp_path, ENV)).learner, R2D2Config)  # agent: r2d2 by default
    sac = load_config(write(tmp_path, "agent: sac\nenv: {id: PendulumNoVel-v1}\nlearner: {tau: 0.02}\n"))
    assert sac.agent == "sac" and isinstance(sac.learner, SACConfig) and sac.learner.tau == 0.02
    save_config(sac, tmp_path / "resolved.yaml")
    assert load_config(tmp_path / "resolved.yaml") == sac
    overridden = load_config(write(tmp_path, "env: {id: PendulumNoVel-v1}\n"), ["agent=sac", "learner.tau=0.1"])
    assert overridden.agent == "sac" and overridden.learner.tau == 0.1


@pytest.mark.parametrize("text, overrides, message", [
    ("agent: ppo\n" + ENV, [], r"c.yaml: agent must be one of \['r2d2', 'sac'\].*got 'ppo'"),
    (ENV, ["agent=ddpg"], r"--set: agent must be one of \['r2d2', 'sac'\].*got 'ddpg'"),
    (ENV + "learner: {tau: 0.1}\n", [],
     r"learner.tau is not a key of agent 'r2d2''s learner section .*it is a key of agent 'sac': set agent: sac"),
    ("agent: sac\n" + ENV + "learner: {double_q: false}\n", [],
     r"learner.double_q is not a key of agent 'sac''s learner section .*set agent: r2d2"),
])
def test_an_unknown_agent_or_another_agents_learner_key_is_named(tmp_path, text, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), overrides)
