#include "interop/torchscript.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/files.h"
#include "layers/position_bias.h"
#include "text/tokenizer.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

// Replaces every {KEY} of `text`. The generated TorchScript has no braces of its own.
std::string fill(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values) {
    const std::string mark = "{" + key + "}";
    for (size_t at = text.find(mark); at != std::string::npos; at = text.find(mark, at + value.size())) {
      text.replace(at, mark.size(), value);
    }
  }
  return text;
}

// A float literal that reads back as exactly `v`.
std::string literal(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  std::string s = buffer;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string flat(std::string name) {
  for (auto& ch : name) {
    if (ch == '.') ch = '_';
  }
  return name;
}

std::string indent(const std::string& lines, int spaces) {
  std::string out, pad(spaces, ' ');
  size_t start = 0;
  while (start < lines.size()) {
    size_t end = lines.find('\n', start);
    if (end == std::string::npos) end = lines.size();
    if (end > start) out += pad + lines.substr(start, end - start);
    out += "\n";
    start = end + 1;
  }
  return out;
}

// Writes the TorchScript of one config. Parameter names follow the native modules; every name
// the source uses is recorded so to_torchscript can check it against the model's parameters.
class ScriptWriter {
 public:
  explicit ScriptWriter(const ModelConfig& config) : c_(config) {}

  std::string source() {
    std::string s = helpers();
    switch (c_.family) {
      case Family::kGpt: s += gpt(); break;
      case Family::kBert: s += bert(); break;
      case Family::kT5:
      case Family::kTransformer: s += encoder_decoder(); break;
    }
    return s;
  }

  // Tensors the source reads that are not parameters of the native module (tables it computes).
  const std::set<std::string>& used() const { return used_; }

 private:
  std::string p(const std::string& name) {
    used_.insert(name);
    return "self." + flat(name);
  }
  std::string p_if(bool present, const std::string& name) { return present ? p(name) : "None"; }
  bool rope() const { return c_.position == PositionKind::kRope; }
  bool norm_bias() const { return c_.norm == NormKind::kLayerNorm && c_.bias; }
  int64_t head_dim() const { return c_.resolved_head_dim(); }
  int64_t kv_heads() const { return c_.n_kv_heads > 0 ? c_.n_kv_heads : c_.n_heads; }

  std::map<std::string, std::string> constants() const {
    const int64_t hd = head_dim(), h = c_.n_heads, hkv = kv_heads();
    return {{"D", std::to_string(c_.d_model)},
            {"H", std::to_string(h)},
            {"HKV", std::to_string(hkv)},
            {"REP", std::to_string(h / hkv)},
            {"HD", std::to_string(hd)},
            {"HALF", std::to_string(hd / 2)},
            {"QW", std::to_string(h * hd)},
            {"KW", std::to_string(hkv * hd)},
            {"QKW", std::to_string((h + hkv) * hd)},
            {"EPS", literal(c_.norm_eps)},
            {"SCALE", literal(c_.scale_attention ? 1.0 / std::sqrt(static_cast<double>(hd)) : 1.0)},
            {"MAXPOS", std::to_string(c_.max_positions)},
            {"PAD", std::to_string(c_.pad_id)},
            {"START", std::to_string(c_.decoder_start_id)},
            {"WINDOW", std::to_string(c_.window.value_or(0))},
            {"LOWEST", "-3.4028234663852886e+38"},  // float32's lowest, as mask_to_bias uses
            {"SQRT_D", literal(std::sqrt(static_cast<double>(c_.d_model)))},
            {"INV_SQRT_D", literal(1.0 / std::sqrt(static_cast<double>(c_.d_model)))}};
  }

  std::string activation(const std::string& x) const {
    switch (c_.activation) {
      case Activation::kReLU: return "torch.relu(" + x + ")";
      case Activation::kGELU:
      case Activation::kGeGLU: return "torch.gelu(" + x + ")";
      case Activation::kGELUTanh:
      case Activation::kGeGLUTanh: return "torch.gelu(" + x + ", approximate=\"tanh\")";
      case Activation::kSiLU:
      case Activation::kSwiGLU: return "torch.silu(" + x + ")";
    }
    throw std::logic_error("unhandled activation");
  }

  // Methods every family shares: norm, feed-forward, attention, masks, sampling.
  std::string helpers() {
    std::string s;
    // Batch-1 decoding multiplies one vector: sgemv reads the weights 2-3x faster than sgemm
    // with one row (layers/linear.h).
    s += R"py(
def _project(self, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    if x.numel() == weight.size(1) and not x.is_cuda:
        if bias is None:
            y = torch.mv(weight, x.reshape(-1))
        else:
            y = torch.addmv(bias, weight, x.reshape(-1))
        return y.view(x.size()[:-1] + [weight.size(0)])
    return torch.linear(x, weight, bias)
)py";
    if (c_.norm == NormKind::kLayerNorm) {
      s += R"py(
def _norm(self, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    return torch.layer_norm(x, [x.size(-1)], weight, bias, {EPS})
)py";
    } else {
      s += R"py(
def _norm(self, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + {EPS})).to(x.dtype)
)py";
    }
    if (is_gated(c_.activation)) {
      s += R"py(
def _ff(self, x: Tensor, up_w: Tensor, up_b: Optional[Tensor], gate_w: Tensor, gate_b: Optional[Tensor],
        down_w: Tensor, down_b: Optional[Tensor]) -> Tensor:
    h = )py" + activation("self._project(x, gate_w, gate_b)") + R"py( * self._project(x, up_w, up_b)
    return self._project(h, down_w, down_b)
)py";
    } else {
      s += R"py(
def _ff(self, x: Tensor, up_w: Tensor, up_b: Optional[Tensor], down_w: Tensor, down_b: Optional[Tensor]) -> Tensor:
    return self._project()py" + activation("self._project(x, up_w, up_b)") + R"py(, down_w, down_b)
)py";
    }
    // Grouped queries fold the query heads sharing a key head into the query length, as the
    // native kernel does, so keys and values are never repeated.
    s += R"py(
def _attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    b = q.size(0)
    t = q.size(2)
    tk = k.size(2)
)py";
    if (c_.n_heads != kv_heads()) {
      s += R"py(    q = q.reshape(b, {HKV}, {REP} * t, {HD})
    bias = bias.expand(bias.size(0), {H}, t, tk).reshape(bias.size(0), {HKV}, {REP} * t, tk)
)py";
    }
    s += R"py(    scores = torch.matmul(q, k.transpose(-2, -1)) * {SCALE} + bias
    weights = torch.softmax(scores.float(), -1).to(q.dtype)
    o = torch.matmul(weights, v).view(b, {H}, t, {HD})
    return o.transpose(1, 2).reshape(b, t, {QW})

def _self_attention(self, x: Tensor, qkv_w: Tensor, qkv_b: Optional[Tensor], out_w: Tensor,
                    out_b: Optional[Tensor], bias: Tensor, positions: Tensor, start: int,
                    cache: List[Tensor], layer: int) -> Tensor:
    b = x.size(0)
    t = x.size(1)
    qkv = self._project(x, qkv_w, qkv_b)
    q = qkv[:, :, 0:{QW}].view(b, t, {H}, {HD}).transpose(1, 2)
    k = qkv[:, :, {QW}:{QKW}].view(b, t, {HKV}, {HD}).transpose(1, 2)
    v = qkv[:, :, {QKW}:].view(b, t, {HKV}, {HD}).transpose(1, 2)
)py";
    if (rope()) {
      s += R"py(    q = self._rope(q, positions)
    k = self._rope(k, positions)
)py";
    }
    s += R"py(    if len(cache) > 0:
        keys = cache[2 * layer]
        values = cache[2 * layer + 1]
        keys[:, :, start:start + t] = k
        values[:, :, start:start + t] = v
        k = keys[:, :, 0:start + t]
        v = values[:, :, 0:start + t]
    return self._project(self._attend(q, k, v, bias), out_w, out_b)

def _allowed_bias(self, allowed: Tensor) -> Tensor:
    return torch.zeros(allowed.size(), device=allowed.device).masked_fill(torch.logical_not(allowed), {LOWEST})

def _causal_allowed(self, t: int, tk: int, start: int, device: Device) -> Tensor:
    q = torch.arange(start, start + t, device=device).unsqueeze(1)
    k = torch.arange(0, tk, device=device).unsqueeze(0)
    allowed = k <= q
)py";
    if (c_.window.has_value()) s += "    allowed = allowed & (k > q - {WINDOW})\n";
    s += R"py(    return allowed.unsqueeze(0).unsqueeze(0)

def _key_allowed(self, mask: Tensor, tk: int) -> Tensor:
    return (mask[:, mask.size(1) - tk:] != 0).unsqueeze(1).unsqueeze(2)

def _pick(self, logits: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    if temperature <= 0.0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k > 0 and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, -1)[0][:, top_k - 1:top_k]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, -1, True)
        probs = torch.softmax(sorted_logits, -1)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.multinomial(torch.softmax(logits, -1), 1).squeeze(1)
)py";
    if (rope()) {
      used_.insert("rope.cos");
      used_.insert("rope.sin");
      s += R"py(
def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
    flat_positions = positions.reshape(-1)
    cos = self.rope_cos.index_select(0, flat_positions).view(positions.size(0), 1, positions.size(1), {HALF}).to(x.dtype)
    sin = self.rope_sin.index_select(0, flat_positions).view(positions.size(0), 1, positions.size(1), {HALF}).to(x.dtype)
)py";
      if (c_.rope_layout == RopeLayout::kHalf) {
        s += R"py(    x1 = x[:, :, :, 0:{HALF}]
    x2 = x[:, :, :, {HALF}:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
)py";
      } else {
        s += R"py(    pairs = x.reshape(x.size(0), x.size(1), x.size(2), {HALF}, 2)
    x1 = pairs.select(-1, 0)
    x2 = pairs.select(-1, 1)
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(3)
)py";
      }
    }
    return fill(s, constants());
  }

  // One stack's position terms: `embed_<stack>` adds token and position embeddings;
  // `position_bias_<stack>` (alibi, relative) returns the additive attention term or zeros.
  std::string positions(const std::string& stack, bool bidirectional) {
    const std::string name = flat(stack);
    std::string s = "\ndef _embed_" + name + "(self, ids: Tensor, positions: Tensor) -> Tensor:\n";
    s += "    x = torch.embedding(" + p("token_embedding.weight") + ", ids)\n";
    if (c_.scale_embeddings) s += "    x = x * {SQRT_D}\n";
    if (c_.position == PositionKind::kLearned) {
      s += "    x = x + torch.embedding(" + p(stack + ".learned.embedding.weight") + ", positions)\n";
    } else if (c_.position == PositionKind::kSinusoidal) {
      s += "    x = x + torch.embedding(" + p(stack + ".sinusoidal.table") + ", positions).to(x.dtype)\n";
    }
    s += "    return x\n";

    s += "\ndef _position_bias_" + name + "(self, t: int, tk: int, start: int, device: Device) -> Tensor:\n";
    if (c_.position == PositionKind::kAlibi) {
      s += "    q = torch.arange(start, start + t, device=device).float().unsqueeze(1)\n"
           "    k = torch.arange(0, tk, device=device).float().unsqueeze(0)\n"
           "    return -" + p(stack + ".alibi.slopes") + ".view(1, {H}, 1, 1) * (q - k).abs().unsqueeze(0)\n";
    } else if (c_.position == PositionKind::kRelative) {
      // T5's buckets, with the float32 constants the native layer uses (position_bias.cpp).
      const int64_t buckets = bidirectional ? c_.relative_buckets / 2 : c_.relative_buckets;
      const int64_t max_exact = buckets / 2;
      const float log_ratio = static_cast<float>(
          std::log(static_cast<double>(c_.relative_max_distance) / max_exact));
      s += "    q = torch.arange(start, start + t, device=device).unsqueeze(1)\n"
           "    k = torch.arange(0, tk, device=device).unsqueeze(0)\n"
           "    relative = k - q\n";
      if (bidirectional) {
        s += "    bucket = (relative > 0).long() * " + std::to_string(buckets) + "\n"
             "    n = relative.abs()\n";
      } else {
        s += "    bucket = torch.zeros_like(relative)\n"
             "    n = -torch.clamp(relative, max=0)\n";
      }
      s += "    large = torch.log(torch.clamp(n, min=1).float() / " +
           literal(static_cast<float>(max_exact)) + ") / " + literal(log_ratio) + " * " +
           literal(static_cast<float>(buckets - max_exact)) + "\n";
      s += "    if_large = torch.clamp(large.long() + " + std::to_string(max_exact) + ", max=" +
           std::to_string(buckets - 1) + ")\n";
      s += "    bucket = bucket + torch.where(n < " + std::to_string(max_exact) + ", n, if_large)\n";
      s += "    return torch.embedding(" + p(stack + ".relative.relative_attention_bias.weight") +
           ", bucket).permute(2, 0, 1).unsqueeze(0)\n";
    } else {
      s += "    return torch.zeros([1, 1, t, tk], device=device)\n";
    }
    return fill(s, constants());
  }

  // The lines of block `prefix` (e.g. "blocks.3"), updating `x`.
  std::string block(const std::string& prefix, int64_t layer, bool cross) {
    const std::string a = prefix + ".self_attn.", ca = prefix + ".cross_attn.", f = prefix + ".ff.";
    auto norm = [&](const std::string& input, const std::string& n) {
      return "self._norm(" + input + ", " + p(prefix + "." + n + ".weight") + ", " +
             p_if(norm_bias(), prefix + "." + n + ".bias") + ")";
    };
    auto self_attention = [&](const std::string& h) {
      return "self._self_attention(" + h + ", " + p(a + "qkv.weight") + ", " + p_if(c_.bias, a + "qkv.bias") +
             ", " + p(a + "out.weight") + ", " + p_if(c_.bias, a + "out.bias") +
             ", bias, positions, start, cache, " + std::to_string(layer) + ")";
    };
    auto cross_attention = [&](const std::string& h) {
      return "self._cross_attention(" + h + ", " + p(ca + "q.weight") + ", " + p_if(c_.bias, ca + "q.bias") +
             ", cross[" + std::to_string(2 * layer) + "], cross[" + std::to_string(2 * layer + 1) + "], " +
             p(ca + "out.weight") + ", " + p_if(c_.bias, ca + "out.bias") + ", cross_bias)";
    };
    auto feed_forward = [&](const std::string& h) {
      std::string call = "self._ff(" + h + ", " + p(f + "up.weight") + ", " + p_if(c_.bias, f + "up.bias");
      if (is_gated(c_.activation)) call += ", " + p(f + "gate.weight") + ", " + p_if(c_.bias, f + "gate.bias");
      return call + ", " + p(f + "down.weight") + ", " + p_if(c_.bias, f + "down.bias") + ")";
    };
    std::string s;
    if (c_.norm_position == NormPosition::kPre) {
      s += "x = x + " + self_attention(norm("x", "self_attn_norm")) + "\n";
      if (cross) s += "x = x + " + cross_attention(norm("x", "cross_attn_norm")) + "\n";
      s += "x = x + " + feed_forward(norm("x", "ff_norm")) + "\n";
    } else {
      s += "x = " + norm("x + " + self_attention("x"), "self_attn_norm") + "\n";
      if (cross) s += "x = " + norm("x + " + cross_attention("x"), "cross_attn_norm") + "\n";
      s += "x = " + norm("x + " + feed_forward("x"), "ff_norm") + "\n";
    }
    return s;
  }

  // A bidirectional stack's attention bias (positions, padding) and the empty cache its blocks
  // are called with.
  static std::string bidirectional_setup(const std::string& stack) {
    return "bias = self._position_bias_" + flat(stack) + "(t, t, 0, x.device)\n"
           "if attention_mask is not None:\n"
           "    bias = bias + self._allowed_bias(self._key_allowed(attention_mask, t))\n"
           "start = 0\n"
           "cache: List[Tensor] = []\n";
  }

  std::string final_norm(const std::string& name) {
    if (c_.norm_position != NormPosition::kPre) return "";
    return "x = self._norm(x, " + p(name + ".weight") + ", " + p_if(norm_bias(), name + ".bias") + ")\n";
  }

  std::string logits_method(const std::string& final_scale) {
    std::string s = "\ndef _logits(self, x: Tensor) -> Tensor:\n";
    if (!c_.tie_embeddings) return s + "    return self._project(x, " + p("lm_head.weight") + ", None)\n";
    return s + "    return self._project(x" + final_scale + ", " + p("token_embedding.weight") + ", None)\n";
  }

  // The cache: keys and values per layer, (B, Hkv, length, head_dim), written in place.
  std::string cache_lines(int64_t layers, const std::string& length) {
    return fill("cache: List[Tensor] = []\n"
                "for _ in range(" + std::to_string(2 * layers) + "):\n"
                "    cache.append(torch.zeros([b, {HKV}, " + length + ", {HD}], dtype=" +
                    p("token_embedding.weight") + ".dtype, device=input_ids.device))\n",
                constants());
  }

  std::string generate_loop(const std::string& next_logits) {
    return R"py(finished = torch.zeros([b], device=input_ids.device) != 0
for step in range(max_new_tokens):
    token = self._pick(logits, temperature, top_k, top_p)
    token = torch.where(finished, torch.full_like(token, {PAD}), token)
    out = torch.cat([out, token.unsqueeze(1)], 1)
    if eos_id >= 0:
        finished = finished | (token == eos_id)
    if bool(finished.all()) or step + 1 == max_new_tokens:
        break
)py" + indent(next_logits, 4);
  }

  std::string gpt() {
    std::string s = positions("positions", false);
    std::string body = R"py(b = input_ids.size(0)
t = input_ids.size(1)
x = self._embed_positions(input_ids, positions)
allowed = self._causal_allowed(t, start + t, start, x.device)
if key_mask is not None:
    allowed = allowed & self._key_allowed(key_mask, start + t)
bias = self._allowed_bias(allowed) + self._position_bias_positions(t, start + t, start, x.device)
)py";
    for (int64_t i = 0; i < c_.n_layers; ++i) body += block("blocks." + std::to_string(i), i, false);
    body += final_norm("final_norm") + "return x\n";
    s += "\ndef _hidden(self, input_ids: Tensor, positions: Tensor, start: int, key_mask: Optional[Tensor],\n"
         "            cache: List[Tensor]) -> Tensor:\n" + indent(body, 4);
    s += logits_method("");
    s += R"py(
def _positions(self, input_ids: Tensor, attention_mask: Optional[Tensor]) -> Tensor:
    if attention_mask is None:
        return torch.arange(0, input_ids.size(1), device=input_ids.device).unsqueeze(0).expand(input_ids.size(0), input_ids.size(1))
    return torch.clamp(attention_mask.long().cumsum(1) - 1, min=0)

def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
    assert input_ids.dim() == 2, "forward: input_ids must be (batch, tokens)"
    assert input_ids.size(1) <= {MAXPOS}, "forward: more tokens than max_positions ({MAXPOS})"
    no_cache: List[Tensor] = []
    return self._logits(self._hidden(input_ids, self._positions(input_ids, attention_mask), 0, attention_mask, no_cache))
)py";
    std::string gen = R"py(assert input_ids.dim() == 2, "generate: input_ids must be (batch, tokens)"
assert max_new_tokens >= 0, "generate: max_new_tokens must be >= 0"
b = input_ids.size(0)
t0 = input_ids.size(1)
assert t0 + max_new_tokens <= {MAXPOS}, "generate: prompt plus max_new_tokens exceeds max_positions ({MAXPOS})"
if attention_mask is None:
    mask = torch.ones_like(input_ids)
else:
    mask = attention_mask.long()
)py" + cache_lines(c_.n_layers, "t0 + max_new_tokens") + R"py(positions = self._positions(input_ids, mask)
logits = self._logits(self._hidden(input_ids, positions, 0, mask, cache)[:, -1])
out = input_ids
)py" + generate_loop(R"py(mask = torch.cat([mask, torch.ones_like(mask[:, 0:1])], 1)
positions = positions[:, -1:] + 1
logits = self._logits(self._hidden(token.unsqueeze(1), positions, t0 + step, mask, cache)[:, -1])
)py") + "return out\n";
    s += "\ndef generate(self, input_ids: Tensor, max_new_tokens: int = 32, temperature: float = 0.0,\n"
         "             top_k: int = 0, top_p: float = 1.0, eos_id: int = -1,\n"
         "             attention_mask: Optional[Tensor] = None) -> Tensor:\n" + indent(gen, 4);
    return fill(s, constants());
  }

  std::string bert() {
    std::string s = positions("positions", true);
    std::string returns = "Tuple[Tensor, Tensor";
    std::string body = R"py(assert input_ids.dim() == 2, "forward: input_ids must be (batch, tokens)"
assert input_ids.size(1) <= {MAXPOS}, "forward: more tokens than max_positions ({MAXPOS})"
b = input_ids.size(0)
t = input_ids.size(1)
positions = torch.arange(0, t, device=input_ids.device).unsqueeze(0).expand(b, t)
if token_type_ids is None:
    types = torch.zeros_like(input_ids)
else:
    types = token_type_ids
x = self._embed_positions(input_ids, positions) + torch.embedding()py" + p("token_type_embedding.weight") + R"py(, types)
x = self._norm(x, )py" + p("embedding_norm.weight") + ", " + p_if(norm_bias(), "embedding_norm.bias") + R"py()
)py" + bidirectional_setup("positions");
    for (int64_t i = 0; i < c_.n_layers; ++i) body += block("blocks." + std::to_string(i), i, false);
    body += final_norm("final_norm");
    if (c_.pooler) {
      body += "pooled = torch.tanh(torch.linear(x[:, 0], " + p("pooler.weight") + ", " + p("pooler.bias") + "))\n";
    } else {
      body += "pooled = torch.zeros([0], device=x.device)\n";
    }
    std::string outputs = "x, pooled";
    const auto head = c_.head;
    if (head == BertHead::kMaskedLM || head == BertHead::kPretraining) {
      const bool layer_norm = c_.norm == NormKind::kLayerNorm;  // the head's norm keeps its bias
      body += "h = " + activation("torch.linear(x, " + p("mlm_head.dense.weight") + ", " + p("mlm_head.dense.bias") + ")") + "\n";
      body += "h = self._norm(h, " + p("mlm_head.norm.weight") + ", " + p_if(layer_norm, "mlm_head.norm.bias") + ")\n";
      body += "logits = torch.linear(h, " + p("token_embedding.weight") + ", " + p("mlm_head.bias") + ")\n";
      outputs += ", logits", returns += ", Tensor";
    }
    if (head == BertHead::kNextSentence || head == BertHead::kPretraining) {
      body += "nsp_logits = torch.linear(pooled, " + p("nsp_head.weight") + ", " + p("nsp_head.bias") + ")\n";
      outputs += ", nsp_logits", returns += ", Tensor";
    }
    if (head == BertHead::kSequenceClassification || head == BertHead::kTokenClassification) {
      const std::string features = head == BertHead::kSequenceClassification ? "pooled" : "x";
      body += "logits = torch.linear(" + features + ", " + p("classifier.weight") + ", " + p("classifier.bias") + ")\n";
      outputs += ", logits", returns += ", Tensor";
    }
    body += "return " + outputs + "\n";
    s += "\ndef forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None,\n"
         "            token_type_ids: Optional[Tensor] = None) -> " + returns + "]:\n" + indent(body, 4);
    return fill(s, constants());
  }

  std::string encoder_decoder() {
    std::string s = positions("encoder_positions", true) + positions("decoder_positions", false);
    s += fill(R"py(
def _cross_attention(self, x: Tensor, q_w: Tensor, q_b: Optional[Tensor], k: Tensor, v: Tensor,
                     out_w: Tensor, out_b: Optional[Tensor], bias: Tensor) -> Tensor:
    q = self._project(x, q_w, q_b).view(x.size(0), x.size(1), {H}, {HD}).transpose(1, 2)
    return self._project(self._attend(q, k, v, bias), out_w, out_b)
)py", constants());

    // encode
    std::string enc = R"py(assert input_ids.dim() == 2, "encode: input_ids must be (batch, tokens)"
assert input_ids.size(1) <= {MAXPOS}, "encode: more tokens than max_positions ({MAXPOS})"
b = input_ids.size(0)
t = input_ids.size(1)
positions = torch.arange(0, t, device=input_ids.device).unsqueeze(0)
x = self._embed_encoder_positions(input_ids, positions)
)py" + bidirectional_setup("encoder_positions");
    for (int64_t i = 0; i < c_.resolved_encoder_layers(); ++i) enc += block("encoder_blocks." + std::to_string(i), i, false);
    enc += final_norm("encoder_final_norm") + "return x\n";
    s += "\ndef encode(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:\n" +
         indent(enc, 4);

    // cross-attention keys and values of every decoder layer, computed once per memory
    std::string kv = "b = memory.size(0)\ns = memory.size(1)\ncross: List[Tensor] = []\n";
    for (int64_t i = 0; i < c_.resolved_decoder_layers(); ++i) {
      const std::string a = "decoder_blocks." + std::to_string(i) + ".cross_attn.kv.";
      kv += "kv = torch.linear(memory, " + p(a + "weight") + ", " + p_if(c_.bias, a + "bias") + ")\n"
            "cross.append(kv[:, :, 0:{KW}].view(b, s, {HKV}, {HD}).transpose(1, 2))\n"
            "cross.append(kv[:, :, {KW}:].view(b, s, {HKV}, {HD}).transpose(1, 2))\n";
    }
    kv += "return cross\n";
    s += "\ndef _cross_memory(self, memory: Tensor) -> List[Tensor]:\n" + indent(kv, 4);

    // the decoder, from position `start` (cached keys and values before it)
    std::string dec = R"py(b = ids.size(0)
t = ids.size(1)
assert start + t <= {MAXPOS}, "decode: more tokens than max_positions ({MAXPOS})"
positions = torch.arange(start, start + t, device=ids.device).unsqueeze(0)
x = self._embed_decoder_positions(ids, positions)
bias = self._allowed_bias(self._causal_allowed(t, start + t, start, x.device)) + self._position_bias_decoder_positions(t, start + t, start, x.device)
s = cross[0].size(2)
if memory_mask is None:
    cross_bias = torch.zeros([1, 1, 1, s], device=x.device)
else:
    cross_bias = self._allowed_bias(self._key_allowed(memory_mask, s))
)py";
    for (int64_t i = 0; i < c_.resolved_decoder_layers(); ++i) dec += block("decoder_blocks." + std::to_string(i), i, true);
    dec += final_norm("decoder_final_norm") + "return self._logits(x)\n";
    s += "\ndef _decode(self, ids: Tensor, start: int, cross: List[Tensor], memory_mask: Optional[Tensor],\n"
         "            cache: List[Tensor]) -> Tensor:\n" + indent(dec, 4);
    s += logits_method(c_.scales_tied_head() ? " * {INV_SQRT_D}" : "");

    s += R"py(
def decode(self, decoder_input_ids: Tensor, memory: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
    assert decoder_input_ids.dim() == 2, "decode: decoder_input_ids must be (batch, tokens)"
    no_cache: List[Tensor] = []
    return self._decode(decoder_input_ids, 0, self._cross_memory(memory), attention_mask, no_cache)

def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor], decoder_input_ids: Tensor) -> Tensor:
    return self.decode(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask)
)py";
    std::string gen = R"py(assert max_new_tokens >= 0, "generate: max_new_tokens must be >= 0"
assert max_new_tokens <= {MAXPOS}, "generate: max_new_tokens exceeds max_positions ({MAXPOS})"
b = input_ids.size(0)
memory = self.encode(input_ids, attention_mask)
cross = self._cross_memory(memory)
)py" + cache_lines(c_.resolved_decoder_layers(), "max(max_new_tokens, 1)") + R"py(out = torch.full([b, 1], {START}, dtype=input_ids.dtype, device=input_ids.device)
logits = self._decode(out, 0, cross, attention_mask, cache)[:, -1]
)py" + generate_loop(R"py(logits = self._decode(token.unsqueeze(1), step + 1, cross, attention_mask, cache)[:, -1]
)py") + "return out\n";
    s += "\ndef generate(self, input_ids: Tensor, max_new_tokens: int = 32, temperature: float = 0.0,\n"
         "             top_k: int = 0, top_p: float = 1.0, eos_id: int = -1,\n"
         "             attention_mask: Optional[Tensor] = None) -> Tensor:\n" + indent(gen, 4);
    return fill(s, constants());
  }

  const ModelConfig& c_;
  std::set<std::string> used_;
};

// Tables the native layers compute rather than store, as buffers of the export.
std::map<std::string, torch::Tensor> computed_tables(const Model& model) {
  const auto& c = model.config;
  std::map<std::string, torch::Tensor> tables;
  auto add_stack = [&](const std::string& stack, PositionEncoding pe) {
    if (pe->sinusoidal) {
      tables[stack + ".sinusoidal.table"] = pe->sinusoidal->forward(torch::arange(c.max_positions, torch::kLong));
    }
    if (pe->alibi) {
      tables[stack + ".alibi.slopes"] = torch::tensor(alibi_slopes(c.n_heads), torch::kDouble).to(torch::kFloat);
    }
  };
  if (model.gpt) add_stack("positions", model.gpt->positions);
  if (model.bert) add_stack("positions", model.bert->positions);
  if (model.seq2seq) {
    add_stack("encoder_positions", model.seq2seq->encoder_positions);
    add_stack("decoder_positions", model.seq2seq->decoder_positions);
  }
  if (c.position == PositionKind::kRope) {
    // As RotaryEmbedding builds its table: angles in double, stored in float32.
    const int64_t d = c.resolved_head_dim();
    auto inv_freq = torch::pow(c.rope_base, -torch::arange(0, d, 2, torch::kDouble) / static_cast<double>(d));
    auto angle = torch::arange(c.max_positions, torch::kDouble).unsqueeze(1) * inv_freq;
    tables["rope.cos"] = angle.cos().to(torch::kFloat);
    tables["rope.sin"] = angle.sin().to(torch::kFloat);
  }
  return tables;
}

std::string class_name(Family family) {
  switch (family) {
    case Family::kGpt: return "GPT";
    case Family::kBert: return "Bert";
    case Family::kT5: return "T5";
    case Family::kTransformer: return "Transformer";
  }
  return "Model";
}

}  // namespace

std::string torchscript_source(const ModelConfig& config) {
  config.validate();
  return ScriptWriter(config).source();
}

torch::jit::Module to_torchscript(const Model& model) {
  const auto& c = model.config;
  c.validate();
  ScriptWriter writer(c);
  const std::string source = writer.source();

  torch::jit::Module script(c10::QualifiedName("__torch__.zoo." + class_name(c.family)));
  script.register_attribute("training", c10::BoolType::get(), false);
  torch::NoGradGuard no_grad;
  auto device = torch::Device(torch::kCPU);
  std::set<std::string> registered;
  for (const auto& item : model.module()->named_parameters(/*recurse=*/true)) {
    script.register_parameter(flat(item.key()), item.value().detach(), /*is_buffer=*/false);
    registered.insert(item.key());
    device = item.value().device();
  }
  for (const auto& item : model.module()->named_buffers(/*recurse=*/true)) {
    script.register_buffer(flat(item.key()), item.value().detach());
    registered.insert(item.key());
  }
  for (const auto& [name, table] : computed_tables(model)) {
    script.register_buffer(flat(name), table.to(device));
    registered.insert(name);
  }
  // The source and the model must agree tensor for tensor: a variant the writer does not know
  // would otherwise export silently wrong.
  for (const auto& name : writer.used()) {
    TORCH_CHECK(registered.count(name), "TorchScript export: the generated source reads ", name,
                ", which the ", class_name(c.family), " model does not have");
  }
  for (const auto& name : registered) {
    TORCH_CHECK(writer.used().count(name), "TorchScript export: ", name,
                " of the model is not used by the generated source");
  }
  try {
    script.define(source);
  } catch (const std::exception& e) {
    throw std::logic_error(std::string("TorchScript export: the generated source does not compile: ") + e.what());
  }
  return script;
}

void export_torchscript(const Model& model, const std::string& path, const std::string& tokenizer_bytes) {
  const auto& c = model.config;
  torch::jit::Module script = to_torchscript(model);

  nlohmann::json meta = {{"format", "zoo-torchscript"},
                         {"version", 1},
                         {"family", family_name(c.family)},
                         {"vocab_size", c.vocab_size},
                         {"max_positions", c.max_positions},
                         {"pad_id", c.pad_id},
                         {"decoder_start_id", c.decoder_start_id},
                         {"has_tokenizer", !tokenizer_bytes.empty()}};
  if (!tokenizer_bytes.empty()) {
    meta["special_ids"] = {{"pad", SpecialTokens::kPad}, {"unk", SpecialTokens::kUnk},
                           {"bos", SpecialTokens::kBos}, {"eos", SpecialTokens::kEos},
                           {"cls", SpecialTokens::kCls}, {"sep", SpecialTokens::kSep},
                           {"mask", SpecialTokens::kMask}};
  }
  switch (c.family) {
    case Family::kGpt: meta["methods"] = {"forward", "generate"}; break;
    case Family::kBert: meta["methods"] = {"forward"}; break;
    default: meta["methods"] = {"forward", "encode", "decode", "generate"}; break;
  }
  torch::jit::ExtraFilesMap extra{{"config.yaml", to_yaml(c)}, {"zoo.json", meta.dump(2) + "\n"}};
  if (!tokenizer_bytes.empty()) extra["tokenizer.model"] = tokenizer_bytes;

  const fs::path target(path);
  create_parent_directories(path);
  if (fs::is_directory(target)) throw std::runtime_error(path + ": is a directory; give a file name (model.pt)");
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  try {
    script.save(temporary, extra);
    fs::rename(temporary, target);
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
}

}  // namespace zoo
