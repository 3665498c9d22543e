"""zoo serve driven by the official `openai` client and raw HTTP, on the loopback address only.

Usage: serve_client.py PORT API_KEY ZOO RUN_DIR MODEL_ID

Checks, against `zoo generate` on the same checkpoint (the one-request-at-a-time reference):
completions and chat, whole and streamed; stop sequences; seeds; n; greedy outputs under
concurrency equal the sequential ones token for token; usage and /metrics add up; 200 malformed
requests get 4xx and the server stays healthy; a full server answers 503 with Retry-After; a client
that disconnects frees its slot. Exits non-zero naming the first check that failed.
"""
import concurrent.futures
import http.client
import json
import re
import subprocess
import sys
import time

import openai

port, api_key, zoo, run_dir, model_id = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=api_key, max_retries=0, timeout=120)
completion_tokens = 0  # every token the responses' usage reported


def check(condition, message):
    if not condition:
        sys.exit(f"serve_client: {message}")


def zoo_generate(prompt, max_new_tokens, chat=False):
    """What `zoo generate --greedy` writes: the continuation (or the chat reply) alone."""
    args = [zoo, "--threads", "1", "generate", run_dir, "--prompt", prompt, "--greedy", "--max-new-tokens", str(max_new_tokens)]
    if chat:
        args.append("--chat")
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    out = out[:-1] if out.endswith("\n") else out
    return out if chat else out[len(prompt):]


def complete(prompt, max_tokens, **kw):
    global completion_tokens
    r = client.completions.create(model=model_id, prompt=prompt, max_tokens=max_tokens, **kw)
    completion_tokens += r.usage.completion_tokens
    return r


# The model list names the model; requests naming another are refused.
models = client.models.list()
check([m.id for m in models.data] == [model_id], f"/v1/models lists {[m.id for m in models.data]}")
try:
    client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
    check(False, "a request naming another model was accepted")
except openai.NotFoundError as e:
    check("no-such-model" in str(e), f"404 without the model's name: {e}")

# Completions, greedy: the text zoo generate writes, its usage, its finish reason.
prompts = ["The list", "A function", "import", "class Foo", "Errors are", "The module", "x = ", "Python"]
for p in prompts[:3]:
    r = complete(p, 24, temperature=0)
    want = zoo_generate(p, 24)
    check(r.choices[0].text == want, f"completion of {p!r}: {r.choices[0].text!r}, zoo generate: {want!r}")
    check(r.choices[0].finish_reason in ("stop", "length"), f"finish_reason {r.choices[0].finish_reason}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens > 0, f"usage {r.usage}")
    check(r.object == "text_completion" and r.id.startswith("cmpl-"), f"object {r.object}, id {r.id}")

# Streamed: the deltas add up to the whole text; the last chunk says why; include_usage's last
# chunk has the usage and no choices.
whole = complete("The list", 24, temperature=0)
chunks = list(client.completions.create(model=model_id, prompt="The list", max_tokens=24, temperature=0, stream=True,
                                        stream_options={"include_usage": True}))
text = "".join(c.choices[0].text for c in chunks if c.choices)
check(text == whole.choices[0].text, f"streamed {text!r}, whole {whole.choices[0].text!r}")
check(chunks[-1].usage is not None and not chunks[-1].choices, "no usage chunk at the end of the stream")
check(chunks[-1].usage.completion_tokens == whole.usage.completion_tokens, "streamed usage differs")
completion_tokens += chunks[-1].usage.completion_tokens
finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
check(finishes == [whole.choices[0].finish_reason], f"finish reasons in the stream: {finishes}")

# Chat through the model's chat template, whole and streamed, equals zoo generate --chat.
want = zoo_generate("Question 3?", 16, chat=True)
r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Question 3?"}], max_tokens=16,
                                   temperature=0)
completion_tokens += r.usage.completion_tokens
check(r.choices[0].message.content == want, f"chat reply {r.choices[0].message.content!r}, zoo generate --chat {want!r}")
check(r.choices[0].message.role == "assistant" and r.object == "chat.completion", "chat response shape")
stream = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Question 3?"}],
                                        max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True})
deltas = list(stream)
check(deltas[0].choices[0].delta.role == "assistant", "the chat stream does not open with the assistant's role")
streamed = "".join(d.choices[0].delta.content or "" for d in deltas if d.choices)
check(streamed == want, f"streamed chat {streamed!r}, whole {want!r}")
completion_tokens += deltas[-1].usage.completion_tokens

# Stop sequences cut the text where they begin (even one that spans tokens).
full = complete("The module", 40, temperature=0).choices[0].text
check(len(full) > 10, f"a completion too short to cut: {full!r}")
stop = full[len(full) // 2:len(full) // 2 + 3]
r = complete("The module", 40, temperature=0, stop=[stop, "@@never@@"])
check(r.choices[0].text == full[:full.index(stop)] and r.choices[0].finish_reason == "stop",
      f"stop {stop!r}: got {r.choices[0].text!r} ({r.choices[0].finish_reason}), full {full!r}")

# Seeds: the same seed gives the same sample; n choices with a seed, each its own.
a = complete("The", 20, temperature=1.0, seed=11, n=3)
b = complete("The", 20, temperature=1.0, seed=11, n=3)
check([c.text for c in a.choices] == [c.text for c in b.choices], "the same seed sampled differently")
check([c.index for c in a.choices] == [0, 1, 2], f"choice indices {[c.index for c in a.choices]}")
check(len({c.text for c in a.choices}) > 1, f"three samples all alike: {[c.text for c in a.choices]}")
c = complete("The", 20, temperature=1.0, seed=12)
check(c.choices[0].text != a.choices[0].text, "another seed sampled the same text")

# Concurrency: greedy completions of many clients at once equal the sequential ones, token for
# token (more clients than --max-batch: some wait in the queue).
sequential = [complete(p, 32, temperature=0).choices[0].text for p in prompts]
with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
    parallel = list(pool.map(lambda p: complete(p, 32, temperature=0).choices[0].text, prompts))
for p, s, q in zip(prompts, sequential, parallel):
    check(s == q, f"{p!r}: alone {s!r}, under concurrency {q!r}")


def raw(method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    h = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data


def metric(name):
    status, _, body = raw("GET", "/metrics")
    check(status == 200, f"/metrics answered {status}")
    m = re.search(rf"^{re.escape(name)} (\S+)$", body.decode(), re.M)
    check(m is not None, f"/metrics has no {name}")
    return float(m.group(1))


# The metrics add up: tokens out are the sum of every response's usage.
check(metric("zoo_completion_tokens_total") == completion_tokens,
      f"zoo_completion_tokens_total {metric('zoo_completion_tokens_total')}, usage sums to {completion_tokens}")
check(metric("zoo_time_to_first_token_seconds_count") > 0, "no time to first token observed")
# The scheduler publishes its batch after the step that ended the last sequence: a moment later.
deadline = time.time() + 10
while metric("zoo_batch_running") > 0 and time.time() < deadline:
    time.sleep(0.02)
check(metric("zoo_batch_running") == 0, "sequences still running when every client has its answer")

# The API key: none, or a wrong one, is 401.
for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
    status, _, body = raw("GET", "/v1/models", headers=headers)
    check(status == 401 and json.loads(body)["error"]["type"] == "authentication_error", f"{headers}: {status} {body}")

# 200 malformed requests: every one a 4xx with OpenAI's error object; the server stays healthy.
bad = [
    ("POST", "/v1/completions", b"{"), ("POST", "/v1/completions", b"[]"), ("POST", "/v1/completions", b"null"),
    ("POST", "/v1/completions", b'{"prompt": 1}'), ("POST", "/v1/completions", b'{"prompt": "x", "max_tokens": -5}'),
    ("POST", "/v1/completions", b'{"prompt": "x", "max_tokens": 100000}'),
    ("POST", "/v1/completions", b'{"prompt": "x", "temperature": -1}'),
    ("POST", "/v1/completions", b'{"prompt": "x", "top_p": 2}'), ("POST", "/v1/completions", b'{"prompt": "x", "n": "3"}'),
    ("POST", "/v1/completions", b'{"prompt": [99999999]}'), ("POST", "/v1/completions", b'{"prompt": "\xff\xfe"}'),
    ("POST", "/v1/completions", b'{"prompt": "x", "stop": ""}'), ("POST", "/v1/completions", b'{"prompt": "x", "logprobs": 21}'),
    ("POST", "/v1/chat/completions", b'{"messages": []}'), ("POST", "/v1/chat/completions", b'{"messages": [{"role": 1}]}'),
    ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": null}]}'),
    ("POST", "/v1/embeddings", b'{"input": "x"}'), ("GET", "/v1/completions", None), ("POST", "/v1/nothing", b"{}"),
    ("POST", "/v1/completions", b'{"prompt": "' + b"x" * (2 << 20) + b'"}'),
]
for i in range(200):
    method, path, body = bad[i % len(bad)]
    status, _, data = raw(method, path, body)
    check(400 <= status < 500, f"{method} {path} {body[:60] if body else body!r}: status {status}")
    check("error" in json.loads(data), f"{method} {path}: no error object in {data[:200]!r}")
status, _, data = raw("GET", "/health")
check(status == 200 and json.loads(data)["status"] == "ok", f"/health after the bad requests: {status} {data!r}")
check(complete("The list", 24, temperature=0).choices[0].text == whole.choices[0].text,
      "the server answers differently after the bad requests")

# A client that disconnects mid-stream frees its slot: the server stops generating for it.
before = metric("zoo_completion_tokens_total")
for _ in range(3):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "The", "max_tokens": 200, "temperature": 0.8,
                                                             "stream": True, "stop": "@@never@@"}),
                 headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    r = conn.getresponse()
    check(r.status == 200, f"streaming request: {r.status}")
    r.fp.readline()  # the first event
    conn.sock.close()
    conn.close()
# Until each has left the batch and the queue alike.
deadline = time.time() + 30
while (metric("zoo_batch_running") > 0 or metric("zoo_queue_length") > 0) and time.time() < deadline:
    time.sleep(0.05)
check(metric("zoo_batch_running") == 0 and metric("zoo_queue_length") == 0, "a disconnected client's sequence still runs")
generated = metric("zoo_completion_tokens_total") - before
check(generated < 3 * 200, f"disconnected clients' sequences ran to the end ({generated} tokens)")

# The same for a request answered in one piece, which writes nothing until it is done: the server
# sees the closed connection itself. With ignore_eos the sequence would run its 240 tokens.
before = metric("zoo_completion_tokens_total")
conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "The", "max_tokens": 240, "temperature": 0.8,
                                                         "ignore_eos": True, "stop": "@@never@@"}),
             headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
conn.sock.close()
conn.close()


def closed_requests():
    _, _, body = raw("GET", "/metrics")
    m = re.search(r'^zoo_requests_total\{endpoint="/v1/completions",status="499"\} (\S+)$', body.decode(), re.M)
    return float(m.group(1)) if m else 0.0


deadline = time.time() + 30
while closed_requests() == 0 and time.time() < deadline:  # the server saw the client go
    time.sleep(0.05)
check(closed_requests() == 1, "the server never saw the client of a whole-answer request go")
# The 499 can come before the scheduler took the request from its queue: wait until it has left both.
while (metric("zoo_batch_running") > 0 or metric("zoo_queue_length") > 0) and time.time() < deadline:
    time.sleep(0.05)
generated = metric("zoo_completion_tokens_total") - before
check(metric("zoo_batch_running") == 0 and metric("zoo_queue_length") == 0,
      "a disconnected client's whole-answer sequence still runs or waits")
check(generated < 120, f"a disconnected client's whole-answer sequence ran on ({generated} of 240 tokens)")

# A full server answers 503 with Retry-After (this server: --max-batch 4, --max-queue 4). Eight long
# streams fill it; the ninth request is refused while they run.
refused = False
for attempt in range(5):
    conns = []
    for _ in range(8):
        conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "The", "max_tokens": 200, "temperature": 1.0,
                                                                 "stream": True, "stop": "@@never@@", "seed": 1}),
                     headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
        conns.append(conn)
    responses = [c.getresponse() for c in conns]
    check(all(r.status == 200 for r in responses), f"the first eight: {[r.status for r in responses]}")
    status, headers, data = raw("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 1}).encode())
    for r in responses:
        r.read()
    for c in conns:
        c.close()
    if status == 503:
        check(headers.get("Retry-After") == "1", f"503 without Retry-After: {headers}")
        check(json.loads(data)["error"]["type"] == "server_busy", f"503 body {data!r}")
        refused = True
        break
    check(status == 200, f"the ninth request: {status} {data!r}")
check(refused, "eight running and queued streams never made the server refuse a ninth")
print("serve_client: every check passed")
