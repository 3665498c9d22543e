"""Several LoRA adapters served on one base by zoo serve, against peft and zoo generate.

Usage: serve_lora.py PORT API_KEY MODEL_ID HF_DIR WORK_DIR ZOO LORA_RUN PLAIN_PORT

The server at PORT serves MODEL_ID (whose `zoo export-hf` is HF_DIR) with --allow-runtime-lora and
`--lora c=LORA_RUN` (a zoo LoRA run on it); PLAIN_PORT is a server of the same model without the
flag. Two PEFT adapters of different ranks and targets, with random (non-zero) B, are made here
with peft on HF_DIR and loaded through POST /v1/load_lora_adapter. Checks, each exiting non-zero
with what failed:
- /v1/models lists the base and every adapter, each adapter with the base as its parent;
- each PEFT adapter's greedy tokens are peft's (its generate on transformers), and their
  log-probabilities peft's log-softmax within 1e-4, as are the base's without adapters; the
  adapters change the answers;
- the zoo LoRA run's greedy text is `zoo generate`'s on that run;
- 16 requests at once over the base and three adapters: each answer equals its answer alone;
- unloading an adapter a request holds is refused (409), and succeeds once it ends; unknown names
  404; an adapter of another model's shapes, a missing path, a name taken, unknown fields and a
  server without --allow-runtime-lora are refused by name.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

port, api_key, model_id, hf_dir, work, zoo, lora_run, plain_port = sys.argv[1:9]
os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})

import openai  # noqa: E402
import peft  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=api_key, max_retries=0, timeout=120)
tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
NEW = 8


def check(condition, message):
    if not condition:
        sys.exit(f"serve_lora: {message}")


def post(path, body, at=port, raw=None):
    """(status, text) of a POST."""
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{at}{path}", data=data,
                                     headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# Two PEFT adapters on the export, B random so that each changes the answers.
def make_adapter(name, seed, **config):
    torch.manual_seed(seed)
    base = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model = peft.get_peft_model(base, peft.LoraConfig(init_lora_weights=False, **config))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    model.save_pretrained(os.path.join(work, name))
    return model.eval()


peft_models = {"a": make_adapter("lora-a", 1, r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True),
               "b": make_adapter("lora-b", 2, r=8, lora_alpha=32, target_modules=["c_attn", "c_proj", "c_fc"],
                                 fan_in_fan_out=True)}
# Another model's shapes: wider feed-forward.
wide = transformers.GPT2Config.from_pretrained(hf_dir)
wide.n_inner = 2 * (wide.n_inner or 4 * wide.n_embd) + 8
peft.get_peft_model(transformers.GPT2LMHeadModel(wide), peft.LoraConfig(r=2, target_modules=["c_fc"],
                                                                        fan_in_fan_out=True)).save_pretrained(
    os.path.join(work, "lora-wide"))

for name in ["a", "b"]:
    status, text = post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": os.path.join(work, f"lora-{name}")})
    check(status == 200 and f"'{name}'" in text, f"loading {name}: {status} {text}")
def metric(name):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(request, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    sys.exit(f"serve_lora: /metrics has no {name}")


check(metric("zoo_lora_adapters") == 3 and metric("zoo_lora_adapter_bytes") > 0,
      f"/metrics counts {metric('zoo_lora_adapters')} adapters")
listed = {m.id: m for m in client.models.list().data}
check(set(listed) == {model_id, "a", "b", "c"}, f"/v1/models lists {sorted(listed)}")
for name in ["a", "b", "c"]:
    check(listed[name].model_extra.get("parent") == model_id, f"{name}'s parent is {listed[name].model_extra}")

prompts = [tokenizer("The list of").input_ids, tokenizer("import os\nimport").input_ids,
           tokenizer("A function returns the").input_ids]


def served(model, ids):
    """Greedy tokens (as text pieces) and their log-probabilities, from the server."""
    r = client.completions.create(model=model, prompt=ids, max_tokens=NEW, temperature=0, logprobs=0)
    return r.choices[0].logprobs.tokens, r.choices[0].logprobs.token_logprobs


def reference(model, ids):
    """peft's greedy continuation of `ids` and each chosen token's log-softmax (float64)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW,
                             pad_token_id=0)[0].tolist()
        logits = model(torch.tensor([out])).logits[0].double()
    values = torch.log_softmax(logits, -1)
    new = out[len(ids):]
    return out, [values[len(ids) - 1 + i, t].item() for i, t in enumerate(new)]


alone = {}
for name, model in [("a", peft_models["a"]), ("b", peft_models["b"]), (model_id, peft_models["a"])]:
    for p, ids in enumerate(prompts):
        if name == model_id:
            with model.disable_adapter():
                full, want = reference(model, ids)
        else:
            full, want = reference(model, ids)
        tokens, values = served(name, ids)
        alone[name, p] = tokens
        # The reference's tokens as the server spells them: its echo of the whole sequence.
        echo = client.completions.create(model=name, prompt=full, max_tokens=0, echo=True, logprobs=0)
        check(echo.choices[0].logprobs.tokens[-NEW:] == tokens,
              f"{name}, prompt {p}: greedy tokens {tokens}, peft's {echo.choices[0].logprobs.tokens[-NEW:]}")
        worst = max(abs(x - y) for x, y in zip(values, want))
        check(worst < 1e-4, f"{name}, prompt {p}: log-probabilities {worst:.2e} from peft's")
check(any(alone["a", p] != alone[model_id, p] for p in range(3)) and
      any(alone["b", p] != alone["a", p] for p in range(3)), "the adapters do not change the answers")

# The zoo LoRA run: zoo generate's greedy text on it.
text_prompt = "The list of"
out = subprocess.run([zoo, "--threads", "1", "generate", lora_run, "--prompt", text_prompt, "--greedy",
                      "--max-new-tokens", str(NEW)], capture_output=True, text=True, check=True).stdout
want = (out[:-1] if out.endswith("\n") else out)[len(text_prompt):]  # the continuation alone
got = client.completions.create(model="c", prompt=text_prompt, max_tokens=NEW, temperature=0).choices[0].text
check(got == want, f"adapter c: {got!r}, zoo generate on its run: {want!r}")
for p, ids in enumerate(prompts):
    alone["c", p] = served("c", ids)[0]

# All at once: rows of different adapters (and none) in one batch, each its answer alone.
jobs = [(name, p) for p in range(3) for name in [model_id, "a", "b", "c"]][:16]
with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
    together = list(pool.map(lambda job: served(job[0], prompts[job[1]])[0], jobs))
for job, tokens in zip(jobs, together):
    check(tokens == alone[job], f"{job} among others: {tokens}, alone: {alone[job]}")

# Unloading: refused while a request holds the adapter, done once it ends.
stream = client.completions.create(model="b", prompt=prompts[0], max_tokens=400, temperature=0, stream=True,
                                   extra_body={"ignore_eos": True})
next(iter(stream))
status, text = post("/v1/unload_lora_adapter", {"lora_name": "b"})
check(status == 409 and "in use" in text, f"unloading b while it streams: {status} {text}")
stream.close()
for _ in range(100):
    status, text = post("/v1/unload_lora_adapter", {"lora_name": "b"})
    if status != 409:
        break
    time.sleep(0.05)
check(status == 200, f"unloading b once its stream ended: {status} {text}")
check(metric("zoo_lora_adapters") == 2, "/metrics still counts b")
status, text = post("/v1/unload_lora_adapter", {"lora_name": "b"})
check(status == 404 and "no adapter named 'b'" in text, f"unloading b twice: {status} {text}")
try:
    client.completions.create(model="b", prompt="x", max_tokens=1)
    sys.exit("serve_lora: an unloaded adapter answered")
except openai.NotFoundError as e:
    check("'a'" in str(e), e)
check(served("a", prompts[1])[0] == alone["a", 1], "a changed when b left")

for body, status_want, needle in [
    ({"lora_name": "w", "lora_path": os.path.join(work, "lora-wide")}, 400, "do not fit the module"),
    ({"lora_name": "m", "lora_path": os.path.join(work, "no-such-adapter")}, 400, "no-such-adapter: no such directory"),
    ({"lora_name": "a", "lora_path": os.path.join(work, "lora-a")}, 400, "'a' is served already"),
    ({"lora_name": model_id, "lora_path": os.path.join(work, "lora-a")}, 400, "not the base's"),
    ({"lora_name": "x", "lora_path": os.path.join(work, "lora-a"), "base": 1}, 400, "base: unknown field"),
    ({"lora_path": os.path.join(work, "lora-a")}, 400, "lora_name: required"),
]:
    status, text = post("/v1/load_lora_adapter", body)
    check(status == status_want and needle in text, f"loading {body}: {status} {text}")
status, text = post("/v1/load_lora_adapter", None, raw=b"{not json")
check(status == 400 and "not JSON" in text, f"a malformed body: {status} {text}")
status, text = post("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": work}, at=plain_port)
check(status == 403 and "--allow-runtime-lora" in text, f"a server without --allow-runtime-lora: {status} {text}")
print("serve_lora: ok")
