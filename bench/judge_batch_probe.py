"""Probe for issue 19's batching idea, on a running vLLM server (the embedded one by
default): are a judge prompt's token ids the same when the chat template is
rendered once (`/tokenize` with a sentinel message, then `/detokenize`) and each
prompt is sent as text to `/v1/completions` with `add_special_tokens: false`? And
are the temperature-0 answers of one batched `/v1/completions` request the same as
n chat requests'? A probe, not the implementation.

Result on the embedded vLLM CPU server (SmolLM2-135M-Instruct), 2026-11-30: token ids
identical 6/6 (plain, double space, leading space, non-ASCII, empty, line break
endings); answers identical 6/6.

    tension-run serve --embedded && python bench/judge_batch_probe.py
"""
import json
import sys
import urllib.request

from tension.core.prompts.score import JUDGE_SYSTEM, judge_messages_from_parts

B = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8765"
M = sys.argv[2] if len(sys.argv) > 2 else "smollm2-135m"
def post(path, body):
    req = urllib.request.Request(B + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=300).read())
S = "\ue000"
tk = post("/tokenize", {"model": M, "messages": [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": S}],
                        "add_generation_prompt": True})
text = post("/detokenize", {"model": M, "tokens": tk["tokens"]})["prompt"]
assert text.count(S) == 1, text
pre, suf = text.split(S)
print("prefix/suffix:", repr(pre[-60:]), repr(suf))
head = "STORY SO FAR:\nThe baker left a loaf on the step every morning. Nobody knew who took it.\n\nCANDIDATE ENDING:\n"
tail = "\n\nTRUE CONTINUATION:\nOskar hid behind the barrel and waited.\n\nDoes the candidate match? Answer Y or N."
endings = ["An old woman took the bread.", "The baker's  apprentice ate it himself!", " A fox, of course.", "Ünïcode ending — with dashes…", "", "Line\nbreak ending."]
same = 0
for e in endings:
    msgs = judge_messages_from_parts(head, tail, e)
    a = post("/tokenize", {"model": M, "messages": msgs, "add_generation_prompt": True})["tokens"]
    b = post("/tokenize", {"model": M, "prompt": pre + head + e + tail + suf, "add_special_tokens": False})["tokens"]
    same += a == b
    if a != b: print("DIFF", repr(e), len(a), len(b))
print(f"token ids identical: {same}/{len(endings)}")
# answers: chat vs completions batch, temperature 0
chat = [post("/v1/chat/completions", {"model": M, "messages": judge_messages_from_parts(head, tail, e), "temperature": 0, "max_tokens": 10})["choices"][0]["message"]["content"] for e in endings]
comp = post("/v1/completions", {"model": M, "prompt": [pre + head + e + tail + suf for e in endings], "temperature": 0, "max_tokens": 10, "add_special_tokens": False})
ct = [c["text"] for c in sorted(comp["choices"], key=lambda c: c["index"])]
print("answers identical:", sum(x == y for x, y in zip(chat, ct)), "/", len(endings))
for x, y in zip(chat, ct):
    if x != y: print("  chat", repr(x), "comp", repr(y))
