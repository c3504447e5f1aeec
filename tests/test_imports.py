"""Buffer users and actor processes must not pay for a TensorFlow import they don't need."""

import subprocess
import sys


def test_replay_import_does_not_import_tensorflow():
    code = (
        "import sys, r2d2kit, r2d2kit.replay\n"
        "from r2d2kit.replay import PrioritizedReplayBuffer\n"
        "b = PrioritizedReplayBuffer(8, {'x': ((), 'float32')}, seed=0)\n"
        "b.add(x=1.0); b.sample(2)\n"
        "print('tensorflow' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_public_names_are_exported():
    import r2d2kit
    import r2d2kit.replay as replay

    assert {"SumTree", "MinTree"} <= set(r2d2kit.__all__)
    for name in replay.__all__:
        assert getattr(replay, name).__doc__, f"r2d2kit.replay.{name} has no docstring"
