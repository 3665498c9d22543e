#pragma once
// at::parallel_for whose workers run in the caller's thread-local state. OpenMP's worker threads
// start with LibTorch's defaults (grad mode on, no c10::InferenceMode, no autocast), so a kernel
// that writes into a tensor made under InferenceMode (zoo serve's scheduler thread) fails there
// with "Inplace update to inference tensor outside InferenceMode", and only once the work is
// large enough to reach a second thread: a long prompt. Every kernel of zoo's own that hands work
// to threads goes through this.

#include <cstdint>

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

namespace zoo {

template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& body) {
  const at::ThreadLocalState caller;  // grad and inference mode, dispatch keys, autocast
  at::parallel_for(begin, end, grain, [&](int64_t chunk_begin, int64_t chunk_end) {
    at::ThreadLocalStateGuard same_state(caller);
    body(chunk_begin, chunk_end);
  });
}

}  // namespace zoo
