"""Write docs/api.md from the docstrings of r2d2kit's public names: ``python docs/build_api.py``.

tests/test_docs.py checks that the committed docs/api.md equals what this script writes, so the
reference cannot drift from the code.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

MODULES = ["r2d2kit", "r2d2kit.replay", "r2d2kit.rescale", "r2d2kit.targets", "r2d2kit.models",
           "r2d2kit.learner", "r2d2kit.policies", "r2d2kit.runners", "r2d2kit.runners.processes",
           "r2d2kit.runners.shm", "r2d2kit.trainer", "r2d2kit.callbacks", "r2d2kit.checkpoint", "r2d2kit.builders",
           "r2d2kit.config", "r2d2kit.envs"]
PUBLIC_OBJECTS = {  # modules without __all__: the names users import from them
    "r2d2kit.rescale": ["value_rescale", "inverse_value_rescale", "tf_value_rescale", "tf_inverse_value_rescale"],
    "r2d2kit.targets": ["nstep_targets", "tf_nstep_targets"],
    "r2d2kit.learner": ["R2D2Config", "R2D2Learner", "tf_sequence_priorities"],
    "r2d2kit.policies": ["greedy", "epsilon_greedy", "apex_epsilons", "boltzmann"],
    "r2d2kit.config": ["TrainConfig", "EnvConfig", "ModelConfig", "ReplayConfig", "ActorsConfig", "RunConfig",
                       "LoggingConfig", "CheckpointConfig", "ConfigError", "load_config", "build_config",
                       "apply_overrides", "save_config"],
    "r2d2kit.runners.processes": ["ProcessActors", "train_processes", "ProcessRunConfig", "ProcessRunResult"],
    "r2d2kit.runners.shm": ["WeightBroadcast", "RecordRing", "window_layout"],
    "r2d2kit.trainer": ["Trainer"],
    "r2d2kit.callbacks": ["Callback", "CallbackList"],
    "r2d2kit.checkpoint": ["save_checkpoint", "restore_learner", "verify_checkpoint", "latest_checkpoint",
                           "list_checkpoints", "CheckpointError"],
    "r2d2kit.builders": ["make_env", "build_network", "build_encoder", "env_spaces"],
}


def public_names(module) -> list[str]:
    return list(getattr(module, "__all__", None) or PUBLIC_OBJECTS[module.__name__])


def signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def render() -> str:
    lines = ["# API reference", "", "Generated from the docstrings by `python docs/build_api.py`; do not edit by hand.", ""]
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        lines += [f"## `{module_name}`", "", inspect.cleandoc(module.__doc__ or "").split("\n\n")[0], ""]
        for name in public_names(module):
            if name.startswith("__"):
                continue
            obj = getattr(module, name)
            kind = "class" if inspect.isclass(obj) else "function"
            lines += [f"### `{name}{signature(obj)}`", "", f"*{kind}*", "", inspect.cleandoc(obj.__doc__ or ""), ""]
            if inspect.isclass(obj):
                for member_name, member in sorted(vars(obj).items()):
                    if member_name.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                        continue
                    target = member.fget if isinstance(member, property) else member
                    shown = member_name if isinstance(member, property) else f"{member_name}{signature(member)}"
                    summary = inspect.cleandoc(target.__doc__ or "").split("\n\n")[0]
                    lines += [f"- `{shown}`: {summary}"]
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    Path(__file__).with_name("api.md").write_text(render())
    print("wrote docs/api.md")
