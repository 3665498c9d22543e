// libFuzzer target for the safetensors header parser: whatever the bytes, parsing either
// throws SafetensorsError or returns entries whose every byte lies inside the input (ASan
// checks the reads below).
#include <cstddef>
#include <cstdint>

#include "interop/safetensors_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto header = zoo::parse_safetensors(data, size, "fuzz input");
    uint64_t sum = 0;
    for (const auto& e : header.entries)
      for (uint64_t i = e.begin; i < e.end; ++i) sum += data[header.data_offset + i];
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const zoo::SafetensorsError&) {
  }
  return 0;
}
