#include "interop/torchscript.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/torch.h>

#include "core/files.h"
#include "interop/script_files.h"
#include "kernels/quantized_weight.h"
#include "layers/mixture_of_experts.h"
#include "layers/position_bias.h"
#include "layers/rotary.h"
#include "models/bert.h"
#include "models/layer_options.h"
#include "tokenizers/tokenizer.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

// `torch` as Module::define resolves it (the ATen operators), and also its dtypes, which
// TorchScript's Python frontend takes from Python.
struct TorchNames : torch::jit::BuiltinModule {
  TorchNames() : BuiltinModule("aten") {}
  std::shared_ptr<torch::jit::SugaredValue> attr(const torch::jit::SourceRange& loc, torch::jit::GraphFunction& m,
                                                 const std::string& field) override {
    static const std::map<std::string, c10::ScalarType> dtypes = {
        {"float16", torch::kHalf}, {"bfloat16", torch::kBFloat16}, {"float32", torch::kFloat},
        {"float64", torch::kDouble}, {"int64", torch::kLong}, {"bool", torch::kBool},
        {"int8", torch::kChar},      {"uint8", torch::kByte}};
    if (auto it = dtypes.find(field); it != dtypes.end()) {
      return std::make_shared<torch::jit::SimpleValue>(m.graph()->insertConstant(it->second, loc));
    }
    return BuiltinModule::attr(loc, m, field);
  }
};

// The names the scripts use beyond their own: `torch`, and `F`, in Python torch.nn.functional,
// here the ATen operators of the same names, which take the same arguments for the functions
// the scripts call (linear, gelu, silu, relu), as TorchScript's Python frontend compiles them.
struct ScriptResolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction&,
                                                         const torch::jit::SourceRange&) override {
    if (name == "torch") return std::make_shared<TorchNames>();
    if (name == "F") return std::make_shared<torch::jit::BuiltinModule>("aten");
    return nullptr;
  }
  c10::TypePtr resolveType(const std::string&, const torch::jit::SourceRange&) override { return nullptr; }
};

constexpr std::string_view kMarker = "# --- TorchScript below";

std::string_view script_text(const std::string& name) {
  for (const auto& file : script_files()) {
    if (file.name == name) return file.text;
  }
  throw std::logic_error("TorchScript export: no interop/script/" + name);
}

// A file of interop/script as Module::define reads it: the Python-only lines above the marker
// (imports, notes) blanked, so that TorchScript's line numbers are the file's.
std::string script_methods(const std::string& name) {
  const auto text = script_text(name);
  const size_t at = text.find(kMarker);
  TORCH_CHECK(at != std::string_view::npos, "interop/script/", name, ": no line '", kMarker, "'");
  return std::string(std::count(text.begin(), text.begin() + at, '\n'), '\n') + std::string(text.substr(at));
}

std::string flat(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

// The names matching group 1 of `pattern` in `text`, comments left out.
std::set<std::string> matches(const std::string& text, const std::regex& pattern) {
  const std::string code = std::regex_replace(text, std::regex("#[^\n]*"), "");
  std::set<std::string> names;
  for (std::sregex_iterator it(code.begin(), code.end(), pattern), end; it != end; ++it) names.insert((*it)[1]);
  return names;
}

// The root's class, its script files and methods (zoo.json lists them).
struct FamilyScript {
  std::string class_name;
  std::vector<std::string> files;
  std::vector<std::string> methods;
};

FamilyScript family_script(Family family) {
  const std::vector<std::string> encoder_decoder = {"common.py", "generation.py", "encoder_decoder.py"};
  const std::vector<std::string> seq2seq_methods = {"forward", "encode", "decode", "generate"};
  switch (family) {
    case Family::kGpt: return {"GPT", {"common.py", "generation.py", "decoder.py"}, {"forward", "generate"}};
    case Family::kBert: return {"Bert", {"common.py", "encoder.py"}, {"forward"}};
    case Family::kT5: return {"T5", encoder_decoder, seq2seq_methods};
    case Family::kTransformer: return {"Transformer", encoder_decoder, seq2seq_methods};
  }
  throw std::logic_error("unhandled family");
}

// The variants as the scripts spell them: as configs/ do (to_string). No switch on a config enum
// in this file has a default, so a variant added to zoo is a compiler warning here until the
// scripts handle it.

// A gated activation is its nonlinearity on the gate; the scripts tell it by ff_gate_weight.
std::string nonlinearity(Activation activation) {
  switch (activation) {
    case Activation::kReLU: return "relu";
    case Activation::kGELU:
    case Activation::kGeGLU: return "gelu";
    case Activation::kGELUTanh:
    case Activation::kGeGLUTanh: return "gelu_tanh";
    case Activation::kSiLU:
    case Activation::kSwiGLU: return "silu";
  }
  throw std::logic_error("unhandled activation");
}

// The config's values the scripts read through `self`; each class gets those its files read.
std::map<std::string, c10::IValue> config_attributes(const ModelConfig& c) {
  switch (c.norm) { case NormKind::kLayerNorm: case NormKind::kRMSNorm: case NormKind::kRMSNormPlusOne: break; }
  switch (c.norm_position) { case NormPosition::kPre: case NormPosition::kPost: case NormPosition::kSandwich: break; }
  switch (c.rope_layout) { case RopeLayout::kHalf: case RopeLayout::kInterleaved: break; }
  switch (c.head) {
    case BertHead::kNone: case BertHead::kMaskedLM: case BertHead::kNextSentence: case BertHead::kPretraining:
    case BertHead::kSequenceClassification: case BertHead::kTokenClassification: break;
  }
  switch (c.pooling) { case Pooling::kCls: case Pooling::kMean: break; }
  // Longformer's one-sided window of each layer, each head's dilation, and how many leading
  // tokens are global (models/bert.h's default, which the script applies: it takes no mask).
  c10::List<int64_t> longformer_windows, longformer_dilation;
  const bool longformer = c.attention == AttentionKind::kLongformer;
  for (int64_t layer = 0; longformer && layer < c.n_layers; ++layer) {
    longformer_windows.push_back(c.longformer_window_of(layer) / 2);
  }
  const auto dilations = c.longformer_dilation_of_heads();
  for (int64_t head = 0; longformer && head < c.n_heads; ++head) {
    longformer_dilation.push_back(dilations.empty() ? 1 : dilations[static_cast<size_t>(head)]);
  }
  return {{"d_model", c.d_model},
          {"longformer_windows", longformer_windows},
          {"longformer_dilation", longformer_dilation},
          {"longformer_global", default_global_tokens(c)},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads},
          {"head_dim", c.resolved_head_dim()},
          {"max_positions", c.max_positions},
          {"window", c.window.value_or(0)},
          {"mixed_windows", c.has_mixed_windows()},
          {"attention_scale_dim", c.attention_scale_dim > 0 ? c.attention_scale_dim : c.resolved_head_dim()},
          {"attention_softcap", c.attention_softcap},
          {"logit_softcap", c.logit_softcap},
          {"rope_trained_positions", c.rope_scaling.original_max_positions},
          {"pad_id", c.pad_id},
          {"decoder_start_id", c.decoder_start_id},
          {"norm", to_string(c.norm)},
          {"norm_eps", c.norm_eps},
          {"norm_position", to_string(c.norm_position)},
          {"activation", nonlinearity(c.activation)},
          {"rope_layout", to_string(c.rope_layout)},
          {"head", to_string(c.head)},
          {"pooling", to_string(c.pooling)},
          {"scale_attention", c.scale_attention},
          {"scale_embeddings", c.scale_embeddings},
          {"scale_tied_head", c.scales_tied_head()},
          {"feature_map", to_string(c.feature_map)},
          {"linear_normalize", c.linear_normalize},
          {"gla_gate_normalizer", c.gla_gate_normalizer},
          {"experts_per_token", c.experts_per_token},
          {"normalize_expert_weights", c.normalize_expert_weights},
          {"round_expert_weights", c.round_expert_weights}};
}

// The tables a stack's positions compute rather than store, by the native layers' own code.
std::map<std::string, torch::Tensor> position_tables(const ModelConfig& c, PositionEncodingImpl& positions) {
  const int64_t n = c.max_positions;
  switch (c.position) {
    case PositionKind::kNone:
    case PositionKind::kLearned: return {};
    case PositionKind::kSinusoidal: return {{"sinusoidal_table", positions.sinusoidal->forward(torch::arange(n))}};
    case PositionKind::kRope: {
      auto [cos, sin] = rotary_table(rotary_options(c), n);
      std::map<std::string, torch::Tensor> tables = {{"rope_cos", cos}, {"rope_sin", sin}};
      if (c.rope_scaling.kind == RopeScalingKind::kLongrope) {
        auto [long_cos, long_sin] = rotary_table(rotary_options(c), n, /*long_factors=*/true);
        tables["rope_long_cos"] = long_cos, tables["rope_long_sin"] = long_sin;
      }
      if (c.window_rope_base > 0.0) {  // the sliding layers' own base, unscaled (layers/layer_options.cpp)
        auto [local_cos, local_sin] = rotary_table(rotary_options(c).base(c.window_rope_base).scaling({}), n);
        tables["rope_local_cos"] = local_cos, tables["rope_local_sin"] = local_sin;
      }
      return tables;
    }
    case PositionKind::kAlibi: return {{"alibi_slopes", positions.alibi->slopes()}};
    case PositionKind::kRelative: {
      // The bucket of every distance key - query the model can meet, -(n - 1) .. n - 1.
      const auto& o = positions.relative->options;
      return {{"relative_buckets", relative_position_bucket(torch::arange(1 - n, n), o.bidirectional(),
                                                            o.num_buckets(), o.max_distance())}};
    }
  }
  throw std::logic_error("unhandled position kind");
}

// One class of the export: the root (the family's file), or a submodule standing for a child of
// the native model: a PositionEncoding (positions.py) or a ModuleList of blocks (blocks.py).
struct ScriptClass {
  ScriptClass(std::string name, std::vector<std::string> files) : name(std::move(name)), files(std::move(files)) {}
  std::string name;  // the child's; empty for the root
  std::vector<std::string> files;
  std::map<std::string, torch::Tensor> parameters, buffers;
  std::map<std::string, c10::IValue> attributes;  // its own, besides the config's
};

// A quantized weight as the scripts read it (interop/script/common.py): each output's integers
// followed by the bytes of its float32 scales (and int4's zeros), one integer tensor.
torch::Tensor packed_rows(const QuantizedWeight& q) {
  const auto bytes = [&](const torch::Tensor& t) {
    return t.reshape({q.out_features(), -1}).contiguous().view(q.data.scalar_type());
  };
  switch (q.format) {
    case WeightFormat::kInt8: return torch::cat({q.data, bytes(q.scale)}, 1);
    case WeightFormat::kInt4: return torch::cat({q.data, bytes(q.scale), bytes(q.zero)}, 1);
  }
  throw std::logic_error("unhandled weight format");
}

void add_tensors(const torch::nn::Module& module, const std::string& prefix, ScriptClass& into) {
  for (const auto& p : module.named_parameters()) into.parameters[flat(prefix + p.key())] = p.value().detach();
  for (const auto& b : module.named_buffers()) into.buffers[flat(prefix + b.key())] = b.value().detach();
  // A quantized weight: its packed rows under the weight's name, in place of the emptied
  // parameter and the buffers holding its integers, scales and zeros.
  for (const auto& m : module.named_modules()) {
    const std::string path = prefix + (m.key().empty() ? "" : m.key() + ".");
    for (const auto& p : m.value()->named_parameters(/*recurse=*/false)) {
      const auto q = quantized_weight_of(*m.value(), p.value());
      if (!q) continue;
      for (const auto& b : m.value()->named_buffers(/*recurse=*/false)) {
        const auto& t = b.value();
        if (t.is_same(q->data) || t.is_same(q->scale) || (q->zero.defined() && t.is_same(q->zero))) {
          into.buffers.erase(flat(path + b.key()));
        }
      }
      into.parameters.erase(flat(path + p.key()));
      auto packed = packed_rows(*q);
      // A mixture of experts' stack: each expert's rows apart, (experts, out, packed).
      if (const auto* moe = m.value()->as<MixtureOfExpertsImpl>()) {
        packed = packed.view({moe->options.experts(), -1, packed.size(1)});
      }
      into.buffers[flat(path + p.key())] = packed;
    }
  }
}

// The prefix a layer's token mixer's tensors take in the script: self_attn for softmax attention,
// linear_attn and gla_attn for the linear kinds (layers/linear_attention.h), whose tensors of the
// same names differ in shape.
std::string mixer_prefix(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinformer:
    case AttentionKind::kLongformer: return "self_attn_";  // softmax's tensors and E, F (a BERT's layers)
    case AttentionKind::kLinear: return "linear_attn_";
    case AttentionKind::kGatedLinear: return "gla_attn_";
  }
  throw std::logic_error("unhandled attention kind");
}

// Whether a block's flattened tensor name is its token mixer's (self_attn_*), which the stack
// files under the mixer's kind; self_attn_norm_* is the block's norm before the mixer.
bool is_mixer_tensor(const std::string& key, const std::string& prefix = "self_attn_") {
  return key.rfind(prefix, 0) == 0 && key.rfind("self_attn_norm_", 0) != 0 && key.rfind("self_attn_post_norm_", 0) != 0;
}

// Whether a block's flattened tensor name is its dense feed-forward's (ff_*, not ff_norm_*) or its
// mixture of experts' (moe_*): each is stacked over the layers that have one.
bool is_feed_forward_tensor(const std::string& key, bool moe) {
  if (moe) return key.rfind("moe_", 0) == 0;
  return key.rfind("ff_", 0) == 0 && key.rfind("ff_norm_", 0) != 0 && key.rfind("ff_post_norm_", 0) != 0;
}

// Blocks as one class: the tensor `self_attn.qkv.weight` of each layer becomes a row of
// self_attn_qkv_weight (L, ...), so that the script loops over layers. A token mixer's tensors
// are stacked over the layers of its kind only (layer_kinds, and kind_rows: layer i's row); a
// feed-forward's over the dense or the mixture-of-experts layers (ff_kinds, ff_rows).
ScriptClass stacked_blocks(const std::string& name, const torch::nn::ModuleListImpl& blocks) {
  std::vector<ScriptClass> layers;
  std::vector<AttentionKind> kinds;
  c10::List<std::string> kind_names;
  c10::List<int64_t> kind_rows, ff_rows;
  std::map<AttentionKind, int64_t> per_kind;
  std::vector<bool> sparse;
  c10::List<std::string> ff_kinds;
  c10::List<bool> windows;  // the layers a sliding window bounds
  std::vector<bool> attention_norms;  // the layers with a norm before the self-attention (not ModernBERT's first)
  c10::List<int64_t> attention_norm_rows;  // layer i's row of the stacked norms, -1 without one
  int64_t norm_count = 0;
  int64_t dense_count = 0, sparse_count = 0;
  for (const auto& block : blocks) {
    const auto* b = block->as<TransformerBlockImpl>();
    TORCH_CHECK(b != nullptr, "TorchScript export: ", name, " holds a module that is not a block");
    const AttentionKind kind = b->linear_attn ? b->linear_attn->options.kind() : AttentionKind::kSoftmax;
    layers.emplace_back(name + "." + std::to_string(layers.size()), std::vector<std::string>{});
    ScriptClass plain("", {});
    add_tensors(*block, "", plain);
    for (auto member : {&ScriptClass::parameters, &ScriptClass::buffers}) {
      for (const auto& [key, tensor] : plain.*member) {
        (layers.back().*member)[is_mixer_tensor(key) ? mixer_prefix(kind) + key.substr(10) : key] = tensor;
      }
    }
    kinds.push_back(kind);
    kind_names.push_back(to_string(kind));
    kind_rows.push_back(per_kind[kind]++);
    sparse.push_back(static_cast<bool>(b->moe));
    ff_kinds.push_back(b->moe ? "moe" : "dense");
    ff_rows.push_back(b->moe ? sparse_count++ : dense_count++);
    windows.push_back(b->self_attn && b->self_attn->options.window().has_value());
    attention_norms.push_back(static_cast<bool>(b->self_attn_norm));
    attention_norm_rows.push_back(b->self_attn_norm ? norm_count++ : -1);
  }
  // The layers that must hold `key`: those of its mixer's kind, or every layer.
  auto owners = [&](const std::string& key) {
    std::vector<size_t> out;
    for (size_t i = 0; i < layers.size(); ++i) {
      bool own = true;
      for (const AttentionKind k : {AttentionKind::kSoftmax, AttentionKind::kLinear, AttentionKind::kGatedLinear})
        if (is_mixer_tensor(key, mixer_prefix(k))) own = kinds[i] == k;
      for (const bool moe : {false, true})
        if (is_feed_forward_tensor(key, moe)) own = sparse[i] == moe;
      if (key.rfind("self_attn_norm_", 0) == 0) own = attention_norms[i];
      if (own) out.push_back(i);
    }
    return out;
  };
  ScriptClass stack(name, {"common.py", "blocks.py"});
  for (auto member : {&ScriptClass::parameters, &ScriptClass::buffers}) {
    std::set<std::string> keys;
    for (const auto& layer : layers)
      for (const auto& [key, tensor] : layer.*member) keys.insert(key);
    for (const auto& key : keys) {
      std::vector<torch::Tensor> rows;
      const ScriptClass* holder = nullptr;  // a layer that has it
      for (const size_t i : owners(key))
        if (holder == nullptr && (layers[i].*member).count(key)) holder = &layers[i];
      for (const size_t i : owners(key)) {
        TORCH_CHECK((layers[i].*member).count(key), "TorchScript export: ", layers[i].name, " has no ", key, " but ",
                    holder != nullptr ? holder->name : std::string("no layer"), " has");
        rows.push_back((layers[i].*member).at(key));
      }
      (stack.*member)[key] = torch::stack(rows);
    }
  }
  stack.attributes["n_layers"] = static_cast<int64_t>(blocks.size());
  stack.attributes["layer_kinds"] = kind_names;
  stack.attributes["kind_rows"] = kind_rows;
  stack.attributes["ff_kinds"] = ff_kinds;
  stack.attributes["ff_rows"] = ff_rows;
  stack.attributes["layer_windows"] = windows;
  stack.attributes["attention_norm_rows"] = attention_norm_rows;
  return stack;
}

// The model's tensors by class; the root comes last, as its methods call the others'.
std::vector<ScriptClass> script_classes(const Model& model) {
  const auto& c = model.config;
  const auto device = model.module()->parameters().front().device();
  ScriptClass root("", family_script(c.family).files);
  std::vector<ScriptClass> classes;
  for (const auto& child : model.module()->named_children()) {
    if (auto* positions = child.value()->as<PositionEncodingImpl>()) {
      ScriptClass k(child.key(), {"positions.py"});
      add_tensors(*positions, "", k);
      for (auto& [name, table] : position_tables(c, *positions)) k.buffers[name] = table.to(device);
      classes.push_back(std::move(k));
    } else if (auto* blocks = child.value()->as<torch::nn::ModuleList>()) {
      classes.push_back(stacked_blocks(child.key(), *blocks));
    } else {
      add_tensors(*child.value(), child.key() + ".", root);
      // A quantized token embedding's rows are looked up in the dtype its emptied weight keeps.
      const auto* table = child.value()->as<torch::nn::EmbeddingImpl>();
      if (table != nullptr && quantized_weight_of(*table, table->weight)) {
        root.buffers["float_like"] = torch::empty({0}, table->weight.options());
      }
    }
  }
  for (const auto& p : model.module()->named_parameters(/*recurse=*/false)) root.parameters[p.key()] = p.value();
  for (const auto& b : model.module()->named_buffers(/*recurse=*/false)) root.buffers[b.key()] = b.value();
  classes.push_back(std::move(root));
  return classes;
}

std::string camel_case(const std::string& name) {
  std::string out;
  bool upper = true;
  for (char ch : name) {
    if (ch == '_') {
      upper = true;
    } else {
      out += upper ? static_cast<char>(std::toupper(ch)) : ch;
      upper = false;
    }
  }
  return out;
}

// Registers a class's tensors and the attributes its files read, then defines the files. A name
// the files read that the model does not have is a weight this config lacks: None, so that
// TorchScript compiles the branch without it. A tensor no file reads is an error: it would mean a
// variant the scripts do not know.
torch::jit::Module define_class(const ScriptClass& k, const std::string& class_name,
                                const std::shared_ptr<torch::jit::CompilationUnit>& unit,
                                const std::map<std::string, c10::IValue>& config,
                                const std::vector<std::pair<std::string, torch::jit::Module>>& submodules) {
  const std::string where = k.name.empty() ? class_name : k.name;
  std::string files, methods;
  for (const auto& f : k.files) {
    files += (files.empty() ? "" : ", ") + f;
    methods += script_methods(f);
  }
  const auto reads = matches(methods, std::regex(R"(self\.(\w+))"));
  const auto defines = matches(methods, std::regex(R"(\ndef (\w+))"));

  torch::jit::Module m(c10::QualifiedName("__torch__.zoo." + class_name), unit, /*shouldMangle=*/true);
  m.register_attribute("training", c10::BoolType::get(), false);
  for (const auto& [name, sub] : submodules) m.register_module(name, sub);
  for (const auto* tensors : {&k.parameters, &k.buffers}) {
    for (const auto& [name, tensor] : *tensors) {
      TORCH_CHECK(reads.count(name), "TorchScript export: ", where, ": the model's ", name,
                  " is read by no script (interop/script ", files, "): a variant the export does not know");
      if (tensors == &k.parameters) m.register_parameter(name, tensor, /*is_buffer=*/false);
      else m.register_buffer(name, tensor);
    }
  }
  for (const auto& name : reads) {
    if (m.hasattr(name) || defines.count(name)) continue;
    auto value = k.attributes.count(name) ? k.attributes.at(name) : config.count(name) ? config.at(name) : c10::IValue();
    m.register_attribute(name, value.isNone() ? c10::NoneType::get() : value.type(), value);
  }
  for (const auto& f : k.files) {
    try {
      m.define(script_methods(f), std::make_shared<ScriptResolver>());
    } catch (const std::exception& e) {
      throw std::logic_error("TorchScript export: interop/script/" + f + " does not compile for " + where + ": " +
                             e.what());
    }
  }
  m.eval();
  return m;
}

// The export and, for zoo.json, the script files of each of its classes.
torch::jit::Module build(const Model& model, nlohmann::json* files) {
  model.config.validate();
  torch::NoGradGuard no_grad;
  auto config = config_attributes(model.config);
  const auto& q = model.quantization;
  config["int4_group_size"] = q && q->format == WeightFormat::kInt4 ? q->group_size : int64_t{0};
  const std::string family = family_script(model.config.family).class_name;
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  std::vector<std::pair<std::string, torch::jit::Module>> submodules;
  for (const auto& k : script_classes(model)) {
    if (files) (*files)[k.name.empty() ? "self" : k.name] = k.files;
    if (!k.name.empty()) {
      submodules.emplace_back(k.name, define_class(k, family + camel_case(k.name), unit, config, {}));
    } else {
      return define_class(k, family, unit, config, submodules);
    }
  }
  throw std::logic_error("TorchScript export: no root class");
}

}  // namespace

std::string torchscript_source(const ModelConfig& config) {
  config.validate();
  std::vector<std::string> files = {"common.py", "positions.py", "blocks.py"};
  for (const auto& f : family_script(config.family).files) {
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  std::string source;
  for (const auto& name : files) source += "# interop/script/" + name + "\n" + std::string(script_text(name)) + "\n";
  return source;
}

torch::jit::Module to_torchscript(const Model& model) { return build(model, nullptr); }

namespace {

// LibTorch's archive writer, streamed into an AtomicFile: errors name the target and the reason
// (a full disk, a read-only directory), not a temporary file. The writer cannot take a short
// write (it aborts in a destructor), so after a failure the rest is swallowed and the failure
// thrown by finish().
class ArchiveBuffer : public std::streambuf {
 public:
  explicit ArchiveBuffer(AtomicFile& file) : file_(file) {}
  void finish() const {
    if (!failure_.empty()) throw std::runtime_error(failure_);
  }

 protected:
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    if (failure_.empty()) {
      try {
        file_.write(data, static_cast<size_t>(n));
      } catch (const std::exception& e) {
        failure_ = e.what();
      }
    }
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      const char byte = traits_type::to_char_type(c);
      xsputn(&byte, 1);
    }
    return traits_type::not_eof(c);
  }

 private:
  AtomicFile& file_;
  std::string failure_;
};

}  // namespace

void export_torchscript(const Model& model, const std::string& path, const Tokenizer* tokenizer) {
  const auto& c = model.config;
  nlohmann::json files;
  torch::jit::Module script = build(model, &files);

  nlohmann::json meta = {{"format", "zoo-torchscript"},
                         {"version", 2},
                         {"family", to_string(c.family)},
                         {"vocab_size", c.vocab_size},
                         {"max_positions", c.max_positions},
                         {"pad_id", c.pad_id},
                         {"decoder_start_id", c.decoder_start_id},
                         {"methods", family_script(c.family).methods},
                         {"script_files", files},
                         {"has_tokenizer", tokenizer != nullptr}};
  torch::jit::ExtraFilesMap extra{{"config.yaml", to_yaml(c)}};
  if (tokenizer != nullptr) {
    const auto& s = tokenizer->special();
    nlohmann::json ids = nlohmann::json::object();
    for (const auto& [role, id] : {std::pair<const char*, std::optional<int64_t>>{"pad", s.pad}, {"unk", s.unk},
                                   {"bos", s.bos}, {"eos", s.eos}, {"cls", s.cls}, {"sep", s.sep}, {"mask", s.mask}}) {
      if (id) ids[role] = *id;
    }
    meta["special_ids"] = ids;
    // What the tokenizer's post-processing puts around one text (LLaMA: <s> before; T5: </s>
    // after; zoo's and GPT-2's nothing), for deployments that encode with SentencePiece alone.
    const auto bare = tokenizer->encode("a"), framed = tokenizer->encode("a", /*add_special_tokens=*/true);
    const auto at = std::search(framed.begin(), framed.end(), bare.begin(), bare.end());
    if (!bare.empty() && at != framed.end()) {
      meta["prompt_prefix"] = std::vector<int64_t>(framed.begin(), at);
      meta["prompt_suffix"] = std::vector<int64_t>(at + static_cast<int64_t>(bare.size()), framed.end());
    }
    meta["tokenizer"] = to_string(tokenizer->kind());
    const bool zoo_model = tokenizer->kind() == TokenizerBackend::kZooSentencePiece;
    extra[zoo_model ? "tokenizer.model" : "tokenizer.files"] = tokenizer->model_bytes();
  }
  extra["zoo.json"] = meta.dump(2) + "\n";

  std::error_code ec;
  if (fs::is_directory(path, ec)) throw std::runtime_error(path + ": is a directory; give a file name (model.pt)");
  create_parent_directories(path);
  AtomicFile file(path);
  ArchiveBuffer buffer(file);
  std::ostream out(&buffer);
  script.save(out, extra);
  buffer.finish();
  file.commit();
}

}  // namespace zoo
