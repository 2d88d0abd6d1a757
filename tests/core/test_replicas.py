"""Several replicas per role (core/llm/replicas.py and core/llm/router.py): three loopback servers stand in
for three GPUs. Story affinity, load spread, failover with identical outputs,
re-admission, the rendezvous-hashing share that moves when a replica is added,
model checks and the config forms."""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from pathlib import Path

import pytest
from conftest import make_corpus
from openai_server import CHAT_PATH, LoopbackServer, judge_blocks

from tension.core.llm import replicas as replicas_mod
from tension.core.cli import main
from tension.core.llm.client import Client, RetryPolicy
from tension.core.config import load_config
from tension.core.errors import ConfigError, RetryBudgetError
from tension.core.llm.protocol import ChatRequest
from tension.core.llm import router as router_mod
from tension.core.llm.prometheus import parse_samples, prefix_cache_hit_rate
from tension.core.llm.replicas import Replica, hrw_order, parse_replicas
from tension.core.llm.router import Router
from tension.core.run.scheduler import Scheduler
from tension.core.pipelines.score import score

N = 4  # endings per position
MODELS = ["test-gen", "test-judge"]
OUTPUTS = ("positions.jsonl", "stories.csv", "groups.csv", "meta.jsonl")


@pytest.fixture
def trio():
    servers = [LoopbackServer(model=MODELS).start() for _ in range(3)]
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


def cfg_for(urls, tmp_path, cache="cache", **kw):
    base = {"base_url": ",".join(urls) if isinstance(urls, list) else urls, "model": "test-gen",
            "judge_model": "test-judge", "cache": str(tmp_path / cache), "endings": N, "progress": False,
            "seed": 7, "report": False}
    base.update(kw)
    return load_config(None, base)


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
                s = score(cfg_for(one.base_url, tmp), corpus, tmp / "out")
            assert s.status == "complete", s.error
            done[key] = outputs(tmp / "out")
        return done[key]

    return get


# --- config forms ----------------------------------------------------------------


def test_parse_replicas_forms_and_errors():
    assert parse_replicas("http://a:1, http://b:2/v1/", "base_url") == [
        Replica(url="http://a:1"), Replica(url="http://b:2")]
    assert parse_replicas(["http://a:1", {"url": "http://b:2", "weight": 3}], "base_url") == [
        Replica(url="http://a:1", weight=1.0), Replica(url="http://b:2", weight=3.0)]
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


def test_config_file_lists_replicas_with_weights(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('base_url = [{url = "http://g1:8000", weight = 2}, {url = "http://g2:8000"}]\n'
                    'judge-base-url = ["http://j1:8001", "http://j2:8001/v1"]\n')
    cfg = load_config(toml, {})
    assert cfg.generation_replicas() == [Replica(url="http://g1:8000", weight=2.0), Replica(url="http://g2:8000")]
    assert [r.url for r in cfg.judge_replicas()] == ["http://j1:8001", "http://j2:8001"]
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


# --- rendezvous hashing ----------------------------------------------------------

KEYS = [f"story-{i:05d}" for i in range(20_000)]


def owners(reps) -> list[str]:
    return [reps[hrw_order(k, reps)[0]].url for k in KEYS]


def test_hrw_shares_follow_the_weights():
    reps = [Replica(url="http://a:1"), Replica(url="http://b:1"), Replica(url="http://c:1", weight=2.0)]
    share = collections.Counter(owners(reps))
    # binomial sd of a share over 20,000 keys is <= 0.0035: a tolerance of 0.015 is > 4 sd
    assert share["http://a:1"] / len(KEYS) == pytest.approx(0.25, abs=0.015)
    assert share["http://b:1"] / len(KEYS) == pytest.approx(0.25, abs=0.015)
    assert share["http://c:1"] / len(KEYS) == pytest.approx(0.50, abs=0.015)
    # the order is a permutation, fixed for a key, whatever order the replicas are listed in
    for k in KEYS[:200]:
        order = hrw_order(k, reps)
        assert sorted(order) == [0, 1, 2]
        rev = list(reversed(reps))
        assert [rev[i].url for i in hrw_order(k, rev)] == [reps[i].url for i in order]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_adding_a_replica_moves_only_its_share_and_only_to_it(n):
    old = [Replica(url=f"http://gpu{i}:8000") for i in range(n)]
    new = old + [Replica(url=f"http://gpu{n}:8000")]
    before, after = owners(old), owners(new)
    moved = [(a, b) for a, b in zip(before, after) if a != b]
    assert all(b == new[-1].url for _, b in moved)  # nothing moves between the old replicas
    assert len(moved) / len(KEYS) == pytest.approx(1 / (n + 1), abs=0.015)
    # and removing it again puts every key back where it was
    assert owners(old) == before


def test_removing_a_replica_moves_only_its_keys():
    reps = [Replica(url=f"http://gpu{i}:8000") for i in range(4)]
    before = owners(reps)
    after = owners(reps[:1] + reps[2:])
    for a, b in zip(before, after):
        if a != reps[1].url:
            assert a == b
        else:
            assert b != reps[1].url


# --- end to end: three replicas ----------------------------------------------------


def test_story_affinity_load_spread_and_same_outputs_as_one_server(trio, tmp_path, clean_outputs):
    corpus = make_corpus(tmp_path / "c.jsonl", 6, seed=3)
    heads = story_heads(corpus)
    s = score(cfg_for(urls(trio), tmp_path), corpus, tmp_path / "out")
    assert s.status == "complete", s.error
    assert outputs(tmp_path / "out") == clean_outputs(corpus)

    stories, positions, judge_counts = who_served(trio, heads)
    assert set(stories) == set(heads)
    assert all(len(v) == 1 for v in stories.values()), stories  # a story's requests all hit one replica
    assert len(positions) == s.positions > 60
    assert all(len(v) == 1 for v in positions.values())  # a position's judge requests hit one replica
    # Load: judge requests follow positions, ~1/3 each; with > 60 positions a share
    # outside [0.18, 0.50] would be a > 3 sd event (it is fixed by the hashes anyway).
    total = sum(judge_counts)
    assert all(0.18 <= c / total <= 0.50 for c in judge_counts), judge_counts
    assert sum(1 for v in stories.values() if v) == 6
    assert len({next(iter(v)) for v in stories.values()}) >= 2  # stories spread over replicas
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    gen = run["replicas"]["generation"]
    # the affinity is the documented one: each story's replica is first in its HRW
    # order, but for stories an idle replica took over before they started
    reps = [Replica(url=u) for u in urls(trio)]
    taken = [sid for sid, served in stories.items() if served != {hrw_order(sid, reps)[0]}]
    assert len(taken) == sum(g["stories_taken"] for g in gen)
    # taken from the end of the owner's queue: its own stories come first in corpus order
    order = list(heads)
    for sid in taken:
        kept = [o for o in order if hrw_order(o, reps)[0] == hrw_order(sid, reps)[0] and o not in taken]
        assert all(order.index(o) < order.index(sid) for o in kept)
    assert [g["url"] for g in gen] == urls(trio)
    assert sum(g["requests"] for g in gen) == s.requests["generation"]
    assert sum(j["requests"] for j in run["replicas"]["judge"]) == s.requests["judge"] == total
    for g, srv in zip(gen, trio):
        m = srv.metrics()
        assert g["prefix_cache_hit_rate"] == pytest.approx(m["prefix_cache_hits"] / m["prefix_cache_queries"])
        assert g["failures"] == 0 and g["up"] and g["taken_out"] == []
    assert set(run["lanes"]) == {f"{role} {u}" for role in ("generation", "judge", "tokenize") for u in urls(trio)}
    assert all(v["peak_in_flight"] <= v["limit"] for v in run["lanes"].values())

    # cache keys do not depend on the replica: one other server, same cache, sends nothing
    with LoopbackServer(model=MODELS) as other:
        s2 = score(cfg_for(other.base_url, tmp_path), corpus, tmp_path / "out2")
        assert s2.status == "complete"
        assert other.count(path=CHAT_PATH) == 0 and other.count(path="/tokenize") == 0
    assert outputs(tmp_path / "out2") == clean_outputs(corpus)


def test_killing_a_replica_mid_run_gives_the_clean_outputs_and_names_it(trio, tmp_path, clean_outputs):
    corpus = make_corpus(tmp_path / "c.jsonl", 6, seed=3)
    heads = story_heads(corpus)
    for srv in trio:
        srv.delay = 0.005  # so the run is still going when the kill lands
    # Kill the replica with the most stories while it works on its first one (which
    # no other replica takes over: they take from the end of a queue): once it has
    # answered a few of that story's generation requests, the rest are still to come.
    reps = [Replica(url=u) for u in urls(trio)]
    first_of = collections.defaultdict(list)
    for sid in heads:
        first_of[hrw_order(sid, reps)[0]].append(sid)
    owner = max(first_of, key=lambda i: len(first_of[i]))
    target = first_of[owner][0]
    killed: list[int] = []

    def killer():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = sum(1 for r in trio[owner].requests if r.path == CHAT_PATH and r.kind == "generation"
                       and r.status == 200 and heads[target] in r.body["messages"][-1]["content"])
            if done >= 3:
                trio[owner].shutdown_hard()
                killed.append(owner)
                return
            time.sleep(0.005)

    th = threading.Thread(target=killer)
    th.start()
    try:
        s = score(cfg_for(urls(trio), tmp_path, gen_concurrency=4, judge_concurrency=16), corpus, tmp_path / "out")
    finally:
        th.join()
    assert killed, "the run ended before the kill"
    dead = trio[killed[0]].base_url
    assert s.status == "complete", s.error
    assert outputs(tmp_path / "out") == clean_outputs(corpus)
    # the run says which replica failed
    assert any(e.startswith(f"generation replica {dead} taken out") or e.startswith(f"judge replica {dead} taken out")
               for e in s.replica_events), s.replica_events
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    dead_figs = [f for role in ("generation", "judge") for f in run["replicas"][role] if f["url"] == dead]
    assert any(f["taken_out"] for f in dead_figs) and not all(f["up"] for f in dead_figs)
    assert sum(f["rerouted"] for f in dead_figs) >= 1
    # the story it was working on was finished by another replica
    stories, positions, _ = who_served(trio, heads)
    assert owner in stories[target] and len(stories[target]) == 2


def test_cli_score_with_a_comma_separated_list_and_a_replica_serving_another_model(trio, tmp_path, capsys):
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
    assert f"--base-url: replica {odd.base_url} serves other-gen, test-judge, not test-gen" in err
    assert trio[0].count(path=CHAT_PATH) == 0  # nothing was scored

    # no --model: the replicas' first models must agree
    with LoopbackServer(model=["other-gen"]) as odd2:
        rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url",
                   f"{trio[0].base_url},{odd2.base_url}", "--endings", "2", "--cache", str(tmp_path / "cache"),
                   "--no-progress"])
        err = capsys.readouterr().err
        assert rc == 2 and f"replica {odd2.base_url} serves other-gen, not test-gen" in err

    rc = main(["score", str(corpus), "--out", str(tmp_path / "out"), "--base-url", ",".join(urls(trio)),
               "--model", "test-gen", "--judge-model", "test-judge", "--endings", "2",
               "--cache", str(tmp_path / "cache"), "--no-progress", "--no-report"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert sum(srv.count(path=CHAT_PATH, kind="generation") for srv in trio) > 0
    assert f"generation replicas: {trio[0].base_url} " in err  # the per-replica summary line


def test_serve_profile_paper_replicas_prints_one_engine_pair_per_gpu_and_the_score_command(capsys):
    assert main(["serve", "--profile", "paper", "--replicas", "3", "--generator-path", "/m/g",
                 "--judge-path", "/m/j"]) == 0
    out = capsys.readouterr().out.splitlines()
    engines = [line for line in out if " vllm serve " in line]
    assert len(engines) == 6
    ports = [int(line.split("--port ")[1].split()[0]) for line in engines]
    gpus = [line.split("CUDA_VISIBLE_DEVICES=")[1].split()[0] for line in engines]
    assert ports == [8000, 8001, 8002, 8003, 8004, 8005] and gpus == ["0", "0", "1", "1", "2", "2"]
    assert all(("/m/g" in line) == (p % 2 == 0) for line, p in zip(engines, ports))
    score_line = next(line for line in out if "tension-run score" in line)
    flags = score_line.split()
    gen = parse_replicas(flags[flags.index("--base-url") + 1].replace("HOST", "h"), "base_url")
    judge = parse_replicas(flags[flags.index("--judge-base-url") + 1].replace("HOST", "h"), "judge_base_url")
    assert [r.url for r in gen] == ["http://h:8000", "http://h:8002", "http://h:8004"]
    assert [r.url for r in judge] == ["http://h:8001", "http://h:8003", "http://h:8005"]
    # --replicas belongs to the GPU profile only
    assert main(["serve", "--embedded", "--replicas", "2"]) == 2
    assert main(["serve", "--profile", "paper", "--replicas", "0"]) == 2
    assert "--replicas: expected an integer >= 1, got 0" in capsys.readouterr().err


def test_weighted_replicas_from_a_config_file_and_servers_without_metrics(tmp_path):
    corpus = make_corpus(tmp_path / "c.jsonl", 4, seed=5)
    heads = story_heads(corpus)
    a = LoopbackServer(model=MODELS, serve_metrics=False).start()
    b = LoopbackServer(model=MODELS).start()
    try:
        toml = tmp_path / "c.toml"
        toml.write_text(f'base-url = [{{url = "{a.base_url}", weight = 3}}, {{url = "{b.base_url}", weight = 0.5}}]\n'
                        f'judge-base-url = ["{b.base_url}"]\n')
        cfg = load_config(toml, {"model": "test-gen", "judge_model": "test-judge", "cache": str(tmp_path / "cache"),
                                 "endings": N, "progress": False, "report": False})
        s = score(cfg, corpus, tmp_path / "out")
        assert s.status == "complete", s.error
        reps = cfg.generation_replicas()
        stories, _, judge_counts = who_served([a, b], heads)
        taken = [sid for sid, served in stories.items() if served != {hrw_order(sid, reps)[0]}]
        assert len(taken) == sum(g["stories_taken"] for g in s.replicas["generation"])
        assert all(len(served) == 1 for served in stories.values())
        assert judge_counts[0] == 0 and judge_counts[1] > 0  # the judge has its own (single) server
        gen = s.replicas["generation"]
        assert [(g["url"], g["weight"]) for g in gen] == [(a.base_url, 3.0), (b.base_url, 0.5)]
        assert gen[0]["prefix_cache_hit_rate"] is None  # no /metrics: tolerated, no figure
        assert s.replicas["judge"][0]["url"] == b.base_url
    finally:
        a.stop()
        b.stop()


# --- the router on its own: failover, re-admission, all replicas out ----------------


def gen_request(i: int) -> ChatRequest:
    return ChatRequest(model="test-gen", n=1, seed=i, messages=[
        {"role": "system", "content": "You are a fiction writer."},
        {"role": "user", "content": f"STORY SO FAR:\nprompt {i}"}])


def keys_preferring(router: Router, url: str, n: int) -> list[str]:
    return [k for k in (f"s{i}" for i in range(10_000)) if router.preference(k)[0] == url][:n]


def test_a_replica_taken_out_is_probed_and_readmitted(trio):
    events: list[str] = []

    async def main_():
        async with Client(retry=RetryPolicy(attempts=2, backoff=0.01)) as client:
            router = Router("generation", [Replica(url=u) for u in urls(trio)], client, limit=4,
                            total_seconds=20, probe_first=0.05, probe_cap=0.2,
                            failover_retry=RetryPolicy(attempts=2, backoff=0.01), on_change=events.append)
            assert await router.check_models("test-gen", "--model") == "test-gen"
            b = trio[1]
            keys = keys_preferring(router, b.base_url, 6)
            async with Scheduler(router.lanes()) as sched:
                sched.service(router.health_loop())
                b.stop()
                first = await sched.map(lambda k: router.chat(sched, k, gen_request(int(k[1:]))), keys[:3])
                assert [f.texts for f in first] and not router.figures()[1]["up"]
                b.start()  # same port
                t0 = time.monotonic()
                while not router.figures()[1]["up"] and time.monotonic() - t0 < 10:
                    await asyncio.sleep(0.02)
                b.reset_records()
                second = await sched.map(lambda k: router.chat(sched, k, gen_request(int(k[1:]))), keys[3:])
            return router.figures(), first, second

    figs, first, second = asyncio.run(main_())
    b = trio[1]
    assert figs[1]["up"] and figs[1]["readmitted"] == 1 and len(figs[1]["taken_out"]) == 1
    assert figs[1]["failures"] >= 1 and figs[1]["rerouted"] >= 1
    assert events[0].startswith(f"generation replica {b.base_url} taken out: ")
    assert events[-1] == f"generation replica {b.base_url} re-admitted"
    # after re-admission its keys come back to it
    assert b.count(path=CHAT_PATH) == 3 and figs[1]["requests"] == 3
    # while it was out they went to the next replica of each key's order, answered the same
    assert all(len(r.texts) == 1 for r in first + second)


def test_every_replica_out_waits_then_fails_with_each_reason(trio):
    async def main_():
        async with Client(retry=RetryPolicy(attempts=1)) as client:
            router = Router("judge", [Replica(url=u) for u in urls(trio[:2])], client, limit=2,
                            total_seconds=0.6, probe_first=0.05, probe_cap=0.1,
                            failover_retry=RetryPolicy(attempts=1))
            await router.check_models("test-gen", "--judge-model")
            for srv in trio[:2]:
                srv.stop()
            async with Scheduler(router.lanes()) as sched:
                sched.service(router.health_loop())
                t0 = time.monotonic()
                with pytest.raises(RetryBudgetError) as e:
                    await router.chat(sched, "k", gen_request(1))
                return time.monotonic() - t0, str(e.value)

    waited, msg = asyncio.run(main_())
    assert 0.5 <= waited < 5
    assert msg.startswith("every judge replica is out (") and "none came back within 0.6 s" in msg
    assert all(u in msg for u in urls(trio[:2]))


def test_an_unreachable_replica_at_start_is_taken_out_and_the_others_serve(trio):
    async def main_():
        async with Client() as client:
            router = Router("generation", [Replica(url=u) for u in urls(trio)], client, limit=2,
                            total_seconds=5, failover_retry=RetryPolicy(attempts=1))
            trio[2].stop()
            await router.check_models(None, "--model")
            async with Scheduler(router.lanes()) as sched:
                res = await sched.map(lambda k: router.chat(sched, k, gen_request(1)), [f"s{i}" for i in range(30)])
            return router, res

    router, res = asyncio.run(main_())
    assert router.model == "test-gen" and len(res) == 30
    figs = router.figures()
    assert not figs[2]["up"] and figs[2]["taken_out"][0].startswith("did not answer /v1/models at start")
    assert figs[0]["requests"] + figs[1]["requests"] == 30


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
            s = score(cfg_for(srv.base_url, tmp_path, shard=f"{i}/3"), corpus, tmp_path / f"shard{i}")
            assert s.status == "complete", s.error
            rows = (tmp_path / f"shard{i}" / "stories.csv").read_text().splitlines()[1:]
            shards.append([row.split(",")[0] for row in rows])
        assert sorted(sum(shards, [])) == sorted(ids)  # every story in exactly one shard
        assert sum(1 for sh in shards if sh) >= 2
        sent = srv.count(path=CHAT_PATH)
        s = score(cfg_for(srv.base_url, tmp_path), corpus, tmp_path / "all")
        assert srv.count(path=CHAT_PATH) == sent  # the shards left everything in the cache
    assert outputs(tmp_path / "all") == clean_outputs(corpus)
    for bad in ("3/3", "1", "a/2", "-1/2"):
        with pytest.raises(ConfigError, match=r"shard: expected I/N with 0 <= I < N"):
            cfg_for("http://x:1", tmp_path, shard=bad)


def test_pin_moves_one_key_to_the_front_and_keeps_the_rest_of_its_order():
    reps = [Replica(url=f"http://gpu{i}:8000") for i in range(4)]
    router = Router("generation", reps, Client(), limit=1, total_seconds=1)
    before = router.preference("story-9")
    router.pin("story-9", before[-1])
    assert router.preference("story-9") == [before[-1]] + before[:-1]
    assert router.preference("story-8") == [reps[i].url for i in hrw_order("story-8", reps)]
    assert [f["stories_taken"] for f in router.figures() if f["url"] == before[-1]] == [1]


def test_progress_postfix_counts_requests_per_replica_and_marks_those_out(trio):
    async def main_():
        async with Client() as client:
            router = Router("judge", [Replica(url=u) for u in urls(trio)], client, limit=2, total_seconds=5,
                            failover_retry=RetryPolicy(attempts=1))
            trio[1].stop()
            await router.check_models("test-gen", "--judge-model")
            async with Scheduler(router.lanes()) as sched:
                await sched.map(lambda k: router.chat(sched, k, gen_request(1)), [f"s{i}" for i in range(20)])
            return router

    router = asyncio.run(main_())
    n = [f["requests"] for f in router.figures()]
    assert n[1] == 0 and n[0] + n[2] == 20
    assert router.postfix() == f"j[{n[0]} 0! {n[2]}]"


def test_a_replica_added_between_runs_takes_about_a_quarter_of_the_stories_and_only_those(trio):
    keys = [f"story-{i:03d}" for i in range(240)]
    fourth = LoopbackServer(model=MODELS).start()

    def served(servers) -> dict[str, int]:
        """story key -> index of the server that answered it (from the servers' logs)."""
        out = {}
        for i, srv in enumerate(servers):
            for r in srv.requests:
                if r.path == CHAT_PATH:
                    out[r.body["messages"][-1]["content"].removeprefix("STORY SO FAR:\n")] = i
            srv.reset_records()
        return out

    async def run(servers) -> None:
        async with Client() as client:
            router = Router("generation", [Replica(url=s.base_url) for s in servers], client, limit=8,
                            total_seconds=5)
            async with Scheduler(router.lanes()) as sched:
                await sched.map(lambda k: router.chat(sched, k, ChatRequest(model="test-gen", n=1, messages=[
                    {"role": "system", "content": "You are a fiction writer."},
                    {"role": "user", "content": f"STORY SO FAR:\n{k}"}])), keys)

    try:
        asyncio.run(run(trio))
        before = served(trio)
        asyncio.run(run(trio + [fourth]))
        after = served(trio + [fourth])
    finally:
        fourth.stop()
    assert set(before) == set(after) == set(keys)
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == 3 for k in moved)  # only to the new replica, none between the old ones
    # expected share 1/4; binomial sd over 240 stories is 0.028, tolerance 0.09 (> 3 sd)
    assert abs(len(moved) / len(keys) - 0.25) <= 0.09


def test_hit_rate_is_taken_over_the_run_and_survives_a_restarted_server():
    q, h = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
    rate = prefix_cache_hit_rate
    assert rate({q: 1000.0, h: 900.0}, {q: 3000.0, h: 1900.0}) == 0.5  # deltas, not totals (0.63)
    assert rate(None, {q: 400.0, h: 100.0}) == 0.25  # no start reading: since the server started
    assert rate({q: 5000.0, h: 4000.0}, {q: 400.0, h: 300.0}) == 0.75  # restarted mid-run: counters reset
    assert rate({q: 10.0, h: 1.0}, {q: 10.0, h: 1.0}) is None  # no query during the run
    assert rate({q: 10.0, h: 1.0}, None) is None and rate(None, {"other": 1.0}) is None
