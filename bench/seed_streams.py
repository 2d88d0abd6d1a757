"""Issue 57: do neighbouring positions' endings share their random stream?

Scores one real story (read from ../shared/data, never copied into the repository)
twice on a running server, each run with a fresh cache: with --seed-scheme run
(every position's request seeded with --seed, as releases before 2026-12-07 did)
and with --seed-scheme position (each position its own seed, docs/metrics.md
1.2-1.3). For each pair of neighbouring kept positions it counts how many leading
words ending i of the one shares with ending i of the other ("aligned": the same
seed + i under the old scheme), and, as the level chance gives, ending i with
ending j != i ("crossed": never the same seed). Endings are compared as whitespace
words, exactly.

    .venv/bin/tension-run serve --embedded
    .venv/bin/python bench/seed_streams.py --story lcats-anderson-naughty_boy --endings 8 --seed 1
    .venv/bin/tension-run serve --stop

The scoring settings are the embedded profile's (`EMBEDDED_SCORE_SETTINGS`:
temperature 0.8, 48 tokens, the logprobs judge); --base-url and --model name another
server (default: the running embedded server).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "pd_short_stories.jsonl"
SCHEMES = ("run", "position")


def shared_words(a: str, b: str) -> int:
    """How many leading whitespace words `a` and `b` have in common."""
    n = 0
    for x, y in zip(a.split(), b.split()):
        if x != y:
            break
        n += 1
    return n


def pair_figures(texts: dict[int, list[str]]) -> dict[str, float]:
    """Aligned and crossed shared leading words over neighbouring kept positions."""
    ks = sorted(texts)
    aligned: list[int] = []
    crossed: list[int] = []
    for k0, k1 in zip(ks, ks[1:]):
        a, b = texts[k0], texts[k1]
        for i, j in itertools.product(range(len(a)), range(len(b))):
            (aligned if i == j else crossed).append(shared_words(a[i], b[j]))
    return {
        "neighbour_pairs": len(ks) - 1,
        "aligned_pairs": len(aligned),
        "aligned_mean": statistics.fmean(aligned),
        "aligned_ge3": sum(x >= 3 for x in aligned) / len(aligned),
        "aligned_ge5": sum(x >= 5 for x in aligned) / len(aligned),
        "aligned_ge10": sum(x >= 10 for x in aligned) / len(aligned),
        "aligned_max": max(aligned),
        "crossed_mean": statistics.fmean(crossed),
        "crossed_ge3": sum(x >= 3 for x in crossed) / len(crossed),
        "crossed_ge5": sum(x >= 5 for x in crossed) / len(crossed),
        "crossed_max": max(crossed),
    }


def read_story(path: Path, story_id: str | None) -> dict:
    if not path.exists():
        sys.exit(f"{path} is not there: this bench reads a real story from ../shared/data")
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if story_id is None or row["id"] == story_id:
            return {"id": row["id"], "text": row["text"]}
    sys.exit(f"{path}: no story with id {story_id!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA, help="JSON Lines of stories (default: %(default)s)")
    ap.add_argument("--story", default="lcats-anderson-naughty_boy", help="the story's id (default: %(default)s)")
    ap.add_argument("--endings", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pct-min", type=float, default=0.10)
    ap.add_argument("--pct-max", type=float, default=0.99, help="fewer positions, for a shorter run")
    ap.add_argument("--base-url", help="default: the running embedded server")
    ap.add_argument("--model", help="default: the running embedded server's")
    ap.add_argument("--json", help="also write the figures as JSON")
    a = ap.parse_args(argv)

    import tension
    from tension.core.serving import embedded
    from tension.core.serving.profiles import EMBEDDED_SCORE_SETTINGS

    url, model = a.base_url, a.model
    if url is None:
        st = embedded.running_state()
        if st is None:
            sys.exit("no embedded server is running: start it with `tension-run serve --embedded`, or give "
                     "--base-url")
        url, model = st.url, model or st.model
    story = read_story(a.data, a.story)
    settings = {**EMBEDDED_SCORE_SETTINGS, "endings": a.endings, "seed": a.seed, "pct_min": a.pct_min,
                "pct_max": a.pct_max, "base_url": url, "model": model, "save_texts": True, "progress": False,
                "report": False}
    shown = {k: v for k, v in settings.items() if k not in ("save_texts", "progress", "report")}
    print(f"seed streams: story {story['id']} ({len(story['text'].split())} words) from {a.data}")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in shown.items()), flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="seed-streams-"))
    corpus = tmp / "story.jsonl"
    corpus.write_text(json.dumps(story) + "\n", encoding="utf-8")
    rows: dict[str, dict] = {}
    for scheme in SCHEMES:
        t0 = time.perf_counter()
        res = tension.score(corpus, out=tmp / scheme, cache=str(tmp / f"cache-{scheme}"), seed_scheme=scheme,
                            **settings)
        if res.summary.status != "complete":
            sys.exit(f"--seed-scheme {scheme}: the run {res.summary.status}: {res.summary.error}")
        texts = {d["k"]: d["endings"] for d in map(json.loads, (tmp / scheme / "texts.jsonl").read_text().splitlines())}
        rows[scheme] = {**pair_figures(texts), "positions": len(texts), "seconds": round(time.perf_counter() - t0, 1),
                        "generation_requests": res.summary.requests.get("generation")}
        print(f"  {scheme}: {len(texts)} positions in {rows[scheme]['seconds']} s", flush=True)

    old, new = rows["run"], rows["position"]
    print("=" * 50)
    print(f"{'figure (neighbouring positions)':<44}{'run (old)':>11}{'position':>11}{'vs.':>8}")
    for key, label in (("aligned_mean", "ending i vs i: mean shared leading words"),
                       ("aligned_ge3", "  share sharing >= 3 words"),
                       ("aligned_ge5", "  share sharing >= 5 words"),
                       ("aligned_ge10", "  share sharing >= 10 words"),
                       ("aligned_max", "  most shared words"),
                       ("crossed_mean", "ending i vs j != i: mean (chance)"),
                       ("crossed_ge3", "  share sharing >= 3 words"),
                       ("crossed_ge5", "  share sharing >= 5 words"),
                       ("crossed_max", "  most shared words")):
        o, n = old[key], new[key]
        ratio = f"{n / o:.2f}" if o else "-"
        print(f"{label:<44}{o:>11.3g}{n:>11.3g}{ratio:>8}")
    print(f"{'neighbour pairs (aligned ending pairs)':<44}{old['neighbour_pairs']:>5} ({old['aligned_pairs']})"
          f"{new['neighbour_pairs']:>5} ({new['aligned_pairs']})")
    if a.json:
        Path(a.json).write_text(json.dumps({"story": story["id"], "settings": shown, "schemes": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
