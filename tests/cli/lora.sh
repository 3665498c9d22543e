#!/usr/bin/env bash
# LoRA end to end on Hugging Face models (transformers' layouts, real tokenizer files):
# `zoo finetune ... lora.rank=N` trains adapters on an imported GPT-2 (fused c_attn, Conv1D),
# LLaMA (separate q/k/v/o, gate/up/down) and BERT classifier (head trained in full), writes
# checkpoints of adapters only, exports them merged (TorchScript, Hugging Face) and in PEFT's
# layout, which PEFT itself loads onto transformers' base model and merges to the same weights
# and logits; the PEFT directory imports back onto the base and generates what the run does.
# The other way, adapters made and saved by PEFT import onto zoo's base to PEFT's merge. Bad
# input is named.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
zoo="$1" corpus="$2" reference="$3" references="$4" spm_reference="$5"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}" peft="$(dirname "$3")/peft_reference.py" generate_py="$(dirname "$0")/../../scripts/torchscript_generate.py"

pretrained_inputs "$corpus" "$spm_reference"
lora="steps=3 eval_every=0 batch_size=2 lr=0.01 lora.rank=4 lora.alpha=8"

# peft_round_trip FLAVOR RUN: the merged export equals PEFT's merge of the adapter export on
# transformers' base; the PEFT directory imports onto the base and exports to the same.
peft_round_trip() {
  local flavor="$1" run="$2"
  "$zoo" export-hf "$run" --adapters-only --out "$run-peft" > /dev/null
  "$zoo" export-hf "$run" --out "$run-merged" | has "^merging the LoRA adapters (rank 4, alpha 8"
  "$python" "$peft" check "$work/$flavor-hf" "$run-peft" "$run-merged" > /dev/null
  "$zoo" import-hf "$run-peft" --base "$work/$flavor" --out "$run-back" | has "LoRA adapters on"
  "$zoo" export-hf "$run-back" --out "$run-merged2" > /dev/null
  "$python" "$peft" check "$work/$flavor-hf" "$run-peft" "$run-merged2" > /dev/null
}

# GPT-2: adapters on q and v (parts of the fused c_attn) and the feed-forward's down (c_proj).
hf_dir gpt2 50257 "$references/gpt2-files/vocab.json" "$references/gpt2-files/merges.txt"
# shellcheck disable=SC2086
"$zoo" finetune "$work/gpt2" --train "$work/slice.txt" --task lm $lora block_size=32 lora.targets=q,v,down \
  --run-dir "$work/gpt2-lora" > "$work/gpt2-lora.out" 2>&1
# 2 layers: q and v A (4, 32) + B (32, 4) each, down A (4, 64) + B (32, 4).
grep -q "parameters: .* (trainable 1792, " "$work/gpt2-lora.out"
grep -q "lora: rank 4, alpha 8, dropout 0.05 on 6 projections (q, v, down); the base stays frozen" "$work/gpt2-lora.out"
grep -q '"trainable_parameters":1792' "$work/gpt2-lora/metrics.jsonl"
test -e "$work/gpt2-lora/checkpoints/last/lora.json"
peft_round_trip gpt2 "$work/gpt2-lora"
"$python" - "$work/gpt2-lora-peft/adapter_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
# q and v of c_attn: one adapter of rank 8 at the same scale (alpha 16 / 8 = 8 / 4); the
# feed-forward's c_proj named so that PEFT does not also take the attention's c_proj.
assert c["target_modules"] == ["c_attn", "mlp.c_proj"] and c["fan_in_fan_out"] is True, c
assert c["rank_pattern"] == {"c_attn": 8} and c["alpha_pattern"] == {"c_attn": 16.0}, c
assert c["task_type"] == "CAUSAL_LM" and c["r"] == 4 and c["lora_alpha"] == 8, c
PY
want=$("$zoo" generate "$work/gpt2-lora" --prompt "The module" --max-new-tokens 6 --greedy 2> /dev/null)
got=$("$zoo" generate "$work/gpt2-lora-back" --prompt "The module" --max-new-tokens 6 --greedy 2> /dev/null)
[[ -n "$want" && "$want" == "$got" ]] || { echo "LoRA run: '$want', PEFT import: '$got'"; exit 1; }
# The merged TorchScript export generates the same in plain PyTorch.
"$zoo" export "$work/gpt2-lora" --out "$work/gpt2-lora.pt" | has "its tokenizer inside"
tokenizer="$work/gpt2-lora/checkpoints/last/tokenizer"
ids=$(printf 'The module\n' | "$zoo" tokenizer encode --model "$tokenizer")
got=$("$python" "$generate_py" "$work/gpt2-lora.pt" --ids "$ids" --max-new-tokens 6 --greedy | "$zoo" tokenizer decode --model "$tokenizer")
[[ "$want" == "$got" ]] || { echo "LoRA run: '$want', its merged TorchScript export: '$got'"; exit 1; }
# Resume continues the adapters.
# shellcheck disable=SC2086
"$zoo" train --resume "$work/gpt2-lora" steps=4 > "$work/resume.out" 2>&1
grep -q "resumed from .* at step 3" "$work/resume.out"

# LLaMA: every projection (q, k, v, out, gate, up, down: PEFT's q_proj ... down_proj).
hf_dir llama 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
# shellcheck disable=SC2086
"$zoo" finetune "$work/llama" --train "$work/slice.txt" --task lm $lora block_size=32 lora.targets=all \
  --run-dir "$work/llama-lora" > /dev/null 2>&1
peft_round_trip llama "$work/llama-lora"
grep -q '"target_modules": \[$' "$work/llama-lora-peft/adapter_config.json"
for m in q_proj k_proj v_proj o_proj gate_proj up_proj down_proj; do
  grep -q "\"$m\"" "$work/llama-lora-peft/adapter_config.json"
done

# Phi-3: adapters on q and v (parts of the fused qkv_proj) and gate (half of gate_up_proj), over
# LongRoPE's long factors (the blocks are longer than its trained context of 8).
hf_dir phi3 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
# shellcheck disable=SC2086
"$zoo" finetune "$work/phi3" --train "$work/slice.txt" --task lm $lora block_size=32 lora.targets=q,v,gate \
  --run-dir "$work/phi3-lora" > /dev/null 2>&1
peft_round_trip phi3 "$work/phi3-lora"
"$python" - "$work/phi3-lora-peft/adapter_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
# q and v: one qkv_proj adapter of rank 8, B block-diagonal; gate: gate_up_proj's first half.
assert c["target_modules"] == ["gate_up_proj", "qkv_proj"], c
assert c["rank_pattern"] == {"qkv_proj": 8} and c["alpha_pattern"] == {"qkv_proj": 16.0}, c
PY

# Mixtral: adapters on q and on every expert's gate_up and down (PEFT's target_parameters on
# transformers' mlp.experts), without dropout (PEFT has none there).
hf_dir mixtral 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
# shellcheck disable=SC2086
"$zoo" finetune "$work/mixtral" --train "$work/slice.txt" --task lm $lora block_size=32 lora.dropout=0 \
  lora.targets=q,gate_up,down --run-dir "$work/mixtral-lora" > /dev/null 2>&1
peft_round_trip mixtral "$work/mixtral-lora"
"$python" - "$work/mixtral-lora-peft/adapter_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["target_modules"] == ["q_proj"], c
assert c["target_parameters"] == ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"], c
PY

# Gemma 2 (sandwich norms, soft-capped scores and logits, a window in layer 0 only): adapters on
# q, out and down both ways.
hf_dir gemma2 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
# shellcheck disable=SC2086
"$zoo" finetune "$work/gemma2" --train "$work/slice.txt" --task lm $lora block_size=32 lora.targets=q,out,down \
  --run-dir "$work/gemma2-lora" > /dev/null 2>&1
peft_round_trip gemma2 "$work/gemma2-lora"

# PEFT's own adapters (get_peft_model, save_pretrained) on GPT-2's c_attn, LLaMA's q, v and
# down projections, Qwen3's (head norms, head_dim apart) k, o and up, Phi-3's fused qkv_proj
# and gate_up_proj, Qwen3-MoE's q, o and experts, and Gemma 3's (q/k norms, a sliding layer at its
# own RoPE base) v, gate and up import onto zoo's base and export merged to PEFT's merge.
hf_dir qwen3 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
hf_dir qwen3_moe 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
hf_dir gemma3 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
for flavor_targets in gpt2:c_attn,c_fc llama:q_proj,v_proj,down_proj qwen3:k_proj,o_proj,up_proj \
    phi3:qkv_proj,gate_up_proj qwen3_moe:q_proj,o_proj,mlp.experts.gate_up_proj,mlp.experts.down_proj \
    gemma3:v_proj,gate_proj,up_proj; do
  flavor="${flavor_targets%%:*}"
  "$python" "$peft" make "$work/$flavor-hf" "$work/$flavor-made-peft" "${flavor_targets#*:}" 4 8 > /dev/null
  "$zoo" import-hf "$work/$flavor-made-peft" --base "$work/$flavor" --out "$work/$flavor-made" | has "LoRA adapters on"
  "$zoo" export-hf "$work/$flavor-made" --out "$work/$flavor-made-merged" > /dev/null
  "$python" "$peft" check "$work/$flavor-hf" "$work/$flavor-made-peft" "$work/$flavor-made-merged" > /dev/null
done

# BERT masked-LM base fine-tuned as a classifier: adapters on query and value, the fresh
# classifier and pooler trained in full (PEFT's modules_to_save).
hf_dir bert_mlm 30522 "$references/bert-vocab/vocab.txt"
# shellcheck disable=SC2086
"$zoo" finetune "$work/bert_mlm" --train "$work/cls.csv" $lora --run-dir "$work/bert-lora" > "$work/bert.out" 2>&1
grep -q "trained in full: pooler.weight, pooler.bias, classifier.weight, classifier.bias" "$work/bert.out"
peft_round_trip bert_mlm "$work/bert-lora"
grep -q '"SEQ_CLS"' "$work/bert-lora-peft/adapter_config.json"
"$zoo" generate "$work/bert-lora" --prompt "item 3 is good" 2> /dev/null | has -E "^  (pos|neg)\s"
"$zoo" generate "$work/bert-lora-back" --prompt "item 3 is good" 2> /dev/null | has -E "^  [01]\s"

# ModernBERT masked-LM base fine-tuned as a classifier: adapters on q and v (parts of the fused
# Wqkv) and gate (half of Wi); the head transform (started from the masked LM's head, as
# transformers' ModernBertForSequenceClassification does) and the fresh classifier trained in full.
hf_dir modernbert_mlm 30522 "$references/bert-vocab/vocab.txt"
# shellcheck disable=SC2086
"$zoo" finetune "$work/modernbert_mlm" --train "$work/cls.csv" $lora lora.targets=q,v,gate \
  --run-dir "$work/modernbert-lora" > "$work/modernbert.out" 2>&1
grep -q "trained in full: classifier.weight, classifier.bias, head_transform.dense.weight, head_transform.dense.bias, head_transform.norm.weight, head_transform.norm.bias$" "$work/modernbert.out"
peft_round_trip modernbert_mlm "$work/modernbert-lora"
"$python" - "$work/modernbert-lora-peft/adapter_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["task_type"] == "SEQ_CLS" and c["target_modules"] == ["Wi", "Wqkv"], c
PY
"$zoo" generate "$work/modernbert-lora-back" --prompt "item 3 is good" 2> /dev/null | has -E "^  [01]\s"
# A SEQ_CLS adapter saving the classifier alone (PEFT's default modules_to_save): the head
# transform comes from the base's masked LM, as transformers loads `head` from it.
cp -r "$work/modernbert-lora-peft" "$work/modernbert-classifier-peft"
"$python" - "$work/modernbert-classifier-peft" <<'PY'
import json, sys
from safetensors.torch import load_file, save_file
d = sys.argv[1]
c = json.load(open(f"{d}/adapter_config.json"))
json.dump({**c, "modules_to_save": ["classifier"]}, open(f"{d}/adapter_config.json", "w"))
w = load_file(f"{d}/adapter_model.safetensors")
save_file({k: v for k, v in w.items() if ".head." not in k}, f"{d}/adapter_model.safetensors", metadata={"format": "pt"})
PY
"$zoo" import-hf "$work/modernbert-classifier-peft" --base "$work/modernbert_mlm" --out "$work/modernbert-classifier" > /dev/null
"$zoo" export-hf "$work/modernbert-classifier" --out "$work/modernbert-classifier-merged" > /dev/null
"$python" "$peft" check "$work/modernbert_mlm-hf" "$work/modernbert-classifier-peft" "$work/modernbert-classifier-merged" > /dev/null

# T5 sequence to sequence: adapters on the encoder's and decoder's self-attention and the
# decoder's cross-attention (PEFT's q and v of every T5Attention), evaluated and resumed.
hf_dir t5 2100 "$work/spm/t5-dir/spiece.model" "$work/spm/t5-dir/tokenizer_config.json"
# shellcheck disable=SC2086
"$zoo" finetune "$work/t5" --train "$work/pairs.jsonl" --val "$work/pairs.jsonl" $lora eval_batches=1 \
  --run-dir "$work/t5-lora" > "$work/t5.out" 2>&1
# 2 encoder and 3 decoder layers: q and v of 8 attentions, each A (4, 32) + B (32, 4).
grep -q "lora: rank 4, alpha 8, dropout 0.05 on 16 projections (q, v); the base stays frozen" "$work/t5.out"
grep -q "parameters: .* (trainable 4096, " "$work/t5.out"
peft_round_trip t5 "$work/t5-lora"
grep -q '"SEQ_2_SEQ_LM"' "$work/t5-lora-peft/adapter_config.json"
grep -q '"base_model.model.decoder.block.2.layer.1.EncDecAttention.v.lora_B.weight"' "$work/t5-lora-peft/adapter_model.safetensors"
"$zoo" eval "$work/t5-lora" --data "$work/pairs.jsonl" 2> /dev/null | has "^exact_match "
want=$("$zoo" generate "$work/t5-lora" --prompt "copy 3" --max-new-tokens 4 --greedy 2> /dev/null)
got=$("$zoo" generate "$work/t5-lora-back" --prompt "copy 3" --max-new-tokens 4 --greedy 2> /dev/null)
[[ "$want" == "$got" ]] || { echo "T5 LoRA run: '$want', PEFT import: '$got'"; exit 1; }
"$zoo" train --resume "$work/t5-lora" steps=4 > "$work/t5-resume.out" 2>&1
grep -q "resumed from .* at step 3" "$work/t5-resume.out"

# Bad input: named, nothing left behind.
fails "lora.targets: 'query' matches no projection of this model; its projections are q, k, v, out, up, down" \
  "$zoo" finetune "$work/gpt2" --train "$work/slice.txt" --task lm $lora lora.targets=query --run-dir "$work/bad"
test ! -e "$work/bad"
fails "lora.rank: 40 exceeds blocks.0.self_attn.q \(32 x 32\)" \
  "$zoo" finetune "$work/gpt2" --train "$work/slice.txt" --task lm steps=1 lora.rank=40 --run-dir "$work/bad"
fails "lora.rank: LoRA adapts a pretrained model" "$zoo" train gpt-tiny lora.rank=4 steps=1 --run-dir "$work/bad"
test ! -e "$work/bad"
fails "has no LoRA adapters" "$zoo" export-hf "$work/gpt2" --adapters-only --out "$work/bad"
fails "name the zoo checkpoint of its base model with --base" "$zoo" import-hf "$work/gpt2-lora-peft" --out "$work/bad"
fails "bert.pooler.dense.bias' is neither an adapter nor a tensor of the model" "$zoo" import-hf "$work/bert-lora-peft" --base "$work/gpt2" --out "$work/bad"
test ! -e "$work/bad"
# An adapter_config.json that disagrees with its weights (issue 31: each was imported).
# edited NAME PYTHON: a copy of the GPT-2 PEFT export whose config PYTHON (on c) changed.
edited() {
  rm -rf "$work/$1" && cp -r "$work/gpt2-lora-peft" "$work/$1"
  "$python" - "$work/$1/adapter_config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
}
edited huge-r 'c["r"] = 1000000000'
fails "adapter_config.json: r: says rank 1000000000 for transformer.h.0.mlp.c_proj, whose lora_A and lora_B have rank 4" \
  "$zoo" import-hf "$work/huge-r" --base "$work/gpt2" --out "$work/bad"
edited pattern-8 'c["rank_pattern"] = {"c_attn": 4}'
fails "rank_pattern: says rank 4 for transformer.h.0.attn.c_attn, whose lora_A and lora_B have rank 8" \
  "$zoo" import-hf "$work/pattern-8" --base "$work/gpt2" --out "$work/bad"
edited pattern-negative 'c["rank_pattern"] = {"c_attn": -3}'
fails "rank_pattern: the rank for transformer.h.0.attn.c_attn must be a positive integer, got -3" \
  "$zoo" import-hf "$work/pattern-negative" --base "$work/gpt2" --out "$work/bad"
edited huge-alpha 'c["lora_alpha"] = 1e308'
fails "lora_alpha: a scale of .* for transformer.h.0.mlp.c_proj \(alpha / r\) is beyond 10000" \
  "$zoo" import-hf "$work/huge-alpha" --base "$work/gpt2" --out "$work/bad"
edited rslora-yes 'c["use_rslora"] = "yes"'
fails "use_rslora: expected true or false, got \"yes\"" "$zoo" import-hf "$work/rslora-yes" --base "$work/gpt2" --out "$work/bad"
edited unknown-target 'c["target_modules"] = c["target_modules"] + ["q_proj"]'
fails "target_modules: 'q_proj' matches no module the adapter's weights hold" \
  "$zoo" import-hf "$work/unknown-target" --base "$work/gpt2" --out "$work/bad"
test ! -e "$work/bad"
echo "LoRA: ok"
