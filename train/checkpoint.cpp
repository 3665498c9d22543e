#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "core/files.h"
#include "core/json_view.h"
#include "core/outputs.h"
#include "core/strings.h"
#include "train/run_directory.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

constexpr const char* kQuantizationFile = "quantization.json";

std::string quantization_json(const WeightQuantization& q) {
  nlohmann::json j{{"format", to_string(q.format)}, {"token_embeddings", q.token_embeddings}};
  switch (q.format) {
    case WeightFormat::kInt8: break;
    case WeightFormat::kInt4: j["group_size"] = q.group_size; break;
  }
  return j.dump(2) + "\n";
}

std::string shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// Writes the archive through an AtomicFile, whose errors name `path` and the reason (a full
// disk, a file-size limit, a read-only directory) rather than LibTorch's temporary file name.
void save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  AtomicFile file(path);
  // LibTorch's zip writer cannot take a short write (it aborts in a destructor), so after the
  // first failure the rest is swallowed and the failure thrown once the archive is done.
  std::string failure;
  archive.save_to([&](const void* data, size_t size) -> size_t {
    if (!failure.empty()) return size;
    try {
      file.write(data, size);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    return size;
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  file.commit();
}

// Opens a weights file, naming it when it is missing, truncated or corrupt.
void read_weights_file(torch::serialize::InputArchive& archive, const std::string& path) {
  if (!fs::exists(path)) throw std::runtime_error(path + ": missing (no weights file)");
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": cannot read weights (truncated or corrupt): " +
                             std::string(e.what_without_backtrace()).substr(0, 200));
  }
}

// When the checkpoint DIR is quantized (quantization.json), gives `model` its layout
// (prepare_quantized_weights) and records it in model.quantization, and returns true.
bool prepare_quantized(Model& model, const std::string& dir) {
  model.quantization = read_quantization(dir);
  if (!model.quantization) return false;
  try {
    prepare_quantized_weights(*model.module(), *model.quantization);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error((fs::path(dir) / kQuantizationFile).string() + ": " + e.what());
  }
  return true;
}

// A LoRA checkpoint's own tensors: the adapters and what trained in full beside them.
std::function<bool(const std::string&)> owned_by(const LoraState& lora) {
  auto trained = std::make_shared<std::set<std::string>>(lora.trained.begin(), lora.trained.end());
  return [trained](const std::string& name) { return is_adapter_tensor(name) || trained->count(name) > 0; };
}

}  // namespace

void save_weights(const std::string& path, const torch::nn::Module& module,
                  const std::function<bool(const std::string&)>& keep) {
  torch::serialize::OutputArchive archive;
  for (const auto& p : module.named_parameters())
    if (!keep || keep(p.key())) archive.write(p.key(), p.value().detach().cpu());
  for (const auto& b : module.named_buffers())
    if (!keep || keep(b.key())) archive.write(b.key(), b.value().cpu(), /*is_buffer=*/true);
  save_archive(archive, path);
}

torch::ScalarType resolve_weights_dtype(WeightsDtype requested, torch::ScalarType stored) {
  switch (requested) {
    case WeightsDtype::kAuto: return stored == torch::kBFloat16 ? torch::kBFloat16 : torch::kFloat;
    case WeightsDtype::kFloat32: return torch::kFloat;
    case WeightsDtype::kBFloat16: return torch::kBFloat16;
  }
  throw std::logic_error("unhandled weights dtype");
}

std::string cpu_generator_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  const auto state = generator.get_state().contiguous();
  const auto* bytes = state.data_ptr<uint8_t>();
  static const char* kDigits = "0123456789abcdef";
  std::string hex;
  for (int64_t i = 0; i < state.numel(); ++i) hex += {kDigits[bytes[i] >> 4], kDigits[bytes[i] & 15]};
  return hex;
}

void restore_cpu_generator(const std::string& hex, const std::string& where) {
  auto nibble = [&](char c) -> uint8_t {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::runtime_error(where + ": rng is not a hex string");
  };
  if (hex.empty() || hex.size() % 2 != 0) throw std::runtime_error(where + ": rng is not a hex string");
  std::vector<uint8_t> v;
  for (size_t i = 0; i < hex.size(); i += 2) v.push_back(static_cast<uint8_t>(nibble(hex[i]) << 4 | nibble(hex[i + 1])));
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(torch::tensor(v, torch::kUInt8));
  } catch (const c10::Error& e) {
    throw std::runtime_error(where + ": rng state does not fit this LibTorch's generator");
  }
}

void check_finite(const torch::Tensor& value, const std::string& what) {
  if (!value.is_floating_point()) return;
  // In blocks, and counted only when something is wrong: isfinite's mask of a whole embedding is
  // a quarter of it, and summing a mask widens it to int64 (1.1 GB for Qwen2-0.5B's).
  const auto flat = value.reshape(-1);
  constexpr int64_t kBlock = int64_t{1} << 22;
  bool finite = true;
  for (int64_t start = 0; start < flat.numel() && finite; start += kBlock) {
    finite = torch::isfinite(flat.narrow(0, start, std::min(kBlock, flat.numel() - start))).all().item<bool>();
  }
  if (finite) return;
  const int64_t bad = value.numel() - torch::isfinite(value).sum().item<int64_t>();
  throw std::runtime_error(what + " holds " + std::to_string(bad) + " non-finite value" + (bad == 1 ? "" : "s") +
                           " (NaN or infinity) of " + std::to_string(value.numel()) +
                           ": the weights are corrupt or diverged");
}

torch::ScalarType load_weights(const std::string& path, torch::nn::Module& module,
                               const std::function<bool(const std::string&)>& wanted_name, bool extra_allowed) {
  torch::serialize::InputArchive archive;
  read_weights_file(archive, path);
  auto keys = archive.keys();
  std::set<std::string> present(keys.begin(), keys.end()), wanted;
  std::vector<std::string> missing, unexpected;
  auto targets = module.named_parameters();
  auto buffers = module.named_buffers();
  for (const auto& p : targets)
    if (!wanted_name || wanted_name(p.key())) wanted.insert(p.key());
  for (const auto& b : buffers)
    if (!wanted_name || wanted_name(b.key())) wanted.insert(b.key());
  for (const auto& w : wanted)
    if (!present.count(w)) missing.push_back(w);
  if (!extra_allowed) {
    for (const auto& k : keys)
      if (!wanted.count(k)) unexpected.push_back(k);
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string message = path + ": the weights do not match the model;";
    if (!missing.empty()) message += " missing tensors: " + join(missing, ", ", 10) + ";";
    if (!unexpected.empty()) message += " unexpected tensors: " + join(unexpected, ", ", 10) + ";";
    message.pop_back();
    throw std::runtime_error(message);
  }
  torch::NoGradGuard no_grad;
  size_t floating = 0, bf16 = 0;
  auto copy = [&](const std::string& name, torch::Tensor& target, bool is_buffer) {
    if (!wanted.count(name)) return;
    torch::Tensor value;
    archive.read(name, value, is_buffer);
    if (value.sizes() != target.sizes()) {
      throw std::runtime_error(path + ": tensor '" + name + "' has shape " + shape(value) + " but the model's is " +
                               shape(target));
    }
    check_finite(value, path + ": tensor '" + name + "'");
    // Parameters only: a quantized weight's scales and zeros are float32 in a bf16 model.
    if (!is_buffer && value.is_floating_point()) ++floating, bf16 += value.scalar_type() == torch::kBFloat16;
    target.copy_(value);
  };
  for (auto& p : targets) copy(p.key(), p.value(), false);
  for (auto& b : buffers) copy(b.key(), b.value(), true);
  return floating > 0 && bf16 == floating ? torch::kBFloat16 : torch::kFloat;
}

torch::ScalarType load_lora_weights(const std::string& dir, Model& model) {
  const std::string state_path = (fs::path(dir) / kLoraStateFile).string();
  const LoraState& lora = *model.lora;
  const std::string base_weights = (fs::path(lora.base) / "model.pt").string();
  if (!fs::exists(base_weights)) {
    throw std::runtime_error(state_path + ": the base checkpoint " + lora.base +
                             " is gone (no model.pt there); the adapters need it");
  }
  const std::string hash = file_hash(base_weights);
  if (hash != lora.base_hash) {
    throw std::runtime_error(state_path + ": the base checkpoint " + lora.base +
                             " has changed since the adapters were trained (" + kLoraStateFile + " records " +
                             lora.base_hash + ", model.pt now hashes to " + hash + ")");
  }
  const auto own = owned_by(lora);
  // QLoRA: a quantized base's layout first, unless the model has it already (a new run's).
  const bool quantized = model.quantization || prepare_quantized(model, lora.base);
  // The base's tensors (its other heads are not the run's), then the run's own.
  const auto stored = load_weights(base_weights, *model.module(), [&](const std::string& name) { return !own(name); },
                                   /*extra_allowed=*/true);
  if (quantized) check_quantized_weights(*model.module(), base_weights);
  load_weights((fs::path(dir) / "model.pt").string(), *model.module(), own, /*extra_allowed=*/false);
  return stored;
}

void save_checkpoint(const std::string& dir, const Model& model, const torch::optim::Optimizer* optimizer,
                     const Tokenizer* tokenizer, const nlohmann::json& state,
                     const std::map<std::string, std::string>& extra_files) {
  const fs::path target(dir);
  // Only a checkpoint is ever replaced: a user's file or folder of that name is refused.
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target, ec)) && !holds_own_output(dir, OutputKind::kCheckpoint) &&
      !(fs::is_directory(target, ec) && fs::is_empty(target, ec))) {
    throw std::runtime_error(dir + ": exists and is not a zoo checkpoint; a checkpoint is never written over it");
  }
  create_parent_directories(dir);
  const fs::path tmp = temporary_path_for(dir);
  create_directories(tmp.string());
  // Errors name the checkpoint the user sees, not the temporary directory it is written in.
  auto in_target = [&](const std::exception& e) {
    std::string message = e.what();
    const std::string temporary = tmp.string();
    for (size_t at = message.find(temporary); at != std::string::npos; at = message.find(temporary, at)) {
      message.replace(at, temporary.size(), dir);
    }
    return std::runtime_error(message);
  };
  try {
    if (model.lora) {
      // The adapters and what trained beside them; the base stays where it is, named by hash.
      save_weights((tmp / "model.pt").string(), *model.module(), owned_by(*model.lora));
      write_file_atomically((tmp / kLoraStateFile).string(), model.lora->to_json().dump(2) + "\n");
    } else {
      save_weights((tmp / "model.pt").string(), *model.module());
    }
    if (model.quantization && !model.lora) {  // a LoRA checkpoint's base records its own
      write_file_atomically((tmp / kQuantizationFile).string(), quantization_json(*model.quantization));
    }
    if (optimizer != nullptr) {
      torch::serialize::OutputArchive archive;
      optimizer->save(archive);
      save_archive(archive, (tmp / "optimizer.pt").string());
    }
    write_file_atomically((tmp / "config.yaml").string(), to_yaml(model.config));
    if (tokenizer != nullptr) store_tokenizer(*tokenizer, tmp.string());
    for (const auto& [name, contents] : extra_files) write_file_atomically((tmp / name).string(), contents);
    write_output_marker(tmp.string(), OutputKind::kCheckpoint);
    write_file_atomically((tmp / "state.json").string(), state.dump(2) + "\n");
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    throw in_target(e);
  }
  replace_directory(tmp.string(), dir);
}

Checkpoint load_checkpoint(const std::string& dir, std::optional<Family> expected) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw std::runtime_error(dir + ": no such checkpoint directory");
  Checkpoint c;
  c.dir = dir;
  const auto config_path = (root / "config.yaml").string();
  if (!fs::exists(config_path)) throw std::runtime_error(config_path + ": missing (not a zoo checkpoint?)");
  auto config = load_config(config_path);
  if (expected && config.family != *expected) {
    throw std::runtime_error(dir + ": a " + to_string(config.family) + " checkpoint, but this needs a " +
                             to_string(*expected) + " model");
  }
  c.model = build_model(config);
  const auto lora_path = (root / kLoraStateFile).string();
  if (!fs::exists(lora_path) && prepare_quantized(c.model, dir)) {
    const auto weights = (root / "model.pt").string();
    c.stored_dtype = load_weights(weights, *c.model.module());
    check_quantized_weights(*c.model.module(), weights);
  } else if (fs::exists(lora_path)) {
    c.model.lora = LoraState::parse(read_file(lora_path), lora_path);
    try {
      attach_lora(c.model, c.model.lora->config);
    } catch (const std::exception& e) {
      throw std::runtime_error(lora_path + ": " + e.what());
    }
    c.stored_dtype = load_lora_weights(dir, c.model);
  } else {
    c.stored_dtype = load_weights((root / "model.pt").string(), *c.model.module());
  }
  const auto state_path = (root / "state.json").string();
  if (fs::exists(state_path)) {
    try {
      c.state = nlohmann::json::parse(read_file(state_path));
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(state_path + ": corrupt (" + std::string(e.what()) + ")");
    }
  }
  c.tokenizer = stored_tokenizer(dir);
  return c;
}

std::optional<WeightQuantization> read_quantization(const std::string& dir) {
  const auto path = (fs::path(dir) / kQuantizationFile).string();
  if (!fs::exists(path)) return std::nullopt;
  const auto json = JsonView::parse(read_file(path), path);
  const JsonView view(json, path);
  for (const auto& [key, value] : view.members()) {
    if (key != "format" && key != "group_size" && key != "token_embeddings") {
      view.fail("unknown key '" + key + "' (expected format, group_size, token_embeddings)");
    }
  }
  WeightQuantization q;
  const auto format = view.at("format");
  try {
    q.format = from_string<WeightFormat>(format.as_string());
  } catch (const std::invalid_argument& e) {
    format.fail(e.what());
  }
  q.token_embeddings = view.bool_at("token_embeddings");
  switch (q.format) {
    case WeightFormat::kInt8:
      if (view.has("group_size")) view.at("group_size").fail("int8 has a scale per output, no group size");
      break;
    case WeightFormat::kInt4: {
      const auto group = view.at("group_size");
      q.group_size = group.as_int();
      if (!is_int4_group_size(q.group_size)) group.fail("int4 groups 32, 64 or 128 inputs, not " + std::to_string(q.group_size));
      break;
    }
  }
  return q;
}

std::string describe_stored_weights(const std::string& dir, int64_t parameters) {
  const auto path = (fs::path(dir) / "model.pt").string();
  torch::serialize::InputArchive archive;
  read_weights_file(archive, path);
  int64_t bytes = 0;
  std::set<std::string> float_types;
  for (const auto& key : archive.keys()) {
    torch::Tensor value;
    archive.read(key, value);
    bytes += value.numel() * static_cast<int64_t>(value.element_size());
    if (!value.is_floating_point() || value.numel() == 0) continue;
    const auto type = value.scalar_type();
    float_types.insert(type == torch::kFloat ? "float32" : type == torch::kBFloat16 ? "bf16" : c10::toString(type));
  }
  char figures[96];
  std::snprintf(figures, sizeof figures, "%.1f MiB in model.pt", static_cast<double>(bytes) / 1048576.0);
  if (fs::exists(fs::path(dir) / kLoraStateFile)) {
    return std::string("weights: ") + figures + " (LoRA adapters; the base's weights are in its checkpoint)";
  }
  const auto quantization = read_quantization(dir);
  std::snprintf(figures + std::strlen(figures), sizeof figures - std::strlen(figures), ", %.2f bytes per parameter",
                parameters > 0 ? static_cast<double>(bytes) / static_cast<double>(parameters) : 0.0);
  return std::string("weights: ") + figures + " (" +
         (quantization ? quantization->describe() + "; the rest in " : std::string()) +
         join(std::vector<std::string>(float_types.begin(), float_types.end())) + ")";
}

void refuse_quantized(const Checkpoint& checkpoint, const std::string& what) {
  if (!checkpoint.model.quantization) return;
  throw std::runtime_error(checkpoint.dir + ": a quantized checkpoint (" + checkpoint.model.quantization->describe() +
                           "); " + what + " needs float weights: train LoRA adapters on it (lora.rank), or use "
                           "the checkpoint it was quantized from");
}

void load_optimizer_state(const std::string& dir, torch::optim::Optimizer& optimizer, const torch::Device& device) {
  const auto path = (fs::path(dir) / "optimizer.pt").string();
  if (!fs::exists(path)) throw std::runtime_error(path + ": missing (the checkpoint has no optimizer state)");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device);
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": cannot restore the optimizer (truncated, corrupt or another model's): " +
                             std::string(e.what_without_backtrace()).substr(0, 200));
  }
}

std::vector<std::string> initialize_from_checkpoint(Model& model, const std::string& path, std::ostream& log,
                                                    bool frozen_base) {
  const std::string dir = resolve_checkpoint(path);
  Checkpoint source = load_checkpoint(dir);
  if (source.model.quantization) {
    // QLoRA: the run's base takes the checkpoint's integers as they are, and stays frozen.
    if (!frozen_base || source.model.lora) refuse_quantized(source, "training all its weights");
    model.quantization = source.model.quantization;
    prepare_quantized_weights(*model.module(), *model.quantization);
  }
  // A LoRA checkpoint's model is its base with the adapters' updates in the weights.
  if (source.model.lora) merge_lora(source.model);
  if (source.model.config.family != model.config.family) {
    throw std::runtime_error(dir + ": a checkpoint of another family than the run's model");
  }
  std::map<std::string, torch::Tensor> available;
  for (const auto& p : source.model.module()->named_parameters()) available[p.key()] = p.value();
  for (const auto& b : source.model.module()->named_buffers()) available[b.key()] = b.value();
  std::vector<std::string> fresh;
  std::set<std::string> used;
  auto is_head = [](const std::string& name) {
    return name.rfind("classifier.", 0) == 0 || name.rfind("nsp_head.", 0) == 0 || name.rfind("mlm_head.", 0) == 0;
  };
  torch::NoGradGuard no_grad;
  auto copy = [&](const std::string& name, torch::Tensor& target) {
    auto it = available.find(name);
    if (it == available.end()) it = available.find(masked_lm_source(name));  // ModernBERT's head transform
    if (it == available.end()) return fresh.push_back(name);
    used.insert(it->first);
    if (it->second.sizes() != target.sizes()) {
      if (is_head(name)) return fresh.push_back(name);
      throw std::runtime_error(dir + ": tensor '" + name + "' has shape " + c10::str(it->second.sizes()) +
                               " but the run's model needs " + c10::str(target.sizes()));
    }
    target.copy_(it->second);
  };
  for (auto& p : model.module()->named_parameters()) copy(p.key(), p.value());
  for (auto& b : model.module()->named_buffers()) copy(b.key(), b.value());
  if (model.quantization) {
    // A layer the quantized base lacks (a new head) would be quantized zeros, frozen: refused.
    for (const auto& name : fresh) {
      if (name.ends_with(".weight_quantized")) {
        throw std::runtime_error(dir + ": the run's " + name.substr(0, name.size() - 17) +
                                 " is not in this quantized checkpoint (or has another shape); LoRA on a quantized "
                                 "base adapts the base's own layers: start a new head from a float checkpoint");
      }
    }
  }
  std::vector<std::string> dropped;
  for (const auto& [name, value] : available)
    if (!used.count(name)) dropped.push_back(name);
  log << "initialized from " << dir << "\n";
  if (!fresh.empty()) log << "  newly initialized: " << join(fresh) << "\n";
  if (!dropped.empty()) log << "  not used: " << join(dropped) << "\n";
  return fresh;
}

}  // namespace zoo
