#include "layers/attention_path.h"

#include <stdexcept>

namespace zoo {
namespace {

// Why LibTorch's CPU kernel would need a (T, Tk) tensor for `call`, or empty when its flash
// kernel takes the call as it is: a plain causal mask (is_causal), or a key padding mask
// broadcast as (B, 1, 1, Tk).
std::string libtorch_needs_full_bias(const AttentionCall& call) {
  if (call.softcap) return "its kernels do not soft-cap scores";
  if (call.dropout > 0.0) return "its CPU flash kernel takes no dropout: it falls back to the (T, Tk) math path";
  switch (call.position) {
    case AttentionPositionTerm::kNone: break;
    case AttentionPositionTerm::kAlibi: return "ALiBi is an additive (H, T, Tk) bias for it";
    case AttentionPositionTerm::kRelative:
      return "T5's relative bias is an (H, T, Tk) tensor requiring grad for it, which its CPU flash kernel "
             "does not take";
    case AttentionPositionTerm::kTensor: return "the call brings an additive bias tensor";
  }
  if (call.window > 0) return "a sliding window is a full (T, Tk) mask for it";
  if (!call.causal) return {};
  if (!call.aligned) return "a causal mask after cached keys is a (T, Tk) mask for it";
  if (call.key_padding) return "causal with key padding is a (B, 1, T, Tk) mask for it";
  if (call.grouped) return "grouped queries under a causal mask need a (T, Tk) mask for it";
  return {};
}

}  // namespace

void set_mask_facts(AttentionCall& call, int64_t queries, int64_t past, int64_t keys, bool causal, int64_t window,
                    bool key_padding, AttentionPositionTerm position) {
  call.queries = queries, call.keys = keys;
  call.aligned = past == 0 && queries == keys;
  call.causal = causal;
  call.window = window;
  call.key_padding = key_padding;
  call.position = position;
}

std::string tiled_refusal(const AttentionCall& call) {
  if (call.need_weights) return "the caller asks for the (T, Tk) weights";
  if (!call.cpu) return "CPU only (CUDA's fused kernels are LibTorch's)";
  if (!call.float_or_bf16) return "float32 and bfloat16 only";
  if (call.position == AttentionPositionTerm::kTensor) return "the call brings an additive bias tensor";
  return {};
}

std::string decode_refusal(const AttentionCall& call) {
  if (call.queries != 1) return "one query row per sequence only";
  if (call.need_weights) return "the caller asks for the weights";
  if (!call.cpu) return "CPU only";
  if (!call.float_or_bf16) return "float32 and bfloat16 only";
  if (call.dropout > 0.0) return "no dropout";
  if (call.differentiable) return "no backward (grad mode is on)";
  if (!call.bf16 && !call.float32_decode_kernel) return "float32 needs AVX-512F, which this CPU lacks";
  return {};
}

AttentionChoice choose_attention_path(const AttentionCall& call) {
  AttentionChoice choice;
  auto pick = [&](AttentionPath path, std::string reason) {
    choice.path = path;
    choice.reason = std::move(reason);
    return choice;
  };
  const std::string tiled_no = tiled_refusal(call);
  if (call.ring) {
    if (!tiled_no.empty()) throw std::invalid_argument("context parallelism cannot run this call: " + tiled_no);
    return pick(AttentionPath::kRing, "context parallelism: the tiled kernel's terms around the ring");
  }
  const bool decode = decode_refusal(call).empty();
  switch (call.backend) {
    case AttentionBackend::kMath:
      if (decode && call.bf16) {
        return pick(AttentionPath::kDecode, "a bfloat16 decoding step, with the bf16 export's roundings");
      }
      return pick(AttentionPath::kMath, "attention_backend: math");
    case AttentionBackend::kFused:
      if (decode) return pick(AttentionPath::kDecode, "a decoding step");
      if (call.softcap) throw std::invalid_argument("attention_backend: fused cannot soft-cap scores (LibTorch's kernels "
                                                    "have no such term; auto takes zoo's tiled kernel)");
      return pick(AttentionPath::kLibTorch, "attention_backend: fused");
    case AttentionBackend::kTiled:
      if (!tiled_no.empty()) throw std::invalid_argument("attention_backend: tiled cannot run this call: " + tiled_no);
      return pick(AttentionPath::kTiled, "attention_backend: tiled");
    case AttentionBackend::kAuto: break;
  }
  if (call.need_weights) {
    choice.refused = {"libtorch: the caller asks for the (T, Tk) weights", "tiled: " + tiled_no};
    return pick(AttentionPath::kMath, "the caller asks for the weights");
  }
  if (call.softcap && !(call.queries <= 1 && decode)) {
    // Only zoo's kernels soft-cap: the tiled one where it runs (any length: no (T, Tk) tensor), else math.
    choice.refused = {"libtorch: " + libtorch_needs_full_bias(call)};
    if (tiled_no.empty()) return pick(AttentionPath::kTiled, "soft-capped scores, no (T, Tk) tensor");
    choice.refused.push_back("tiled: " + tiled_no);
    return pick(AttentionPath::kMath, "soft-capped scores");
  }
  if (!call.cpu) {
    choice.refused = {"tiled: " + tiled_no};
    return pick(AttentionPath::kLibTorch, "CUDA: LibTorch chooses flash or memory-efficient attention");
  }
  if (call.queries <= 1) {
    choice.refused = {"tiled: one query row has a (1, Tk) bias at most; nothing to tile"};
    if (decode) {
      choice.refused.push_back("libtorch: zoo's kernel is faster (16 rows of gpt2-small, 60 keys: 0.10 ms a layer, 0.21)");
      return pick(AttentionPath::kDecode, "one query row (decoding)");
    }
    choice.refused.push_back("decode: " + decode_refusal(call));
    return pick(AttentionPath::kLibTorch, "one query row (decoding)");
  }
  const std::string libtorch_no = libtorch_needs_full_bias(call);
  if (call.bf16 && call.differentiable && call.queries * call.keys <= kMathMaximumScoresBf16Training) {
    choice.refused = {"libtorch: its CPU flash kernel's bfloat16 backward is slower up to 128 x 128 scores",
                      "tiled: the (T, Tk) scores are small"};
    return pick(AttentionPath::kMath, "bfloat16 training of a short sequence");
  }
  if (libtorch_no.empty()) {
    choice.refused = {"tiled: LibTorch's flash kernel takes this call and is as fast or faster"};
    return pick(AttentionPath::kLibTorch, call.causal ? "flash kernel, its own causal mask"
                                                      : call.key_padding ? "flash kernel, a (B, 1, 1, Tk) padding mask"
                                                                         : "flash kernel, no mask");
  }
  if (!tiled_no.empty()) {
    choice.refused = {"tiled: " + tiled_no};
    return pick(AttentionPath::kLibTorch, "LibTorch with a full bias: " + libtorch_no);
  }
  if (call.dropout == 0.0 && call.queries * call.keys < kTiledMinimumScores) {
    choice.refused = {"tiled: under 512 x 512 scores LibTorch's kernel with a full bias is faster"};
    return pick(AttentionPath::kLibTorch, "LibTorch with a small full bias: " + libtorch_no);
  }
  choice.refused = {"libtorch: " + libtorch_no};
  return pick(AttentionPath::kTiled, "no (T, Tk) tensor");
}

std::string describe(const AttentionChoice& choice) {
  std::string line = std::string(to_string(choice.path)) + " (" + choice.reason + ")";
  for (size_t i = 0; i < choice.refused.size(); ++i) line += (i == 0 ? "; refused: " : "; ") + choice.refused[i];
  return line;
}

}  // namespace zoo
