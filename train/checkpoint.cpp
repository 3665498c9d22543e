#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <torch/torch.h>

#include "core/strings.h"
#include "core/files.h"
#include "core/outputs.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

void save_weights(const std::string& path, const torch::nn::Module& module) {
  torch::serialize::OutputArchive archive;
  for (const auto& p : module.named_parameters()) archive.write(p.key(), p.value().detach().cpu());
  for (const auto& b : module.named_buffers()) archive.write(b.key(), b.value().cpu(), /*is_buffer=*/true);
  save_archive(archive, path);
}

void load_weights(const std::string& path, torch::nn::Module& module) {
  if (!fs::exists(path)) throw std::runtime_error(path + ": missing (no weights file)");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": cannot read weights (truncated or corrupt): " +
                             std::string(e.what_without_backtrace()).substr(0, 200));
  }
  auto keys = archive.keys();
  std::set<std::string> present(keys.begin(), keys.end()), wanted;
  std::vector<std::string> missing, unexpected;
  auto targets = module.named_parameters();
  auto buffers = module.named_buffers();
  for (const auto& p : targets) wanted.insert(p.key());
  for (const auto& b : buffers) wanted.insert(b.key());
  for (const auto& w : wanted)
    if (!present.count(w)) missing.push_back(w);
  for (const auto& k : keys)
    if (!wanted.count(k)) unexpected.push_back(k);
  if (!missing.empty() || !unexpected.empty()) {
    std::string message = path + ": the weights do not match the model;";
    if (!missing.empty()) message += " missing tensors: " + join(missing, ", ", 10) + ";";
    if (!unexpected.empty()) message += " unexpected tensors: " + join(unexpected, ", ", 10) + ";";
    message.pop_back();
    throw std::runtime_error(message);
  }
  torch::NoGradGuard no_grad;
  auto copy = [&](const std::string& name, torch::Tensor& target, bool is_buffer) {
    torch::Tensor value;
    archive.read(name, value, is_buffer);
    if (value.sizes() != target.sizes()) {
      throw std::runtime_error(path + ": tensor '" + name + "' has shape " + shape(value) + " but the model's is " +
                               shape(target));
    }
    target.copy_(value);
  };
  for (auto& p : targets) copy(p.key(), p.value(), false);
  for (auto& b : buffers) copy(b.key(), b.value(), true);
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
    save_weights((tmp / "model.pt").string(), *model.module());
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

Checkpoint load_checkpoint(const std::string& dir, c10::optional<Family> expected) {
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
  load_weights((root / "model.pt").string(), *c.model.module());
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

}  // namespace zoo
