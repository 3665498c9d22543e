// libFuzzer target for a checkpoint's state.json: parsing either returns a state whose every
// field is in range, or throws std::runtime_error naming the problem.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "train/trainer_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto s = zoo::TrainerState::parse(std::string(reinterpret_cast<const char*>(data), size), "state.json");
    if (s.step < 0 || s.world_size < 1 || s.sampler_epoch < 0 || s.sampler_index < 0 || s.rng.empty() ||
        !(s.loss_scale > 0) || (s.best && s.best->step > s.step)) {
      std::abort();  // an impossible state was accepted
    }
    zoo::TrainerState::parse(s.to_json().dump(), "round trip");
  } catch (const std::runtime_error&) {
  }
  return 0;
}
