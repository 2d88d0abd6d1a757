"""Several servers per role behind the vLLM router (core/llm/router.py, the real
`vllm-router` binary): three loopback servers stand in for three GPUs. Story and
position affinity through the routing key, load spread, a killed and a hung
worker with identical outputs, model checks, figures in run.json, the config
forms and shards. Every run is in this process (the API, or the CLI's `main`); the
only processes are the routers, the real binary each routed run starts."""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

import pytest

import tension
from tension.core.cli import main
from tension.core.config import load_config
from tension.core.errors import ConfigError
from tension.core.llm import replicas as replicas_mod
from tension.core.llm import router as router_mod
from tension.core.llm.prometheus import by_label, parse_samples, prefix_cache_hit_rate
from tension.core.llm.replicas import Replica, parse_replicas
from tension.testing.corpus import make_corpus
from tension.testing.openai_server import CHAT_PATH, LoopbackServer, judge_blocks

N = 4  # endings per position
MODELS = ["test-gen", "test-judge"]
OUTPUTS = ("positions.jsonl", "stories.csv", "groups.csv", "meta.jsonl")


def cfg_for(urls, tmp_path, cache="cache", **kw):
    base = {"base_url": ",".join(urls) if isinstance(urls, list) else urls, "model": "test-gen",
            "judge_model": "test-judge", "cache": str(tmp_path / cache), "endings": N, "progress": False,
            "seed": 7, "report": False}
    base.update(kw)
    return base  # the API's keywords


def urls(servers) -> list[str]:
    return [s.base_url for s in servers]


def story_heads(corpus: Path) -> dict[str, str]:
    """story id -> its first five words (inside its first sentence, so every
    prefix and tokenize prompt of the story starts with them)."""
    heads = {}
    for line in corpus.read_text().splitlines():
        d = json.loads(line)
        heads[d["id"]] = " ".join(d["text"].split()[:5])
    assert len(set(heads.values())) == len(heads)
    return heads


def story_of(text: str, heads: dict[str, str]) -> str | None:
    return next((sid for sid, h in heads.items() if text.startswith(h)), None)


def who_served(servers, heads) -> tuple[dict[str, set[int]], dict[str, set[int]], list[int]]:
    """(story id -> servers that got its generation/tokenize requests,
        judge continuation -> servers that got its judge requests,
        judge requests per server), from each server's own request log."""
    stories: dict[str, set[int]] = collections.defaultdict(set)
    positions: dict[str, set[int]] = collections.defaultdict(set)
    judge_counts = [0] * len(servers)
    for i, srv in enumerate(servers):
        for r in srv.requests:
            if r.status != 200 or r.body is None:
                continue
            if r.path == "/tokenize":
                sid = story_of(r.body.get("prompt", ""), heads)
            elif r.path == CHAT_PATH and r.kind == "generation":
                sid = story_of(r.body["messages"][-1]["content"].split("STORY SO FAR:\n", 1)[1], heads)
                assert sid is not None
            elif r.path == CHAT_PATH and r.kind == "judge":
                positions[judge_blocks(r.body["messages"])[0]].add(i)
                judge_counts[i] += 1
                continue
            else:
                continue
            if sid is not None:
                stories[sid].add(i)
    return stories, positions, judge_counts


def outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in OUTPUTS}


@pytest.fixture(scope="module")
def clean_outputs(tmp_path_factory):
    """Outputs of a run against one server with a fresh cache, per corpus (by content)."""
    done: dict[bytes, dict[str, bytes]] = {}

    def get(corpus: Path) -> dict[str, bytes]:
        key = corpus.read_bytes()
        if key not in done:
            tmp = tmp_path_factory.mktemp("clean")
            with LoopbackServer(model=MODELS) as one:
                s = tension.score(corpus, out=tmp / "out", **cfg_for(one.base_url, tmp)).summary
            assert s.status == "complete", s.error
            done[key] = outputs(tmp / "out")
        return done[key]

    return get


# --- config forms ----------------------------------------------------------------

def test_parse_replicas_forms_and_errors():
    assert parse_replicas("http://a:1, http://b:2/v1/", "base_url") == [
        Replica(url="http://a:1"), Replica(url="http://b:2")]
    assert parse_replicas(["http://a:1", {"url": "http://b:2", "weight": 1}], "base_url") == [
        Replica(url="http://a:1"), Replica(url="http://b:2")]
    for value, msg in [
        ("http://a:1,ftp://b", "base-url[1]: expected an http(s) URL, got 'ftp://b'"),
        ("localhost:8000", "base-url: expected an http(s) URL, got 'localhost:8000'"),
        ([{"url": "http://a:1", "weight": 0}], "base-url: weight: expected a number > 0, got 0"),
        ([{"url": "http://a:1"}, {"url": "http://b:1", "wieght": 2}], "base-url[1]: Object contains unknown field"),
        (["http://a:1", "http://a:1/"], "base-url[1]: http://a:1 is listed twice"),
        ([], "base-url: expected at least one URL"),
        ("http://a:1,", "base-url[1]: expected an http(s) URL, got ''"),
    ]:
        with pytest.raises(ConfigError) as e:
            parse_replicas(value, "base_url")
        assert msg in str(e.value)


def test_config_file_lists_servers_and_weights_are_refused_with_the_reason(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('base_url = [{url = "http://g1:8000", weight = 2}, {url = "http://g2:8000"}]\n')
    with pytest.raises(ConfigError, match=r"base-url\[0\]: weights are not supported: the vLLM router's "
                                          r"consistent hashing weighs servers equally"):
        load_config(toml, {})
    toml.write_text('base_url = [{url = "http://g1:8000"}, "http://g2:8000"]\n'
                    'judge-base-url = ["http://j1:8001", "http://j2:8001/v1"]\n')
    cfg = load_config(toml, {})
    assert cfg.generation_replicas() == [Replica(url="http://g1:8000"), Replica(url="http://g2:8000")]
    assert [r.url for r in cfg.judge_replicas()] == ["http://j1:8001", "http://j2:8001"]
    # one server may carry a weight (it changes nothing)
    assert load_config(None, {"base_url": [{"url": "http://g1:8000", "weight": 2}]}).generation_replicas() == [
        Replica(url="http://g1:8000", weight=2.0)]
    # the flag (a comma-separated string) overrides the file's list
    assert [r.url for r in load_config(toml, {"base_url": "http://x:1,http://y:1"}).generation_replicas()] == [
        "http://x:1", "http://y:1"]
    # no judge servers given: the generation servers judge
    assert load_config(None, {"base_url": "http://x:1,http://y:1"}).judge_replicas() == [
        Replica(url="http://x:1"), Replica(url="http://y:1")]
    toml.write_text('base_url = [{url = "http://g1:8000", weight = -1}]\n')
    with pytest.raises(ConfigError, match=r"base-url: weight: expected a number > 0, got -1"):
        load_config(toml, {})


def test_prometheus_text_is_summed_over_label_sets():
    text = ('# HELP vllm:prefix_cache_hits_total Prefix cache hits.\n# TYPE vllm:prefix_cache_hits_total counter\n'
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 120.0\n'
            'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 30.0\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 300\n'
            'vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7959871603402967e+09\n'
            'spaced{model_name="a b}c"} 2.5\n'
            'plain_counter 7 1712345678\nbroken{a="b"} notanumber\n')
    got = parse_samples(text)
    assert got == {"vllm:prefix_cache_hits_total": 150.0, "vllm:prefix_cache_queries_total": 300.0,
                   "vllm:prefix_cache_hits_created": 1.7959871603402967e+09, "spaced": 2.5, "plain_counter": 7.0}



def test_router_metrics_are_read_per_worker_label():
    text = ('vllm_router_processed_requests_total{worker="http://a:1"} 10\n'
            'vllm_router_processed_requests_total{worker="http://b:2",x="y"} 3\n'
            'vllm_router_cb_state{worker="http://a:1"} 1\n')
    assert by_label(text, "vllm_router_processed_requests_total", "worker") == {"http://a:1": 10.0, "http://b:2": 3.0}
    assert by_label(text, "vllm_router_cb_state", "worker") == {"http://a:1": 1.0}
    assert by_label(text, "missing", "worker") == {}
    outcomes = ('vllm_router_cb_outcomes_total{worker="http://a:1",outcome="success"} 7\n'
                'vllm_router_cb_outcomes_total{worker="http://a:1",outcome="failure"} 2\n'
                'vllm_router_cb_outcomes_total{outcome="failure",worker="http://b:2"} 1\n')
    assert by_label(outcomes, "vllm_router_cb_outcomes_total", "worker", where={"outcome": "failure"}) == {
        "http://a:1": 2.0, "http://b:2": 1.0}


# --- through the router ----------------------------------------------------------


def test_story_affinity_load_spread_and_same_outputs_as_one_server(trio, tmp_path, clean_outputs):
    corpus = make_corpus(tmp_path / "c.jsonl", 9, seed=3)
    heads = story_heads(corpus)
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(urls(trio), tmp_path)).summary
    assert s.status == "complete", s.error
    assert outputs(tmp_path / "out") == clean_outputs(corpus)

    stories, positions, judge_counts = who_served(trio, heads)
    assert set(stories) == set(heads)
    assert all(len(v) == 1 for v in stories.values()), stories  # a story's requests all hit one server
    assert len(positions) == s.positions > 60
    assert all(len(v) == 1 for v in positions.values())  # a position's judge requests hit one server
    # Load: judge requests follow positions; with > 60 positions each server's share
    # is within [0.15, 0.55] unless the router's hash is badly skewed.
    total = sum(judge_counts)
    assert all(0.15 <= c / total <= 0.55 for c in judge_counts), judge_counts
    assert len({next(iter(v)) for v in stories.values()}) >= 2  # stories spread over servers
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    gen, judge = run["replicas"]["generation"], run["replicas"]["judge"]
    assert [g["url"] for g in gen] == [j["url"] for j in judge] == urls(trio)
    router = gen[0]["router"]
    assert router.startswith("http://127.0.0.1:") and all(f["router"] == router for f in gen + judge)
    # one router for both roles (the judge runs on the generation servers): its count
    # per worker is every request the worker answered through it (chat and tokenize)
    for g, srv in zip(gen, trio):
        answered = sum(1 for r in srv.requests if r.path in (CHAT_PATH, "/tokenize") and r.status == 200)
        assert g["requests"] == answered and g["up"] and g["failures"] == 0
        assert g["circuit_breaker"] == "closed"
        m = srv.metrics()
        assert g["prefix_cache_hit_rate"] == pytest.approx(m["prefix_cache_hits"] / m["prefix_cache_queries"],
                                                           abs=1e-6)
    assert sum(g["requests"] for g in gen) == s.requests["generation"] + s.requests["judge"] + s.requests["tokenize"]
    assert set(run["lanes"]) == {"generation", "judge", "tokenize"}
    assert run["lanes"]["judge"]["limit"] == 3 * run["config"]["judge_concurrency"]

    # cache keys do not depend on the server: one other server, same cache, sends nothing
    with LoopbackServer(model=MODELS) as other:
        s2 = tension.score(corpus, out=tmp_path / "out2", **cfg_for(other.base_url, tmp_path)).summary
        assert s2.status == "complete"
        assert other.count(path=CHAT_PATH) == 0 and other.count(path="/tokenize") == 0
    assert outputs(tmp_path / "out2") == clean_outputs(corpus)


def _kill_mid_story(servers, heads, done_at, hard=True):
    """A thread that kills (or hangs) the first of `servers` to have answered `done_at`
    generation requests of one story; the list it returns holds (that server's index,
    the story) after."""
    killed: list[tuple[int, str]] = []

    def answered(server) -> collections.Counter:
        per_story: collections.Counter = collections.Counter()
        for r in list(server.requests):
            if r.path == CHAT_PATH and r.kind == "generation" and r.status == 200:
                per_story[story_of(r.body["messages"][-1]["content"].split("STORY SO FAR:\n", 1)[1], heads)] += 1
        return per_story

    def killer():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for i, server in enumerate(servers):
                sid, done = max(answered(server).items(), key=lambda kv: kv[1], default=(None, 0))
                if done >= done_at:
                    if hard:
                        server.shutdown_hard()
                    else:
                        server.delay = 3600  # hung: it accepts requests and never answers
                    killed.append((i, sid))
                    return
            time.sleep(0.005)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    return th, killed


def _failing_mid_run(trio, tmp_path, hard: bool):
    """A six-story corpus, its story heads, and a thread that kills (`hard`) or hangs
    mid-story the first server to be three generation answers into a story. Chosen
    while the run goes: no routed run first to learn where the router sends each story
    (that took a run and a router of its own, ≈ 2.5 s of CPU)."""
    corpus = make_corpus(tmp_path / "c.jsonl", 6, seed=3)
    heads = story_heads(corpus)
    for srv in trio:
        srv.delay = 0.005  # so the run is still going when the kill lands
    th, killed = _kill_mid_story(trio, heads, 3, hard=hard)
    return corpus, heads, th, killed


def test_killing_a_worker_mid_run_gives_the_clean_outputs_and_names_it(trio, tmp_path, clean_outputs):
    corpus, heads, th, killed = _failing_mid_run(trio, tmp_path, hard=True)
    s = tension.score(corpus, out=tmp_path / "out",
                      **cfg_for(urls(trio), tmp_path, gen_concurrency=4, judge_concurrency=16)).summary
    th.join()
    assert killed, "the run ended before the kill"
    owner, target = killed[0]
    dead = trio[owner].base_url
    assert s.status == "complete", s.error
    assert outputs(tmp_path / "out") == clean_outputs(corpus)  # --seed: the retried requests sample the same
    assert any(e.startswith(f"generation server {dead} unhealthy") for e in s.replica_events), s.replica_events
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    figs = [f for f in run["replicas"]["generation"] if f["url"] == dead]
    assert not figs[0]["up"] and figs[0]["failures"] >= 1
    # the story it was working on was finished by another server
    stories, _, _ = who_served(trio, heads)
    assert owner in stories[target] and len(stories[target]) == 2


def test_a_hung_worker_is_left_behind_within_the_routers_request_timeout(trio, tmp_path, clean_outputs):
    corpus, heads, th, hung = _failing_mid_run(trio, tmp_path, hard=False)
    # the router gives up on a request after request_timeout_secs; a short one here
    t0 = time.monotonic()
    # the router leaves a server after half the client's --timeout (core/llm/router.py)
    s = tension.score(corpus, out=tmp_path / "out",
                      **cfg_for(urls(trio), tmp_path, gen_concurrency=4, judge_concurrency=16, timeout=8)).summary
    wall = time.monotonic() - t0
    th.join()
    assert hung, "the run ended before the hang"
    _, target = hung[0]
    assert s.status == "complete", s.error
    assert outputs(tmp_path / "out") == clean_outputs(corpus)
    assert wall < 60, wall  # bounded: one request timeout plus the rest of the work, not the client's 30 min
    stories, _, _ = who_served(trio, heads)
    assert len(stories[target]) == 2


def test_cli_score_with_a_comma_separated_list_and_a_server_serving_another_model(trio, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    odd = LoopbackServer(model=["other-gen", "test-judge"]).start()
    try:
        rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url",
                   f"{trio[0].base_url},{odd.base_url}/v1", "--model", "test-gen", "--judge-model", "test-judge",
                   "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress"])
    finally:
        odd.stop()
    err = capsys.readouterr().err
    assert rc == 2
    assert f"--base-url: server {odd.base_url} serves other-gen, test-judge, not test-gen" in err
    assert trio[0].count(path=CHAT_PATH) == 0  # nothing was scored

    # no --model: the servers' first models must agree
    with LoopbackServer(model=["other-gen"]) as odd2:
        rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url",
                   f"{trio[0].base_url},{odd2.base_url}", "--endings", "2", "--cache", str(tmp_path / "cache"),
                   "--no-progress"])
        err = capsys.readouterr().err
        assert rc == 2 and f"server {odd2.base_url} serves other-gen, not test-gen" in err

    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", ",".join(urls(trio)),
               "--model", "test-gen", "--judge-model", "test-judge", "--endings", "2",
               "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert sum(srv.count(path=CHAT_PATH, kind="generation") for srv in trio) > 0
    assert f"generation servers: {trio[0].base_url} " in err  # the per-server summary line


def test_an_unreachable_server_at_start_is_named_before_any_work(trio, tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", 1, seed=3)
    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url",
               f"{trio[0].base_url},http://127.0.0.1:9", "--model", "test-gen", "--judge-model", "test-judge",
               "--endings", "2", "--cache", str(tmp_path / "cache"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc != 0 and "http://127.0.0.1:9" in err and "Traceback" not in err
    assert trio[0].count(path=CHAT_PATH) == 0


def test_serve_profile_paper_replicas_prints_one_engine_pair_per_gpu_and_the_router(capsys):
    assert main(["serve", "--profile", "paper", "--replicas", "3", "--generator-path", "/m/g",
                 "--judge-path", "/m/j"]) == 0
    out = capsys.readouterr().out.splitlines()
    engines = [line for line in out if " vllm serve " in line]
    assert len(engines) == 6
    ports = [int(line.split("--port ")[1].split()[0]) for line in engines]
    gpus = [line.split("CUDA_VISIBLE_DEVICES=")[1].split()[0] for line in engines]
    assert ports == [8000, 8001, 8002, 8003, 8004, 8005] and gpus == ["0", "0", "1", "1", "2", "2"]
    assert all(("/m/g" in line) == (p % 2 == 0) for line, p in zip(engines, ports))
    routers = [line for line in out if line.startswith("vllm-router ")]
    assert len(routers) == 2  # one per role
    assert "--policy sticky_least_loaded" in routers[0]
    assert all(f"http://localhost:{p}" in routers[0] for p in (8000, 8002, 8004))
    assert all(f"http://localhost:{p}" in routers[1] for p in (8001, 8003, 8005))
    score_line = next(line for line in out if "tension-run score" in line)
    flags = score_line.split()
    assert flags[flags.index("--base-url") + 1] == "http://HOST:30000"
    assert flags[flags.index("--judge-base-url") + 1] == "http://HOST:30001"
    # one URL per role now carries three engines' worth of requests
    assert flags[flags.index("--gen-concurrency") + 1] == "192" and flags[flags.index("--judge-concurrency") + 1] == "1536"
    # --replicas belongs to the GPU profile only
    assert main(["serve", "--embedded", "--replicas", "2"]) == 2
    with pytest.raises(SystemExit) as e:  # a usage error of the flag's declared bounds, at parse time
        main(["serve", "--profile", "paper", "--replicas", "0"])
    assert e.value.code == 2
    assert "--replicas: expected an integer >= 1, got 0" in capsys.readouterr().err


def test_a_judge_on_servers_of_its_own_gets_a_router_of_its_own_and_servers_without_metrics(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=5)
    heads = story_heads(corpus)
    a = LoopbackServer(model=MODELS, serve_metrics=False).start()
    b = LoopbackServer(model=MODELS).start()
    c = LoopbackServer(model=MODELS).start()
    try:
        toml = tmp_path / "c.toml"
        toml.write_text(f'base-url = ["{a.base_url}", "{b.base_url}"]\njudge-base-url = ["{c.base_url}"]\n')
        s = tension.score(corpus, out=tmp_path / "out", config=toml, model="test-gen", judge_model="test-judge",
                          cache=str(tmp_path / "cache"), endings=N, progress=False, report=False).summary
        assert s.status == "complete", s.error
        stories, _, judge_counts = who_served([a, b, c], heads)
        assert all(len(served) == 1 and served <= {0, 1} for served in stories.values())
        assert judge_counts[:2] == [0, 0] and judge_counts[2] > 0  # the judge has its own (single) server
        gen = s.replicas["generation"]
        assert [g["url"] for g in gen] == [a.base_url, b.base_url]
        assert gen[0]["prefix_cache_hit_rate"] is None  # no /metrics: tolerated, no figure
        assert gen[1]["prefix_cache_hit_rate"] is not None
        judge = s.replicas["judge"]
        assert judge[0]["url"] == c.base_url and judge[0]["router"] is None
        assert judge[0]["requests"] == judge_counts[2]  # one server: the client's own count
    finally:
        for srv in (a, b, c):
            srv.stop()


def test_server_figures_carry_no_url_password():
    from tension.core.llm.client import Client
    from tension.core.llm.router import Router

    router = Router("generation", [Replica(url="http://me:pw-4f2a9c@gpu0:8000"), Replica(url="http://gpu1:8000")],
                    Client(), limit=1)
    figs = router.figures()
    assert [f["url"] for f in figs] == ["http://me:***@gpu0:8000", "http://gpu1:8000"]
    assert "pw-4f2a9c" not in json.dumps(figs) and "pw-4f2a9c" not in router.postfix()
    assert router.workers[0] == "http://me:pw-4f2a9c@gpu0:8000"  # requests still go to the server as given


def test_module_exports():
    for mod in (replicas_mod, router_mod):
        for name in mod.__all__:
            assert hasattr(mod, name)


# --- --shard I/N: several score processes on one cache ------------------------------


def test_shards_split_the_stories_and_a_last_run_collects_them_from_the_cache(tmp_path, clean_outputs):
    corpus = make_corpus(tmp_path / "c.jsonl", 6, seed=3)
    ids = list(story_heads(corpus))
    with LoopbackServer(model=MODELS) as srv:
        shards: list[list[str]] = []
        for i in range(3):
            s = tension.score(corpus, out=tmp_path / f"shard{i}",
                              **cfg_for(srv.base_url, tmp_path, shard=f"{i}/3")).summary
            assert s.status == "complete", s.error
            rows = (tmp_path / f"shard{i}" / "stories.csv").read_text().splitlines()[1:]
            shards.append([row.split(",")[0] for row in rows])
        assert sorted(sum(shards, [])) == sorted(ids)  # every story in exactly one shard
        assert sum(1 for sh in shards if sh) >= 2
        sent = srv.count(path=CHAT_PATH)
        s = tension.score(corpus, out=tmp_path / "all", **cfg_for(srv.base_url, tmp_path)).summary
        assert srv.count(path=CHAT_PATH) == sent  # the shards left everything in the cache
    assert outputs(tmp_path / "all") == clean_outputs(corpus)
    for bad in ("3/3", "1", "a/2", "-1/2"):
        with pytest.raises(ConfigError, match=r"shard: expected I/N with 0 <= I < N"):
            load_config(None, cfg_for("http://x:1", tmp_path, shard=bad))


def test_hit_rate_is_taken_over_the_run_and_survives_a_restarted_server():
    q, h = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
    rate = prefix_cache_hit_rate
    assert rate({q: 1000.0, h: 900.0}, {q: 3000.0, h: 1900.0}) == 0.5  # deltas, not totals (0.63)
    assert rate(None, {q: 400.0, h: 100.0}) == 0.25  # no start reading: since the server started
    assert rate({q: 5000.0, h: 4000.0}, {q: 400.0, h: 300.0}) == 0.75  # restarted mid-run: counters reset
    assert rate({q: 10.0, h: 1.0}, {q: 10.0, h: 1.0}) is None  # no query during the run
    assert rate({q: 10.0, h: 1.0}, None) is None and rate(None, {"other": 1.0}) is None


def test_batched_judge_prompts_through_the_router_stay_with_their_position(tmp_path, clean_outputs):
    """Issue 19 behind vllm-router: a position's judge prompts travel as /v1/completions
    requests (the warm one, then the rest), routed by the position's key to one
    server; the outputs are those of one server and one chat request per ending."""
    from tension.testing.openai_server import COMPLETIONS_PATH, parse_rendered

    servers = [LoopbackServer(model=MODELS, batching=True).start() for _ in range(3)]
    try:
        corpus = make_corpus(tmp_path / "c.jsonl", 9, seed=3)
        s = tension.score(corpus, out=tmp_path / "out", **cfg_for(urls(servers), tmp_path)).summary
        assert s.status == "complete", s.error
        assert outputs(tmp_path / "out") == clean_outputs(corpus)
        where: dict[str, set[int]] = collections.defaultdict(set)
        for i, srv in enumerate(servers):
            assert srv.count(kind="judge") == 0
            for r in srv.requests:
                if r.path == COMPLETIONS_PATH and r.status == 200:
                    for prompt in r.body["prompt"]:
                        where[judge_blocks(parse_rendered(prompt))[0]].add(i)
        assert len(where) == s.positions > 60
        assert all(len(v) == 1 for v in where.values())  # a position's prompts on one server
        assert len({next(iter(v)) for v in where.values()}) >= 2  # positions spread over the servers
        run = json.loads((tmp_path / "out" / "run.json").read_text())
        assert run["judge_batch"]["batched"] and run["judge_batch"]["prompts"] == s.requests["judge"]
    finally:
        for srv in servers:
            srv.stop()


def test_each_server_is_asked_for_its_models_once(trio, tmp_path):
    """Several servers: the model ids are resolved on each (Router.resolve_model) and
    the pre-flight check reuses those answers instead of asking every server again."""
    corpus = make_corpus(tmp_path / "c.jsonl", 2, seed=5)
    s = tension.score(corpus, out=tmp_path / "out", **cfg_for(urls(trio), tmp_path)).summary
    assert s.status == "complete", s.error
    assert [srv.count(path="/v1/models") for srv in trio] == [1, 1, 1]
    assert s.requests["models"] == 3
