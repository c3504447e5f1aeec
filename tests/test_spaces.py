"""Observation and action spaces (r2d2kit.spaces, r2d2kit.models.code_encoding) against brute-force numpy.

For every supported space kind a hand-made env is played by the learner's own pieces (the local
actor pool, the replay made by ``make_sequence_replay``); the stored codes sampled back from replay,
encoded by the network, must equal a one-hot encoding of the original observation written here
independently (``reference_encoding``). Actions: every flat index maps to a distinct env action in
the order of ``itertools.product`` and back.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from r2d2kit.spaces import (
    FlatActions,
    FlatCodes,
    UnsupportedSpaceError,
    action_layout,
    observation_layout,
    wrap_spaces,
)

S = gym.spaces


# ----------------------------------------------------------------------------- brute-force reference
def reference_encoding(space: gym.Space, obs) -> np.ndarray:
    """What the network should see: one-hots for Discrete/MultiDiscrete, Box values and bits as they
    are, Tuple in order, Dict by sorted key (gymnasium sorts a Dict built from a dict)."""
    if isinstance(space, S.Discrete):
        return np.eye(space.n, dtype=np.float32)[int(obs) - int(space.start)]
    if isinstance(space, S.MultiDiscrete):
        values = np.asarray(obs).reshape(-1) - np.asarray(space.start).reshape(-1)
        return np.concatenate([np.eye(n, dtype=np.float32)[v] for n, v in zip(space.nvec.reshape(-1), values)])
    if isinstance(space, (S.Box, S.MultiBinary)):
        return np.asarray(obs, dtype=np.float32).reshape(-1)
    if isinstance(space, S.Tuple):
        return np.concatenate([reference_encoding(sub, part) for sub, part in zip(space.spaces, obs)])
    return np.concatenate([reference_encoding(space[key], obs[key]) for key in sorted(space.keys())])


# ----------------------------------------------------------------------------- hand-made envs
class LoggingEnv(gym.Env):
    """Random observations of ``observation_space``; logs every observation it emits and every action
    it receives (``log`` is shared by the envs of a vector env)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, log: dict, length: int = 7) -> None:
        self.observation_space, self.action_space = observation_space, action_space
        self.log, self.length = log, length
        self.t = 0

    def _emit(self):
        self.last_obs = self.observation_space.sample()
        self.log["obs"].append(self.last_obs)
        return self.last_obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.t = 0
        return self._emit(), {}

    def step(self, action):
        assert self.action_space.contains(action), (action, self.action_space)
        self.log["steps"].append((self.last_obs, action))
        self.t += 1
        return self._emit(), float(self.t), False, self.t >= self.length, {}


class Case(NamedTuple):
    name: str
    observation_space: gym.Space
    action_space: gym.Space = S.Discrete(3)


CASES = [
    Case("box", S.Box(-2.0, 2.0, (3,), np.float32)),
    Case("box-bool-channels", S.Box(0, 1, (5, 5, 3), bool)),  # MinAtar's kind: stored as bool, read as 0/1
    Case("box-uint8-indices", S.Box(0, 10, (7, 7, 3), np.uint8)),  # MiniGrid's index image
    Case("discrete", S.Discrete(5)),
    Case("discrete-start", S.Discrete(4, start=-2)),
    Case("multidiscrete", S.MultiDiscrete([3, 2, 4])),
    Case("multidiscrete-2d-start", S.MultiDiscrete(np.array([[2, 3], [3, 300]]), start=np.array([[1, 0], [0, -5]]))),
    Case("multibinary", S.MultiBinary(5)),
    Case("tuple", S.Tuple((S.Discrete(3), S.Box(0.0, 1.0, (2,), np.float32)))),
    Case("dict", S.Dict({"pos": S.Box(-1.0, 1.0, (2,), np.float32), "card": S.Discrete(4), "bits": S.MultiBinary(2)})),
    Case("nested", S.Dict({"z": S.Tuple((S.Discrete(2), S.Dict({"b": S.MultiDiscrete([2, 3]), "a": S.Discrete(3)}))),
                           "img": S.Box(0, 255, (2, 2), np.uint8)})),
    Case("multidiscrete-actions", S.Discrete(3), S.MultiDiscrete([2, 3], start=[0, -1])),
    Case("multibinary-actions", S.Tuple((S.Discrete(2), S.Discrete(2))), S.MultiBinary(2)),
    Case("discrete-start-actions", S.MultiBinary(3), S.Discrete(4, start=1)),
]


def pass_through():
    """An ImageModel returning its input, so the encoder model's output is the encoded observation
    (an image's entries flattened, as float32 numbers: bool as 0/1, uint8 not divided by 255)."""
    import keras

    from r2d2kit.models import ImageModel

    class Identity(ImageModel):
        def create_image_model(self, x):
            if len(x.shape) > 2:  # [N, H, W, C] frames -> [N, H*W*C]
                return keras.layers.Flatten()(keras.ops.cast(x, "float32"))
            return x

    return Identity()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_observations_round_trip_through_actors_replay_and_network(case):
    """env obs -> codes (wrapper) -> windows (local actor pool) -> replay (the learner's recipe) ->
    sampled codes -> network encoding == reference one-hot of the original observation."""
    from r2d2kit.agent.r2d2 import QNetwork
    from r2d2kit.agent.r2d2.policies import EpsilonGreedyFactory, EpsilonSchedule
    from r2d2kit.agent.seam import WindowLayout
    from r2d2kit.models.code_encoding import CodeEncoder
    from r2d2kit.runners.local import LocalActors
    from r2d2kit.runners.pool import Incarnations
    from r2d2kit.training.builders import make_sequence_replay

    log = {"obs": [], "steps": []}
    env = wrap_spaces(LoggingEnv(case.observation_space, case.action_space, log))
    layout = observation_layout(case.observation_space)
    assert (layout is None) == isinstance(case.observation_space, S.Box)
    encoder = pass_through() if layout is None else CodeEncoder(layout, pass_through())
    network = QNetwork(env.observation_space.shape, int(env.action_space.n), encoder,
                       obs_dtype=str(env.observation_space.dtype), core_units=4, head_units=0)
    windows_layout = WindowLayout(burn_in=1, trace_length=4, period=2, n_step=1)
    replay = make_sequence_replay(network.window_fields(), windows_layout, capacity=500, seed=0)
    policies = EpsilonGreedyFactory(lambda: network, EpsilonSchedule(np.ones(2)), 2)
    actors = LocalActors(lambda: wrap_spaces(LoggingEnv(case.observation_space, case.action_space, log)), policies,
                         windows_layout, incarnations=Incarnations(seed=3))
    for _ in range(40):
        for windows, source in actors.collect().windows:
            replay.add_sequences(windows, source=source)
    actors.close()

    def key(codes):
        return np.asarray(codes, dtype=env.observation_space.dtype).tobytes()

    expected = {key(env.observation(o) if layout else o): reference_encoding(case.observation_space, o)
                for o in log["obs"]}
    batch = replay.sample(64)
    obs = batch["obs"]  # [B, L, *code_shape]
    assert obs.dtype == env.observation_space.dtype and obs.shape[2:] == env.observation_space.shape
    encoded = np.asarray(network.encoder(obs))  # [B, L, encoded]
    rows = np.argwhere(batch["obs_mask"])
    assert len(rows) > 0
    for b, t in rows:
        np.testing.assert_array_equal(encoded[b, t], expected[key(obs[b, t])])
    # every stored (observation, action) pair was played: the flat action maps to what the env got
    acts = action_layout(case.action_space)
    played = {(key(env.observation(o) if layout else o), np.asarray(a).tobytes()) for o, a in log["steps"]}
    for b, t in np.argwhere(batch["mask"]):
        action = batch["action"][b, t] if acts is None else acts.to_env(batch["action"][b, t])
        assert (key(obs[b, t]), np.asarray(action, dtype=case.action_space.dtype).tobytes()) in played


def test_a_box_observation_and_discrete_actions_are_left_as_they_are():
    env = LoggingEnv(S.Box(0, 255, (4, 4, 3), np.uint8), S.Discrete(2), {"obs": [], "steps": []})
    assert wrap_spaces(env) is env  # images stay images; runs and checkpoints of Box envs are unchanged


@pytest.mark.parametrize("case", [case for case in CASES if not isinstance(case.observation_space, S.Box)],
                         ids=lambda case: case.name)
def test_codes_lie_in_the_code_space_and_are_compact(case):
    layout = observation_layout(case.observation_space)
    case.observation_space.seed(0)
    for _ in range(50):
        codes = layout.codes(case.observation_space.sample())
        assert layout.code_space.contains(codes), codes
    has_box = any(isinstance(space, S.Box) for space in leaves(case.observation_space))
    biggest = max(int(np.max(space.nvec if isinstance(space, S.MultiDiscrete) else getattr(space, "n", 2)))
                  for space in leaves(case.observation_space))
    want = np.float32 if has_box else (np.uint8 if biggest <= 256 else np.int32)
    assert layout.code_space.dtype == want  # the integer codes, not one-hots; float32 only with Box values
    assert layout.code_size == sum(int(np.prod(getattr(s, "shape", ()) or (1,)))
                                   for s in leaves(case.observation_space))


def leaves(space):
    if isinstance(space, S.Tuple):
        return [leaf for sub in space.spaces for leaf in leaves(sub)]
    if isinstance(space, S.Dict):
        return [leaf for sub in space.spaces.values() for leaf in leaves(sub)]
    return [space]


# ----------------------------------------------------------------------------- the Keras layer, any leading axes
@pytest.mark.parametrize("leading", [(5,), (2, 3), (1, 2, 2)])
def test_the_encoding_acts_on_the_last_axis_only(leading):
    from r2d2kit.models.code_encoding import CodeEncoding

    space = S.Tuple((S.MultiDiscrete([3, 3, 2]), S.Box(-1.0, 1.0, (2,), np.float32), S.Discrete(4, start=1)))
    layout = observation_layout(space)
    space.seed(1)
    samples = [space.sample() for _ in range(int(np.prod(leading)))]
    codes = np.stack([layout.codes(s) for s in samples]).reshape(*leading, layout.code_size)
    encoded = np.asarray(CodeEncoding(*layout.encoding_plan())(codes))
    reference = np.stack([reference_encoding(space, s) for s in samples]).reshape(*leading, -1)
    assert encoded.shape == leading + (layout.encoded_size,) == reference.shape
    np.testing.assert_array_equal(encoded, reference)


# ----------------------------------------------------------------------------- property: random nested spaces
def leaf_spaces():
    return st.one_of(
        st.integers(1, 6).map(lambda n: S.Discrete(n)),
        st.tuples(st.integers(1, 6), st.integers(-3, 3)).map(lambda a: S.Discrete(a[0], start=a[1])),
        st.lists(st.integers(1, 5), min_size=1, max_size=4).map(lambda nvec: S.MultiDiscrete(nvec)),
        st.integers(1, 4).map(lambda n: S.MultiBinary(n)),
        st.integers(1, 3).map(lambda n: S.Box(-1.0, 1.0, (n,), np.float32)),
    )


def composite_spaces():
    names = st.text("abcdefgh", min_size=1, max_size=3)
    return st.recursive(leaf_spaces(), lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda parts: S.Tuple(parts)),
        st.dictionaries(names, children, min_size=1, max_size=3).map(lambda parts: S.Dict(parts))), max_leaves=6)


@settings(max_examples=60, deadline=None)
@given(space=composite_spaces(), seed=st.integers(0, 2**16))
def test_codes_expand_to_the_reference_encoding_for_random_spaces(space, seed):
    """The numpy reading of the gather plan (what CodeEncoding computes) equals the reference."""
    if isinstance(space, S.Box):
        return
    layout = observation_layout(space)
    source, category = layout.encoding_plan()
    space.seed(seed)
    for _ in range(3):
        obs = space.sample()
        codes = layout.codes(obs).astype(np.float32)
        gathered = codes[source]
        encoded = np.where(category < 0, gathered, (gathered == category).astype(np.float32))
        np.testing.assert_array_equal(encoded, reference_encoding(space, obs))
        assert layout.encoded_size == encoded.size


# ----------------------------------------------------------------------------- actions
@pytest.mark.parametrize("space", [S.MultiDiscrete([2, 3, 4]), S.MultiDiscrete([3, 2], start=[-1, 5]),
                                   S.MultiDiscrete(np.array([[2, 2], [3, 1]])), S.MultiBinary(3),
                                   S.MultiBinary((2, 2)), S.Discrete(5, start=-2)], ids=str)
def test_every_flat_action_maps_to_a_distinct_env_action_and_back(space):
    layout = action_layout(space)
    if isinstance(space, S.Discrete):
        combos = [(v,) for v in range(int(space.start), int(space.start) + int(space.n))]
    else:
        nvec = space.nvec.reshape(-1) if isinstance(space, S.MultiDiscrete) else np.full(int(np.prod(space.shape)), 2)
        start = np.asarray(getattr(space, "start", np.zeros_like(nvec))).reshape(-1)
        combos = list(itertools.product(*[range(s, s + n) for s, n in zip(start.tolist(), nvec.tolist())]))
    assert layout.num_actions == len(combos)
    for index, combo in enumerate(combos):  # itertools.product order: first component most significant
        action = layout.to_env(index)
        assert space.contains(action), (index, action)
        np.testing.assert_array_equal(np.asarray(action).reshape(-1), combo)
        assert layout.to_index(action) == index
    with pytest.raises(ValueError, match="outside"):
        layout.to_env(len(combos))


def test_flat_actions_step_the_env_with_the_mapped_action():
    log = {"obs": [], "steps": []}
    env = FlatActions(LoggingEnv(S.Discrete(2), S.MultiDiscrete([2, 3]), log))
    assert env.action_space == S.Discrete(6)
    env.reset(seed=0)
    for index in range(6):
        env.step(index)
    assert [tuple(int(v) for v in action) for _, action in log["steps"]] == list(itertools.product(range(2), range(3)))


def test_a_discrete_action_space_starting_at_zero_is_used_as_it_is():
    assert action_layout(S.Discrete(4)) is None


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("space, named", [
    (S.Text(8), (r"observation space Text\(1, 8.*Text observations have no fixed-size vector form.*fix: .*"
                 r"FilterObservation")),
    (S.Graph(S.Box(0.0, 1.0, (2,)), S.Discrete(2)), r"observation space Graph\(.*Graph observations.*fix: "),
    (S.Dict({"image": S.Box(0, 255, (3, 3, 3), np.uint8), "mission": S.Text(5)}),
     r"observation space Dict\(.* at obs\['mission'\]: Text observations.*fix: drop or replace the Text entry"),
    (S.Sequence(S.Discrete(2)), r"observation space Sequence\(.*fix: "),
    (S.Discrete(100_000), r"100000 categories are more than the 65536.*fix: .*Box of values"),
], ids=["text", "graph", "dict-with-text", "sequence", "huge-discrete"])
def test_unsupported_observation_spaces_are_refused_with_the_space_and_a_fix(space, named):
    with pytest.raises(UnsupportedSpaceError, match=named):
        observation_layout(space)


@pytest.mark.parametrize("space, named", [
    (S.Box(-2.0, 2.0, (1,), np.float32), (r"action space Box\(-2\.0, 2\.0, \(1,\), float32\): R2D2 picks one of "
                                          r"finitely many actions .* continuous.*fix: .*DiscretizeAction")),
    (S.Tuple((S.Discrete(2), S.Discrete(2))), r"action space Tuple\(.*not Tuple; fix: an action wrapper"),
    (S.MultiDiscrete([1000, 1000]), r"flattened, it has 1000000 actions.*more than 65536; fix: "),
], ids=["box", "tuple", "too-many"])
def test_unsupported_action_spaces_are_refused_with_the_space_and_a_fix(space, named):
    with pytest.raises(UnsupportedSpaceError, match=named):
        action_layout(space)


def test_flat_codes_refuses_a_box_that_needs_no_codes():
    with pytest.raises(ValueError, match="needs no codes"):
        FlatCodes(LoggingEnv(S.Box(0.0, 1.0, (2,)), S.Discrete(2), {"obs": [], "steps": []}))


# ----------------------------------------------------------------------------- through the config
ENV_IDS = {"SpacesTestBoxActions-v0": (S.Discrete(3), S.Box(-1.0, 1.0, (2,), np.float32)),
           "SpacesTestTupleMultiDiscrete-v0": (S.Tuple((S.Discrete(3), S.MultiBinary(2))), S.MultiDiscrete([2, 3]))}


def make_test_env(env_id: str):
    obs_space, act_space = ENV_IDS[env_id]
    return LoggingEnv(obs_space, act_space, {"obs": [], "steps": []}, length=6)


for _env_id in ENV_IDS:
    if _env_id not in gym.envs.registry:
        gym.register(_env_id, entry_point=make_test_env, kwargs={"env_id": _env_id})


def write_config(tmp_path, env_id: str, extra: str = "", model: str = "{core_units: 8, head_units: 8, hidden: [8]}"):
    path = tmp_path / "c.yaml"
    path.write_text(f"env: {{id: {env_id}, num_envs: 2}}\nmodel: {model}\n"
                    "replay: {burn_in: 1, trace_length: 4, period: 2, n_step: 1}\nlearner: {batch_size: 4}\n"
                    "run: {total_env_steps: 120, warmup_steps: 40, eval_every: 60, eval_episodes: 2}\n"
                    "logging: {progress: false, tensorboard: false}\n" + extra)
    return path


def test_continuous_actions_are_a_config_error_naming_the_env_space_and_fix(tmp_path, capsys):
    from r2d2kit.train import main

    assert main([str(write_config(tmp_path, "SpacesTestBoxActions-v0")), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert ("config error: env.id 'SpacesTestBoxActions-v0' for agent 'r2d2': action space Box(-1.0, 1.0, (2,), "
            "float32): R2D2 picks one of finitely many actions") in err
    assert "fix: train recurrent SAC on it (agent: sac), or discretise the actions with a wrapper listed in" in err
    assert not (tmp_path / "run").exists()  # refused before a run directory is made


@pytest.mark.slow
def test_a_tuple_observation_multidiscrete_action_env_trains_and_evaluates(tmp_path):
    from r2d2kit.evaluate import evaluate_run
    from r2d2kit.training.config import load_config
    from r2d2kit.training.trainer import Trainer

    trainer = Trainer(load_config(write_config(tmp_path, "SpacesTestTupleMultiDiscrete-v0")), tmp_path / "run")
    assert trainer.agent.network.obs_shape == (3,) and trainer.agent.network.obs_dtype == "uint8"  # 1 code + 2 bits
    assert trainer.agent.network.num_actions == 6
    summary = trainer.fit()
    assert summary["env_steps"] == 120 and summary["updates"] > 0 and summary["final_eval"] is not None
    result = evaluate_run(tmp_path / "run", episodes=2)
    assert len(result["returns"]) == 2


@pytest.mark.parametrize("model, named", [
    ("{encoder: dqn}", r"model\.encoder 'dqn' is a convolutional encoder for images, but env\.id "
                       r"'SpacesTestTupleMultiDiscrete-v0' observes Tuple\(Discrete\(3\), MultiBinary\(2\)\), "
                       r"which the "
                       r"network gets as a vector of 5 entries .*; use model\.encoder: mlp"),
    ("{input_scale: [1.0, 2.0]}", r"model\.input_scale has 2 entries, but .* vector of 5 entries .*give one number, "
                                  r"or 5 \(one per network input"),
], ids=["conv-encoder", "input-scale-length"])
def test_a_model_that_cannot_read_the_encoded_observation_is_a_config_error(tmp_path, model, named):
    from r2d2kit.agent.r2d2.builder import build_q_network
    from r2d2kit.training.builders import observation_layout
    from r2d2kit.training.config import ConfigError, load_config

    config = load_config(write_config(tmp_path, "SpacesTestTupleMultiDiscrete-v0", model=model))
    for build in (observation_layout, build_q_network):
        with pytest.raises(ConfigError, match=named):
            build(config)


def test_an_input_scale_with_one_entry_per_encoded_input_builds(tmp_path):
    from r2d2kit.agent.r2d2.builder import build_q_network
    from r2d2kit.training.config import load_config

    scale = [1.0, 2.0, 3.0, 10.0, 20.0]  # one-hot(3) of the Discrete, then the 2 bits
    config = load_config(write_config(tmp_path, "SpacesTestTupleMultiDiscrete-v0", model=f"{{input_scale: {scale}}}"))
    network = build_q_network(config)
    layer = network.encoder.get_layer("code_encoding")
    encoded = np.asarray(layer(np.array([[2, 1, 0]], np.uint8)))
    np.testing.assert_array_equal(encoded, [[0, 0, 1, 1, 0]])
