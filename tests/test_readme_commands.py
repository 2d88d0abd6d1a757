"""Every command README.md shows, run as a user would (in a folder laid out like a
checkout; the first a subprocess of the installed `tension-run`, the rest the CLI's
`main()` in this process, which spares ≈ 1.5 s of CPU a command) against the
loopback test server serving the README's model names. The demo, which needs the
embedded server, is run by the slow step (tests/test_readme.py).

Shell blocks are run as written, with the README's server (`http://gpu-box:…`) the
test server's URL; a command that names no server gets `--base-url` and
`--model` of the test server. Verbs the README shows only in a heading with
placeholders (`tension-run report RUN_DIR`) run with the files the commands before
them made; every heading's verb must be run here, so a new one cannot go
untested."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tension.testing.cli import run_here
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import LoopbackServer

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
EXE = str(Path(sys.executable).parent / "tension-run")
MODELS = ["Qwen/Qwen3-32B", "Qwen/Qwen3-8B"]
SERVER_VERBS = {"score", "estimate", "bench", "generate", "fairplay"}

# The heading-only commands, with the placeholders filled from what the shell
# blocks made (runs/first is the README's score run).
HEADING_COMMANDS = [
    "tension-run report runs/first --gpu-hour-usd 3.5",
    "tension-run compare runs/first runs/first --pair-by prompt_id --out runs/cmp",
    "tension-run metrics runs/first --out runs/metrics",
    "tension-run metrics examples/sample_curves.jsonl --out runs/sample-metrics",
    "tension-run generate examples/ideas.jsonl --out runs/stories.jsonl --mode vanilla",
    "tension-run cache stats",
    "tension-run cache verify",
    "tension-run cache recover {default_cache} runs/recovered",
    "tension-run cache drop --run runs/first --role judge",  # a dry run: counts, drops nothing
    "tension-run cache merge {default_cache} runs/merged.lmdb",  # one machine's cache into a new one
    "tension-run view runs/first --export runs/view",
]


def shell_commands() -> list[str]:
    """The `tension-run …` commands of the README's sh blocks after the setup
    section, continuation lines joined."""
    usage = README.split("## Usage", 1)[1]
    out = []
    for block in re.findall(r"```sh\n(.*?)```", usage, flags=re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.strip().startswith("tension-run "):
                out.append(" ".join(cmd.split()))
    return out


def heading_verbs() -> set[str]:
    verbs = set()
    for m in re.finditer(r"`tension-run ([a-z-]+)( stats| verify| recover| drop| merge)?", README):
        verbs.add(m.group(1) + (m.group(2) or ""))
    # demo, serve: the embedded server, the slow step (tests/test_readme.py); route runs
    # until Ctrl-C: tests/core/test_router_process.py runs it over three test servers
    return verbs - {"demo", "serve", "route"}


def _answers(msgs, n, seed):
    """Readers, culprit judge and the generate pipeline, answered from the prompt."""
    text = "\n".join(m["content"] for m in msgs)
    names = re.search(r"The suspects are: (.*?)\. (?:Please|Which)", text, flags=re.S)
    if names and "reveal at its end as the true culprit" in text:
        return json.dumps({"culprit": names.group(1).split(", ")[0]})
    if names and "probabilities" in text.lower():
        k = len(names.group(1).split(", "))
        return json.dumps({"suspects": names.group(1).split(", "), "probabilities": [1 / k] * k})
    if "Write the story now." in text:
        return "The ferry left without her, and the harbour lights went out one by one. " * 4
    return None


@pytest.fixture
def checkout(tmp_path):
    """A folder laid out like the checkout the README is read in, beside ../shared."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "examples", repo / "examples")
    shared = Path("/work/shared/data/musr_murder_sample.jsonl")
    (tmp_path / "shared" / "data").mkdir(parents=True)
    if shared.is_file():
        shutil.copy(shared, tmp_path / "shared" / "data")
    make_corpus(repo / "stories.jsonl", 1, seed=1)
    return repo


def _argv(cmd: str, url: str) -> list[str]:
    argv = shlex.split(cmd.replace("http://gpu-box:8000", url).replace("http://gpu-box:8001", url))
    verb = argv[1]
    if verb in SERVER_VERBS and "--base-url" not in argv:
        argv += ["--base-url", url, "--model", MODELS[0]]
    if verb in SERVER_VERBS - {"generate"}:
        argv += ["--no-progress"]
    return [EXE, *argv[1:]]


def test_every_readme_command_runs_against_the_test_server(checkout):
    cmds = shell_commands()
    assert {"score", "bench", "estimate", "fairplay", "fairplay-metrics"} <= {c.split()[1] for c in cmds}
    covered = {c.split()[1] for c in cmds} | {" ".join(c.split()[1:3]) if c.split()[1] == "cache" else c.split()[1]
                                             for c in HEADING_COMMANDS}
    from tension.cache.store import default_path  # under the test's private HOME

    headings = [c.replace("{default_cache}", str(default_path())) for c in HEADING_COMMANDS]
    assert heading_verbs() <= covered, heading_verbs() - covered
    if not (checkout.parent / "shared" / "data" / "musr_murder_sample.jsonl").is_file():
        cmds = [c for c in cmds if "../shared/" not in c]
    with LoopbackServer(model=MODELS) as server:
        server.respond(_answers)
        # score first: the heading commands read its folder
        for i, cmd in enumerate([c for c in cmds if c.split()[1] == "score"] + headings +
                                [c for c in cmds if c.split()[1] != "score"]):
            argv = _argv(cmd, server.base_url)
            if i == 0:  # the installed console script, as the user types it
                r = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=600,
                                   env=dict(os.environ))
            else:  # the same command in this process: its output, files and status, no interpreter to start
                r = run_here(*argv[1:], cwd=checkout)
            assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
            assert "Traceback" not in r.stderr, cmd
    for path in ("runs/first/report.md", "runs/first/figures/nr.png", "runs/cmp/compare.md",
                 "runs/metrics/stories.csv", "runs/stories.jsonl", "runs/fp-demo/stories.csv", "bench.json",
                 "runs/recovered/data.mdb", "runs/view/index.html"):
        assert (checkout / path).is_file(), path
