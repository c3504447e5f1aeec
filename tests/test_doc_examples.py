"""Every code block in README.md and docs/ is checked, so the documentation cannot drift from the code.

What each kind of block must do (docs/writing-docs.md says the same for authors):

* ``python``: runs. The python blocks of one page run in order in one namespace (like a notebook), in
  an empty temporary directory that holds a link to the checkout's ``configs/``, with the checkout
  first on the import path. The pages run one after another in one fresh interpreter (TensorFlow is
  imported once). A failure shows the traceback, whose frames name the page and the line in it.
* ``yaml``: a ``python -m r2d2kit.train`` config (any subset of its sections) that validates.
* ``bash``: every command names real things: the scripts and config files exist, ``pip install``
  extras exist in pyproject.toml, ``python -m r2d2kit.*`` flags exist in that command's ``--help``,
  and ``python -m r2d2kit.train CONFIG --set ...`` validates CONFIG with the overrides (nothing is
  trained), as does ``python -m r2d2kit.tune CONFIG``, with its ``--space`` file.
* no language or ``text``: prose (diagrams, printed output); not checked.

``<!-- skip: reason -->`` on the line before a fence opts one block out (a skipped python block is
still compiled). Skips are few (``MAX_SKIPPED``) and every one gives its reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MAX_SKIPPED = 3  # deliberately not runnable blocks; raise it only with a reason in the block's marker
RUN_TIMEOUT_S = 300  # all pages together

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
SKIP = re.compile(r"^\s*<!--\s*skip:(?P<reason>.*?)-->\s*$")
LANGUAGES = {"python": "python", "py": "python", "yaml": "yaml", "yml": "yaml", "bash": "bash", "sh": "bash",
             "shell": "bash", "": "text", "text": "text", "markdown": "text"}  # fence language -> check


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    skip_reason: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced code blocks of one Markdown file, in order."""
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        language = opening.group("info").strip().split(" ")[0].lstrip(".{").lower()
        previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
        skip = SKIP.match(previous)
        body, j = [], i + 1
        while j < len(lines) and not (lines[j].startswith(indent + fence[0] * len(fence))
                                      and not lines[j].strip().strip(fence[0])):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        reason = skip.group("reason").strip() if skip else None
        blocks.append(Block(path, i + 1, language, "\n".join(body) + "\n", reason))
        i = j + 1
    return blocks


PAGES = [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))  # the README's blocks are held to the same rules
ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def of_language(language: str, skipped: bool = False) -> list[Block]:
    return [b for b in ALL_BLOCKS if LANGUAGES.get(b.language) == language and (b.skip_reason is not None) == skipped]


# --------------------------------------------------------------------------- the rules themselves
def test_every_block_has_a_known_language():
    unknown = [f"{b.where} ```{b.language}" for b in ALL_BLOCKS if b.language not in LANGUAGES]
    assert not unknown, f"use python, yaml, bash or text (or add the language to LANGUAGES): {unknown}"


def test_skipped_blocks_are_few_and_say_why():
    skipped = [b for b in ALL_BLOCKS if b.skip_reason is not None]
    assert all(len(b.skip_reason) >= 10 for b in skipped), [b.where for b in skipped if len(b.skip_reason) < 10]
    assert len(skipped) <= MAX_SKIPPED, [f"{b.where}: {b.skip_reason}" for b in skipped]


@pytest.mark.parametrize("block", of_language("python", skipped=True), ids=lambda b: b.where)
def test_skipped_python_blocks_compile(block):
    compile("\n" * block.line + block.code, str(block.path), "exec")


# --------------------------------------------------------------------------- python: run each page
# One interpreter runs every page (TensorFlow is imported once), each page in a fresh namespace and
# its own empty directory; results go to a JSON file so a crash still reports the pages before it.
DRIVER = r"""
import gc, json, os, sys, time, traceback

def main(request_path):
    request = json.load(open(request_path))
    results = []
    for page in request["pages"]:
        os.chdir(page["cwd"])
        namespace = {"__name__": "__main__"}
        start, where, error = time.perf_counter(), None, None
        print(f"=== {page['name']}", flush=True)
        try:
            for block in page["blocks"]:
                where = block["where"]
                exec(compile("\n" * block["line"] + block["code"], block["path"], "exec"), namespace)
        except BaseException:  # SystemExit and KeyboardInterrupt too: the page failed
            error = traceback.format_exc()
        namespace.clear()
        gc.collect()
        results.append({"page": page["name"], "where": where, "error": error,
                        "seconds": round(time.perf_counter() - start, 1)})
        with open(request["results"], "w") as handle:
            json.dump(results, handle)

if __name__ == "__main__":  # spawned processes import this file again; they must not rerun the pages
    main(sys.argv[1])
"""


def run_pages(pages: list[Path], workdir: Path, timeout: float = RUN_TIMEOUT_S) -> tuple[list[dict], str]:
    """Run the python blocks of ``pages``; return (one result per page that ran, the interpreter's output)."""
    request = {"results": str(workdir / "results.json"), "pages": []}
    for page in pages:
        name = str(page.relative_to(ROOT))
        cwd = workdir / name.replace("/", "__").removesuffix(".md")
        cwd.mkdir(parents=True)
        (cwd / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
        request["pages"].append({"name": name, "cwd": str(cwd), "blocks": [
            {"where": b.where, "path": str(b.path), "line": b.line, "code": b.code}
            for b in of_language("python") if b.path == page]})
    (workdir / "request.json").write_text(json.dumps(request))
    (workdir / "driver.py").write_text(DRIVER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               TF_CPP_MIN_LOG_LEVEL="3", MPLBACKEND="Agg")
    try:
        run = subprocess.run([sys.executable, str(workdir / "driver.py"), str(workdir / "request.json")],
                             cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        output = run.stdout + run.stderr
    except subprocess.TimeoutExpired as expired:
        output = f"timed out after {timeout} s\n{expired.stdout or ''}{expired.stderr or ''}"
    results_path = workdir / "results.json"
    return (json.loads(results_path.read_text()) if results_path.exists() else []), output


RUN_PAGES = sorted({b.path for b in of_language("python")})


@pytest.mark.slow
def test_python_blocks_run(tmp_path):
    results, output = run_pages(RUN_PAGES, tmp_path)
    problems = [f"{r['where']} failed:\n{r['error']}" for r in results if r["error"]]
    ran = {r["page"] for r in results}
    missing = [str(p.relative_to(ROOT)) for p in RUN_PAGES if str(p.relative_to(ROOT)) not in ran]
    if missing:
        problems.append(f"pages that did not finish (the interpreter died or timed out): {missing}\n"
                        f"output:\n{output[-3000:]}")
    assert not problems, "\n\n".join(problems)
    print("seconds per page:", {r["page"]: r["seconds"] for r in results})


# --------------------------------------------------------------------------- yaml: configs validate
@pytest.mark.parametrize("block", of_language("yaml"), ids=lambda b: b.where)
def test_yaml_blocks_are_valid_training_configs(block):
    from r2d2kit.training.config import SECTIONS, build_config

    data = yaml.safe_load(block.code)
    assert isinstance(data, dict) and set(data) <= {*SECTIONS, "agent"}, (
        f"{block.where}: not a training config (sections {sorted(SECTIONS)}); mark it <!-- skip: why --> if it "
        "is something else")
    build_config(data, source=block.where)


# --------------------------------------------------------------------------- bash: commands name real things
def commands_of(code: str) -> list[list[str]]:
    """Each command of a shell block as a token list (comments, continuations and && / ; / | split off)."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        tokens = shlex.split(line, comments=True)
        current: list[str] = []
        for token in tokens + [";"]:
            if token in ("&&", ";", "||", "|"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(token)
    return commands


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        yield out


_OPTIONS: dict[str, set[str]] = {}


def module_options(module: str) -> set[str]:
    """The ``--options`` that ``python -m MODULE --help`` lists (run in this process: ``main(["--help"])``)."""
    if module not in _OPTIONS:
        import importlib

        with _quiet() as out, pytest.raises(SystemExit):
            importlib.import_module(module).main(["--help"])
        _OPTIONS[module] = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", out.getvalue()))
    return _OPTIONS[module]


def options(tokens: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(positional arguments, --flags, --set values) of an r2d2kit command line (every flag takes a value)."""
    positional, flags, overrides, i = [], [], [], 0
    while i < len(tokens):
        flag, _, inline = tokens[i].partition("=")
        if not flag.startswith("--"):
            positional.append(tokens[i])
            i += 1
            continue
        flags.append(flag)
        value = inline if inline else (tokens[i + 1] if i + 1 < len(tokens) else "")
        if flag == "--set":
            overrides.append(value)
        i += 1 if inline else 2
    return positional, flags, overrides


def pip_extras() -> set[str]:
    """The optional-dependency groups of pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:  # Python 3.10: read the keys of the one table we need
        table = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
        return set(re.findall(r"^([\w-]+)\s*=", table, re.MULTILINE))
    return set(tomllib.loads(text)["project"]["optional-dependencies"])


def check_command(tokens: list[str]) -> list[str]:
    """Problems with one command ([] when it names only real things)."""
    problems = []
    program, args = tokens[0], tokens[1:]
    if program in ("pip", "python") and args[:2] == ["-m", "pip"]:
        program, args = "pip", args[2:]
    if program == "pip" and args[:1] == ["install"]:
        extras = pip_extras()
        for i, arg in enumerate(args):
            match = re.fullmatch(r"(?:\.|r2d2kit)\[([\w,\s-]+)\]", arg)
            if match:
                problems += [f"no extra {e!r} in pyproject.toml" for e in match.group(1).split(",")
                             if e.strip() not in extras]
            if arg == "-r" and not (ROOT / args[i + 1]).is_file():
                problems.append(f"no file {args[i + 1]}")
        return problems
    if program != "python" or not args:
        return problems  # tensorboard, mkdocs, git, ...: nothing of ours to check
    if args[0] == "-m":
        module = args[1]
        if not module.startswith("r2d2kit"):
            return problems
        positional, flags, overrides = options(args[2:])
        known = module_options(module)
        problems += [f"{module} has no option {flag}" for flag in flags if flag not in known]
        if module in ("r2d2kit.train", "r2d2kit.tune"):
            from r2d2kit.training.config import (
                apply_overrides,
                build_config,
                load_config,
            )

            config = positional[0] if positional else None
            try:
                if config:
                    # a path under the checkout, or a shipped config's name as the docs write it
                    loaded = load_config(ROOT / config if (ROOT / config).is_file() else config, overrides)
                else:
                    loaded = build_config(apply_overrides({}, overrides))
                if module == "r2d2kit.tune" and "--space" in args:  # the search space must fit the config
                    from r2d2kit.tuning.space import load_space

                    space = args[args.index("--space") + 1]  # a path under the checkout, or a shipped name
                    load_space(ROOT / space if (ROOT / space).is_file() else space, loaded.to_dict())
            except Exception as error:  # noqa: BLE001 - the message is the finding
                problems.append(f"config does not validate: {error}")
        return problems
    script = args[0]
    if script.endswith(".py") and not (ROOT / script).is_file():
        problems.append(f"no script {script}")
    return problems


@pytest.mark.parametrize("block", of_language("bash"), ids=lambda b: b.where)
def test_shell_commands_name_real_things(block):
    problems = [f"{' '.join(tokens)}: {problem}" for tokens in commands_of(block.code)
                for problem in check_command(tokens)]
    assert not problems, f"{block.where}: {problems}"


@pytest.mark.parametrize("command, finding", [
    ("python -m r2d2kit.train configs/cue_memory.yaml --set learner.batch_sise=3", "did you mean 'batch_size'"),
    ("python -m r2d2kit.train configs/nope.yaml", "no config file"),
    ("python -m r2d2kit.train --resume runs/x --sett run.seed=1", "has no option --sett"),
    ("python -m r2d2kit.evaluate runs/x --episode 3", "has no option --episode"),
    ("python -m r2d2kit.tune configs/cue_memory.yaml --space configs/cue_memory.yaml", "not a section.key name"),
    ('pip install -e ".[test,nope]"', "no extra 'nope'"),
    ("python agents/nope.py --fast", "no script agents/nope.py"),
], ids=["unknown key", "missing config", "unknown train option", "unknown evaluate option", "tune space",
        "unknown extra", "missing script"])
def test_the_command_check_finds_mistakes(command, finding):
    (tokens,) = commands_of(command)
    assert any(finding in problem for problem in check_command(tokens)), check_command(tokens)


if __name__ == "__main__":  # run some pages by hand: python tests/test_doc_examples.py docs/quickstart.md ...
    import tempfile

    chosen = [Path(arg).resolve() for arg in sys.argv[1:]] or RUN_PAGES
    with tempfile.TemporaryDirectory() as directory:
        for result in run_pages(chosen, Path(directory))[0]:
            print(f"{result['page']}: {'ok' if not result['error'] else 'FAILED'} in {result['seconds']} s")
            if result["error"]:
                print(result["error"])
