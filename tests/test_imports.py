"""Buffer users and actor processes must not pay for a TensorFlow import they don't need."""

import subprocess
import sys
from pathlib import Path


def test_replay_import_does_not_import_tensorflow():
    code = (
        "import sys, r2d2kit, r2d2kit.replay\n"
        "from r2d2kit.replay import ReplayBuffer\n"
        "b = ReplayBuffer(8, {'x': ((), 'float32')}, 'proportional', seed=0)\n"
        "b.add(x=1.0); b.sample(2)\n"
        "print('tensorflow' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_reading_a_config_and_the_train_help_import_no_tensorflow():
    """load_config, ``python -m r2d2kit.train --help`` and the config reference need no TensorFlow."""
    code = (
        "import sys, contextlib, io\n"
        "from r2d2kit.training.config import load_config\n"
        "config = load_config('configs/cartpole_pomdp.yaml', ['learner.batch_size=32'])\n"
        "from r2d2kit.train import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert 'usage: python -m r2d2kit.train' in out.getvalue()\n"
        "import r2d2kit.replay, r2d2kit.runners, r2d2kit.training, r2d2kit.agent\n"
        "print(config.learner.batch_size, 'tensorflow' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert result.stdout.strip() == "32 False"


def test_public_names_are_exported():
    import r2d2kit
    import r2d2kit.replay as replay

    assert {"SumTree", "MinTree"} <= set(r2d2kit.__all__)
    for name in replay.__all__:
        assert getattr(replay, name).__doc__, f"r2d2kit.replay.{name} has no docstring"
