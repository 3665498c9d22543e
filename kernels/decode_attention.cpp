#include "kernels/decode_attention.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "kernels/bf16_dot.h"
#include "kernels/f32_rows_dot.h"
#include "kernels/math_attention.h"
#include "kernels/parallel.h"

namespace zoo {
namespace {

bool rows_contiguous_per_head(const torch::Tensor& t) {
  return t.dim() == 4 && t.stride(3) == 1 && t.stride(2) == t.size(3);
}

const uint16_t* bf16_bits(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}

// The (batch, key head) pairs of a step, numbered batch * hkv + group, each with the m query rows
// that share its keys: where a pair starts in a tensor, and how many pairs a thread takes at least.
struct DecodeHeads {
  int64_t b, hkv, m, d, tk;
  DecodeHeads(const torch::Tensor& q, const torch::Tensor& k)
      : b(q.size(0)), hkv(q.size(1)), m(q.size(2)), d(q.size(3)), tk(k.size(2)) {}
  int64_t count() const { return b * hkv; }
  int64_t offset(const torch::Tensor& t, int64_t head) const {
    return (head / hkv) * t.stride(0) + (head % hkv) * t.stride(1);
  }
  // Pairs in blocks of at least 64K multiply-adds: a short context stays on one thread.
  int64_t grain() const { return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, m * tk * d)); }
};

// Keys and values as the kernels read them: rows contiguous within each head (a KV cache's
// narrowed buffers are; the heads of a projection without a cache are copied, one step's worth).
torch::Tensor with_contiguous_rows(const torch::Tensor& t) { return rows_contiguous_per_head(t) ? t : t.contiguous(); }

}  // namespace

torch::Tensor float32_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                       const torch::Tensor& bias, double scale, double softcap) {
  const auto k = with_contiguous_rows(keys), v = with_contiguous_rows(values);
  const DecodeHeads heads(q, k);
  const int64_t m = heads.m, d = heads.d, tk = heads.tk;
  const auto queries = q.contiguous();
  auto scores = torch::empty({heads.b, heads.hkv, m, tk}, q.options());
  auto out = torch::empty({heads.b, heads.hkv, m, d}, q.options());
  const float* q_data = queries.data_ptr<float>();
  const float* k_data = k.data_ptr<float>();
  const float* v_data = v.data_ptr<float>();
  float* score_data = scores.data_ptr<float>();
  float* out_data = out.data_ptr<float>();
  // The m query rows of a head against its keys together: each key is read once for all of them.
  parallel_for(0, heads.count(), heads.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) {
      f32_rows_dot(q_data + head * m * d, m, k_data + heads.offset(k, head), d, nullptr, 0, tk,
                   score_data + head * m * tk, tk);
    }
  });
  auto biased = soft_cap(scores * scale, softcap);
  if (bias.defined()) biased = biased + bias;
  const auto probs = torch::softmax(biased, -1).contiguous();
  const float* prob_data = probs.data_ptr<float>();
  parallel_for(0, heads.count(), heads.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) {
      for (int64_t row = head * m; row < (head + 1) * m; ++row) {
        f32_weighted_row_sum(prob_data + row * tk, v_data + heads.offset(v, head), tk, d, out_data + row * d);
      }
    }
  });
  return out;
}

torch::Tensor bf16_decode_attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                    const torch::Tensor& bias, double scale, double softcap) {
  const auto k = with_contiguous_rows(keys), v = with_contiguous_rows(values);
  const DecodeHeads heads(q, k);
  const int64_t m = heads.m, d = heads.d, tk = heads.tk;
  const auto queries = q.contiguous();
  std::unique_ptr<float[]> sums(new float[static_cast<size_t>(heads.count() * m * std::max(tk, d))]);
  auto scores = torch::empty({heads.b, heads.hkv, m, tk}, q.options());
  auto out = torch::empty({heads.b, heads.hkv, m, d}, q.options());
  const uint16_t* q_bits = bf16_bits(queries);
  const uint16_t* k_bits = bf16_bits(k);
  const uint16_t* v_bits = bf16_bits(v);
  auto* score_bits = reinterpret_cast<uint16_t*>(scores.data_ptr<at::BFloat16>());
  auto* out_bits = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const Bf16DotKernel kernel = fastest_bf16_dot_kernel();
  parallel_for(0, heads.count(), heads.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) {
      for (int64_t row = head * m; row < (head + 1) * m; ++row) {
        bf16_rows_dot(kernel, k_bits + heads.offset(k, head), q_bits + row * d, d, 0, tk, sums.get() + row * tk);
        round_to_bf16(sums.get() + row * tk, nullptr, tk, score_bits + row * tk);
      }
    }
  });
  // Rounded where LibTorch's bf16 attention rounds (scores, their scaling and bias, the
  // probabilities), so that decoding gives what the full pass and a bf16 TorchScript export give.
  auto biased = soft_cap(scores * scale, softcap);
  if (bias.defined()) biased = biased + bias;
  const auto probs = torch::softmax(biased, -1, torch::kFloat).to(torch::kBFloat16).to(torch::kFloat);
  const float* prob_data = probs.data_ptr<float>();
  parallel_for(0, heads.count(), heads.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) {
      for (int64_t row = head * m; row < (head + 1) * m; ++row) {
        bf16_weighted_row_sum(prob_data + row * tk, v_bits + heads.offset(v, head), tk, d, sums.get() + row * d);
        round_to_bf16(sums.get() + row * d, nullptr, d, out_bits + row * d);
      }
    }
  });
  return out;
}

}  // namespace zoo
