#include "layers/attention_path.h"

#include <gtest/gtest.h>

namespace zoo {
namespace {

// A training call of T tokens, no cache, float32 on the CPU, no dropout: the facts a test varies.
AttentionCall training_call(bool causal) {
  AttentionCall call;
  call.queries = call.keys = 2048;
  call.causal = causal;
  return call;
}

bool refused_with(const AttentionChoice& choice, const std::string& path, const std::string& words) {
  for (const auto& line : choice.refused) {
    if (line.rfind(path + ": ", 0) == 0 && line.find(words) != std::string::npos) return true;
  }
  return false;
}

// Soft-capped scores (Gemma 2): LibTorch's kernels have no such term, so every length takes the
// tiled kernel (no (T, Tk) tensor), a decoding step zoo's decoding kernel, and what neither can
// take (weights asked for, CUDA) the math path; the fused backend refuses it by name.
TEST(AttentionPath, SoftCappedScoresNeverTakeLibTorch) {
  for (int64_t t : {7, 2048}) {
    auto call = training_call(true);
    call.queries = call.keys = t;
    call.softcap = true;
    const auto choice = choose_attention_path(call);
    EXPECT_EQ(choice.path, AttentionPath::kTiled) << t;
    EXPECT_TRUE(refused_with(choice, "libtorch", "do not soft-cap")) << describe(choice);
  }
  auto step = training_call(true);
  step.softcap = true, step.queries = 1, step.keys = 40, step.aligned = false, step.bf16 = true;
  EXPECT_EQ(choose_attention_path(step).path, AttentionPath::kDecode);
  step.differentiable = true;  // the decoding kernel has no backward: tiled, not LibTorch
  EXPECT_EQ(choose_attention_path(step).path, AttentionPath::kTiled);
  auto cuda = training_call(true);
  cuda.softcap = true, cuda.cpu = false;
  EXPECT_EQ(choose_attention_path(cuda).path, AttentionPath::kMath);
  auto fused = training_call(true);
  fused.softcap = true, fused.backend = AttentionBackend::kFused;
  EXPECT_THROW(choose_attention_path(fused), std::invalid_argument);
  fused.backend = AttentionBackend::kMath;
  EXPECT_EQ(choose_attention_path(fused).path, AttentionPath::kMath);
}

// bfloat16 training on the CPU up to 128 x 128 scores takes the math path (LibTorch's flash
// backward in bfloat16 is slower there); longer, float32, or without gradients, the flash kernel.
TEST(AttentionPath, ShortBf16TrainingTakesTheMathPath) {
  auto call = training_call(true);
  call.bf16 = true, call.differentiable = true, call.queries = call.keys = 128;
  const auto short_choice = choose_attention_path(call);
  EXPECT_EQ(short_choice.path, AttentionPath::kMath) << describe(short_choice);
  EXPECT_TRUE(refused_with(short_choice, "libtorch", "bfloat16 backward"));
  call.queries = call.keys = 129;
  EXPECT_EQ(choose_attention_path(call).path, AttentionPath::kLibTorch);
  call.queries = call.keys = 128, call.differentiable = false;
  EXPECT_EQ(choose_attention_path(call).path, AttentionPath::kLibTorch);
  call.differentiable = true, call.bf16 = false;
  EXPECT_EQ(choose_attention_path(call).path, AttentionPath::kLibTorch);
}

TEST(AttentionPath, LibTorchFlashTakesPlainCausalAndPaddingOnly) {
  auto causal = choose_attention_path(training_call(true));
  EXPECT_EQ(causal.path, AttentionPath::kLibTorch);
  EXPECT_EQ(causal.reason, "flash kernel, its own causal mask");
  EXPECT_TRUE(refused_with(causal, "tiled", "as fast or faster"));

  auto encoder = training_call(false);
  encoder.key_padding = true;
  EXPECT_EQ(choose_attention_path(encoder).path, AttentionPath::kLibTorch);
  encoder.grouped = true;  // grouped queries fold into the query length: still no (T, Tk) mask
  EXPECT_EQ(choose_attention_path(encoder).path, AttentionPath::kLibTorch);
}

TEST(AttentionPath, EveryTermThatWouldBeATxTTensorTakesTheTiledKernel) {
  struct Case {
    const char* name;
    void (*set)(AttentionCall&);
    const char* libtorch_refusal;
  };
  const Case cases[] = {
      {"alibi", [](AttentionCall& c) { c.position = AttentionPositionTerm::kAlibi; }, "ALiBi"},
      {"t5", [](AttentionCall& c) { c.position = AttentionPositionTerm::kRelative; }, "T5's relative bias"},
      {"window", [](AttentionCall& c) { c.window = 256; }, "sliding window"},
      {"padding", [](AttentionCall& c) { c.key_padding = true; }, "causal with key padding"},
      {"grouped", [](AttentionCall& c) { c.grouped = true; }, "grouped queries under a causal mask"},
      {"cache", [](AttentionCall& c) { c.keys = 4096, c.aligned = false; }, "after cached keys"},
      {"dropout", [](AttentionCall& c) { c.dropout = 0.1; }, "takes no dropout"},
  };
  for (const auto& c : cases) {
    auto call = training_call(true);
    c.set(call);
    const auto choice = choose_attention_path(call);
    EXPECT_EQ(choice.path, AttentionPath::kTiled) << c.name;
    EXPECT_EQ(choice.reason, "no (T, Tk) tensor") << c.name;
    EXPECT_TRUE(refused_with(choice, "libtorch", c.libtorch_refusal)) << c.name << ": " << describe(choice);
  }
  auto encoder = training_call(false);
  encoder.position = AttentionPositionTerm::kRelative;
  EXPECT_EQ(choose_attention_path(encoder).path, AttentionPath::kTiled);
}

TEST(AttentionPath, WhatTheTiledKernelCannotTakeGoesToLibTorchSayingWhy) {
  struct Case {
    const char* name;
    void (*set)(AttentionCall&);
    const char* tiled_refusal;
  };
  const Case cases[] = {
      {"cuda", [](AttentionCall& c) { c.cpu = false; }, "CPU only"},
      {"float64", [](AttentionCall& c) { c.float_or_bf16 = false; }, "float32 and bfloat16 only"},
      {"tensor", [](AttentionCall& c) { c.position = AttentionPositionTerm::kTensor; }, "additive bias tensor"},
  };
  for (const auto& c : cases) {
    auto call = training_call(true);
    call.position = AttentionPositionTerm::kAlibi;  // a term only the tiled kernel spares a (T, Tk) tensor
    c.set(call);
    const auto choice = choose_attention_path(call);
    EXPECT_EQ(choice.path, AttentionPath::kLibTorch) << c.name;
    EXPECT_TRUE(refused_with(choice, "tiled", c.tiled_refusal)) << c.name << ": " << describe(choice);
  }
}

TEST(AttentionPath, ShortSequencesKeepLibTorchsFullBiasUnlessDropout) {
  auto call = training_call(true);
  call.position = AttentionPositionTerm::kAlibi;
  call.queries = call.keys = 511;
  const auto short_call = choose_attention_path(call);
  EXPECT_EQ(short_call.path, AttentionPath::kLibTorch);
  EXPECT_TRUE(refused_with(short_call, "tiled", "under 512 x 512 scores")) << describe(short_call);
  call.queries = call.keys = 512;
  EXPECT_EQ(choose_attention_path(call).path, AttentionPath::kTiled);
  call.queries = call.keys = 64;
  call.dropout = 0.1;  // LibTorch's CPU dropout is its (T, Tk) math path, slower at any length
  EXPECT_EQ(choose_attention_path(call).path, AttentionPath::kTiled);
}

TEST(AttentionPath, DecodingAndWeightsAndTheBackendKey) {
  // A decoding step: zoo's decode kernel, with auto and fused; with math only in bfloat16 (the
  // roundings the bf16 export decodes with); LibTorch's where the kernel cannot run it.
  auto decode = training_call(true);
  decode.queries = 1, decode.keys = 100, decode.aligned = false, decode.position = AttentionPositionTerm::kAlibi;
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kDecode);
  EXPECT_TRUE(refused_with(choose_attention_path(decode), "tiled", "nothing to tile"));
  EXPECT_TRUE(refused_with(choose_attention_path(decode), "libtorch", "faster"));
  decode.backend = AttentionBackend::kFused;
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kDecode);
  decode.backend = AttentionBackend::kMath;
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kMath);
  decode.bf16 = true;
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kDecode);
  decode.backend = AttentionBackend::kAuto;
  decode.float32_decode_kernel = false;  // bf16 runs everywhere
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kDecode);
  decode.bf16 = false;
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kLibTorch);
  EXPECT_TRUE(refused_with(choose_attention_path(decode), "decode", "AVX-512F"));
  decode.float32_decode_kernel = true, decode.dropout = 0.1;
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kLibTorch);
  EXPECT_TRUE(refused_with(choose_attention_path(decode), "decode", "no dropout"));
  decode.dropout = 0.0, decode.cpu = false;
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kLibTorch);
  decode.cpu = true, decode.float_or_bf16 = false;  // float64
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kLibTorch);
  decode.float_or_bf16 = true, decode.need_weights = true;
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kMath);
  decode.need_weights = false, decode.backend = AttentionBackend::kTiled;  // forced
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kTiled);
  decode.backend = AttentionBackend::kAuto, decode.differentiable = true;  // grad mode on: no backward
  EXPECT_EQ(choose_attention_path(decode).path, AttentionPath::kLibTorch);
  EXPECT_TRUE(refused_with(choose_attention_path(decode), "decode", "no backward"));

  auto weights = training_call(true);
  weights.need_weights = true;
  EXPECT_EQ(choose_attention_path(weights).path, AttentionPath::kMath);

  auto alibi = training_call(true);
  alibi.position = AttentionPositionTerm::kAlibi;
  alibi.backend = AttentionBackend::kMath;
  EXPECT_EQ(choose_attention_path(alibi).path, AttentionPath::kMath);
  alibi.backend = AttentionBackend::kFused;
  EXPECT_EQ(choose_attention_path(alibi).path, AttentionPath::kLibTorch);
  alibi.backend = AttentionBackend::kTiled;
  EXPECT_EQ(choose_attention_path(alibi).path, AttentionPath::kTiled);
  auto plain = training_call(true);
  plain.backend = AttentionBackend::kTiled;  // forced even where LibTorch's kernel applies
  EXPECT_EQ(choose_attention_path(plain).path, AttentionPath::kTiled);
  plain.cpu = false;
  try {
    choose_attention_path(plain);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "attention_backend: tiled cannot run this call: CPU only (CUDA's fused kernels are LibTorch's)");
  }
}

TEST(AttentionPath, DescribeSaysThePathItsReasonAndEveryRefusal) {
  auto call = training_call(true);
  call.position = AttentionPositionTerm::kAlibi;
  EXPECT_EQ(describe(choose_attention_path(call)),
            "tiled (no (T, Tk) tensor); refused: libtorch: ALiBi is an additive (H, T, Tk) bias for it");
}

// Context parallelism takes the ring whatever the backend, with the tiled kernel's conditions.
TEST(AttentionPath, RingCallsTakeTheRing) {
  auto ring = training_call(true);
  ring.ring = true;
  for (auto backend : {AttentionBackend::kAuto, AttentionBackend::kMath, AttentionBackend::kFused}) {
    ring.backend = backend;
    EXPECT_EQ(choose_attention_path(ring).path, AttentionPath::kRing) << to_string(backend);
  }
  ring.queries = 1;  // a short rank still rings
  EXPECT_EQ(choose_attention_path(ring).path, AttentionPath::kRing);
  ring.float_or_bf16 = false;
  EXPECT_THROW(choose_attention_path(ring), std::invalid_argument);
}

}  // namespace
}  // namespace zoo
