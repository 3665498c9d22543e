#include "serve/adapter_bank.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <tuple>

#include <torch/torch.h>

#include "core/files.h"
#include "core/splitmix.h"
#include "core/strings.h"
#include "interop/peft.h"
#include "train/checkpoint.h"
#include "train/run_directory.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

// The updates of zoo's LoRA checkpoint `dir` (lora.json and its adapters' model.pt) onto `base`,
// the model of the checkpoint whose model.pt hashes to `base_hash` (empty: a base that is no zoo
// checkpoint).
std::vector<ProjectionUpdate> read_lora_updates(const std::string& dir, const Model& base, const std::string& base_hash) {
  const std::string state_path = (fs::path(dir) / kLoraStateFile).string();
  if (!fs::exists(state_path)) throw std::runtime_error(dir + ": no " + kLoraStateFile + " (not a zoo LoRA checkpoint)");
  const LoraState state = LoraState::parse(read_file(state_path), state_path);
  if (base_hash.empty()) {
    throw std::runtime_error(state_path + ": adapters of the zoo checkpoint " + state.base +
                             "; this server's model is no zoo checkpoint (serve that one with them)");
  }
  if (state.base_hash != base_hash) {
    throw std::runtime_error(state_path + ": trained on another base (" + state.base + ", whose model.pt hashed to " +
                             state.base_hash + "; this server's hashes to " + base_hash + ")");
  }
  if (!state.trained.empty()) {
    throw std::runtime_error(state_path + ": trains " + join(state.trained) +
                             " in full besides its adapters, which one base cannot share: serve it alone");
  }
  const auto projections = projection_names(base);
  std::vector<const NamedProjection*> chosen;
  try {
    chosen = lora_targets(projections, state.config);
  } catch (const std::exception& e) {
    throw std::runtime_error(state_path + ": " + e.what());
  }
  const std::string weights = (fs::path(dir) / "model.pt").string();
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(weights, torch::kCPU);
  } catch (const c10::Error& e) {
    throw std::runtime_error(weights + ": unreadable (" + std::string(e.what_without_backtrace()).substr(0, 200) + ")");
  }
  const auto keys = archive.keys();
  const std::set<std::string> stored(keys.begin(), keys.end());
  const double scaling = static_cast<double>(state.config.alpha) / static_cast<double>(state.config.rank);
  std::vector<ProjectionUpdate> updates;
  for (const NamedProjection* p : chosen) {
    if (p->experts) {
      throw std::runtime_error(state_path + ": adapts " + p->name +
                               ", a mixture's experts, which are not served per request: merge them (zoo export-hf)");
    }
    // blocks.0.self_attn.q's adapter is blocks.0.self_attn.lora_q
    const std::string adapter = p->name.substr(0, p->name.rfind('.')) + ".lora_" + p->part.part;
    const int64_t in = p->part.projection->options.in_features(), r = state.config.rank;
    torch::Tensor A, B;
    for (auto [tensor, key, shape] : {std::tuple{&A, adapter + ".A", std::vector<int64_t>{r, in}},
                                      std::tuple{&B, adapter + ".B", std::vector<int64_t>{p->part.rows, r}}}) {
      if (!stored.count(key)) throw std::runtime_error(weights + ": no tensor '" + key + "' (lora.json adapts " + p->name + ")");
      archive.read(key, *tensor);
      if (tensor->sizes() != torch::IntArrayRef(shape)) {
        throw std::runtime_error(weights + ": tensor '" + key + "' has shape " + c10::str(tensor->sizes()) + " but " +
                                 p->name + " at rank " + std::to_string(r) + " takes " + c10::str(shape));
      }
      check_finite(*tensor, weights + ": tensor '" + key + "'");
    }
    updates.push_back({p->name, A.to(torch::kFloat), B.to(torch::kFloat) * scaling});
  }
  return updates;
}

torch::TensorOptions float_options(const Model& model) {
  for (const auto& p : model.module()->parameters())
    if (p.is_floating_point()) return p.options().requires_grad(false);
  return torch::TensorOptions().dtype(torch::kFloat);
}

}  // namespace

AdapterBank::AdapterBank(Model model, std::string base_dir)
    : model_(std::move(model)), base_dir_(std::move(base_dir)), options_(float_options(model_)) {}

const std::string& AdapterBank::base_hash() const {
  // Hashing a large base takes seconds: only once an adapter asks.
  std::call_once(hashed_, [&] {
    if (!base_dir_.empty()) base_hash_ = file_hash((fs::path(base_dir_) / "model.pt").string());
  });
  return base_hash_;
}

ReadAdapter AdapterBank::read(const std::string& name, const std::string& path) const {
  if (name.empty()) throw std::invalid_argument("an adapter needs a name");
  if (!fs::is_directory(path)) throw std::invalid_argument(path + ": no such directory (adapter '" + name + "')");
  ReadAdapter out{name, path, {}};
  if (is_peft_directory(path)) {
    Model base = model_;
    out.updates = read_peft_updates(path, base);
  } else {
    out.updates = read_lora_updates(resolve_checkpoint(path), model_, base_hash());
  }
  if (out.updates.empty()) throw std::invalid_argument(path + ": adapts no projection");
  return out;
}

std::shared_ptr<const ServedAdapter> AdapterBank::install(ReadAdapter adapter) {
  c10::InferenceMode inference;  // the stacks are the forwards' alone
  std::lock_guard lock(mutex_);
  for (const auto& s : slots_) {
    if (s && s->name == adapter.name) {
      throw std::invalid_argument("an adapter named '" + adapter.name + "' is served already (from " + s->path + ")");
    }
  }
  const auto free = std::find(slots_.begin(), slots_.end(), nullptr);
  const auto slot = static_cast<int64_t>(free - slots_.begin());
  const int64_t count = std::max<int64_t>(static_cast<int64_t>(slots_.size()), slot + 1);
  int64_t rank = 0, bytes = 0;
  for (const auto& u : adapter.updates) {
    rank = std::max(rank, u.A.size(0));
    bytes += (u.A.numel() + u.B.numel()) * static_cast<int64_t>(c10::elementSize(options_.dtype().toScalarType()));
  }
  rank_ = std::max(rank_, rank);
  // Every stack holds `count` slots at rank_; a new projection starts at zeros.
  for (const auto& u : adapter.updates) {
    if (!stacks_.count(u.name)) {
      stacks_[u.name] = {torch::zeros({0, 0, u.A.size(1)}, options_), torch::zeros({u.B.size(0), 0, 0}, options_)};
    }
  }
  for (auto& [name, stack] : stacks_) {
    auto& [A, B] = stack;
    if (A.size(0) == count && A.size(1) == rank_) continue;
    auto wider_A = torch::zeros({count, rank_, A.size(2)}, options_);
    auto wider_B = torch::zeros({B.size(0), count, rank_}, options_);
    wider_A.narrow(0, 0, A.size(0)).narrow(1, 0, A.size(1)).copy_(A);
    wider_B.narrow(1, 0, B.size(1)).narrow(2, 0, B.size(2)).copy_(B);
    A = wider_A, B = wider_B;
  }
  for (const auto& u : adapter.updates) {
    auto& [A, B] = stacks_.at(u.name);
    A[slot].narrow(0, 0, u.A.size(0)).copy_(u.A);
    B.select(1, slot).narrow(1, 0, u.B.size(1)).copy_(u.B);
  }
  auto served = std::make_shared<ServedAdapter>();
  served->name = adapter.name, served->path = adapter.path;
  served->slot = slot, served->rank = rank, served->bytes = bytes;
  served->salt = splitmix64(std::hash<std::string>{}(adapter.name) ^ splitmix64(++installs_)) | 1;
  if (free == slots_.end()) {
    slots_.push_back(served);
  } else {
    *free = served;
  }
  publish();
  return served;
}

void AdapterBank::remove(const std::string& name) {
  c10::InferenceMode inference;
  std::lock_guard lock(mutex_);
  const auto found = std::find_if(slots_.begin(), slots_.end(), [&](const auto& s) { return s && s->name == name; });
  if (found == slots_.end()) throw std::out_of_range("no adapter named '" + name + "' is served");
  // The bank's own reference, and each request's that chose it.
  if (const auto users = found->use_count() - 1; users > 0) {
    throw AdapterInUse("adapter '" + name + "' is in use by " + std::to_string(users) +
                       " request(s); unload it once they end");
  }
  const int64_t slot = (*found)->slot;
  *found = nullptr;
  if (std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return s == nullptr; })) {
    slots_.clear(), stacks_.clear(), rank_ = 0;  // nothing served: no cost in any forward
  } else {
    for (auto& [projection, stack] : stacks_) stack.first[slot].zero_(), stack.second.select(1, slot).zero_();
  }
  publish();
}

std::shared_ptr<const ServedAdapter> AdapterBank::find(const std::string& name) const {
  std::lock_guard lock(mutex_);
  for (const auto& s : slots_)
    if (s && s->name == name) return s;
  return nullptr;
}

std::vector<std::shared_ptr<const ServedAdapter>> AdapterBank::adapters() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<const ServedAdapter>> out;
  for (const auto& s : slots_)
    if (s) out.push_back(s);
  return out;
}

int64_t AdapterBank::bytes() const {
  std::lock_guard lock(mutex_);
  int64_t total = 0;
  for (const auto& [name, stack] : stacks_)
    total += (stack.first.numel() + stack.second.numel()) * static_cast<int64_t>(stack.first.element_size());
  return total;
}

void AdapterBank::publish() { serve_adapter_stacks(model_, stacks_); }

}  // namespace zoo
