"""Issue-5 diagnostic: the same benchmark on CartPole-v1 with its velocities observed.

    python benchmarks/experiments/full_observation.py --without recurrent-ppo --seed 0 --stop-on-miss \
        --set env.id=CartPole-v1 --set "model.input_scale=[2.0, 1.0, 20.0, 1.0]" ...

Runs ``bench_r2d2_cartpole.py`` unchanged except that training and evaluation use ``CartPole-v1``
(cart position, cart velocity, pole angle, pole velocity). The question it answers: is the hold
missed because the cart's slow drift is hard to read from positions alone (a cart at 0.1-0.5 m/s
moves 0.002-0.01 m a step), or because of the learning dynamics, which this leaves as they are?

A diagnostic, not a benchmark of the issue's task: the env is not the partially observed one.
"""

import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH_DIR), str(BENCH_DIR.parent)]  # the benchmark and the checkout it measures

import bench_r2d2_cartpole as bench

bench.ENV_ID = os.environ.get("FULL_ENV_ID", "CartPole-v1")

if __name__ == "__main__":
    print(f"diagnostic env: {bench.ENV_ID}", flush=True)
    bench.main(sys.argv[1:])
