#pragma once
// zoo bench's worker processes: every workload runs in a fresh one (this binary with --worker,
// or python3 for PyTorch's side), so that its peak resident memory is its own and no allocator
// state carries over; a ring row's ranks run as processes started together.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zoo::bench {

// Runs `argv` with `env` added and returns the JSON object on the last line of its standard
// output (a library may have printed before it); std::runtime_error naming the command when it
// fails or prints none.
nlohmann::json run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env);

// A ring row: its `ranks` as worker processes of `self` started together (the environment
// torchrun would set, a free loopback port for the rendezvous), the machine's `threads` shared
// among them. The row is rank 0's, with every rank's peak memory and the largest as the row's.
nlohmann::json run_ranks(const std::string& self, const std::string& name, int64_t ranks, int64_t threads,
                         const std::string& steps);

}  // namespace zoo::bench
