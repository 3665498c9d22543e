#pragma once
// Where a piece of LibTorch work spends its time, op by op: LibTorch's own profiler (the CPU
// "legacy" one, present in 1.13 and 2.x) around a function, reduced to a table like PyTorch's
// `key_averages()`. `zoo bench --profile` prints it for a training step.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

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

// Runs `work` once under Kineto (LibTorch's profiler of PyTorch's torch.profiler), with the
// GPU's kernels and runtime calls when `cuda`, and writes its Chrome trace to `path` (written
// whole, then renamed into place). scripts/trace_summary.py reads it beside PyTorch's.
void write_trace(const std::function<void()>& work, const std::string& path, bool cuda);

// Whether op `name` makes the host wait for the device when its tensors live on a GPU: it reads
// a value back (item, _local_scalar_dense, is_nonzero, equal, allclose), or the size of its
// output depends on the values (nonzero, masked_select, unique, bincount, repeat_interleave with
// tensor repeats, a boolean index). The CPU runs the same ops without waiting, but its profiler
// sees them all the same: a CPU step's count is a GPU step's. (What a CPU kernel alone calls,
// as ATen's fused AdamW reads its step counts, profile_ops names after the op it ran in.)
bool synchronizes(const std::string& name);

// The ops of a profile taken elsewhere (PyTorch's torch.profiler in scripts/bench_pytorch.py),
// each with the index of the op it ran in (-1: none), counted under the names profile_ops gives
// (no times).
struct ProfiledOp {
  std::string name;
  int64_t parent = -1;
};
std::vector<OpTime> count_ops(const std::vector<ProfiledOp>& ops);

// The one way a decoding loop reads a tensor back from its device (the tokens it chose, whether
// each row's logits were finite): a copy to the host inside the profiler range kHostRead, which
// synchronizes() counts, so that a decoding step profiled on the CPU (where the copy is no op at
// all) counts the reads a GPU would make the host wait for.
inline constexpr const char* kHostRead = "zoo::read_to_host";
at::Tensor read_to_host(const at::Tensor& tensor);

// The calls of such ops in `ops`, and their names ("aten::item x2, ...").
int64_t synchronizing_calls(const std::vector<OpTime>& ops);
std::string describe_synchronizing(const std::vector<OpTime>& ops);

// The calls of every op in `ops` ("aten::" ops only: what ATen dispatches, not the autograd
// engine's or the profiler's own ranges).
int64_t aten_calls(const std::vector<OpTime>& ops);

}  // namespace zoo
