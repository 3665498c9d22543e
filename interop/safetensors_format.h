#pragma once
// The safetensors container (Hugging Face's weight format), parsed and validated without
// LibTorch so the parser can be fuzzed on its own:
//   8 bytes: header length N, little-endian u64
//   N bytes: a JSON object {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
//            ..., "__metadata__": {string: string}} (padded with spaces)
//   the data area: every tensor's bytes, offsets relative to its start.
// Everything is checked before any tensor byte is touched: the header length within the file,
// JSON well-formed, known dtypes, shapes of non-negative sizes whose byte count (without
// overflow) equals end - begin, offsets inside the data area, in order, neither overlapping
// nor leaving holes.

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace zoo {

// The format's dtype names and their element sizes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
size_t safetensors_dtype_size(const std::string& dtype);  // 0 when unknown

struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data area
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data area starts in the file: 8 + N
};

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses and validates the first `size` bytes of a file (the whole file); `source` names it in
// errors. Never reads outside [data, data + size).
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& source);

// The header bytes (length prefix included) for tensors laid out back to back in `entries`
// order; their begin/end are filled in. Padded so the data area starts 8-byte aligned.
std::string safetensors_header_bytes(std::vector<SafetensorsEntry>& entries,
                                     const std::map<std::string, std::string>& metadata);

}  // namespace zoo
