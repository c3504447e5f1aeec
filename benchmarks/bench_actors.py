"""Actors: time per vector step by part, env steps/s for 1 and 2 actor processes, weight-broadcast latency.

    python benchmarks/bench_actors.py --quick      # smoke run: about 2 minutes (full: about 6)
    python benchmarks/bench_actors.py --only step --backends keras,numpy
    KERAS_BACKEND=jax python benchmarks/bench_actors.py --only step    # the Keras step compiled by jax.jit
    python benchmarks/bench_actors.py --only broadcast --reps 500 --mb 40 --markdown
    python benchmarks/bench_actors.py --only actors --train --actors 1,2,4,8,12 --steps 20000 --rounds 1

Method: benchmarks/README.md.
"""

import functools
import gc
import os
import time
import zlib
from pathlib import Path

import harness
import numpy as np
from harness import REPO_ROOT, cores, load_average, table

CONFIG = REPO_ROOT / "configs" / "cartpole_pomdp.yaml"
FULL = dict(actor_counts=(1, 2), rounds=2, steps=30_000, reps=200, warmup=5, mb=10.0, vector_steps=3_000)
QUICK = dict(actor_counts=(1, 2), rounds=1, steps=6_000, reps=25, warmup=2, mb=10.0, vector_steps=500)
PARTS = ("step", "actors", "broadcast")
BACKENDS = ("keras", "numpy")
DISTS = ("numpy", "tensorflow", "keras", "gymnasium", "r2d2kit")


# --- part 1: a vector step by part, in a spawned process set up like an actor process
def timed(obj, seconds: dict[str, list], *methods: str):
    """``obj``, its ``methods`` wrapped to append the seconds of each call to ``seconds[method]``."""
    def wrap(method, out: list):
        def call(*args, **kwargs):
            began = time.perf_counter()
            result = method(*args, **kwargs)
            out.append(time.perf_counter() - began)
            return result
        return call

    for name in methods:
        setattr(obj, name, wrap(getattr(obj, name), seconds.setdefault(name, [])))
    return obj


def step_profile(backend: str, vector_steps: int, config: Path) -> dict:
    """In a spawned process set up as an actor's: ``vector_steps`` timed ``ActingLoop.step`` calls by part."""
    from r2d2kit.runners.acting import limit_threads

    limit_threads(1)
    import gymnasium as gym
    import keras

    from r2d2kit.agent.r2d2.policies import EpsilonGreedyPolicy
    from r2d2kit.models.backend import compile_function
    from r2d2kit.models.cores import state_fields
    from r2d2kit.models.process_setup import setup_process
    from r2d2kit.replay import SequenceBuilder
    from r2d2kit.runners.acting import ActingLoop

    setup_process(threads=1)
    network, make_env, settings = actor_parts(backend, config)  # a spawned child: --config reaches it here
    num_envs, config = settings.env.num_envs, settings.replay.layout
    times: dict[str, list] = {}  # seconds per call of each timed method
    actor = timed(network.actor(num_envs, follow_weights=False), times, "q_values", "get_state", "reset")
    envs = timed(gym.vector.SyncVectorEnv([make_env] * num_envs), times, "step")
    builder = SequenceBuilder(num_envs, config.burn_in, config.trace_length, config.n_step, config.period,
                              state_names=tuple(state_fields(network.state_spec())))
    loop = ActingLoop(envs, EpsilonGreedyPolicy(actor, np.full(num_envs, 0.5), settings.run.seed), builder,
                      settings.run.seed)
    warmup = min(200, vector_steps)
    whole = np.empty(vector_steps)
    for i in range(warmup + vector_steps):
        if i == warmup:
            for seconds in times.values():
                seconds.clear()
        began = time.perf_counter()
        loop.step()
        if i >= warmup:
            whole[i - warmup] = time.perf_counter() - began
    envs.close()
    empty = compile_function(lambda: keras.ops.zeros(()), [])  # the backend's fixed cost of one compiled call
    a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
    weights = sum(int(np.prod(v.shape)) for v in network.variables)
    seconds = {name: np.asarray(values) for name, values in times.items()}
    # VmHWM, not ru_maxrss: a spawned process's ru_maxrss starts from its parent's peak
    return dict(backend=actor.backend, network=seconds["q_values"], env=seconds["step"],
                state=seconds["get_state"] + seconds["reset"], whole=whole,
                empty_compiled_call_s=harness.median_s(empty, 2000, warmup=50),
                sgemm_flops=2 * 512 ** 3 / harness.median_s(lambda: a @ a, 50, warmup=50),
                forward_flops=2 * num_envs * weights, rss_mb=harness.process_peak_rss_mb(os.getpid()))


def step_rows(setup: dict, cfg: dict, backends: tuple[str, ...]) -> list[dict]:
    """One spawned process per (backend, round), the backends in ABBA order."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    rows = []
    for round_ in range(1, cfg["rounds"] + 1):
        for backend in (backends if round_ % 2 else backends[::-1]):
            with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
                out = pool.submit(step_profile, backend, cfg["vector_steps"], CONFIG).result()
            if out["backend"] != backend:
                raise RuntimeError(f"asked for the {backend} actor, got {out['backend']}")
            rows.append(dict(out, round=round_, envs=setup["envs"], load=load_average()))
    return sorted(rows, key=lambda r: (r["round"], backends.index(r["backend"])))


# --- part 2: actor throughput (the Trainer with an idle learner)
def actor_parts(backend: str = "auto", config: Path | None = None) -> tuple:
    """(Q-network with actors on ``backend``, env factory, settings) of ``config`` (default ``CONFIG``), as the
    Trainer builds them."""
    from r2d2kit.agent.r2d2.builder import build_q_network
    from r2d2kit.training.builders import make_env
    from r2d2kit.training.config import load_config

    settings = load_config(config or CONFIG)
    network = build_q_network(settings)
    if backend != "auto":
        network.actor = functools.partial(network.actor, backend=backend)  # this instance only
    return network, functools.partial(make_env, settings), settings


def actor_setup() -> dict:
    """What the printed headers say of the config; imports TensorFlow here, before any timed run."""
    network, _, settings = actor_parts()
    model = settings.model
    return dict(env_id=settings.env.id, envs=settings.env.num_envs,
                weights=sum(int(np.prod(v.shape)) for v in network.variables),
                network=(f"MLP {list(model.hidden)}" if model.encoder == "mlp" else f"{model.encoder} encoder")
                + f" -> LSTM {model.core_units} -> dueling head {model.head_units}")


def spawned_children_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each spawned child of this process (not the resource tracker), from /proc."""
    out: dict[int, float] = {}
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
            if int(fields[1]) == me and b"spawn_main" in (entry / "cmdline").read_bytes():
                out[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        except (OSError, ValueError, IndexError):  # the process ended meanwhile
            continue
    return out


def rate(first: tuple, last: tuple) -> float:
    """Env steps per second between two ``(time, env_steps)`` marks."""
    (t0, s0), (t1, s1) = first, last
    return (s1 - s0) / (t1 - t0) if t1 > t0 else float("nan")


def run_actors(num_actors: int, envs_per_actor: int, steps: int, runner: str = "processes",
               train: bool = False) -> dict:
    """One Trainer run, learner idle (``train``: training), on ``runner``'s actors: env steps/s, CPU shares, RSS."""
    from r2d2kit.runners.callbacks import Callback

    marks: list[tuple[float, int]] = []  # (perf_counter, env steps) each time the count changes
    cpu: dict[str, tuple] = {}  # (time, own CPU s, CPU s per spawned child, env steps) at steps / 2 and steps
    rss: list[float] = []  # peak RSS of each actor process, MB

    class Progress(Callback):
        def on_step(self, trainer) -> None:
            env_steps = trainer.counters["env_steps"]
            if env_steps > 0 and (not marks or marks[-1][1] != env_steps):
                marks.append((time.perf_counter(), env_steps))
                for name, threshold in (("half", steps / 2), ("end", steps)):
                    if name not in cpu and env_steps >= threshold:
                        cpu[name] = (time.perf_counter(), time.process_time(), spawned_children_cpu(), env_steps)
                        if name == "end":  # the actors are still alive here: read their peak RSS
                            rss.extend(harness.process_peak_rss_mb(pid) for pid in cpu[name][2])

    load_before, started = load_average(), time.perf_counter()
    trainer, summary, _ = harness.fit(CONFIG, [  # no evaluation; without train, the learner only drains the actors
        *([] if train else ["run.updates_per_env_step=0"]), "run.eval_every=0", f"actors.runner={runner}",
        f"actors.num_actors={num_actors}", f"env.num_envs={envs_per_actor}", f"run.total_env_steps={steps}",
        f"actors.ray_num_cpus={os.cpu_count()}"], [Progress()])
    ended = time.perf_counter()
    if len(marks) < 2 or "half" not in cpu or "end" not in cpu:
        raise RuntimeError(f"only {len(marks)} progress report(s) with env steps; raise the budget")
    (t0, own0, kids0, s0), (t1, own1, kids1, s1) = cpu["half"], cpu["end"]
    actor_cpu = [(kids1[pid] - kids0[pid]) / (t1 - t0) for pid in kids0.keys() & kids1.keys()] if t1 > t0 else []
    return dict(runner=runner, backend="auto", actors=num_actors, envs=num_actors * envs_per_actor,
                env_steps=summary["env_steps"], actor_rss_mb=float(np.nanmax(rss)) if rss else float("nan"),
                windows=sum(trainer.actors.windows_per_actor.values()), startup_s=marks[0][0] - started,
                stepping_s=marks[-1][0] - marks[0][0], shutdown_s=ended - marks[-1][0], load_before=load_before,
                steps_per_s=rate(marks[0], marks[-1]), last_half_steps_per_s=rate((t0, s0), (t1, s1)),
                updates_per_s=summary["updates"] / (marks[-1][0] - marks[0][0]), load_after=load_average(),
                learner_cpu=(own1 - own0) / (t1 - t0) if t1 > t0 else float("nan"),
                actor_cpu=float(np.mean(actor_cpu)) if actor_cpu else float("nan"))


def actor_rows(setup: dict, cfg: dict) -> list[dict]:
    """``rounds`` rounds of one run per actor count, in ABBA order so drift hits every run alike."""
    rows = []
    for round_ in range(1, cfg["rounds"] + 1):
        for num_actors in (cfg["actor_counts"] if round_ % 2 else cfg["actor_counts"][::-1]):
            try:
                rows.append(dict(run_actors(num_actors, setup["envs"], cfg["steps"], train=cfg["train"]),
                                 round=round_))
            except Exception as error:  # noqa: BLE001  (report, go on with the other part)
                rows.append(dict(backend="auto", actors=num_actors, round=round_,
                                 error=f"{type(error).__name__}: {error}"))
            gc.collect()
    return sorted(rows, key=lambda r: (r["round"], r["actors"]))


def steps_per_actor_cpu_second(row: dict) -> float:
    """2nd-half env steps/s over the actors' CPU: what the actors make of the CPU they got."""
    return row["last_half_steps_per_s"] / (row["actor_cpu"] * row["actors"])


# --- part 3: weight-broadcast latency, shared memory against a multiprocessing Queue. Per message, in int64 slots
# of a RawArray: the publisher writes KIND and bumps COMMAND; the reader sets ARMED and waits on that transport;
# 1 ms later the publisher sends; the reader, holding a full copy, writes its clock to T_DONE, then DONE (the
# ack); then, untimed, it CRC-32s its copy into CRC and sets VERIFIED.

PING, SHM, QUEUE, STOP = 0, 1, 2, 3
KIND_NAMES = {PING: "ack channel alone", SHM: "shared memory", QUEUE: "mp.Queue"}
COMMAND, KIND, ARMED, DONE, T_DONE, VERIFIED, CRC, VERSION, PING_VALUE = range(9)
SLOTS = 16
SETTLE_S = 0.001  # publisher's pause between ARMED and the send: the reader is waiting by then
PUBLISHER_POLL_S = 20e-6  # publisher's sleep while waiting for the ack (Linux rounds it up to ~60-80 us)
TIMEOUT_S = 60.0


def broadcast_reader(control, broadcast_name: str, size: int, messages) -> None:
    """Reader process: wait for each message on the transport the publisher names, ack, verify."""
    from r2d2kit.runners.shm import WeightBroadcast

    broadcast = WeightBroadcast.attach(broadcast_name, size)  # as an actor attaches
    slots = np.frombuffer(control, dtype=np.int64)  # [SLOTS]
    handled, version = 0, 0
    try:
        while True:
            command = int(slots[COMMAND])
            if command == handled:
                time.sleep(0.0001)  # idle between messages
                continue
            kind, handled = int(slots[KIND]), command
            if kind == STOP:
                break
            slots[ARMED] = command
            copy = None
            if kind == PING:
                while int(slots[PING_VALUE]) != command:
                    time.sleep(0)  # yield, then poll again
            elif kind == SHM:
                while (latest := broadcast.read(newer_than=version)) is None:
                    time.sleep(0)
                version, copy = latest
            else:
                copy = messages.get(timeout=TIMEOUT_S)
            slots[T_DONE] = time.perf_counter_ns()
            slots[DONE] = command  # the ack: after T_DONE (x86 keeps stores in order)
            slots[CRC] = zlib.crc32(copy) if copy is not None else 0
            slots[VERSION] = version if kind == SHM else 0
            slots[VERIFIED] = command
    finally:
        broadcast.close()


def wait_slot(slots: np.ndarray, slot: int, value: int, reader, poll_s: float) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while int(slots[slot]) != value:
        if not reader.is_alive():
            raise RuntimeError(f"the reader process died (exit code {reader.exitcode})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"reader did not set control slot {slot} to {value} within {TIMEOUT_S:.0f} s")
        time.sleep(poll_s)


def measure_broadcast(size: int, reps: int, warmup: int) -> dict:
    """Interleaved rounds of (ack alone, shared memory, Queue); per-message timings in ns."""
    import multiprocessing as mp

    from r2d2kit.runners.shm import WeightBroadcast

    context = mp.get_context("spawn")
    base = np.random.default_rng(0).standard_normal(size, dtype=np.float32)  # [size]
    samples = {kind: dict(one_way=[], round_trip=[], blocked=[], verified=0, checked=0) for kind in KIND_NAMES}
    control = context.RawArray("q", SLOTS)  # the control block: int64 slots in shared memory, zeroed
    slots = np.frombuffer(control, dtype=np.int64)  # [SLOTS]
    with WeightBroadcast.create(size) as broadcast:
        messages = context.Queue()
        reader = context.Process(target=broadcast_reader, args=(control, broadcast.name, size, messages),
                                 daemon=True, name="bench-broadcast-reader")  # daemon: reaped if we are killed
        reader.start()
        command = 0
        try:
            for rep in range(warmup + reps):
                for kind in (PING, SHM, QUEUE) if rep % 2 == 0 else (QUEUE, SHM, PING):  # alternate: drift hits all
                    command += 1
                    if kind != PING:
                        payload = base + np.float32(command)  # [size]: distinct contents for every message
                        expected = zlib.crc32(payload)
                    slots[KIND], slots[COMMAND] = kind, command  # in this order: the reader polls COMMAND
                    wait_slot(slots, ARMED, command, reader, PUBLISHER_POLL_S)
                    time.sleep(SETTLE_S)
                    t0 = time.perf_counter_ns()
                    if kind == PING:
                        slots[PING_VALUE] = command
                    elif kind == SHM:
                        published = broadcast.publish(payload)
                    else:
                        messages.put(payload)
                    t_returned = time.perf_counter_ns()
                    wait_slot(slots, DONE, command, reader, PUBLISHER_POLL_S)
                    t_ack = time.perf_counter_ns()
                    wait_slot(slots, VERIFIED, command, reader, 0.0005)
                    if rep < warmup:
                        continue
                    entry = samples[kind]
                    entry["one_way"].append(int(slots[T_DONE]) - t0)
                    entry["round_trip"].append(t_ack - t0)
                    entry["blocked"].append(t_returned - t0)
                    if kind != PING:
                        entry["checked"] += 1
                        same_version = kind != SHM or int(slots[VERSION]) == published
                        entry["verified"] += int(int(slots[CRC]) == expected and same_version)
        finally:
            # stop the reader on every path (it polls COMMAND), then reap it before unlinking
            slots[KIND], slots[COMMAND] = STOP, command + 1
            reader.join(timeout=10)
            if reader.is_alive():
                reader.terminate()
                reader.join(timeout=5)
            messages.close()
            messages.join_thread()
    summary = {}
    for kind, entry in samples.items():
        row = dict(n=len(entry["one_way"]), verified=entry["verified"], checked=entry["checked"])
        for key in ("one_way", "round_trip", "blocked"):
            values = np.asarray(entry[key], dtype=np.float64) / 1e9
            row[key] = (float(np.median(values)), float(np.percentile(values, 90))) if values.size else None
        summary[KIND_NAMES[kind]] = row
    return dict(rows=summary, left_behind=[name for name in [broadcast.name] if Path("/dev/shm", name).exists()])


# --- printing
def fmt_seconds(seconds: float) -> str:
    if seconds >= 0.1:
        return f"{seconds * 1e3:,.0f} ms"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def ratio_line(rows: list[dict], key: str, reduce=np.mean) -> str:
    """keras / numpy of ``reduce(row[key])`` per round, as "a.aax (round 1), b.bbx (round 2)"."""
    parts = []
    for round_ in sorted({r["round"] for r in rows}):
        pair = {r["backend"]: float(reduce(r[key])) for r in rows if r["round"] == round_}
        if len(pair) == 2:
            parts.append(f"{pair['keras'] / pair['numpy']:.2f}x (round {round_})")
    return ", ".join(parts) or "n/a"


def print_step_part(srows: list[dict], setup: dict, cfg: dict, markdown: bool) -> None:
    print(f"\nVector step by part: {setup['env_id']}, {setup['envs']} envs, Q-network of "
          f"{os.path.relpath(CONFIG)}: {setup['network']} ({setup['weights']:,} weights); ActingLoop, epsilon 0.5; "
          f"{cfg['vector_steps']:,} timed vector steps (after 200) per run, each run in a spawned process with "
          f"1 TF thread (as an actor process), {cfg['rounds']} round(s), backends in ABBA order\n")
    header = ["backend", "round", "envs", "network call: median", "mean", "p90", "state work (get_state + reset)",
              "env step", "vector step: median", "mean", "env steps/s (1 / mean)", "peak RSS"]
    body = []
    for r in srows:
        mean = {key: fmt_seconds(float(np.mean(r[key]))) for key in ("network", "state", "env", "whole")}
        body.append([r["backend"], str(r["round"]), str(r["envs"]), fmt_seconds(float(np.median(r["network"]))),
                     mean["network"], fmt_seconds(float(np.percentile(r["network"], 90))), mean["state"], mean["env"],
                     fmt_seconds(float(np.median(r["whole"]))), mean["whole"],
                     f"{r['envs'] / float(np.mean(r['whole'])):,.0f}", f"{r['rss_mb']:,.0f} MB"])
    print(table(header, body, markdown, left=2) + "\n")
    floor = srows[0]
    print(f"- floors: an empty compiled call ({os.environ.get('KERAS_BACKEND', 'tensorflow')}) costs "
          f"{fmt_seconds(floor['empty_compiled_call_s'])} here (no compiled Keras call can cost less); the forward's "
          f"arithmetic ({floor['forward_flops'] / 1e3:,.0f} kFLOP) at numpy's "
          f"sgemm rate here ({floor['sgemm_flops'] / 1e9:.0f} GFLOP/s, 512x512) takes "
          f"{fmt_seconds(floor['forward_flops'] / floor['sgemm_flops'])}: the rest of a call is per-operation overhead")
    if len({r["backend"] for r in srows}) == 2:
        print(f"- keras / numpy, network call (mean): {ratio_line(srows, 'network')}; (median): "
              f"{ratio_line(srows, 'network', np.median)}; whole vector step (mean): {ratio_line(srows, 'whole')}")
    print("- peak RSS: VmHWM of the spawned process; load average after each run: "
          + ", ".join(f"{r['backend']} r{r['round']} {r['load']:.2f}" for r in srows))


def print_actor_part(rows: list[dict], setup: dict, cfg: dict, markdown: bool) -> None:
    learner = ("learner training at the config's run.updates_per_env_step" if cfg["train"] else
               "learner idle (updates_per_env_step=0: it only drains the rings into replay)")
    print(f"\nActor throughput: {setup['env_id']}, {setup['envs']} envs per actor, {cfg['steps']:,} env steps per "
          f"run, {cfg['rounds']} round(s); {learner}; Q-network of {os.path.relpath(CONFIG)}: {setup['network']}, "
          f"{setup['weights']:,} float32 weights ({setup['weights'] * 4 / 1e3:.0f} kB per broadcast)\n", flush=True)
    header = ["actor processes", "backend", "round", "envs", "env steps", "start-up", "steps/s (first report -> end)",
              "steps/s (2nd half)", "per actor", "vs 1 actor (same round)", "CPU: learner", "CPU: each actor",
              "steps per actor CPU-s", "actor peak RSS", "updates/s"]
    base = {r["round"]: r["last_half_steps_per_s"] for r in rows if r["actors"] == 1 and "error" not in r}
    body = []
    for r in rows:
        if "error" in r:
            body.append([str(r["actors"]), r["backend"], str(r["round"]), "-", "-", "-", "failed"] + ["-"] * 8)
            continue
        steady, per_cpu = r["last_half_steps_per_s"], steps_per_actor_cpu_second(r)
        body.append([str(r["actors"]), r["backend"], str(r["round"]), str(r["envs"]), f"{r['env_steps']:,}",
                     f"{r['startup_s']:.1f} s", f"{r['steps_per_s']:,.0f}", f"{steady:,.0f}",
                     f"{steady / r['actors']:,.0f}", f"{steady / base[r['round']]:.2f}x" if r["round"] in base else "-",
                     *("n/a" if np.isnan(cpu) else f"{100 * cpu:.0f}%" for cpu in (r["learner_cpu"], r["actor_cpu"])),
                     "n/a" if np.isnan(per_cpu) else f"{per_cpu:,.0f}", f"{r['actor_rss_mb']:,.0f} MB",
                     f"{r['updates_per_s']:.1f}"])
    print(table(header, body, markdown, left=3) + "\n")
    for r in rows:
        print(f"- {r['actors']} actor(s), {r['backend']}, round {r['round']}: " + (
            f"failed: {r['error']}" if "error" in r else
            f"start-up {r['startup_s']:.1f} s (until the first env steps reported), stepping {r['stepping_s']:.1f} s, "
            f"shutdown {r['shutdown_s']:.1f} s; {r['windows']:,} windows drained; load average "
            f"{r['load_before']:.2f} -> {r['load_after']:.2f}"))
    ok = [r for r in rows if "error" not in r]
    best = {n: max((r for r in ok if r["actors"] == n), key=lambda r: r["last_half_steps_per_s"], default=None)
            for n in (1, 2)}
    if best[1] and best[2]:
        overall = [max(r["steps_per_s"] for r in ok if r["actors"] == n) for n in (2, 1)]
        per_cpu = steps_per_actor_cpu_second(best[2]) / steps_per_actor_cpu_second(best[1])
        print(f"- auto: scaling, 2 actors / 1 actor, best round of each: "
              f"{best[2]['last_half_steps_per_s'] / best[1]['last_half_steps_per_s']:.2f}x (2nd half), "
              f"{overall[0] / overall[1]:.2f}x (first report -> end); steps per actor CPU-second, 2 actors / 1 "
              f"actor (same runs): {per_cpu:.2f}x")
    print(f"- CPU: CPU s / wall s over the 2nd half, a share of one core; {cores()} cores here, shared by "
          f"{max(cfg['actor_counts'])} actors, the learner and any other work (benchmarks/README.md)")


def print_broadcast_part(measured: dict, size: int, cfg: dict, markdown: bool) -> None:
    summary = measured["rows"]
    print(f"\nWeight broadcast: {size * 4 / 1e6:.1f} MB ({size:,} float32), publisher here, one spawned reader; "
          f"{cfg['reps']} messages per transport (after {cfg['warmup']} warm-up rounds), transports interleaved\n")
    header = ["transport", "latency median", "p90", "round trip (ack seen) median", "p90",
              "publisher blocked median", "copies = published (CRC-32)"]
    body = [[name, *(fmt_seconds(row[k][i]) for k in ("one_way", "round_trip") for i in (0, 1)),
             fmt_seconds(row["blocked"][0]), "-" if name == KIND_NAMES[PING] else f"{row['verified']}/{row['checked']}"]
            for name, row in summary.items()]
    print(table(header, body, markdown) + "\n")
    shm, que, ack = (summary[KIND_NAMES[kind]] for kind in (SHM, QUEUE, PING))
    if shm["one_way"] and que["one_way"]:
        print(f"- Queue / shared memory latency: {que['one_way'][0] / shm['one_way'][0]:.2f}x (medians), "
              f"{que['one_way'][1] / shm['one_way'][1]:.2f}x (p90)")
    print("- latency: publish() / put() called -> the reader holds a full copy, on the reader's clock "
          f"({time.get_clock_info('perf_counter').implementation}, shared by all processes)")
    print(f"- the ack channel (one int64 in shared memory) costs {fmt_seconds(ack['one_way'][0])} one way "
          f"(median); the round-trip column adds it and the publisher's polling ({PUBLISHER_POLL_S * 1e6:.0f} "
          f"us sleeps): {fmt_seconds(ack['round_trip'][0])} with no payload")
    checks = [f"{name} {row['verified']}/{row['checked']}" for name, row in summary.items() if row["checked"]]
    print(f"- every copy compared by CRC-32 (and version) with what was published: {', '.join(checks)}")
    print(f"- shared memory left in /dev/shm by this part: {measured['left_behind'] or 'none'}")


def main(argv: list[str] | None = None) -> dict:
    global CONFIG
    parser = harness.arg_parser(__doc__, "quick", "markdown", "json")
    parser.add_argument("--only", choices=PARTS, default=None, help="one part (default: all)")
    parser.add_argument("--backends", type=harness.comma_list(BACKENDS), default=BACKENDS,
                        help=f"actor backends of the step part, comma-separated, of {BACKENDS} (default: both)")
    parser.add_argument("--reps", type=int, default=None, help="broadcasts timed per transport")
    parser.add_argument("--mb", type=float, default=None, help="broadcast size in MB (10^6 bytes; default 10)")
    parser.add_argument("--config", type=Path, default=CONFIG, help="the config whose env and network the actors "
                        "run (default configs/cartpole_pomdp.yaml)")
    parser.add_argument("--actors", type=harness.comma_list(cast=int), default=None,
                        help="actors part: the actor-process counts, comma-separated (default 1,2)")
    parser.add_argument("--steps", type=int, default=None, help="actors part: env steps per run")
    parser.add_argument("--rounds", type=int, default=None, help="actors part: rounds of one run per actor count")
    parser.add_argument("--train", action="store_true", help="actors part: the learner trains at the config's "
                        "run.updates_per_env_step (end to end) instead of only draining the rings")
    args = parser.parse_args(argv)
    CONFIG = args.config.resolve()
    cfg = dict(QUICK if args.quick else FULL, train=args.train)
    cfg.update({key: value for key, value in dict(reps=args.reps, mb=args.mb, steps=args.steps, rounds=args.rounds,
                                                  actor_counts=args.actors).items() if value is not None})
    if min(cfg["actor_counts"]) < 1 or cfg["steps"] < 1 or cfg["rounds"] < 1:
        parser.error(f"--actors, --steps and --rounds must be positive; got {cfg['actor_counts']}, "
                     f"{cfg['steps']} and {cfg['rounds']}")
    size = int(cfg["mb"] * 1e6) // 4  # float32 values

    started, load_start = harness.start(DISTS)
    results: dict = dict(machine=harness.machine_line(DISTS), config=cfg)
    setup = actor_setup() if args.only in (None, "step", "actors") else None
    if args.only in (None, "step"):
        srows = step_rows(setup, cfg, tuple(args.backends))
        results["step"] = [{k: dict(mean=float(np.mean(v)), median=float(np.median(v))) if isinstance(v, np.ndarray)
                            else v for k, v in r.items()} for r in srows]
        print_step_part(srows, setup, cfg, args.markdown)
    if args.only in (None, "actors"):
        results["actors"] = actor_rows(setup, cfg)
        print_actor_part(results["actors"], setup, cfg, args.markdown)
    if args.only in (None, "broadcast"):
        results["broadcast"] = dict(measure_broadcast(size, cfg["reps"], cfg["warmup"]), size_values=size)
        print_broadcast_part(results["broadcast"], size, cfg, args.markdown)
    print(harness.load_footer(started, load_start))
    harness.write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
