"""Ctrl-C and SIGTERM in every verb (issue 58, item 5; review 2026-12-07 G3, G4, G6):
whenever the stop comes (while the command imports, as the verb starts, in its work,
while it writes), the verb says "interrupted …" and exits 130, and its outputs are all
there or none of them is new. Each process stops itself at a moment of its own (an audit
hook, `tension.testing.interrupt.stopped_at`), never after a sleep: the moment is the same
on a loaded machine."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tension.core.cli import VERBS, main
from tension.testing.corpus import make_corpus
from tension.testing.inprocess import InProcessServer
from tension.testing.interrupt import COMMAND_STARTED, stopped_at

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bin" / "tension-run"
SIGNALS = ["SIGINT", "SIGTERM"]
SIGNAL_IDS = ["ctrl-c", "sigterm"]

# A command line of every verb that parses (its inputs need not exist: the stops below come
# before the verb reads them). The spec below checks the table names every verb.
ARGV = {
    "score": ["score", "{tmp}/corpus.jsonl", "--out", "{out}", "--base-url", "http://127.0.0.1:9/v1"],
    "estimate": ["estimate", "{tmp}/corpus.jsonl"],
    "bench": ["bench", "--base-url", "http://127.0.0.1:9/v1"],
    "generate": ["generate", "{tmp}/ideas.jsonl", "--out", "{out}/stories.jsonl"],
    "fairplay": ["fairplay", "{tmp}/stories.jsonl", "--out", "{out}"],
    "fairplay-metrics": ["fairplay-metrics", "{tmp}/readers.jsonl", "--out", "{out}"],
    "metrics": ["metrics", "{tmp}/curves.jsonl", "--out", "{out}"],
    "report": ["report", "{tmp}/run"],
    "compare": ["compare", "{tmp}/a", "{tmp}/b", "--out", "{out}"],
    "serve": ["serve", "--profile", "paper"],
    "demo": ["demo", "--out", "{out}"],
    "route": ["route", "http://127.0.0.1:9"],
    "cache stats": ["cache", "stats", "{tmp}/cache"],
    "cache verify": ["cache", "verify", "{tmp}/cache"],
    "cache recover": ["cache", "recover", "{tmp}/cache", "{out}"],
    "cache drop": ["cache", "drop", "{tmp}/cache", "--model", "m"],
    "cache merge": ["cache", "merge", "{tmp}/cache", "{out}"],
    "view": ["view", "{tmp}/run", "--export", "{out}"],
    "subsample": ["subsample", "{tmp}/run", "--out", "{out}"],
    "audit sample": ["audit", "sample", "{tmp}/run"],
    "audit label": ["audit", "label", "{tmp}/run", "--port", "0"],
    "audit export": ["audit", "export", "{tmp}/run", "--out", "{out}/sample.csv"],
    "audit import": ["audit", "import", "{tmp}/run", "{tmp}/labels.csv"],
    "audit report": ["audit", "report", "{tmp}/run"],
}


def test_the_table_names_every_verb():
    assert sorted(ARGV) == sorted(v.name for v in VERBS)


def _home_env(tmp: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTHONPATH")}
    env.update(HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "home" / ".cache"),
               PYTHONPATH=os.pathsep.join(sys.path))  # tension.testing and the package, as this process has them
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def _assert_interrupted(r: subprocess.CompletedProcess, moment: str) -> None:
    assert "stopping at" in r.stderr, r.stderr  # the moment came: the process stopped itself there
    assert r.returncode == 130, (r.returncode, r.stderr)
    said = r.stderr.split("\n", 1)[1]  # after the hook's own line
    assert said.startswith("interrupted"), said
    assert "Resume with the same command" in said and "Traceback" not in said


# "importing": while the command imports, before its main() runs (G3: score's SIGTERM at 0.3 s was
# exit 143 without a word); "starting": the first import once main() has put its handlers in place
MOMENTS = {"importing": "tension.core.config", "starting": COMMAND_STARTED}


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize("moment", list(MOMENTS))
@pytest.mark.parametrize("verb", list(ARGV))
def test_every_verb_stopped_while_it_starts_says_interrupted_exits_130_and_writes_nothing(verb, moment, sig,
                                                                                         tmp_path):
    out = tmp_path / "out"
    argv = [a.format(tmp=tmp_path, out=out) for a in ARGV[verb]]
    env = stopped_at(tmp_path / "hook", sig, imports=MOMENTS[moment], env=_home_env(tmp_path))
    r = _run([sys.executable, str(BIN), *argv], env, tmp_path)
    _assert_interrupted(r, moment)
    assert not out.exists()
    assert {p.name for p in tmp_path.iterdir()} <= {"hook", "home"}  # nothing written anywhere else


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize("entry", ["console-script", "bin", "python-m"])
def test_a_stop_while_any_entry_point_imports_says_interrupted_and_exits_130(entry, sig, tmp_path):
    """The installed command imports the package `tension` (the API) before any module of
    the CLI: its handler is the package's first statement (core/signals.py `command_starts`)."""
    script = Path(sys.executable).parent / "tension-run"
    if entry == "console-script" and not script.exists():
        pytest.skip("tension-run is not installed beside this Python")
    cmd = {"console-script": [str(script)], "bin": [sys.executable, str(BIN)],
           "python-m": [sys.executable, "-m", "tension.core.cli"]}[entry]
    out = tmp_path / "out"
    env = stopped_at(tmp_path / "hook", sig, imports="tension.core.config", env=_home_env(tmp_path))
    r = _run([*cmd, "score", str(tmp_path / "corpus.jsonl"), "--out", str(out)], env, tmp_path)
    _assert_interrupted(r, "importing")
    assert "score" in r.stderr.splitlines()[-1]  # the command to resume with
    assert not out.exists()


def test_a_process_that_only_imports_tension_keeps_its_own_handlers(tmp_path):
    """The start-up handler is the command's alone: a script or a notebook importing the
    package keeps Python's Ctrl-C (KeyboardInterrupt) and SIGTERM's default."""
    code = ("import signal, tension\n"
            "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
            "assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL\n")
    r = _run([sys.executable, "-c", code], _home_env(tmp_path), tmp_path)
    assert r.returncode == 0, r.stderr


# -- subsample: its work, its figure, its three files (G4, G6) -------------------------------------------

@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    """A finished score run (in process, on the test server) whose cache subsample reads."""
    tmp = tmp_path_factory.mktemp("scored")
    corpus = tmp / "corpus.jsonl"
    make_corpus(corpus, 4, seed=3)
    with InProcessServer(["test-gen", "test-judge"]).serving() as srv, pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp / "home"))
        mp.setenv("XDG_CACHE_HOME", str(tmp / "home" / ".cache"))
        mp.delenv("OPENAI_API_KEY", raising=False)
        assert main(["score", str(corpus), "--out", str(tmp / "run"), "--base-url", srv.base_url, "--model",
                     "test-gen", "--judge-model", "test-judge", "--endings", "12", "--seed", "5", "--no-progress",
                     "--cache", str(tmp / "cache")]) == 0
    return tmp / "run"


SUBSAMPLE_FILES = ["subsample.json", "subsample.png", "subsample.txt"]

# G4: in its work (it reads the run's verdicts); G6: while it draws its figure (as it loads the
# figure's font; the .json and .txt were written by then, the .png never); as it writes its files;
# as it renames them into place
SUBSAMPLE_MOMENTS = {
    "working": {"imports": "tension.core.reports.subsampling"},
    "drawing": {"opens": "*.ttf"},
    "writing": {"opens": ".subsample.json.*.tmp"},
    "renaming": {"renames": ".subsample.txt.*.tmp"},
}


def _subsample_stopped(scored: Path, tmp: Path, out: Path, sig: str, moment: str) -> subprocess.CompletedProcess:
    env = stopped_at(tmp / "hook", sig, **SUBSAMPLE_MOMENTS[moment], env=_home_env(tmp))
    return _run([sys.executable, str(BIN), "subsample", str(scored), "--cache", str(scored.parent / "cache"),
                 "--ks", "3,6", "--draws", "20", "--out", str(out)], env, tmp)


def _digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())} if out.exists() else {}


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize("moment", list(SUBSAMPLE_MOMENTS))
def test_subsample_stopped_at_any_moment_exits_130_and_writes_its_three_files_or_none(scored, tmp_path, moment,
                                                                                     sig):
    out = tmp_path / "sub"
    r = _subsample_stopped(scored, tmp_path, out, sig, moment)
    _assert_interrupted(r, moment)
    names = sorted(p.name for p in out.iterdir()) if out.exists() else []
    if moment == "renaming":  # the renames are one step: the stop is obeyed once all three are in place
        assert names == SUBSAMPLE_FILES
    else:
        assert names == []  # no hidden temporary file left either


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
def test_subsample_stopped_over_an_earlier_output_leaves_the_earlier_set_whole(scored, tmp_path, sig):
    out = tmp_path / "sub"
    first = _run([sys.executable, str(BIN), "subsample", str(scored), "--cache", str(scored.parent / "cache"),
                  "--ks", "3", "--draws", "20", "--out", str(out)], _home_env(tmp_path), tmp_path)
    assert first.returncode == 0, first.stderr
    before = _digests(out)
    assert sorted(before) == SUBSAMPLE_FILES
    r = _subsample_stopped(scored, tmp_path, out, sig, "writing")
    _assert_interrupted(r, "writing")
    assert _digests(out) == before


# -- metrics, compare, report, fairplay-metrics: their outputs together (item 5) ----------------------------

EXAMPLES = ROOT / "examples"
FEW, MANY = ("flat with dips", 2, 0.85), ("flat with dips", 4, 0.85)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """Two small score runs of the same four stories (positions.jsonl, meta.jsonl), for compare."""
    from tension.testing.simulated_run import write_simulated_run

    tmp = tmp_path_factory.mktemp("runs")
    write_simulated_run(tmp / "a", FEW, 4, 10, m=20, seed=1)
    write_simulated_run(tmp / "b", MANY, 4, 10, m=20, seed=2)
    return tmp


# Per verb: its command ({out}: the folder it writes; report writes into the run it reads), the outputs it
# writes together, the options of an earlier output over which it is stopped (other bytes), and the
# moments: as it draws its figures (loading their font), as it writes its last file under its hidden name
# (the others are written aside by then), as it renames the first into place.
TOGETHER = {
    "metrics": {
        "argv": ["metrics", str(EXAMPLES / "sample_curves.jsonl"), "--out", "{out}"],
        "outputs": ["groups.csv", "stories.csv"],
        "earlier": {"--window": "3"},
        "moments": {"writing": {"opens": ".groups.csv.*.tmp"}, "renaming": {"renames": ".stories.csv.*.tmp"}},
    },
    "compare": {
        "argv": ["compare", "{runs}/a", "{runs}/b", "--out", "{out}", "--resamples", "200", "--interval-resamples",
                 "100"],
        "outputs": ["compare.csv", "compare.md", "compare_stories.csv"],
        "earlier": {"--seed": "1"},
        "moments": {"writing": {"opens": ".compare_stories.csv.*.tmp"}, "renaming": {"renames": ".compare.md.*.tmp"}},
    },
    "report": {
        "argv": ["report", "{out}", "--max-curves", "2", "--resamples", "200", "--interval-resamples", "100"],
        "inputs": ["meta.jsonl", "positions.jsonl"],
        "outputs": ["figures", "report.md", "table18.csv", "table6.csv"],
        "earlier": {"--max-curves": "1", "--seed": "1"},
        "moments": {"drawing": {"opens": "*.ttf"}, "writing": {"opens": ".report.md.*.tmp"},
                    "renaming": {"renames": ".table6.csv.*.tmp"}},
    },
    "fairplay-metrics": {
        "argv": ["fairplay-metrics", str(EXAMPLES / "fairplay_readers.jsonl"), "--out", "{out}", "--max-plots", "2",
                 "--resamples", "200", "--no-progress"],
        "outputs": ["curves.csv", "distributions.jsonl", "fairplay.json", "groups.csv", "groups.md", "plots",
                    "steps.jsonl", "stories.csv"],
        "earlier": {"--max-plots": "1", "--seed": "1"},
        "moments": {"drawing": {"opens": "*.ttf"}, "writing": {"opens": ".fairplay.json.*.tmp"},
                    "renaming": {"renames": ".stories.csv.*.tmp"}},
    },
}
TOGETHER_CASES = [(verb, moment) for verb, spec in TOGETHER.items() for moment in spec["moments"]]


def _together_out(verb: str, tmp: Path) -> Path:
    """The folder `verb` writes: a fresh one, or for report a fresh run it reads and writes into."""
    if verb != "report":
        return tmp / "out"
    from tension.testing.simulated_run import write_simulated_run

    return write_simulated_run(tmp / "run", FEW, 3, 10, m=20, seed=3)


def _together_argv(verb: str, out: Path, runs: Path, earlier: bool = False) -> list[str]:
    """`verb`'s command line; `earlier`: with the earlier output's values of its options."""
    spec = TOGETHER[verb]
    argv = [a.format(out=out, runs=runs) for a in spec["argv"]]
    for flag, value in (spec["earlier"].items() if earlier else ()):
        argv = argv[:argv.index(flag) + 1] + [value] + argv[argv.index(flag) + 2:] if flag in argv \
            else [*argv, flag, value]
    return argv


def _tree_digests(out: Path) -> dict[str, str]:
    """Every file under `out` (its figures' folders too), by its path there: its sha256."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()} if out.exists() else {}


def _listed(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize(("verb", "moment"), TOGETHER_CASES, ids=[f"{v}-{m}" for v, m in TOGETHER_CASES])
def test_a_verb_stopped_while_it_draws_or_writes_exits_130_and_writes_its_outputs_together_or_none(
        verb, moment, sig, two_runs, tmp_path):
    """metrics (stories.csv, groups.csv), compare --out (its three files), report (its tables, figures/
    and report.md, the file that makes a run folder look reported) and fairplay-metrics (its seven files
    and plots/): stopped before the renames, none of its outputs is there (no hidden temporary file or
    folder either); stopped at the first rename, every one is, the stop obeyed once they are."""
    spec = TOGETHER[verb]
    out = _together_out(verb, tmp_path)
    env = stopped_at(tmp_path / "hook", sig, **spec["moments"][moment], env=_home_env(tmp_path))
    r = _run([sys.executable, str(BIN), *_together_argv(verb, out, two_runs)], env, tmp_path)
    _assert_interrupted(r, moment)
    inputs = spec.get("inputs", [])
    if moment == "renaming":
        assert _listed(out) == sorted(inputs + spec["outputs"])
    else:
        assert _listed(out) == inputs


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize(("verb", "moment"), [c for c in TOGETHER_CASES if c[1] != "renaming"],
                         ids=[f"{v}-{m}" for v, m in TOGETHER_CASES if m != "renaming"])
def test_a_verb_stopped_over_its_earlier_outputs_leaves_them_whole(verb, moment, sig, two_runs, tmp_path):
    """The earlier output (other arguments, other bytes) stays byte for byte, report's figures/ and
    fairplay-metrics' plots/ with it: a report stopped while it draws keeps the earlier figures its
    report.md shows."""
    out = _together_out(verb, tmp_path)
    first = _run([sys.executable, str(BIN), *_together_argv(verb, out, two_runs, earlier=True)],
                 _home_env(tmp_path), tmp_path)
    assert first.returncode == 0, first.stderr
    before = _tree_digests(out)
    assert sorted({name.split("/")[0] for name in before}) == sorted(TOGETHER[verb].get("inputs", [])
                                                                    + TOGETHER[verb]["outputs"])
    env = stopped_at(tmp_path / "hook", sig, **TOGETHER[verb]["moments"][moment], env=_home_env(tmp_path))
    r = _run([sys.executable, str(BIN), *_together_argv(verb, out, two_runs)], env, tmp_path)
    _assert_interrupted(r, moment)
    assert _tree_digests(out) == before
    assert not [p for p in out.rglob(".*")]  # no hidden temporary file or folder left
    done = _run([sys.executable, str(BIN), *_together_argv(verb, out, two_runs)], _home_env(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    assert _tree_digests(out) != before  # the stopped command's outputs differ: what stayed is the earlier set
