"""Issue 16, findings 5–7: the report, run.json and the exit status tell one story;
figures a reader can put on a slide; inputs and flags a new user tries first.

Each test is named for the user's path it protects and failed on the code before
the fix (reproduced from the outside first: the CLI, its messages, exit status
and files).

The commands run in this process (`main`, `tension_run`: the subject is what they
print, write and exit with), but one: `tension-run --help` is the installed console
script's, in a subprocess."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.reports.metrics import Curve, compute
from tension.core.reports.report import report
from tension.testing.cli import run_here
from tension.testing.corpus import make_corpus, write_story

ROOT = Path(__file__).resolve().parents[2]
EXE = str(Path(sys.executable).parent / "tension-run")


def _score(server, tmp_path, corpus, *extra, out="out") -> subprocess.CompletedProcess:
    return run_here("score", str(corpus), "--out", str(tmp_path / out), "--base-url", server.base_url, "--model",
                    "test-gen", "--endings", "3", "--cache", str(tmp_path / "cache"), "--no-progress", *extra)


def _record(tmp_path, out="out"):
    return json.loads((tmp_path / out / "run.json").read_text())


def _with_huge_story(tmp_path, server):
    """Two good stories and one the server refuses (HTTP 400, its content filter: a
    400 over the context only skips the position since issue 26)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=10)
    with corpus.open("a") as f:
        text = "Zyzzyva came to town. " + write_story(random.Random(1), 4900)
        f.write(json.dumps({"id": "huge", "group": "a", "text": text}) + "\n")
    server.refuse = "Zyzzyva"
    cfg = tmp_path / "ctx.toml"
    cfg.write_text("max_model_len = 100000\n")
    return corpus, cfg


# --- finding 5: report.md, run.json and the exit status agree -----------------------


@pytest.mark.in_process
def test_score_with_a_rejected_record_says_exit_1_in_report_md_and_run_json(server, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=3)
    with corpus.open("a") as f:
        f.write('{"id": 5, "text": "x"}\n')
    assert _score(server, tmp_path, corpus).returncode == 1
    rec = _record(tmp_path)
    assert rec["status"] == "complete" and rec["exit_status"] == 1
    md = (tmp_path / "out" / "report.md").read_text()
    assert "exit status 1" in md and "0 failed" not in md.split("\n\n")[1].split("scored")[0]
    assert "1 bad input record(s)" in md and "c.jsonl:3 field `id`: expected a string, got a number" in md


@pytest.mark.in_process
def test_a_failed_story_keeps_its_row_with_the_reason_and_positions_are_counted_as_written(server, tmp_path):
    corpus, cfg = _with_huge_story(tmp_path, server)
    assert _score(server, tmp_path, corpus, "--config", str(cfg)).returncode == 1
    rows = (tmp_path / "out" / "stories.csv").read_text().splitlines()
    huge = [r for r in rows if r.startswith("huge,")]
    assert len(huge) == 1 and ",0," in huge[0] and "failed: position" in huge[0] and "HTTP 400" in huge[0]
    lines = (tmp_path / "out" / "positions.jsonl").read_text().splitlines()
    rec = _record(tmp_path)
    assert rec["positions"] == len(lines) and rec["exit_status"] == 1
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"{len(lines)} positions in `positions.jsonl`" in md
    assert "story `huge` failed at position" in md
    # the failed story is no member of its group: n counts the scored stories only
    groups = (tmp_path / "out" / "groups.csv").read_text()
    assert sum(int(r.split(",")[7]) + int(r.split(",")[8]) for r in groups.splitlines()[1:]
               if ",mean_nr," in r) == 2


@pytest.mark.in_process
def test_the_cost_of_a_resumed_or_cached_rerun_counts_every_invocation(server, tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=4)
    assert _score(server, tmp_path, corpus, "--gpu-hour-usd", "3600").returncode == 0
    first = _record(tmp_path)
    assert first["invocations"] == {"count": 1, "wall_seconds": first["wall_seconds"]}
    assert _score(server, tmp_path, corpus, "--gpu-hour-usd", "3600").returncode == 0  # from the cache
    second = _record(tmp_path)
    assert second["invocations"]["count"] == 2
    total = second["invocations"]["wall_seconds"]
    assert total == pytest.approx(first["wall_seconds"] + second["wall_seconds"], abs=0.002)
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"= ${total / 3600 * 3600:.2f} per GPU" in md and "its 2 invocation(s)" in md


@pytest.mark.in_process
def test_report_md_states_the_wall_time_of_run_json_and_says_unseeded(server, tmp_path):
    assert _score(server, tmp_path, make_corpus(tmp_path / "c.jsonl", 1, seed=5)).returncode == 0
    md = (tmp_path / "out" / "report.md").read_text()
    wall = float(re.search(r"wall time ([0-9.]+) s", md).group(1))
    assert wall == round(_record(tmp_path)["wall_seconds"], 1)
    assert "seed None" not in md and "unseeded" in md


@pytest.mark.in_process
def test_every_story_skipped_exits_1_like_an_empty_corpus(server, tmp_path, capsys):
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text(json.dumps({"id": "t", "text": "Too short to score."}) + "\n")
    r = _score(server, tmp_path, tiny, "--no-report")
    assert r.returncode == 1
    assert "no story to score (1 skipped by the word filter" in r.stderr
    assert _record(tmp_path)["exit_status"] == 1
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert _score(server, tmp_path, empty, "--no-report", out="out2").returncode == 1


def test_metrics_on_an_empty_file_exits_1(tmp_path, capsys):
    (tmp_path / "e.jsonl").write_text("\n")
    assert main(["metrics", str(tmp_path / "e.jsonl"), "--out", str(tmp_path / "m")]) == 1
    assert "e.jsonl: no curves (the file is empty)" in capsys.readouterr().err


# --- finding 6: figures ------------------------------------------------------------

REALISTIC = ["Human-written (Reddit WritingPrompts)", "GPT-4o vanilla baseline", "Qwen3-32B full pipeline",
             "Llama-3.1-70B beats only (warmup ablated)", "a single story"]


def _groups(names, per_group=4):
    rng = random.Random(0)
    curves = []
    for g in names:
        for i in range(1 if g == "a single story" else per_group):
            x = sorted({round(rng.uniform(0.1, 0.99), 3) for _ in range(25)})
            curves.append(Curve(id=f"{g}-{i}", group=g, x=x, y=[rng.random() for _ in x]))
    return compute(curves, n_resamples=200)[1]


def bars_plot(*args, **kw):
    from tension.core.reports.figures import bars_plot  # new with issue 16: the figure before it is saved

    return bars_plot(*args, **kw)


def _overlaps(boxes):
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]


@pytest.mark.parametrize("n_groups", [2, 5, 12, 30])
def test_group_labels_with_realistic_names_do_not_overprint_and_give_n(n_groups):
    names = (REALISTIC * 7)[:n_groups]
    names = [f"{n} #{i}" if i >= len(REALISTIC) else n for i, n in enumerate(names)]
    fig = bars_plot(_groups(names), ["mean_nr", "late_nr"], ["Mean NR", "Late NR"], "t", "no-rate", top=1.0)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    labels = fig.axes[0].get_xticklabels()
    assert len(labels) == n_groups and all("n = " in t.get_text() for t in labels)
    assert _overlaps([t.get_window_extent(r) for t in labels]) == []
    fig_box = fig.bbox
    assert all(fig_box.contains(*t.get_window_extent(r).p0) for t in labels)  # nothing cut off at the bottom


def test_a_group_of_one_story_has_no_interval_that_looks_exact():
    groups = _groups(["a single story", "GPT-4o vanilla baseline"])
    fig = bars_plot(groups, ["mean_nr"], ["Mean NR"], "t", "no-rate", top=1.0)
    ax = fig.axes[0]
    (container,) = [c for c in ax.containers if hasattr(c, "lines") and c.lines]
    segments = container.lines[2][0].get_segments()
    spans = [abs(s[1][1] - s[0][1]) for s in segments if len(s) == 2]  # a NaN interval draws no segment
    assert len(spans) == 1 and spans[0] > 0  # only the 4-story group has a bar, and it is no line
    assert any("no CI" in t.get_text() for t in ax.texts)


def test_an_empty_run_draws_no_negative_no_rates():
    fig = bars_plot(compute([])[1], ["mean_nr", "late_nr"], ["a", "b"], "t", "no-rate", top=1.0)
    ax = fig.axes[0]
    assert ax.get_ylim() == (0.0, 1.0) and any(t.get_text() == "no stories" for t in ax.texts)


def _run_dir(d: Path, ids_groups: dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    rng = random.Random(2)
    with (d / "positions.jsonl").open("w") as f:
        for sid, g in ids_groups.items():
            for k in range(1, 16):
                f.write(json.dumps({"id": sid, "group": g, "k": k, "pct": k / 16, "no_rate": rng.random()}) + "\n")
    return d


def test_the_three_bar_charts_are_the_same_size(tmp_path):
    import matplotlib.image  # at use: matplotlib and PIL ≈ 0.6 s of every worker's collection

    run = _run_dir(tmp_path / "r", {f"s{i}": REALISTIC[i % 4] for i in range(12)})
    report(run, n_resamples=100)
    shapes = {matplotlib.image.imread(run / "figures" / f).shape for f in ("nr.png", "ir.png", "retain.png")}
    assert len(shapes) == 1


def test_ids_that_clean_alike_get_their_own_curve_image(tmp_path):
    run = _run_dir(tmp_path / "r", {"a/b": "x", "a_b": "x", "a:b": "x"})
    md = report(run, n_resamples=100).read_text()
    images = re.findall(r"!\[(a.b)\]\((figures/curves/[^)]+)\)", md)
    assert [i for i, _ in images] == ["a/b", "a_b", "a:b"]
    assert len({p for _, p in images}) == 3 and all((run / p).is_file() for _, p in images)


def test_rerunning_the_report_into_an_old_folder_leaves_no_stale_image(tmp_path):
    run = _run_dir(tmp_path / "r", {"s1": "x", "s2": "x"})
    report(run, n_resamples=100)
    (run / "figures" / "curves" / "old-story.png").write_bytes(b"stale")
    report(run, n_resamples=100, max_curves=1)
    assert sorted(p.name for p in (run / "figures" / "curves").iterdir()) == ["s1.png"]


# --- finding 7: inputs and flags ---------------------------------------------------


def test_tension_run_help_and_every_verbs_help_run():
    r = subprocess.run([EXE, "--help"], capture_output=True, text=True, timeout=300)  # the installed script
    assert r.returncode == 0 and "score" in r.stdout and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["report", "RUN", "--resamples", "-5"], ["report", "RUN", "--max-curves", "-1"],
                                  ["compare", "RUN", "RUN", "--resamples", "-1"]])
def test_negative_counts_are_usage_errors_before_any_work(tmp_path, args, tension_run):
    run = _run_dir(tmp_path / "r", {"s1": "x"})
    r = tension_run(*[str(run) if a == "RUN" else a for a in args])
    assert r.returncode == 2 and "expected an integer >= 0" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("verb", ["report", "compare"])
def test_a_corrupt_run_json_is_a_clear_error(tmp_path, verb, tension_run):
    run = _run_dir(tmp_path / "r", {"s1": "x"})
    (run / "run.json").write_text('{"status": "complete",\n  oops')
    r = tension_run(verb, str(run), *([str(run)] if verb == "compare" else []))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{run / 'run.json'}:2: not valid JSON" in r.stderr


@pytest.mark.parametrize("args", [
    ["score", "C", "--out", ""], ["metrics", "C", "--out", ""], ["generate", "C", "--out", "", "--mode", "vanilla"],
    ["fairplay-metrics", "C", "--out", ""], ["compare", "R", "R", "--out", ""], ["estimate", "C", "--json", ""],
    ["score", "", "--out", "o"]])
def test_an_empty_out_or_path_is_rejected_before_anything_is_written(tmp_path, args, tension_run, monkeypatch):
    args = [str(tmp_path / "c.jsonl") if a == "C" else str(tmp_path) if a == "R" else a for a in args]
    monkeypatch.chdir(tmp_path)  # where an empty path would be written
    r = tension_run(*args)
    assert r.returncode == 2 and "expected a value, got ''" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.in_process
def test_a_corpus_with_a_byte_order_mark_and_null_groups_is_scored(server, tmp_path):
    src = make_corpus(tmp_path / "src.jsonl", 2, seed=6)
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    rows[1]["group"] = None  # as fairplay writes a story without a group
    corpus = tmp_path / "bom.jsonl"
    corpus.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    assert _score(server, tmp_path, corpus, "--no-report").returncode == 0
    ids = {json.loads(x)["id"]: json.loads(x)["group"]
           for x in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()}
    assert ids == {"story-000": "a", "story-001": "all"}


def test_curves_with_a_byte_order_mark_and_a_null_group(tmp_path, capsys):
    line = {"id": "s", "group": None, "x": [0.2, 0.5, 0.8], "y": [0.5, 0.6, 0.4]}
    (tmp_path / "c.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps(line).encode() + b"\n")
    assert main(["metrics", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "stories.csv").read_text().splitlines()[1].startswith("s,all,3,")


def test_a_binary_file_stops_after_a_few_errors_and_counts_the_rest(tmp_path, tension_run):
    data = random.Random(7).randbytes(100_000)
    (tmp_path / "bin.jsonl").write_bytes(data)
    r = tension_run("metrics", str(tmp_path / "bin.jsonl"), "--out", str(tmp_path / "m"))
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert r.returncode == 1 and 1 <= len(errors) <= 6, r.stderr
    n_lines = data.count(b"\n") + (not data.endswith(b"\n"))
    unread = int(re.search(r"stopped reading: (\d+) more lines not read", r.stderr).group(1))
    assert 0 < unread < n_lines


@pytest.mark.in_process
def test_dash_reads_the_corpus_and_the_curves_from_standard_input(server, tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=8)
    r = tension_run("score", "-", "--out", str(tmp_path / "out"), "--base-url", server.base_url, "--model",
                    "test-gen", "--endings", "3", "--cache", str(tmp_path / "cache"), "--no-progress",
                    input=corpus.read_text())
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "positions.jsonl").read_text()
    r = tension_run("metrics", "-", "--out", str(tmp_path / "m"), input='{"id": "s", "x": [0.5], "y": [1]}\n{"id": 1}\n')
    assert r.returncode == 1 and "<stdin>:2 field `id`" in r.stderr


def test_cache_stats_on_a_missing_path_creates_no_cache(tmp_path, tension_run):
    r = tension_run("cache", "stats", "--cache", str(tmp_path / "typo"))
    assert r.returncode == 1 and "typo: no cache here" in r.stderr and not (tmp_path / "typo").exists()


@pytest.mark.in_process
def test_outputs_respect_the_umask(server, tmp_path, tension_run):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=9)
    umask = os.umask(0o022)  # `umask 022` for the command, as `sh -c 'umask 022 && exec …'` set it; put back after
    try:
        r = tension_run("score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", server.base_url,
                        "--model", "test-gen", "--endings", "3", "--cache", str(tmp_path / "cache"), "--no-progress")
    finally:
        os.umask(umask)
    assert r.returncode == 0, r.stderr
    for name in ("positions.jsonl", "stories.csv", "groups.csv", "run.json", "report.md", "table6.csv"):
        assert (tmp_path / "out" / name).stat().st_mode & 0o777 == 0o644, name


@pytest.mark.in_process
def test_generate_with_every_idea_failed_writes_no_file_and_exits_1(server, tmp_path, capsys):
    ideas = tmp_path / "i.jsonl"
    ideas.write_text(json.dumps({"id": "huge", "idea": "word " * 5000}) + "\n")  # over the context: HTTP 400
    out = tmp_path / "o.jsonl"
    rc = main(["generate", str(ideas), "--out", str(out), "--mode", "vanilla", "--base-url", server.base_url,
               "--model", "test-gen", "--cache", str(tmp_path / "cache"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and not out.exists()
    assert "no idea could be generated" in err and "the others were generated" not in err
    assert json.loads((tmp_path / "o.run.json").read_text())["exit_status"] == 1
