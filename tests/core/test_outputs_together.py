"""`score` and `fairplay` put their outputs in place together or not at all (issue 58, item 5's
class: every verb's outputs together). Before, `score` wrote positions.jsonl, stories.csv with
groups.csv, meta.jsonl, texts.jsonl, then report.md with its tables and figures one after another,
and `fairplay` wrote readers.jsonl before its metrics: a stop in between left a folder of some new
files (over an earlier run: some new, some of the earlier run, its report.md removed), whose run.json
said "interrupted" beside positions.jsonl and stories.csv that looked done.

Now a stopped or failed run leaves none of its outputs (an earlier complete run's stay whole, byte
for byte, report and figures with them), keeps its partial file and the cache (the same command then
finishes without a request), and its record says so: `status` "interrupted" or "failed", and
`earlier_outputs`, the files of the folder it left as they were. The earlier outputs are kept until
the run settles, just before its record is written (a stop while its client closes puts them back
too: tests/core/test_reliability_process.py); a stop obeyed only after that leaves it complete, and
its record says so.

Each command is the real CLI in a subprocess against the loopback server, stopped at a moment of its
own (`tension.testing.interrupt.stopped_at`: an audit hook, no timing), on a cache that already holds
every answer (all its time is its outputs)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fairplay_scripted import scripted, story_record, write_jsonl

from tension.testing.corpus import make_corpus
from tension.testing.interrupt import stopped_at
from tension.testing.openai_server import LoopbackServer

BIN = Path(__file__).resolve().parents[2] / "bin" / "tension-run"
SIGNALS, SIGNAL_IDS = ["SIGINT", "SIGTERM"], ["ctrl-c", "sigterm"]
OWN = {".tension-run.lock"}  # the lock, the only hidden file a run leaves
SCORE_OUTPUTS = ["figures", "groups.csv", "meta.jsonl", "positions.jsonl", "report.md", "stories.csv", "table18.csv",
                 "table6.csv", "texts.jsonl"]
SCORE_OWN = ["positions.partial.jsonl", "run.json"]  # what resume needs, and the record: not outputs

# The moments score writes its outputs: its first file; its fourth (positions.jsonl, stories.csv and
# groups.csv written by then); its last data file; the report's figures (as their font loads); report.md
# under its hidden name; the report's renames (signals wait during them: obeyed once they are done)
SCORE_MOMENTS = {
    "positions": {"opens": ".positions.jsonl.*.tmp"},
    "meta": {"opens": ".meta.jsonl.*.tmp"},
    "texts": {"opens": ".texts.jsonl.*.tmp"},
    "drawing": {"opens": "*.ttf"},
    "report": {"opens": ".report.md.*.tmp"},
    "renaming": {"renames": ".table6.csv.*.tmp"},
}


def _env(tmp: Path) -> dict[str, str]:
    """This process's environment for a command of its own: a home in `tmp`, no server or key
    of the user's, this process's path (tension.testing and the package)."""
    env = dict(os.environ, HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "home" / ".cache"),
               PYTHONPATH=os.pathsep.join(sys.path))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=180)


class Scoring:
    """The loopback server, a corpus and a cache that holds every answer of it (4 and 3 endings)."""

    def __init__(self, tmp: Path, srv: LoopbackServer):
        self.tmp, self.srv = tmp, srv
        self.corpus = make_corpus(tmp / "c.jsonl", 3, seed=3)
        self.cache = tmp / "cache"

    def argv(self, out: Path, *flags: str, endings: int = 4) -> list[str]:
        return [sys.executable, str(BIN), "score", str(self.corpus), "--out", str(out), "--cache", str(self.cache),
                "--base-url", self.srv.base_url, "--model", "test-gen", "--endings", str(endings), "--seed", "1",
                "--no-progress", "--save-texts", *flags]

    def score(self, tmp: Path, out: Path, *flags: str, endings: int = 4, sig: str | None = None,
              moment: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        env = _env(tmp)
        if sig is not None:
            env = stopped_at(tmp / "hook", sig, **(moment or {}), env=env)
        return _run(self.argv(out, *flags, endings=endings), env, tmp)


@pytest.fixture(scope="module")
def scoring(tmp_path_factory) -> Scoring:
    """The server for the module's runs; a clean run (4 endings: the bytes a finished run gives) and
    an earlier run of other settings (3 endings: other bytes in every file), both complete."""
    tmp = tmp_path_factory.mktemp("scoring")
    with LoopbackServer(model=["test-gen"]) as srv:
        s = Scoring(tmp, srv)
        for out, endings in ((tmp / "clean", 4), (tmp / "earlier", 3)):
            done = s.score(tmp, out, endings=endings)
            assert done.returncode == 0, done.stderr
        yield s


def _assert_interrupted(r: subprocess.CompletedProcess) -> None:
    """Stopped at its moment, it said "interrupted" (after the notes it gave before, if any), exit 130."""
    assert "stopping at" in r.stderr, r.stderr  # the moment came: the process stopped itself there
    assert r.returncode == 130, (r.returncode, r.stderr)
    said = r.stderr.split("stopping at", 1)[1].split("\n", 1)[1]  # after the hook's own line
    assert said.startswith("interrupted") and "Resume with the same command" in said, said
    assert "Traceback" not in said


def _visible(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name not in OWN)


def _record(out: Path, name: str = "run.json") -> dict:
    return json.loads((out / name).read_text())


def _outputs(out: Path, outputs: list[str]) -> dict[str, str]:
    """The sha256 of each file of `outputs` in `out` (a folder's files by their paths in it)."""
    files = [p for name in outputs for p in ([out / name] if (out / name).is_file() else (out / name).rglob("*"))]
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(files) if p.is_file()}


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize("moment", list(SCORE_MOMENTS))
def test_score_stopped_while_it_writes_leaves_none_of_its_outputs_and_the_same_command_finishes_them(
        scoring, tmp_path, moment, sig):
    out = tmp_path / "run"
    r = scoring.score(tmp_path, out, sig=sig, moment=SCORE_MOMENTS[moment])
    _assert_interrupted(r)
    assert _visible(out) == SCORE_OWN  # not one output; no hidden file but the lock
    assert "its outputs not written" in r.stderr, r.stderr
    run = _record(out)
    assert (run["status"], run["exit_status"], run["earlier_outputs"]) == ("interrupted", 130, [])
    clean = scoring.tmp / "clean"
    # what resume needs is kept: every position in the partial file, every answer in the cache
    assert len((out / "positions.partial.jsonl").read_text().splitlines()) == \
        len((clean / "positions.jsonl").read_text().splitlines())
    asked = len(scoring.srv.requests)
    done = scoring.score(tmp_path, out)
    assert done.returncode == 0, done.stderr
    assert len(scoring.srv.requests) == asked  # nothing asked again
    assert _visible(out) == sorted(SCORE_OUTPUTS + SCORE_OWN)
    assert _record(out)["status"] == "complete" and "earlier_outputs" not in _record(out)
    made = [n for n in SCORE_OUTPUTS if n not in ("figures", "report.md")]  # report.md names its folder
    assert _outputs(out, made) == _outputs(clean, made)


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize("moment", list(SCORE_MOMENTS))
def test_score_stopped_over_an_earlier_finished_run_leaves_that_run_whole(scoring, tmp_path, moment, sig):
    """The earlier run (other settings, so other bytes) stays byte for byte: its report.md, tables and
    figures with its data files; the stopped run's record says they are the earlier run's."""
    out = tmp_path / "run"
    shutil.copytree(scoring.tmp / "earlier", out)
    before = _outputs(out, SCORE_OUTPUTS)
    assert sorted({k.split("/")[0] for k in before}) == SCORE_OUTPUTS
    r = scoring.score(tmp_path, out, sig=sig, moment=SCORE_MOMENTS[moment])
    _assert_interrupted(r)
    assert _outputs(out, SCORE_OUTPUTS) == before
    assert _visible(out) == sorted(SCORE_OUTPUTS + SCORE_OWN)  # and nothing new beside them
    run = _record(out)
    assert (run["status"], run["config"]["endings"]) == ("interrupted", 4)
    assert run["earlier_outputs"] == SCORE_OUTPUTS


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
def test_score_stopped_once_its_record_is_written_is_complete_and_its_outputs_all_there(scoring, tmp_path, sig):
    """The stop comes as the final record is written, once the run has settled: every output is this
    run's, and the record says "complete". (The process says it was stopped, exit 130, for Ctrl-C; a
    SIGTERM this late cancels a task that no longer waits on anything and ends 0: core/run/blocking.py.)"""
    out = tmp_path / "run"
    r = scoring.score(tmp_path, out, "--no-report", sig=sig, moment={"opens": ".run.json.*.tmp"})
    assert "stopping at" in r.stderr and r.returncode in (0, 130), (r.returncode, r.stderr)
    made = [n for n in SCORE_OUTPUTS if n not in ("figures", "report.md", "table6.csv", "table18.csv")]
    assert _visible(out) == sorted(made + SCORE_OWN)
    assert _outputs(out, made) == _outputs(scoring.tmp / "clean", made)
    run = _record(out)
    assert (run["status"], run["exit_status"]) == ("complete", 0) and "earlier_outputs" not in run


@pytest.fixture
def tmpfs(tmp_path):
    """A 2 MB tmpfs at tmp_path/disk (a small disk that fills); skipped where this user may not mount."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={2 << 20}", "tmpfs", str(disk)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"a small disk needs a tmpfs mount, which this user may not make: {r.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_score_that_fails_on_a_full_disk_over_an_earlier_run_leaves_that_run_whole(scoring, tmpfs, tmp_path):
    out = tmpfs / "run"
    shutil.copytree(scoring.tmp / "earlier", out)
    before = _outputs(out, SCORE_OUTPUTS)
    filler = tmpfs / "filler"
    filler.write_bytes(b"\0" * max(0, shutil.disk_usage(tmpfs).free - 60_000))
    r = scoring.score(tmp_path, out)
    assert r.returncode == 1, r.stderr
    assert f"error: cannot write {out}/" in r.stderr and "No space left on device" in r.stderr, r.stderr
    assert _outputs(out, SCORE_OUTPUTS) == before
    assert _visible(out) == sorted(SCORE_OUTPUTS + SCORE_OWN)
    run = _record(out)
    assert run["status"] == "failed" and "cannot write" in run["error"]
    assert run["earlier_outputs"] == SCORE_OUTPUTS
    filler.unlink()
    done = scoring.score(tmp_path, out)
    assert done.returncode == 0, done.stderr
    assert _outputs(out, ["positions.jsonl"]) == _outputs(scoring.tmp / "clean", ["positions.jsonl"])


# -- fairplay: readers.jsonl and its metrics ----------------------------------------------------------------

FAIRPLAY_OUTPUTS = ["curves.csv", "distributions.jsonl", "fairplay.json", "groups.csv", "groups.md", "plots",
                    "readers.jsonl", "steps.jsonl", "stories.csv"]
FAIRPLAY_OWN = ["fairplay_run.json", "readers.partial.jsonl"]
# readers.jsonl as it is written; the metrics' figures; their last file under its hidden name; their renames
FAIRPLAY_MOMENTS = {
    "readers": {"opens": ".readers.jsonl.*.tmp"},
    "drawing": {"opens": "*.ttf"},
    "writing": {"opens": ".fairplay.json.*.tmp"},
    "renaming": {"renames": ".stories.csv.*.tmp"},
}


@pytest.fixture(scope="module")
def reading(tmp_path_factory):
    """The scripted readers' server; two stories files (one story, two); a cache holding both runs'
    answers, and a finished run of the one story (an earlier output of other stories)."""
    tmp = tmp_path_factory.mktemp("reading")
    one = write_jsonl(tmp / "one.jsonl", [story_record("s1", generator=False)])
    two = write_jsonl(tmp / "two.jsonl", [story_record("s1", generator=False), story_record("s2", generator=False)])
    srv = LoopbackServer(model=["test-judge"])
    srv.respond(scripted)
    with srv:
        def fairplay(tmp_: Path, stories: Path, out: Path, env: dict[str, str] | None = None):
            return _run([sys.executable, str(BIN), "fairplay", str(stories), "--out", str(out), "--reader-base-url",
                         srv.base_url, "--reader-model", "test-judge", "--cache", str(tmp / "cache"), "--readers",
                         "gullible,experienced", "--no-progress", "--resamples", "50", "--max-plots", "2"],
                        env or _env(tmp_), tmp_)

        for stories, out in ((two, tmp / "clean"), (one, tmp / "earlier")):
            done = fairplay(tmp, stories, out)
            assert done.returncode == 0, done.stderr
        yield tmp, two, fairplay


@pytest.mark.parametrize("sig", SIGNALS, ids=SIGNAL_IDS)
@pytest.mark.parametrize("earlier", [False, True], ids=["fresh", "over-an-earlier-run"])
@pytest.mark.parametrize("moment", list(FAIRPLAY_MOMENTS))
def test_fairplay_stopped_while_it_writes_leaves_none_of_its_outputs_or_the_earlier_run_whole(
        reading, tmp_path, moment, earlier, sig):
    tmp, two, fairplay = reading
    out = tmp_path / "fp"
    if earlier:
        shutil.copytree(tmp / "earlier", out)
    before = _outputs(out, FAIRPLAY_OUTPUTS)
    env = stopped_at(tmp_path / "hook", sig, **FAIRPLAY_MOMENTS[moment], env=_env(tmp_path))
    r = fairplay(tmp_path, two, out, env)
    _assert_interrupted(r)
    assert _outputs(out, FAIRPLAY_OUTPUTS) == before
    assert _visible(out) == sorted(FAIRPLAY_OWN + (FAIRPLAY_OUTPUTS if earlier else []))
    run = _record(out, "fairplay_run.json")
    assert run["status"] == "interrupted" and run["earlier_outputs"] == (FAIRPLAY_OUTPUTS if earlier else [])
    done = fairplay(tmp_path, two, out)
    assert done.returncode == 0, done.stderr
    made = [n for n in FAIRPLAY_OUTPUTS if n not in ("plots", "fairplay.json")]  # fairplay.json names its folder
    assert _outputs(out, made) == _outputs(tmp / "clean", made)
