#pragma once
// Where a piece of LibTorch work spends its time, op by op: LibTorch's own profiler (the CPU
// "legacy" one, present in 1.13 and 2.x) around a function, reduced to a table like PyTorch's
// `key_averages()`. `zoo bench --profile` prints it for a training step.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zoo {

struct OpTime {
  std::string name;    // "aten::mm", "autograd::engine::evaluate_function: MmBackward0", ...
  int64_t calls = 0;
  double self_ms = 0;   // time in this op, less the ops it called (on the same thread)
  double total_ms = 0;  // time in this op and the ops it called; a recursive op counts once
};

// Runs `work` once under LibTorch's CPU profiler and returns one OpTime per op name, the most
// self time first. The self times add up to the time spent inside ops on every thread the
// profiler followed (the caller's and autograd's); what remains of the wall time is outside
// any op.
std::vector<OpTime> profile_ops(const std::function<void()>& work);

}  // namespace zoo
