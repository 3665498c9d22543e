#include "core/op_profile.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <torch/csrc/autograd/profiler_legacy.h>

namespace zoo {

std::vector<OpTime> profile_ops(const std::function<void()>& work) {
  namespace profiler = torch::autograd::profiler;
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
          OpTime& row = by_name[ended.push->name()];
          row.name = ended.push->name();
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

}  // namespace zoo
