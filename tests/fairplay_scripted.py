"""The scripted readers and whodunit stories of tests/core/test_fairplay_readers.py:
a story record (`story_record`), the readers' answers by prompt (`scripted`, a
`LoopbackServer.respond` responder), their expected distributions written out
independently, and the run's config (`cfg_for`). tests/view/ makes its fairplay
run with them too."""

from __future__ import annotations

import json
import re
from pathlib import Path

SUSPECTS = ["Mara Quill", "Tobias Fenn", "Ines Harrow"]
CULPRIT, DISTRACTOR = "Tobias Fenn", "Ines Harrow"
L = 6
K = 4
FAST = {"n_resamples": 50, "max_plots": 1}  # metrics options: few bootstrap resamples and plots
FAST_KW = {"resamples": 50, "max_plots": 1}  # the same, as tension.fairplay's keywords
GEN_SYSTEM = "You are a skilled author of detective fiction, writing one paragraph at a time."
GENERATOR = {
    "model": "test-gen", "system": GEN_SYSTEM, "temperature": 1.0, "max_tokens": 80, "L": L,
    "paragraph_prompt": "Write paragraph {i} of {L}. Suspects: {suspects}. Culprit: {culprit}. "
                        "Distractor: {distractor}.\nSTORY SO FAR:\n{story}",
    "final_prompt": "Write the final paragraph {i} of {L}; reveal the culprit. Suspects: {suspects}. "
                    "Culprit: {culprit}.\nSTORY SO FAR:\n{story}",
}


def scene(sid: str, j: int) -> str:
    # Braces and a placeholder-like word in the text: rendering must leave them alone.
    return f"Scene {j} of {sid}: the lamp {{flickers}} while someone mutters '{{culprit}}' by the door."


def story_record(sid: str, generator: bool = True, **kw) -> dict:
    rec = {"id": sid, "group": "g1", "segments": [scene(sid, j) for j in range(1, L + 1)], "suspects": SUSPECTS,
           "culprit": CULPRIT, "distractor": DISTRACTOR, "revelation": L}
    if generator:
        rec["generator"] = GENERATOR
    rec.update(kw)
    return rec


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def user_text(msgs) -> str:
    return "\n".join(m["content"] for m in msgs if m["role"] == "user")


def prefix_len(text: str) -> int:
    return len(re.findall(r"Scene \d+ of ", text))


# --- the scripted readers: expected distributions, written out independently --------

def gullible_expected(i: int) -> list[float]:
    # face value: the distractor looks guilty until the revelation in the last paragraph
    return [0.05, 0.9, 0.05] if i == L else [0.3, 0.1, 0.6]


def experienced_expected(i: int) -> list[float]:
    return [0.1, 0.7, 0.2] if i >= 3 else [1 / 3, 1 / 3, 1 / 3]


def kia_culprit_share(c: int) -> int:
    """Continuations (of K) after checkpoint c that end with the true culprit."""
    return min(K, c - 1)


def gullible_answer(i: int) -> str:
    p = gullible_expected(i)
    if i % 3 == 0:  # fenced, names reordered and lower-cased
        return ("```json\n" + json.dumps({"suspects": ["ines harrow", "mara quill", "tobias fenn"],
                                          "probabilities": [p[2], p[0], p[1]]}) + "\n```")
    if i % 3 == 1:  # the paper's format
        return json.dumps({"suspects": SUSPECTS, "probabilities": p, "distractor_probabilities": [0, 0, 1]})
    # prose around a name-keyed object in percent
    return "Here is my estimate: " + json.dumps({"probabilities": {s: f"{100 * x:g}%" for s, x in zip(SUSPECTS, p)}}) \
        + " Hope this helps."


def scripted(msgs, n, seed):
    text = user_text(msgs)
    system = "\n".join(m["content"] for m in msgs if m["role"] == "system")
    if "ignoring the interest of the writer" in text:
        return gullible_answer(prefix_len(text))
    if "(PARTIAL) STORY FOR PREDICTION" in text:
        p = experienced_expected(prefix_len(text))
        return json.dumps({"suspects": SUSPECTS, "probabilities": p})
    if system == GEN_SYSTEM:
        i = int(re.search(r"paragraph (\d+) of", text).group(1))
        if "final paragraph" not in text:
            return [f"Later part {i}, draw {(seed or 0) + j}." for j in range(n)]
        c = prefix_len(text)
        out = []
        for j in range(n):
            k = (seed or 0) + j  # continuation k samples with seed 0 + k throughout
            name = CULPRIT if k < kia_culprit_share(c) else DISTRACTOR
            out.append(f"In the end, {name} is unmasked as the culprit.")
        return out
    if "reveal at its end as the true culprit" in text:
        m = re.search(r"In the end, (.+?) is unmasked", text)
        return json.dumps({"culprit": m.group(1).lower() if m else None})
    return None


def cfg_for(srv, tmp_path, **kw) -> dict:
    """The API's keywords: tension.fairplay(stories, out=…, **cfg_for(…), **FAST_KW)."""
    base = {"base_url": srv.base_url, "reader_model": "test-judge", "cache": str(tmp_path / "cache"),
            "progress": False, "k": K, "schedule": "1,3,5"}
    base.update(kw)
    return base
