#pragma once
// Several LoRA adapters served on one base (S-LoRA's and Punica's batching; vLLM's
// --lora-modules): each adapter's A and B are kept once, stacked by slot with every other
// adapter's on each projection they adapt (zero-padded to the largest rank, a projection an
// adapter does not adapt holding zeros in its slot), so that rows with different adapters, and
// rows with none, decode in one forward (layers/lora.h, served_update). The memory is the
// stacks', not copies of the base.
//
// Reading an adapter's files checks them against the base and changes nothing served, so the
// HTTP threads do it; installing and removing change the stacks, between forwards (the
// scheduler's thread: BatchScheduler::between_turns).

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "models/lora.h"
#include "models/model.h"

namespace zoo {

struct ServedAdapter {
  std::string name, path;
  int64_t slot = 0;   // its index in the stacks
  uint64_t salt = 0;  // starts its prompts' prefix-cache chains: its keys are not the base's
  int64_t rank = 0;
  int64_t bytes = 0;  // its own A and B at the model's type
};

// An adapter's files, read and checked, not yet served.
struct ReadAdapter {
  std::string name, path;
  std::vector<ProjectionUpdate> updates;
};

// remove() of an adapter that requests still use.
struct AdapterInUse : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class AdapterBank {
 public:
  // `base_dir`: the served zoo checkpoint, against whose model.pt zoo's LoRA checkpoints are
  // checked (empty: the base is no zoo checkpoint; PEFT adapters only).
  AdapterBank(Model model, std::string base_dir);

  // A zoo LoRA checkpoint (lora.json) or a PEFT directory (adapter_config.json) at `path`,
  // refused naming the file and the key or tensor when it does not fit the base.
  ReadAdapter read(const std::string& name, const std::string& path) const;
  // Serves it in a free slot (refused when its name is taken). Between forwards.
  std::shared_ptr<const ServedAdapter> install(ReadAdapter adapter);
  // Stops serving it: AdapterInUse while a request holds it, std::out_of_range when none has
  // that name. Between forwards.
  void remove(const std::string& name);

  std::shared_ptr<const ServedAdapter> find(const std::string& name) const;  // nullptr: none
  std::vector<std::shared_ptr<const ServedAdapter>> adapters() const;        // in slot order
  int64_t bytes() const;  // the stacks'

 private:
  const std::string& base_hash() const;
  void publish();  // the stacks to the model's projections

  Model model_;
  std::string base_dir_;
  mutable std::once_flag hashed_;
  mutable std::string base_hash_;
  torch::TensorOptions options_;  // the model's float type and device
  mutable std::mutex mutex_;      // guards the names (find from any thread)
  std::vector<std::shared_ptr<const ServedAdapter>> slots_;  // nullptr: free
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> stacks_;  // by projection: A (S, r, in), B (rows, S, r)
  int64_t rank_ = 0;  // the stacks' rank: the largest served
  uint64_t installs_ = 0;
};

}  // namespace zoo
