#include "core/op_profile.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include <ATen/record_function.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>

namespace zoo {
namespace {

namespace profiler = torch::autograd::profiler;

// Ops whose CPU kernels read values back with ops of their own where their CUDA kernels read
// them on the device: ATen's fused AdamW reads each step count with item() on the CPU only.
bool reads_on_the_device_on_cuda(const std::string& name) {
  return name == "aten::_fused_adamw_" || name == "aten::_fused_adam_" || name == "aten::_amp_update_scale_" ||
         name == "aten::_amp_foreach_non_finite_check_and_unscale_";
}

// Kineto logs its start and stop (and a missing GPU) on file descriptor 2, which is not its
// caller's to fill: sent to /dev/null while it lives (the profiled work's own output is not).
class QuietStderr {
 public:
  QuietStderr() : saved_(::dup(2)) {
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) ::dup2(null, 2), ::close(null);
  }
  ~QuietStderr() {
    if (saved_ >= 0) ::dup2(saved_, 2), ::close(saved_);
  }
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_;
};

// An op's name, or, for one such a CPU kernel called, its name and the op's ("aten::item (in
// aten::_fused_adamw_)"), which synchronizes() does not count: the step a GPU runs has no such op.
std::string name_in_context(const std::string& name, const std::vector<std::string>& enclosing) {
  for (const auto& outer : enclosing) {
    if (reads_on_the_device_on_cuda(outer)) return name + " (in " + outer + ")";
  }
  return name;
}

}  // namespace

std::vector<OpTime> profile_ops(const std::function<void()>& work) {
  profiler::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
  try {
    work();
  } catch (...) {
    profiler::disableProfilerLegacy();
    throw;
  }
  const profiler::thread_event_lists threads = profiler::disableProfilerLegacy();

  std::map<std::string, OpTime> by_name;
  for (const auto& events : threads) {
    // Ranges open on this thread: the push event and the time its children took.
    struct Open {
      const profiler::LegacyEvent* push;
      double children_us;
    };
    std::vector<Open> open;
    for (const auto& event : events) {
      switch (event.kind()) {
        case profiler::EventKind::Mark:
        case profiler::EventKind::MemoryAlloc:
          break;
        case profiler::EventKind::PushRange:
          open.push_back({&event, 0.0});
          break;
        case profiler::EventKind::PopRange: {
          // A range ends on the thread it began on; pops match pushes by handle.
          auto it = std::find_if(open.rbegin(), open.rend(),
                                 [&](const Open& o) { return o.push->handle() == event.handle(); });
          if (it == open.rend()) break;  // began before profiling did
          const Open ended = *it;
          open.erase(std::next(it).base(), open.end());
          const double elapsed = ended.push->cpuElapsedUs(event);
          std::vector<std::string> enclosing;
          for (const auto& o : open) enclosing.emplace_back(o.push->name());
          const std::string name = name_in_context(ended.push->name(), enclosing);
          OpTime& row = by_name[name];
          row.name = name;
          row.calls += 1;
          row.self_ms += (elapsed - ended.children_us) / 1000.0;
          const bool recursive = std::any_of(open.begin(), open.end(), [&](const Open& o) {
            return std::string(o.push->name()) == row.name;
          });
          if (!recursive) row.total_ms += elapsed / 1000.0;
          if (!open.empty()) open.back().children_us += elapsed;
          break;
        }
      }
    }
  }
  std::vector<OpTime> rows;
  for (auto& [name, row] : by_name) rows.push_back(std::move(row));
  std::sort(rows.begin(), rows.end(), [](const OpTime& a, const OpTime& b) { return a.self_ms > b.self_ms; });
  return rows;
}

std::vector<OpTime> count_ops(const std::vector<ProfiledOp>& ops) {
  std::map<std::string, OpTime> by_name;
  for (const auto& op : ops) {
    std::vector<std::string> enclosing;
    for (int64_t up = op.parent, hops = 0; up >= 0 && up < static_cast<int64_t>(ops.size()) && hops < 1000; ++hops) {
      enclosing.push_back(ops[up].name);
      up = ops[up].parent;
    }
    const std::string name = name_in_context(op.name, enclosing);
    OpTime& row = by_name[name];
    row.name = name;
    row.calls += 1;
  }
  std::vector<OpTime> rows;
  for (auto& [name, row] : by_name) rows.push_back(std::move(row));
  return rows;
}

void write_trace(const std::function<void()>& work, const std::string& path, bool cuda) {
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  {
    QuietStderr quiet;
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
  }
  try {
    work();
  } catch (...) {
    QuietStderr quiet;
    profiler::disableProfiler();
    throw;
  }
  QuietStderr quiet;
  const auto result = profiler::disableProfiler();
  // Kineto writes the file itself: beside the destination, then renamed over it.
  const std::string partial = path + ".partial";
  result->save(partial);
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) throw std::runtime_error(c10::str("cannot write the trace ", path, ": ", error.message()));
}

at::Tensor read_to_host(const at::Tensor& tensor) {
  RECORD_USER_SCOPE(kHostRead);
  return tensor.cpu();
}

bool synchronizes(const std::string& name) {
  static const std::set<std::string> kSynchronizing = {
      "aten::item",          "aten::_local_scalar_dense", "aten::is_nonzero",     "aten::equal",
      "aten::allclose",      "aten::nonzero",             "aten::nonzero_static", "aten::masked_select",
      "aten::unique",        "aten::_unique",             "aten::_unique2",       "aten::unique_consecutive",
      "aten::unique_dim",    "aten::bincount",            "aten::repeat_interleave",
      "aten::argwhere",      kHostRead};
  return kSynchronizing.count(name) > 0;
}

int64_t synchronizing_calls(const std::vector<OpTime>& ops) {
  int64_t calls = 0;
  for (const auto& op : ops) {
    if (synchronizes(op.name)) calls += op.calls;
  }
  return calls;
}

std::string describe_synchronizing(const std::vector<OpTime>& ops) {
  std::string text;
  for (const auto& op : ops) {
    if (synchronizes(op.name)) text += (text.empty() ? "" : ", ") + op.name + " x" + std::to_string(op.calls);
  }
  return text.empty() ? "none" : text;
}

int64_t aten_calls(const std::vector<OpTime>& ops) {
  int64_t calls = 0;
  for (const auto& op : ops) {
    if (op.name.rfind("aten::", 0) == 0) calls += op.calls;
  }
  return calls;
}

}  // namespace zoo
