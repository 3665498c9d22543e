"""zoo serve's log-probabilities against transformers, and lm-evaluation-harness pointed at it.

Usage: serve_logprobs.py PORT API_KEY MODEL_ID HF_DIR WORK_DIR

HF_DIR is the served checkpoint's `zoo export-hf` (transformers' model and tokenizer), WORK_DIR a
scratch directory. Checks, each exiting non-zero with what failed:
- completions' `logprobs` and `echo` (token ids and text prompts): every value equals the log-softmax
  of transformers' logits on the same tokens within 1e-4; the first prompt token's is null; greedy
  tokens are each step's most likely one; the top alternatives are transformers' top tokens;
  text offsets count the characters of the tokens before;
- `max_tokens: 0` with `echo` scores the prompt alone, as the echo of a longer request does;
- under concurrency each row's values equal its values alone; streamed chunks carry the same
  values as the whole answer; a chat's `logprobs`/`top_logprobs` come in its own shape;
- the prefix cache: a history sent again is found there (/metrics) and answers the same;
- lm-evaluation-harness's `local-completions` model runs a loglikelihood (multiple-choice) task and a
  generate_until task, defined here over JSONL files, against zoo serve; its `hf` model runs them on
  HF_DIR; the accuracies and generations are equal and every log-likelihood within 1e-3.
"""
import concurrent.futures
import json
import math
import os
import re
import sys
import urllib.request

port, api_key, model_id, hf_dir, work = sys.argv[1:6]
base = f"http://127.0.0.1:{port}/v1"
os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})

import openai  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

client = openai.OpenAI(base_url=base, api_key=api_key, max_retries=0, timeout=120)
tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()


def check(condition, message):
    if not condition:
        sys.exit(f"serve_logprobs: {message}")


def post(path, body):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        return json.load(r)


def reference(ids):
    """transformers' log-softmax over the vocabulary after each position of `ids`, float64."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)


def ids_of(text):
    return tokenizer(text).input_ids


# Completions with echo: the prompt's tokens and the generated ones, each against transformers.
prompts = ["The list of", "A function returns", "import os\nimport"]
for prompt in prompts:
    ids = ids_of(prompt)
    r = post("/completions", {"model": model_id, "prompt": [ids], "max_tokens": 6, "temperature": 0, "logprobs": 5,
                              "echo": True})
    choice = r["choices"][0]
    lp = choice["logprobs"]
    n = len(ids) + r["usage"]["completion_tokens"]
    check(len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n,
          f"{prompt!r}: {len(lp['tokens'])} tokens' entries for {n} tokens")
    check(lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, f"{prompt!r}: the first token has a value")
    # The whole sequence's ids: the prompt's, then the generated ones (each the top token).
    sequence = list(ids)
    for k in range(len(ids), n):
        best = max(lp["top_logprobs"][k].items(), key=lambda item: item[1])
        check(lp["token_logprobs"][k] == best[1], f"{prompt!r}: greedy token {k} is not its step's most likely")
        sequence.append(None)
    want = reference(ids)  # the prompt's positions
    for k in range(1, len(ids)):
        got = lp["token_logprobs"][k]
        check(abs(got - want[k - 1, ids[k]].item()) < 1e-4,
              f"{prompt!r}: prompt token {k}: {got} against transformers' {want[k - 1, ids[k]].item()}")
    # Generated tokens: transformers' argmax at each step is the token zoo chose, with its value.
    greedy = list(ids)
    for k in range(len(ids), n):
        scores = reference(greedy)[-1]
        token = int(scores.argmax())
        check(abs(lp["token_logprobs"][k] - scores[token].item()) < 1e-4,
              f"{prompt!r}: generated token {k}: {lp['token_logprobs'][k]} against {scores[token].item()}")
        top5 = torch.topk(scores, 5)
        got_top = sorted(lp["top_logprobs"][k].values(), reverse=True)[:5]
        check(all(abs(a - b) < 1e-4 for a, b in zip(got_top, top5.values.tolist())),
              f"{prompt!r}: token {k}'s alternatives {got_top} against transformers' {top5.values.tolist()}")
        greedy.append(token)
    offsets = lp["text_offset"]
    for k in range(1, n):
        check(offsets[k] == offsets[k - 1] + len(lp["tokens"][k - 1]), f"{prompt!r}: text_offset {offsets}")

    # The prompt scored alone (max_tokens 0): the same values, nothing generated.
    scored = post("/completions", {"model": model_id, "prompt": [ids], "max_tokens": 0, "logprobs": 1, "echo": True})
    check(scored["usage"]["completion_tokens"] == 0, f"max_tokens 0 generated {scored['usage']}")
    alone = scored["choices"][0]["logprobs"]["token_logprobs"]
    check(alone == lp["token_logprobs"][:len(ids)], f"{prompt!r}: scored alone {alone} against {lp['token_logprobs']}")

# A text prompt: the text starts with the prompt as sent; its tokens are zoo's own.
r = client.completions.create(model=model_id, prompt="The list", max_tokens=3, temperature=0, logprobs=2, echo=True)
check(r.choices[0].text.startswith("The list"), f"echo's text {r.choices[0].text!r}")
check(len(r.choices[0].logprobs.tokens) == r.usage.prompt_tokens + r.usage.completion_tokens, "echo's token count")

# Several choices of several prompts (the prompt's values are read once per prompt, shared by its
# choices): each choice echoes its own prompt's values, as that prompt alone does.
pair = ["The list of", "A function returns"]
r = client.completions.create(model=model_id, prompt=pair, max_tokens=2, temperature=1.0, seed=3, n=3, logprobs=1,
                              echo=True)
for c in r.choices:
    single = client.completions.create(model=model_id, prompt=pair[c.index // 3], max_tokens=0, logprobs=1, echo=True)
    want = single.choices[0].logprobs
    got = c.logprobs
    check(got.tokens[:len(want.tokens)] == want.tokens and got.token_logprobs[:len(want.tokens)] == want.token_logprobs,
          f"choice {c.index} echoes {got.tokens[:len(want.tokens)]} {got.token_logprobs[:len(want.tokens)]}, its prompt "
          f"alone {want.tokens} {want.token_logprobs}")

# Under concurrency: each row's values are its values alone.
bodies = [{"model": model_id, "prompt": p, "max_tokens": 8, "temperature": 0, "logprobs": 3} for p in prompts * 2]
alone = [post("/completions", b)["choices"][0]["logprobs"] for b in bodies]
with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
    together = list(pool.map(lambda b: post("/completions", b)["choices"][0]["logprobs"], bodies))
for a, t in zip(alone, together):
    check(a["tokens"] == t["tokens"], f"tokens together {t['tokens']} against alone {a['tokens']}")
    check(all(abs(x - y) < 1e-5 for x, y in zip(a["token_logprobs"], t["token_logprobs"])),
          f"values together {t['token_logprobs']} against alone {a['token_logprobs']}")

# Streamed: the chunks carry the whole answer's values, in order.
whole = client.completions.create(model=model_id, prompt="A function", max_tokens=8, temperature=0, logprobs=2)
streamed_tokens, streamed_values = [], []
for chunk in client.completions.create(model=model_id, prompt="A function", max_tokens=8, temperature=0, logprobs=2,
                                       stream=True):
    if chunk.choices and chunk.choices[0].logprobs:
        streamed_tokens += chunk.choices[0].logprobs.tokens
        streamed_values += chunk.choices[0].logprobs.token_logprobs
check(streamed_tokens == whole.choices[0].logprobs.tokens, f"streamed tokens {streamed_tokens}")
check(streamed_values == whole.choices[0].logprobs.token_logprobs, "streamed values differ from the whole answer's")

# Chat: logprobs true with top_logprobs, in the chat shape; greedy tokens are the top ones.
r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hello"}], max_tokens=5,
                                   temperature=0, logprobs=True, top_logprobs=3)
content = r.choices[0].logprobs.content
check(len(content) == r.usage.completion_tokens, f"{len(content)} chat entries for {r.usage.completion_tokens} tokens")
for entry in content:
    check(len(entry.top_logprobs) == 3 and entry.top_logprobs[0].logprob == entry.logprob,
          f"chat entry {entry}: not the top token")
    check(bytes(entry.bytes).decode("utf-8", "replace") == entry.token, f"chat entry bytes {entry.bytes}")
for bad, field in [({"prompt": "x", "logprobs": 21}, "logprobs"), ({"prompt": "x", "max_tokens": 0}, "max_tokens")]:
    try:
        post("/completions", {"model": model_id, **bad})
        check(False, f"{bad} was accepted")
    except urllib.error.HTTPError as e:
        check(e.code == 400 and json.load(e)["error"]["param"] == field, f"{bad}: {e.code}")

# The prefix cache: a prompt that begins as an earlier one did reads only the rest (the hits count
# it) and answers as it did when read whole.
def metric(name):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {api_key}"})
    text = urllib.request.urlopen(request, timeout=30).read().decode()
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


history = " ".join(["The list of values is returned by the function."] * 12)
hits = metric("zoo_prefix_cache_hit_tokens_total")
first = post("/completions", {"model": model_id, "prompt": history + " First", "max_tokens": 8, "temperature": 0})
post("/completions", {"model": model_id, "prompt": history + " Second", "max_tokens": 8, "temperature": 0})
again = post("/completions", {"model": model_id, "prompt": history + " First", "max_tokens": 8, "temperature": 0})
check(again["choices"][0]["text"] == first["choices"][0]["text"], "a prompt read from the prefix cache answers otherwise")
check(metric("zoo_prefix_cache_hit_tokens_total") - hits >= 2 * 64, "the prefix cache found no block of a repeated history")

# lm-evaluation-harness, local-completions against zoo serve and hf on the same weights.
import lm_eval  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

tasks = os.path.join(work, "lm-eval-tasks")
os.makedirs(tasks, exist_ok=True)
choices = os.path.join(tasks, "choices.jsonl")
with open(choices, "w") as f:
    for i, (context, options) in enumerate([("The list of", [" items", " the", " numbers"]),
                                            ("import", [" os", " sys", " numpy as np"]),
                                            ("A function that", [" returns", " is", " takes a list"]),
                                            ("The value is", [" None", " 1", " a string"]),
                                            ("class Foo", [":", "(object):", " is"]),
                                            ("Errors are", [" raised", " not", " handled here"])]):
        f.write(json.dumps({"context": context, "choices": options, "label": i % 3}) + "\n")
prompts_file = os.path.join(tasks, "prompts.jsonl")
with open(prompts_file, "w") as f:
    for p in ["The list of", "def f(x):", "A module", "The value"]:
        f.write(json.dumps({"prompt": p, "answer": " the"}) + "\n")


def write_task(name, data, rest):
    """A task over the JSONL file `data`, read by datasets' json builder (nothing downloaded)."""
    with open(os.path.join(tasks, name + ".yaml"), "w") as f:
        f.write(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                f"test_split: test\n{rest}")


write_task("zoo_choice", choices, """output_type: multiple_choice
doc_to_text: "{{context}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
  - metric: acc_norm
""")
write_task("zoo_generate", prompts_file, """output_type: generate_until
doc_to_text: "{{prompt}}"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 12
  do_sample: false
  temperature: 0
metric_list:
  - metric: exact_match
""")
os.environ["OPENAI_API_KEY"] = api_key
manager = TaskManager(include_path=tasks)
def evaluate(model_name, model_args):
    return lm_eval.simple_evaluate(model=model_name, model_args=model_args, tasks=["zoo_choice", "zoo_generate"],
                                   task_manager=manager, log_samples=True, batch_size=1)


served = evaluate("local-completions", f"model={model_id},base_url={base}/completions,tokenizer={hf_dir},"
                                       "tokenizer_backend=huggingface,num_concurrent=4,max_retries=1,add_bos_token=True")
local = evaluate("hf", f"pretrained={hf_dir},dtype=float32,device=cpu,add_bos_token=True")
for task, metric in [("zoo_choice", "acc,none"), ("zoo_choice", "acc_norm,none"), ("zoo_generate", "exact_match,none")]:
    a, b = served["results"][task][metric], local["results"][task][metric]
    check(abs(a - b) < 1e-4, f"lm-eval {task} {metric}: zoo serve {a}, hf {b}")
pairs = 0
for s, l in zip(served["samples"]["zoo_choice"], local["samples"]["zoo_choice"]):
    for (sv, _), (lv, _) in zip([r[0] for r in s["resps"]], [r[0] for r in l["resps"]]):
        check(math.isfinite(sv) and abs(sv - lv) < 1e-3, f"lm-eval log-likelihood {sv} from zoo serve, {lv} from hf")
        pairs += 1
check(pairs == 18, f"{pairs} log-likelihoods compared")
generated = [s["resps"][0][0] for s in served["samples"]["zoo_generate"]]
expected = [s["resps"][0][0] for s in local["samples"]["zoo_generate"]]
# hf decodes the new tokens alone, which drops a SentencePiece word's leading space; the server's
# text is the continuation's in context, as OpenAI's API returns it.
check([g.lstrip(" ") for g in generated] == expected, f"lm-eval generations: zoo serve {generated}, hf {expected}")
check(any(g.strip() for g in generated), f"lm-eval generations are all empty: {generated}")
print(f"serve_logprobs: ok (lm-eval acc {served['results']['zoo_choice']['acc,none']:.3f} on both)")
