#!/usr/bin/env bash
# `cformers serve`'s completion surface (issue 42): batched prompts (strings and token-id
# lists, each its own sequences, choices indexed prompt * n + sample as OpenAI does) give
# the texts each gives alone; best_of returns the n samples of highest mean logprob of the
# best_of it generated; a seed reproduces a sampled text; four stop strings; a stream sends
# one event per token (its logprobs hold exactly that token) and [DONE] last.
source "$(dirname "$0")/lib_cli.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
require_asset stories260K/stories260K.bin
unset CFORMERS_API_KEY
stories260k_ckpt "$tmp/s.ckpt"
"$bin" serve --model "$tmp/s.ckpt" --port 0 --threads 1 --max-batch 8 >"$tmp/server.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
server_url "$tmp/server.out" "cli serve batch"
python3 - "$url" >"$tmp/py.out" 2>&1 <<'EOF2' || fail_because "completion surface"
import json, sys, urllib.request
url = sys.argv[1]
def post(path, body, status=200):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        r = urllib.request.urlopen(req)
        got, data = r.status, r.read()
    except urllib.error.HTTPError as e:
        got, data = e.code, e.read()
    assert got == status, (body, got, data)
    return data if body.get("stream") else json.loads(data)
def events(body):
    lines = post("/v1/completions", dict(body, stream=True)).decode().split("\n")
    ev = [l[6:] for l in lines if l.startswith("data: ")]
    assert ev[-1] == "[DONE]", ev[-3:]
    return [json.loads(e) for e in ev[:-1]]
greedy = {"max_tokens": 12, "temperature": 0}
prompts = ["Once upon a time", "Lily and Tom", "The big dog"]
alone = [post("/v1/completions", dict(greedy, prompt=p))["choices"][0]["text"] for p in prompts]
ids = post("/tokenize", {"prompt": "Once upon a time"})["tokens"]
# 1. a batch of strings, n = 2: choice index prompt * 2 + sample, each the text alone
d = post("/v1/completions", dict(greedy, prompt=prompts, n=2))
assert [c["index"] for c in d["choices"]] == list(range(6)), d
assert [c["text"] for c in d["choices"]] == [t for t in alone for _ in range(2)], (d, alone)
single = post("/v1/completions", dict(greedy, prompt=prompts[0]))
assert d["usage"]["prompt_tokens"] == sum(post("/v1/completions", dict(greedy, prompt=p))["usage"]["prompt_tokens"] for p in prompts), d
assert d["usage"]["completion_tokens"] == 6 * 12, d
# a batch of token-id lists, and one mixed with a string; a single id list
d = post("/v1/completions", dict(greedy, prompt=[ids, "Lily and Tom"]))
assert [c["text"] for c in d["choices"]] == alone[:2], d
assert post("/v1/completions", dict(greedy, prompt=ids))["choices"][0]["text"] == alone[0]
# echo in a batch: each choice its own prompt first
d = post("/v1/completions", dict(greedy, prompt=prompts[:2], echo=True, max_tokens=3))
assert [c["text"][:len(p)] for c, p in zip(d["choices"], prompts)] == prompts[:2], d
# streamed batch: each index's events add up to its text
text = {}
for ch in events(dict(greedy, prompt=prompts)):
    for c in ch["choices"]:
        text[c["index"]] = text.get(c["index"], "") + c["text"]
assert [text[i] for i in range(3)] == alone, (text, alone)
# refusals name the field
for bad, param in [({"prompt": []}, "prompt"), ({"prompt": ["x", 3]}, "prompt"), ({"prompt": [[1, -2]]}, "prompt"),
                   ({"prompt": ["x"] * 257}, "prompt"), ({"prompt": "x", "n": 9}, "n"), ({"prompt": "x", "best_of": 9}, "best_of"),
                   ({"prompt": "x", "best_of": 2, "n": 3}, "best_of"), ({"prompt": "x", "suffix": "y"}, "suffix")]:
    e = post("/v1/completions", bad, 400)["error"]
    assert e["param"] == param and ("'%s'" % param) in e["message"], (bad, e)
# 2. best_of 4, n 2, seed 7: the two of highest mean logprob of the samples n 4 seed 7 gives
sampled = {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 1.0, "seed": 7, "logprobs": 0}
four = post("/v1/completions", dict(sampled, n=4))["choices"]
mean = lambda c: sum(c["logprobs"]["token_logprobs"]) / len(c["logprobs"]["token_logprobs"])
best = sorted(four, key=mean, reverse=True)[:2]
d = post("/v1/completions", dict(sampled, n=2, best_of=4))
assert [c["text"] for c in d["choices"]] == [c["text"] for c in best], (d["choices"], best)
assert [c["index"] for c in d["choices"]] == [0, 1] and d["usage"]["completion_tokens"] == sum(len(c["logprobs"]["tokens"]) for c in four), d
d = post("/v1/completions", dict(sampled, best_of=4, logprobs=None))
assert d["choices"][0]["text"] == best[0]["text"] and d["choices"][0]["logprobs"] is None, d
# 3. seed: the same request twice, the same text; without a seed two requests differ
again = post("/v1/completions", dict(sampled, n=4))["choices"]
assert [c["text"] for c in again] == [c["text"] for c in four], (again, four)
free = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 1.5}
texts = {post("/v1/completions", free)["choices"][0]["text"] for _ in range(4)}
assert len(texts) > 1, "four unseeded samples gave one text: %r" % texts
# 4. four stop strings, each acting
for k in range(4):
    stops = ["zzz", "qqq", "xxx", "yyy"]
    stops[k] = "little"
    c = post("/v1/completions", dict(greedy, prompt="Once upon a time", max_tokens=20, stop=stops))["choices"][0]
    assert c["finish_reason"] == "stop" and "little" not in c["text"], (k, c)
# 5. one event per token: each with text holds one token (the logprobs say which), as many
# as completion_tokens, [DONE] last; and without logprobs, as many events
body = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "stream_options": {"include_usage": True}}
chunks = events(dict(body, logprobs=0))
toks = [c for ch in chunks for c in ch["choices"] if c["text"]]
usage = chunks[-1]["usage"]
assert all(len(c["logprobs"]["tokens"]) == 1 and c["logprobs"]["tokens"][0] == c["text"] for c in toks), toks
assert len(toks) == usage["completion_tokens"] == 24, (len(toks), usage)
plain = [c["text"] for ch in events(body) for c in ch["choices"] if c["text"]]
assert plain == [c["text"] for c in toks], (plain, toks)
assert "".join(plain) == post("/v1/completions", dict(body, stream=False, stream_options=None))["choices"][0]["text"]
print("completion surface ok")
EOF2
cat "$tmp/py.out"
finish "cli serve batch"
