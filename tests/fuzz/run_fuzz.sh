#!/usr/bin/env bash
# Runs a libFuzzer target for SECONDS from seed inputs made for it (valid files of its format and
# a few variants), with the sanitizers' findings fatal. Usage: run_fuzz.sh FUZZER SECONDS
# A crash leaves its input beside the fuzzer (crash-*), which reproduces it: FUZZER crash-...
set -euo pipefail
fuzzer="$(readlink -f "$1")"  # absolute: the fuzzer runs from its own folder
seconds="$2"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus="$work/corpus"
mkdir "$corpus"

safetensors_seed() {  # NAME JSON DATA_BYTES
  local json="$2" n
  n=${#json}
  printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)))" > "$corpus/$1"
  printf '%s' "$json" >> "$corpus/$1"
  head -c "$3" /dev/zero >> "$corpus/$1"
}

repeat() {  # TEXT N: TEXT N times
  local out="" i
  for ((i = 0; i < $2; i++)); do out+="$1"; done
  printf '%s' "$out"
}

u32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)))"; }
u64() { u32 "$1"; u32 0; }

case "$(basename "$fuzzer")" in
  safetensors_fuzz)
    safetensors_seed one '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 8
    safetensors_seed two '{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}' 16
    safetensors_seed empty '{}' 0
    ;;
  config_fuzz)
    for f in "$source_dir"/configs/*.yaml "$source_dir"/configs/runs/*.yaml; do cp "$f" "$corpus/"; done
    printf 'family: gpt\nvocab_size: 64\nd_model: 8\nn_heads: 2\nd_ff: 16\nn_layers: 1\n---overrides\nsteps=3\nmodel.window=4\nprecision=bf16\nschedule=linear\n' > "$corpus/overrides"
    ;;
  trainer_state_fuzz)
    printf '{"step": 12, "world_size": 1, "sampler": {"epoch": 0, "index": 48}, "rng": "0a0b", "skipped": 0, "tokens_seen": 1536, "loss_scale": 1.0, "objective": "causal_lm", "best": {"step": 10, "split": "val", "loss": 5.5, "perplexity": 244.7, "accuracy": 0.1, "targets": 256}}' > "$corpus/state.json"
    printf '{"step": 0, "sampler": {"epoch": 0, "index": 0}, "rng": "00", "best": null}' > "$corpus/minimal.json"
    ;;
  token_file_fuzz)
    # Header (magic, version 1, 2-byte tokens, vocab 512, hash, 5 tokens, 2 documents, reserved),
    # the tokens (documents end with </s> = 3), then the document starts and the total.
    {
      printf 'ZOOTOKEN'; u32 1; u32 2; u64 512; u64 42; u64 5; u64 2; head -c 16 /dev/zero
      printf '\x09\x00\x0a\x00\x03\x00\x0b\x00\x03\x00'
      u64 0; u64 3; u64 5
    } > "$corpus/two-documents.tokens"
    { printf 'ZOOTOKEN'; u32 1; u32 4; u64 70000; u64 0; u64 0; u64 0; head -c 16 /dev/zero; u64 0; } > "$corpus/empty.tokens"
    ;;
  example_files_fuzz)
    printf 'c%s' $'text,label\n"a, quoted ""one""",pos\nplain,neg\n' > "$corpus/classification.csv"
    printf 't%s' $'text\ttext_pair\tlabel\nfirst\tsecond\tyes\n' > "$corpus/pairs.tsv"
    printf 'j%s' $'{"text": "hello", "label": "greeting"}\n{"source": "copy 1", "target": "1"}\n' > "$corpus/examples.jsonl"
    ;;
  hf_model_config_fuzz)
    printf '{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 512, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}' > "$corpus/gpt2.json"
    printf '{"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64}' > "$corpus/bert.json"
    printf '{"model_type": "t5", "vocab_size": 512, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false}' > "$corpus/t5.json"
    printf '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "tie_word_embeddings": true, "eos_token_id": [1, 2]}' > "$corpus/llama.json"
    printf '{"model_type": "mistral", "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "sliding_window": 16, "rope_scaling": {"type": "linear", "factor": 2.0}}' > "$corpus/mistral.json"
    printf '{"model_type": "qwen2", "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "use_sliding_window": true, "sliding_window": 8, "layer_types": ["sliding_attention", "sliding_attention"], "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}' > "$corpus/qwen2.json"
    ;;
  tokenizer_json_fuzz)
    cp "$source_dir"/tests/fuzz/tokenizer_json_seeds/* "$corpus/"
    # Issue 31's hostile tokenizer.json shapes, each once a crash or unbounded growth: components
    # nested deeply, 64 chained Replace a -> aa, a long Prepend string. A WordPiece model and text.
    local_model='"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1}}'
    { printf '{"normalizer": '; repeat '{"type": "Sequence", "normalizers": [' 150; printf '{"type": "Lowercase"}'
      repeat ']}' 150; printf ', %s}\0aaaa' "$local_model"; } > "$corpus/nested-sequences.bin"
    { printf '{"normalizer": {"type": "Sequence", "normalizers": ['
      repeat '{"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}, ' 63
      printf '{"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}]}, %s}\0aaaaaaaa' "$local_model"; } > "$corpus/replace-chain.bin"
    { printf '{"normalizer": {"type": "Prepend", "prepend": "'; repeat 'a' 6000; printf '"}, %s}\0a a a' "$local_model"; } > "$corpus/long-prepend.bin"
    ;;
  chat_template_fuzz)
    printf '%s' "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] | trim + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}" > "$corpus/chatml.jinja"
    # Issue 31's hostile templates, each once a crash, hang or unbounded growth: long chains,
    # values nested or doubled through a namespace, strings doubled, a large replacement.
    { printf "{{ 'a'"; repeat '|upper' 1300; printf ' }}'; } > "$corpus/chain-filters.jinja"
    { printf "{{ 'a'"; repeat " ~ 'a'" 1100; printf ' }}'; } > "$corpus/chain-tilde.jinja"
    { printf '{{ x'; repeat '.a' 1300; printf ' }}'; } > "$corpus/chain-attributes.jinja"
    { printf '{{ 1'; repeat ' if x else 1' 600; printf ' }}'; } > "$corpus/chain-conditionals.jinja"
    printf '%s' '{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}' > "$corpus/nested.jinja"
    printf '%s' '{% set ns = namespace(x=[1]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x|string }}{{ ns.x == ns.x }}' > "$corpus/doubled.jinja"
    printf '%s' '{% set ns = namespace(x=[1]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}' > "$corpus/doubled-printed.jinja"
    printf '%s' "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}" > "$corpus/string-doubled.jinja"
    printf '%s' "{{ ('a' * 1000000)|replace('a', 'b' * 1000) }}{{ strftime_now('%Y' * 100) }}" > "$corpus/replace.jinja"
    printf '%s' $'{%- set ns = namespace(n=0) -%}\n{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}\n  {% for m in messages if m.role != \'system\' %}{% set ns.n = ns.n + 1 %}{{ f(loop.index) }} {{ m | tojson(indent=1) }}{% if loop.last %}{% break %}{% endif %}{% endfor %}{# c #}\n{{ messages[1:][::-1] | map(attribute=\'content\') | join(\', \') | upper }} {{ raise_exception(\'x\') if ns.n > 9 }}' > "$corpus/constructs.jinja"
    ;;
  openai_api_fuzz)
    printf '%s' '{"model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "stop": ["\n", "lo"], "seed": 4, "n": 2, "stream": true, "stream_options": {"include_usage": true}}' > "$corpus/completion.json"
    printf '%s' '{"prompt": ["a", [5, 6]], "logprobs": null, "echo": false}' > "$corpus/prompts.json"
    printf '%s' '{"prompt": [[1, 2, 3]], "logprobs": 5, "echo": true, "max_tokens": 0}' > "$corpus/logprobs.json"
    printf '%s' '{"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 20}' > "$corpus/chat-logprobs.json"
    printf '%s' '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_completion_tokens": 9}' > "$corpus/chat.json"
    printf '%s' '{"input": ["a", "b"], "encoding_format": "float"}' > "$corpus/embeddings.json"
    printf '%s' '{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}' > "$corpus/json-object.json"
    printf '%s' '{"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "s", "strict": true, "schema": {"$defs": {"p": {"type": "integer", "minimum": 0}}, "type": "object", "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"anyOf": [{"type": "array", "items": {"enum": ["x", null]}, "maxItems": 3}, true]}}, "required": ["a"], "additionalProperties": false}}}}' > "$corpus/json-schema.json"
    printf '%s' '{"messages": [{"role": "user", "content": "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call> <tool_call>\n<function=f>\n<parameter=a>\n2\n</parameter>\n</function>\n</tool_call>"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}], "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}], "tool_choice": "required", "parallel_tool_calls": false}' > "$corpus/tools.json"
    printf '%s' '{"messages": [{"role": "user", "content": "x [TOOL_CALLS]f[ARGS]{\"a\": [1, {}]}[TOOL_CALLS][{\"name\": \"g\", \"arguments\": \"{}\"}]"}], "tools": [{"type": "function", "function": {"name": "f"}}]}' > "$corpus/tools-mistral.json"
    printf '%s' '{"messages": [{"role": "user", "content": "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"}\"}}; {\"name\": \"g\"}"}], "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}' > "$corpus/tools-named.json"
    { printf '{"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": '; repeat '{"items": ' 200; printf '{}'; repeat '}' 200; printf '}}}'; } > "$corpus/deep-schema.json"
    { printf '{"prompt": '; repeat '[' 3000; repeat ']' 3000; printf '}'; } > "$corpus/nested.json"
    printf '{"prompt": "caf\u00e9 \ud83d\ude42", "stop": "\u00e9"}' > "$corpus/unicode.json"
    # Numbers past every 64-bit type (issue #52: 5,000 digits answered 500).
    { printf '{"prompt": "a", "max_tokens": 1'; repeat 0 5000; printf '}'; } > "$corpus/long-number.json"
    printf '%s' '{"prompt": [1, 2, -1e400], "temperature": 1e-400, "seed": 18446744073709551616}' > "$corpus/huge-numbers.json"
    ;;
  *)
    echo "run_fuzz.sh: no seeds for $(basename "$fuzzer")" >&2
    exit 2
    ;;
esac

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
cd "$(dirname "$fuzzer")"
"$fuzzer" -max_total_time="$seconds" -max_len=8192 -timeout=20 -print_final_stats=1 "$corpus" 2>&1 | tail -15
exit "${PIPESTATUS[0]}"
