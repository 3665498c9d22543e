"""zoo serve takes every prompt that fits its context: prompts at each boundary the server has,
whole and streamed, alone and together, each answering what `zoo generate` answers.

Usage: serve_long_prompts.py PORT ZOO RUN_DIR SPM_MODEL CORPUS CONTEXT CHUNK CACHE

The server runs with prefill chunks of CHUNK tokens and a KV cache of CACHE positions to start
with, on a model of CONTEXT positions. The prompts' lengths (in tokens, the tokenizer's <s>
included, as the response's usage counts them) sit at each multiple of the chunk and beside
it, at the cache's capacity and its doubling, and at the context's last position; one more
than fits is a 400 naming the prompt.
"""
import concurrent.futures
import subprocess
import sys

import openai
import sentencepiece as spm

port, zoo, run_dir, spm_model, corpus = sys.argv[1:6]
context, chunk, cache = (int(x) for x in sys.argv[6:9])
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=300)
sp = spm.SentencePieceProcessor(model_file=spm_model)
words = open(corpus, encoding="utf-8").read().split()
ids = sp.encode(" ".join(words[:40000]))


def text_of(tokens):
    """A text of the corpus that the tokenizer encodes to `tokens` ids, <s> included."""
    for start in range(0, 2000, 7):
        text = sp.decode(ids[start:start + tokens - 1]).strip()
        if len(sp.encode(text)) == tokens - 1:
            return text
    sys.exit(f"serve_long_prompts: no text of {tokens} tokens")


def generated(prompts, max_tokens):
    """zoo generate --greedy over every prompt, one after another: each prompt's continuation."""
    args = [zoo, "--threads", "1", "generate", run_dir, "--greedy", "--max-new-tokens", str(max_tokens)]
    for p in prompts:
        args += ["--prompt", p]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    answers = []
    for i, p in enumerate(prompts):
        assert out.startswith(p), f"zoo generate's output does not start with prompt {i}"
        out = out[len(p):]
        end = out.find("\n" + prompts[i + 1]) if i + 1 < len(prompts) else len(out) - 1
        answers.append(out[:end])
        out = out[end + 1:]
    return answers


lengths = sorted({cache - 1, cache, cache + 1, chunk - 1, chunk, chunk + 1, 2 * cache, 2 * cache + 1, 900,
                  context - 1} - {0})
prompts = [text_of(n) for n in lengths]
# Twelve tokens each (or what is left of the context: the longest ends at its last position).
budget = [min(12, context - n) for n in lengths]
expected = {}
for b in sorted(set(budget)):
    chosen = [p for p, m in zip(prompts, budget) if m == b]
    expected.update(zip(chosen, generated(chosen, b)))


def whole(i):
    r = client.completions.create(model=run_dir, prompt=prompts[i], max_tokens=budget[i], temperature=0)
    return r.choices[0].text, r.usage.prompt_tokens, r.choices[0].finish_reason


def streamed(i):
    text, usage, finish = "", None, None
    for event in client.completions.create(model=run_dir, prompt=prompts[i], max_tokens=budget[i], temperature=0,
                                           stream=True, stream_options={"include_usage": True}):
        if event.usage is not None:
            usage = event.usage.prompt_tokens
        for c in event.choices:
            text += c.text
            finish = c.finish_reason or finish
    return text, usage, finish


def check(how, i, answer):
    text, prompt_tokens, finish = answer
    n = lengths[i]
    assert prompt_tokens == n, f"{how}: a prompt meant as {n} tokens counted {prompt_tokens}"
    assert text == expected[prompts[i]], f"{how}, prompt of {n}: zoo serve {text!r}, zoo generate {expected[prompts[i]]!r}"
    assert finish == "length", f"{how}, prompt of {n}: finish_reason {finish}"


for i in range(len(prompts)):
    check("alone, whole", i, whole(i))
    check("alone, streamed", i, streamed(i))
with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
    together = list(pool.map(lambda i: (whole if i % 2 else streamed)(i), range(len(prompts))))
for i, answer in enumerate(together):
    check("together", i, answer)

# One token more than the context holds: refused by name, and the server goes on.
for n in (context, context + 1):
    try:
        client.completions.create(model=run_dir, prompt=text_of(n), max_tokens=1)
        sys.exit(f"serve_long_prompts: a prompt of {n} tokens was answered (context {context})")
    except openai.BadRequestError as e:
        assert "prompt" in str(e) and str(context) in str(e), e
check("after the refusals", 0, whole(0))
print(f"serve_long_prompts: {len(lengths)} lengths {lengths}: alone and together, whole and streamed")
