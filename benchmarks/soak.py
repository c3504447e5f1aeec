"""Training under chaos for a given time: what a long run on a flaky machine loses, and what it leaks.

    python benchmarks/soak.py --minutes 60                          # actor processes (the lead's long run)
    python benchmarks/soak.py --minutes 20 --runner ray
    python benchmarks/soak.py --minutes 0.7 --learner-kill-at 0 --kill-every 8 12   # the test suite's short run
    python benchmarks/soak.py --minutes 10 --disk-full --json soak.json
    python benchmarks/soak.py --minutes 10 --config sac/pendulum_novel --keep   # recurrent SAC's pools

Runs ``python -m r2d2kit.train configs/cue_memory.yaml`` (or ``--config``; 2 actors, ``--runner``) and, for
``--minutes`` of chaos counted from the run's first logged interval (1,000 env steps):

* SIGKILLs a random actor every 15-40 s (``--kill-every``), as the OOM killer or a preempted node would,
  but none in the chaos' last ``QUIET_S`` seconds: a kill there could not be noticed and restarted
  (the restart waits out its back-off) before the SIGTERM, and would read as uncounted;
* SIGKILLs the learner once (at ``--learner-kill-at`` of the time; 0: never), waits for its actors to
  leave, and continues the run with ``--resume``;
* with ``--disk-full``, fills the disk during one checkpoint (a simulated ENOSPC: the learner runs
  through this script, which makes ``numpy.savez`` fail while a flag file exists); the run must stop
  with exit status 5 and the named error, and is resumed once the "space" is freed;
* sends SIGTERM to the learner's process group at the end (as ``timeout`` does) and expects exit 0.

Every ``--sample-every`` seconds it samples RSS, open file descriptors and threads of every process
of the run (the learner, its actors, Ray's processes) and the run's ``/dev/shm`` segments. At the end
it checks what was lost and left: unplanned stops, kills not counted as restarts, env steps lost to
the learner kill, torn windows dropped, checkpoints that do not verify, metrics that go back, segments
left in ``/dev/shm``, processes left running. Prints a table (second quarter against the last quarter
of the chaos) and the checks, writes ``--json``; exit status 1 if a check failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checks import r2d2kit (checkpoint verification) when run as a script
SHM = Path("/dev/shm")
SHM_PREFIX = "r2d2kit_"  # r2d2kit.runners.shm.PREFIX: names r2d2kit_<pid namespace>_<creator pid>_<token>
DISK_FLAG_VARIABLE = "R2D2KIT_SOAK_DISK_FULL_FLAG"
QUIET_S = 15.0  # no actor kill this close to the SIGTERM: the pool notices a death on its next poll


# --- /proc
def children_of() -> dict[int, list[int]]:
    """Parent pid -> child pids, for every process."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    tree, found, stack = children_of(), [], [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def sample_process(pid: int) -> dict[str, float] | None:
    """RSS (MB), threads, open file descriptors and mapped /dev/shm files (segments, semaphores) of one
    process; None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    shm = {line.split()[-1] for line in maps.splitlines() if " /dev/shm/" in line}
    return {"rss_mb": int(values.get("VmRSS", "0 kB").split()[0]) / 1024, "threads": int(values["Threads"]),
            "fds": fds, "shm_mapped": len(shm)}


def is_actor(pid: int, runner: str) -> bool:
    line = cmdline(pid)
    return "spawn_main" in line if runner == "processes" else line.startswith("ray::ActorBody")


def our_segments(creators: set[int]) -> list[str]:
    """The run's r2d2kit segments in /dev/shm: those whose creator pid is one of our learners."""
    found = []
    for name in os.listdir(SHM):
        match = re.fullmatch(rf"{SHM_PREFIX}\d+_(\d+)_[0-9a-f]{{12}}", name)
        if match and int(match.group(1)) in creators:
            found.append(name)
    return found


# --- the learner under a simulated full disk (--disk-full): numpy.savez fails while a flag file exists
def learner_with_disk_flag(argv: list[str]) -> int:
    """``python -m r2d2kit.train ARGV``, except that ``numpy.savez`` writes half a file and raises ENOSPC
    while the file named by ``$R2D2KIT_SOAK_DISK_FULL_FLAG`` exists."""
    import errno

    import numpy as np

    savez, flag = np.savez, Path(os.environ[DISK_FLAG_VARIABLE])

    def savez_on_a_full_disk(target, *args, **kwargs):
        if flag.exists():
            handle = open(target, "wb") if isinstance(target, (str, os.PathLike)) else target
            handle.write(b"PK\x03\x04")
            handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return savez(target, *args, **kwargs)

    np.savez = savez_on_a_full_disk
    from r2d2kit.train import main

    return main(argv)


# --- the soak
class Soak:
    """One soak: launches, disturbs, samples and checks a run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = Path(args.work_dir or tempfile.mkdtemp(prefix="r2d2kit-soak-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.run_dir = self.work / "run"
        self.disk_flag = self.work / "DISK_FULL"
        self.learners: list[subprocess.Popen] = []
        self.segments: list[dict] = []  # per learner: its kills, exit, log files
        self.seen: set[int] = set()  # every process of the run ever sampled
        self.samples: list[dict] = []
        self.events: list[dict] = []
        self.began = time.monotonic()
        self.chaos_start: float | None = None
        self._sampling = True
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ processes
    def launch(self, resume: bool) -> subprocess.Popen:
        a = self.args
        sets = [f"actors.runner={a.runner}", "actors.num_actors=2", "run.total_env_steps=1000000000",
                f"run.eval_every={a.eval_every}", "run.eval_episodes=8", "logging.progress=false",
                "logging.log_every=1000", f"checkpoints.every_env_steps={a.checkpoint_every}", "checkpoints.keep=2",
                "checkpoints.save_replay=true"]
        if a.runner == "ray":
            sets += ["actors.ray_num_cpus=2"]
        config = str(Path(a.config).resolve()) if Path(a.config).is_file() else a.config  # the learner runs in REPO
        target = ["--resume", str(self.run_dir)] if resume else [config, "--run-dir", str(self.run_dir)]
        argv = target + [item for s in sets for item in ("--set", s)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        if a.disk_full:
            command = [sys.executable, str(Path(__file__).resolve()), "--as-learner", *argv]
            env[DISK_FLAG_VARIABLE] = str(self.disk_flag)
        else:
            command = [sys.executable, "-m", "r2d2kit.train", *argv]
        number = len(self.learners)
        out = open(self.work / f"learner-{number}.out", "w")
        err = open(self.work / f"learner-{number}.err", "w")
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=err, env=env, start_new_session=True)
        self.learners.append(process)
        self.segments.append({"pid": process.pid, "resume": resume, "actor_kills": [], "exit": None,
                              "started": round(time.monotonic() - self.began, 1)})
        self.event("learner started", pid=process.pid, resume=resume)
        return process

    def actors(self) -> list[int]:
        learner = self.learners[-1]
        return [pid for pid in descendants(learner.pid) if is_actor(pid, self.args.runner)]

    def wait_for_actors(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.learners[-1].poll() is None:
            if len(self.actors()) >= 2:
                return True
            time.sleep(0.5)
        return False

    def event(self, what: str, **details) -> None:
        entry = {"t": round(time.monotonic() - self.began, 1), "event": what, **details}
        self.events.append(entry)
        print(f"[{entry['t']:7.1f} s] {what} {json.dumps(details) if details else ''}", flush=True)

    # ------------------------------------------------------------------ sampling
    def sample_forever(self) -> None:
        while self._sampling:
            now = time.monotonic()
            learner = self.learners[-1] if self.learners else None
            row: dict = {"t": now - self.began, "learner": None, "actors": [], "others": []}
            if learner is not None and learner.poll() is None:
                row["learner"] = sample_process(learner.pid)
                for pid in descendants(learner.pid):
                    values = sample_process(pid)
                    if values is None:
                        continue
                    with self._lock:
                        self.seen.add(pid)
                    row["actors" if is_actor(pid, self.args.runner) else "others"].append(values)
            row["shm"] = len(our_segments({s["pid"] for s in self.segments}))
            self.samples.append(row)
            time.sleep(max(0.0, self.args.sample_every - (time.monotonic() - now)))

    # ------------------------------------------------------------------ chaos
    def kill_an_actor(self) -> None:
        actors = self.actors()
        if not actors:
            return
        pid = self.rng.choice(actors)
        os.kill(pid, signal.SIGKILL)
        self.segments[-1]["actor_kills"].append(pid)
        self.event("actor SIGKILL", pid=pid)

    def kill_the_learner(self) -> None:
        learner = self.learners[-1]
        actors = self.actors()
        steps = last_env_steps(self.run_dir)
        learner.kill()
        learner.wait(timeout=60)
        self.segments[-1]["exit"] = learner.returncode
        self.event("learner SIGKILL", pid=learner.pid, env_steps_logged=steps)
        started = time.monotonic()
        while any(alive(pid) for pid in actors) and time.monotonic() - started < 60:
            time.sleep(0.1)
        left = [pid for pid in actors if alive(pid)]
        self.learner_kill = {"env_steps_logged": steps, "actors_exit_s": round(time.monotonic() - started, 1),
                             "actors_left": left}
        self.resume()

    def resume(self) -> None:
        process = self.launch(resume=True)
        if not self.wait_for_actors(600):
            raise RuntimeError(f"the resumed learner (pid {process.pid}) started no actors: see {self.work}")

    def fill_the_disk(self) -> None:
        """Raise the flag until the learner stops on the failed checkpoint, free the space, resume."""
        learner = self.learners[-1]
        self.disk_flag.touch()
        self.event("disk full (simulated ENOSPC on the next checkpoint)")
        try:
            learner.wait(timeout=600)
        finally:
            self.disk_flag.unlink()
        self.segments[-1]["exit"] = learner.returncode
        self.event("learner stopped on the full disk", code=learner.returncode)
        log = self.work / f"learner-{len(self.learners) - 1}.err"
        self.disk = {"exit": learner.returncode, "error": error_line(log),
                     "checkpoint_after": newest_checkpoint_name(self.run_dir)}
        self.resume()

    def run(self) -> dict:
        a = self.args
        self.learner_kill: dict | None = None
        self.disk: dict | None = None
        sampler = threading.Thread(target=self.sample_forever, daemon=True)
        self.launch(resume=False)
        sampler.start()
        try:
            if not self.wait_for_actors(600):
                raise RuntimeError(f"the learner started no actors within 600 s: see {self.work}")
            deadline = time.monotonic() + 600  # the chaos starts once the run trains: its first logged interval
            while not (self.run_dir / "health.csv").is_file() and time.monotonic() < deadline:
                time.sleep(0.5)
            self.chaos_start = time.monotonic()
            self.event("chaos starts", minutes=a.minutes)
            end = self.chaos_start + 60 * a.minutes
            learner_kill_at = self.chaos_start + 60 * a.minutes * a.learner_kill_at if a.learner_kill_at else None
            disk_at = self.chaos_start + 60 * a.minutes * 0.6 if a.disk_full else None
            next_kill = time.monotonic() + self.rng.uniform(*a.kill_every)
            while time.monotonic() < end:
                if self.learners[-1].poll() is not None:
                    self.segments[-1]["exit"] = self.learners[-1].returncode
                    self.event("the learner stopped unplanned", code=self.learners[-1].returncode)
                    break
                now = time.monotonic()
                if learner_kill_at is not None and now >= learner_kill_at:
                    learner_kill_at = None
                    self.kill_the_learner()
                    next_kill = time.monotonic() + self.rng.uniform(*a.kill_every)
                elif disk_at is not None and now >= disk_at:
                    disk_at = None
                    self.fill_the_disk()
                    next_kill = time.monotonic() + self.rng.uniform(*a.kill_every)
                elif now >= next_kill and now < end - QUIET_S:
                    self.kill_an_actor()
                    next_kill = now + self.rng.uniform(*a.kill_every)
                time.sleep(0.2)
            self.chaos_end = time.monotonic()
            self.stop()
        finally:
            for learner in self.learners:
                if learner.poll() is None:
                    os.killpg(learner.pid, signal.SIGKILL)
            time.sleep(a.sample_every)
            self._sampling = False
            sampler.join(timeout=30)
        return self.check()

    def stop(self) -> None:
        learner = self.learners[-1]
        if learner.poll() is not None:
            return
        os.killpg(learner.pid, signal.SIGTERM)  # the learner and its actors, as `timeout` signals them
        self.event("SIGTERM to the process group", pid=learner.pid)
        try:
            learner.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.event("no exit within 300 s of SIGTERM")
        self.segments[-1]["exit"] = learner.returncode

    # ------------------------------------------------------------------ checks
    def check(self) -> dict:
        time.sleep(5)  # the last actors and Ray's processes leave
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(alive(pid) for pid in self.seen):
            time.sleep(1)
        orphans = [{"pid": pid, "cmd": cmdline(pid)[:120]} for pid in sorted(self.seen) if alive(pid)]
        shm_left = our_segments({s["pid"] for s in self.segments})
        counted, uncounted = 0, []
        restart_lines = torn = 0
        for number, segment in enumerate(self.segments):
            stderr = (self.work / f"learner-{number}.err").read_text(errors="replace")
            segment["error_line"] = error_line(self.work / f"learner-{number}.err")
            if self.args.runner == "processes":
                for pid in segment["actor_kills"]:
                    if re.search(rf"^actor \d+ \(pid {pid}\) died of signal SIGKILL", stderr, re.MULTILINE):
                        counted += 1
                    else:
                        uncounted.append(pid)
                restart_lines += len(re.findall(r"^actor \d+ \(pid \d+\) died", stderr, re.MULTILINE))
            else:
                # unanchored: a line of Ray's actor output can precede it on the same line
                failures = len(re.findall(r"Ray actor \d+ failed", stderr))
                restart_lines += failures
                counted += min(failures, len(segment["actor_kills"]))
                uncounted += segment["actor_kills"][failures:]
            torn += sum(int(n) for n in re.findall(r"^skipped (\d+) torn window", stderr, re.MULTILINE))
        kills = sum(len(s["actor_kills"]) for s in self.segments)
        summary = read_json(self.run_dir / "summary.json")
        metrics = column(self.run_dir / "metrics.csv")
        health = column(self.run_dir / "health.csv")
        checkpoints = verify_all(self.run_dir)
        planned = {0} | ({-signal.SIGKILL} if self.learner_kill else set()) | ({5} if self.disk else set())
        stops = [s for s in self.segments if s["exit"] not in planned]
        resumed_from = [line for n in range(1, len(self.segments))
                        for line in re.findall(r"resuming from (ckpt-\d+) at ([\d,]+) env steps",
                                               (self.work / f"learner-{n}.out").read_text(errors="replace"))]
        lost = None
        if self.learner_kill and resumed_from:
            lost = self.learner_kill["env_steps_logged"] - int(resumed_from[0][1].replace(",", ""))
        result = {
            "runner": self.args.runner, "minutes": self.args.minutes, "work_dir": str(self.work),
            "chaos_s": round(self.chaos_end - self.chaos_start, 1) if self.chaos_start else 0.0,
            "actor_kills": kills, "kills_counted": counted, "kills_uncounted": uncounted,
            "restart_lines": restart_lines, "summary_actor_restarts": summary.get("actor_restarts"),
            "learner_kill": self.learner_kill, "resumed_from": resumed_from, "env_steps_lost_to_learner_kill": lost,
            "disk_full": self.disk, "windows_dropped_torn": torn,
            "final_exit": self.segments[-1]["exit"], "stopped_by": summary.get("stopped_by"),
            "env_steps": summary.get("env_steps"), "unplanned_stops": stops,
            "metrics_rows": len(metrics), "metrics_continuous": strictly_increasing(metrics),
            "health_rows": len(health), "health_continuous": strictly_increasing(health),
            "checkpoints": checkpoints, "shm_left": shm_left, "orphans": orphans,
            "quarters": quarters(self.samples, self.chaos_start - self.began if self.chaos_start else 0.0,
                                 self.chaos_end - self.began if self.chaos_start else 0.0),
            "segments": self.segments, "events": self.events,
        }
        result["checks"] = {
            "no unplanned stop": not stops and result["final_exit"] == 0 and summary.get("stopped_by") == "SIGTERM",
            "every kill counted": kills > 0 and not uncounted,
            "nothing left in /dev/shm": not shm_left,
            "no orphan process": not orphans,
            "metrics continuous": result["metrics_continuous"] and result["health_continuous"],
            "checkpoints verify": bool(checkpoints) and all(c["ok"] for c in checkpoints),
        }
        if self.disk:
            result["checks"]["full disk: exit 5, named error"] = (
                self.disk["exit"] == 5 and "disk failure: could not write checkpoint" in (self.disk["error"] or ""))
        return result


def error_line(path: Path) -> str | None:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.startswith("error: ")]
    return lines[-1] if lines else None


def newest_checkpoint_name(run_dir: Path) -> str | None:
    found = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt-*"))
    return found[-1] if found else None


def last_env_steps(run_dir: Path) -> int:
    """The newest env steps the run logged (health.csv, every logging.log_every)."""
    values = column(run_dir / "health.csv")
    return int(values[-1]) if values else 0


def column(path: Path, name: str = "env_steps") -> list[float]:
    if not path.is_file():
        return []
    with open(path, newline="") as handle:
        return [float(row[name]) for row in csv.DictReader(handle)]


def strictly_increasing(values: list[float]) -> bool:
    return all(b > a for a, b in zip(values, values[1:]))


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def verify_all(run_dir: Path) -> list[dict]:
    from r2d2kit.training.checkpoint import CheckpointError, list_checkpoints, verify_checkpoint

    found = []
    for path in list_checkpoints(run_dir):
        try:
            state = verify_checkpoint(path)
            found.append({"name": path.name, "ok": True, "env_steps": state["env_steps"]})
        except CheckpointError as error:
            found.append({"name": path.name, "ok": False, "error": str(error)})
    return found


def quarters(samples: list[dict], start: float, end: float) -> dict:
    """Medians of the second and the last quarter of the chaos, per measure."""
    import statistics

    def measures(row: dict) -> dict[str, float]:
        learner = row["learner"] or {}
        actors, others = row["actors"], row["others"]
        return {"learner RSS MB": learner.get("rss_mb"), "learner fds": learner.get("fds"),
                "learner threads": learner.get("threads"),
                "learner /dev/shm files mapped": learner.get("shm_mapped"),
                "actor RSS MB (largest)": max(a["rss_mb"] for a in actors) if actors else None,
                "actor fds (most)": max(a["fds"] for a in actors) if actors else None,
                "other processes RSS MB (sum)": sum(o["rss_mb"] for o in others) if others else None,
                "processes": 1 + len(actors) + len(others) if row["learner"] else None,
                "run's /dev/shm segments": row["shm"]}

    span = end - start
    out: dict[str, dict] = {}
    for label, (low, high) in {"second": (0.25, 0.5), "last": (0.75, 1.0)}.items():
        rows = [measures(r) for r in samples if start + low * span <= r["t"] <= start + high * span]
        for name in (measures(samples[0]) if samples else {}):
            values = [r[name] for r in rows if r[name] is not None]
            out.setdefault(name, {})[label] = statistics.median(values) if values else None
    return out


def report(result: dict) -> str:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from harness import fmt, table

    rows = []
    for name, values in result["quarters"].items():
        second, last = values.get("second"), values.get("last")
        ratio = fmt(last / second, ".2f") if second and last is not None else "-"
        rows.append([name, fmt(second, ".1f"), fmt(last, ".1f"), ratio])
    lines = [table(["measure (median)", "second quarter", "last quarter", "last / second"], rows), ""]
    lines.append(f"chaos {result['chaos_s']:.0f} s on {result['runner']}: {result['actor_kills']} actor kills, "
                 f"{result['kills_counted']} counted as restarts ({result['restart_lines']} restart lines, "
                 f"summary.json actor_restarts {result['summary_actor_restarts']}); final env steps "
                 f"{result['env_steps']}, stopped by {result['stopped_by']} (exit {result['final_exit']})")
    if result["learner_kill"]:
        kill = result["learner_kill"]
        lines.append(f"learner SIGKILL at {kill['env_steps_logged']:,} env steps logged: its actors left within "
                     f"{kill['actors_exit_s']} s ({len(kill['actors_left'])} left), resumed from "
                     f"{result['resumed_from'][0][0] if result['resumed_from'] else '-'}: "
                     f"{result['env_steps_lost_to_learner_kill']} env steps redone")
    if result["disk_full"]:
        lines.append(f"full disk: exit {result['disk_full']['exit']}; {result['disk_full']['error']}")
    lines.append(f"windows dropped as torn: {result['windows_dropped_torn']}; metrics rows {result['metrics_rows']}, "
                 f"health rows {result['health_rows']}; checkpoints {[c['name'] for c in result['checkpoints']]}")
    lines.append(f"/dev/shm left: {result['shm_left']}; orphans: {result['orphans']}")
    lines += [f"  {'ok  ' if ok else 'FAIL'}  {name}" for name, ok in result["checks"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as-learner"]:
        return learner_with_disk_flag(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes of chaos (default 10)")
    parser.add_argument("--runner", choices=("processes", "ray"), default="processes")
    parser.add_argument("--config", default="cue_memory",
                        help="the config trained under chaos: a shipped name or a YAML path (default cue_memory)")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(15.0, 40.0), metavar=("MIN_S", "MAX_S"),
                        help="seconds between actor SIGKILLs, drawn uniformly (default 15 40)")
    parser.add_argument("--learner-kill-at", type=float, default=0.15,
                        help="fraction of the chaos at which the learner is SIGKILLed and resumed (0: never)")
    parser.add_argument("--disk-full", action="store_true", help="a simulated full disk during one checkpoint")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between samples (default 5)")
    parser.add_argument("--eval-every", type=int, default=5000, help="env steps between evaluations")
    parser.add_argument("--checkpoint-every", type=int, default=5000, help="env steps between checkpoints")
    parser.add_argument("--seed", type=int, default=0, help="seeds the chaos (which actor, when)")
    parser.add_argument("--work-dir", help="where the run and the logs go (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (kept anyway on a failure)")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    from r2d2kit.training.config import ConfigError, load_config
    try:  # a config the learner would refuse is named here, not found out as "no actors started"
        load_config(args.config)
    except ConfigError as error:
        parser.error(f"--config {args.config!r}: {error}")
    print(f"command: python benchmarks/soak.py {' '.join(argv)}; load average {os.getloadavg()[0]:.2f} on "
          f"{len(os.sched_getaffinity(0))} cores", flush=True)
    soak = Soak(args)
    result = soak.run()
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    passed = all(result["checks"].values())
    if passed and not args.keep and not args.work_dir:
        shutil.rmtree(soak.work, ignore_errors=True)
    else:
        print(f"work directory: {soak.work}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
