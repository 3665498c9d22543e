#pragma once
// Which attention kernel runs for one call, and why the others were refused. One function
// decides, from facts about the call (no tensors), so that a model, `zoo info` and the tests
// ask the same question and get the same answer:
//
//   math     the explicit path: scores (T, Tk), softmax, weights; the tests' reference.
//   libtorch LibTorch's scaled_dot_product_attention: on the CPU its flash kernel when the
//            only terms are a plain causal mask or a key padding mask (no (T, T) tensor), on
//            CUDA flash or memory-efficient attention (which takes a bias and its gradient).
//   tiled    zoo's kernel (kernels/tiled_attention.h): causal, sliding-window, key padding,
//            ALiBi and T5 terms made inside each tile from their parameters, so no (T, T)
//            tensor exists; CPU, float32 or bfloat16.
//   decode   zoo's decoding kernel (kernels/decode_attention.h): one query per sequence against
//            the cache, each key read once for the query heads that share it; CPU, bfloat16, or
//            float32 where the CPU has AVX-512F; no dropout, no weights, nothing to differentiate.
//   ring     context parallelism (kernels/ring_attention.h): the tiled kernel's terms over this
//            rank's zigzag tokens, keys and values passed around the ring.
//
// The layer runs the chosen path with one `switch` (attend, layers/attention.h); a new path is
// one enumerator here, its refusal reason, and one case there.

#include <cstdint>
#include <string>
#include <vector>

#include "layers/variants.h"

namespace zoo {

enum class AttentionPath { kMath, kLibTorch, kTiled, kDecode, kRing };

// Below this many scores (queries x keys) and without dropout, LibTorch's kernel with a full
// bias is faster than the tiled kernel, and the bias is small (1 MiB a head in float32):
// measured on AMD EPYC Zen 3, one thread, 12 heads of 64, forward and backward (docs/models.md).
constexpr int64_t kTiledMinimumScores = 512 * 512;

// Up to this many scores a bfloat16 training call on the CPU is faster on the math path than in
// LibTorch's flash kernel, whose bfloat16 backward is slow there: forward and backward of 16 x 4
// heads of 64 at 128 tokens took 7.6 ms against 23 ms (gpt-tiny's bf16 row: 1.09x faster), 4 x 12
// at 256 tokens 18.7 against 25.2 but gpt2-small's bf16 row gained 2% for 580 MB more memory
// (the saved weights), and 8 x 12 at 512 tokens 343 against 158 (2-core AMD Zen 4, avx512f
// avx512_bf16). In float32 the flash kernel is as fast or faster at every length.
constexpr int64_t kMathMaximumScoresBf16Training = 128 * 128;

// The position term of the scores: none, one the tiled kernel computes from its parameters
// (ALiBi's slopes, T5's table), or an additive tensor someone built (only the math and
// LibTorch paths take one).
enum class AttentionPositionTerm { kNone, kAlibi, kRelative, kTensor };

ZOO_ENUM_NAMES(AttentionPath, "attention path",
               {"math", AttentionPath::kMath}, {"libtorch", AttentionPath::kLibTorch}, {"tiled", AttentionPath::kTiled},
               {"decode", AttentionPath::kDecode}, {"ring", AttentionPath::kRing});

struct AttentionCall {
  AttentionBackend backend = AttentionBackend::kAuto;
  bool cpu = true;
  bool float_or_bf16 = true;  // float32 or bfloat16 (the tiled kernel's types)
  bool bf16 = false;          // bfloat16 (with float_or_bf16; else float32)
  bool float32_decode_kernel = true;  // the CPU runs zoo's float32 decoding kernel (AVX-512F)
  int64_t queries = 0;
  int64_t keys = 0;
  // Queries and keys start at the same position and are as many (no cache before them): a plain
  // causal mask is the kernel's own is_causal.
  bool aligned = true;
  bool causal = false;
  int64_t window = 0;  // sliding window (two-sided without causal); 0 = none
  bool key_padding = false;
  AttentionPositionTerm position = AttentionPositionTerm::kNone;
  bool grouped = false;         // fewer key/value heads than query heads
  double dropout = 0.0;         // the probability applied to this call (0 outside training)
  bool need_weights = false;    // the caller wants the (T, Tk) weights
  bool differentiable = false;  // autograd records the call (grad mode on)
  bool ring = false;            // context parallelism: this rank's zigzag tokens around a ring
  bool softcap = false;         // soft-capped scores (Gemma 2), which LibTorch's kernels do not take
};

// The facts of a call's masks: `queries` new tokens after `past` cached ones against `keys` keys
// from position 0; causal or not, with a sliding `window` (0: none; two-sided without causal); with key padding or not.
void set_mask_facts(AttentionCall& call, int64_t queries, int64_t past, int64_t keys, bool causal, int64_t window,
                    bool key_padding, AttentionPositionTerm position);

struct AttentionChoice {
  AttentionPath path = AttentionPath::kMath;
  std::string reason;                // why `path` runs
  std::vector<std::string> refused;  // "libtorch: ...", "tiled: ...": why each other path did not
};

// The path for `call`. A ring call takes the ring whatever the backend. With backend tiled, a call the tiled kernel cannot take throws
// std::invalid_argument saying why; with fused or math, that path runs whatever the call, but
// for a decoding step: zoo's decoding kernel takes it with auto and fused, and in bfloat16 with
// math too (its roundings are the ones the bf16 TorchScript export decodes with, so zoo and the
// export agree whatever the backend).

AttentionChoice choose_attention_path(const AttentionCall& call);

// Why the tiled kernel cannot take `call`, or empty when it can.
std::string tiled_refusal(const AttentionCall& call);

// Why zoo's decoding kernel cannot take `call`, or empty when it can.
std::string decode_refusal(const AttentionCall& call);

// One line: "tiled (ALiBi is an additive (H, T, K) bias for LibTorch); refused: libtorch: ...".
std::string describe(const AttentionChoice& choice);

}  // namespace zoo
