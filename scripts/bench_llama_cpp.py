#!/usr/bin/python3
"""llama.cpp's side of `zoo bench --llama-cpp`: the generate-* and prefill-* rows of gpt2-small
and llama-0.5b (LLaMA's blocks in Qwen2-0.5B's sizes, without its q, k, v biases) in llama.cpp,
through llama-cpp-python (scripts/install_llama_cpp.sh builds it for this CPU).

    python3 scripts/bench_llama_cpp.py ROW [STEPS]
    python3 scripts/bench_llama_cpp.py --rows      the rows it runs, as JSON

ROW is (generate|prefill)-(gpt2-small|llama-0.5b)[-bf16|-int8|-int4]; the weights are llama.cpp's
F32, BF16, Q8_0 or Q4_0 (every matrix, the tied embedding too: llama_model_quantize's `pure`, as
zoo bench quantizes every product and the tied head). The model is transformers' own with zoo's
row's sizes and random weights, written as a Hugging Face directory and converted by the
converter llama.cpp's source carries (convert_hf_to_gguf.py); the GGUF files are kept in
$ZOO_LLAMA_CPP/models. generate: a 16-token prompt, then 128 greedy tokens (zoo's
generate-* rows); prefill: one 128-token prompt and its next token's logits (zoo's prefill-*
rows). Threads come from ZOO_BENCH_THREADS, the install from ZOO_LLAMA_CPP, GPT-2's vocab.json and
merges.txt (the converter needs a tokenizer) from ZOO_GPT2_TOKENIZER. Prints one JSON object
(name, unit, value, peak_rss_mb, type).
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOME = Path(os.environ.get("ZOO_LLAMA_CPP", "."))
sys.path.insert(0, str(HOME / "site"))

TYPES = {"": "F32", "-bf16": "BF16", "-int8": "Q8_0", "-int4": "Q4_0"}  # by the row name's suffix
ROWS = {f"{task}-{model}{suffix}": (task, model, kind) for task in ("generate", "prefill")
        for model in ("gpt2-small", "llama-0.5b") for suffix, kind in TYPES.items()}


def hugging_face_model(model):
    """transformers' model of the row's sizes (configs/gpt2-small.yaml; configs/qwen2-0.5b.yaml
    without its q, k, v biases), random weights (seeded)."""
    import torch
    import transformers
    torch.manual_seed(0)
    if model == "gpt2-small":
        config = transformers.GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
        return transformers.GPT2LMHeadModel(config)
    config = transformers.LlamaConfig(vocab_size=151936, hidden_size=896, num_hidden_layers=24,
                                      num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                                      max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                      tie_word_embeddings=True, attention_bias=False, mlp_bias=False)
    return transformers.LlamaForCausalLM(config)


def write_atomically(path, make):
    """make(temporary path) writes the file; it becomes `path` only once whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    make(partial)
    os.replace(partial, path)


def gguf_file(model, kind):
    """The model's GGUF file of type `kind`, converted (F32, BF16) or quantized (Q8_0, Q4_0) once."""
    path = HOME / "models" / f"{model}-{kind}.gguf"
    if path.exists():
        return path
    if kind in ("F32", "BF16"):
        with tempfile.TemporaryDirectory() as hf:
            hugging_face_model(model).save_pretrained(hf)
            config = json.loads(Path(hf, "config.json").read_text())
            config.setdefault("n_ctx", config.get("n_positions"))  # GPT-2's converter reads the Hub's older key
            Path(hf, "config.json").write_text(json.dumps(config))
            tokenizer = Path(os.environ["ZOO_GPT2_TOKENIZER"])
            for name in ("vocab.json", "merges.txt"):
                shutil.copy(tokenizer / name, hf)
            Path(hf, "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
            def convert(out):
                done = subprocess.run([sys.executable, str(HOME / "convert" / "convert_hf_to_gguf.py"), hf, "--outfile",
                                       str(out), "--outtype", kind.lower()], capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"bench_llama_cpp.py: convert_hf_to_gguf.py failed on {model}:\n{done.stderr[-4000:]}")
            write_atomically(path, convert)
        return path
    import llama_cpp
    source = gguf_file(model, "F32")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}[kind]
    params.pure = True
    params.nthread = int(os.environ.get("ZOO_BENCH_THREADS", os.cpu_count()))

    def quantize(out):
        from llama_cpp._utils import suppress_stdout_stderr
        with suppress_stdout_stderr(disable=False):  # its log names every tensor
            failed = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0
        if failed:
            sys.exit(f"bench_llama_cpp.py: llama_model_quantize to {kind} failed on {source}")
    write_atomically(path, quantize)
    return path


def median_seconds(warmup, runs, f):
    for _ in range(warmup):
        f()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def main():
    row = sys.argv[1]
    if row == "--rows":
        print(json.dumps({"rows": sorted(ROWS)}))
        return
    if row not in ROWS:
        sys.exit(f"bench_llama_cpp.py: unknown row {row}; known: {', '.join(sorted(ROWS))}")
    if "ZOO_LLAMA_CPP" not in os.environ:
        sys.exit("bench_llama_cpp.py: ZOO_LLAMA_CPP (scripts/install_llama_cpp.sh's folder) is not set")
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    task, model, kind = ROWS[row]
    path = gguf_file(model, kind)
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama
    threads = int(os.environ.get("ZOO_BENCH_THREADS", os.cpu_count()))
    llm = Llama(model_path=str(path), n_ctx=256, n_batch=128, n_ubatch=128, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    vocab = llm.n_vocab()

    def last_logits():  # Llama.eval keeps no logits without logits_all: read the context's own
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))
    runs = min(steps, 3) if steps else 3
    if task == "generate":
        prompt = [(i * 7919) % vocab for i in range(16)]

        def decode():
            llm.reset()
            llm.eval(prompt)
            for step in range(128):
                token = int(np.argmax(last_logits()))
                if step + 1 < 128:
                    llm.eval([token])

        value = 128 / median_seconds(1, runs, decode)
    else:
        prompt = [(i * 7919) % vocab for i in range(128)]

        def prefill():
            llm.reset()
            llm.eval(prompt)
            return int(np.argmax(last_logits()))

        value = 128 / median_seconds(1, runs, prefill)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"name": row, "unit": "tokens/s", "value": value, "peak_rss_mb": peak, "type": kind}))


if __name__ == "__main__":
    main()
