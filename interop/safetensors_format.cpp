#include "interop/safetensors_format.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

namespace zoo {
namespace {

// The reference implementation's limit; a larger header is a corrupt or hostile file.
constexpr uint64_t kMaxHeader = 100u << 20;

struct DtypeSize {
  const char* name;
  size_t size;
};
constexpr DtypeSize kDtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                 {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};

uint64_t read_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.size;
  return 0;
}

namespace {

[[noreturn]] void fail_in(const std::string& source, const std::string& why) {
  throw SafetensorsError(source + ": " + why);
}

// One tensor's header entry, every field checked, its bytes inside the data area.
SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& value, uint64_t data_size,
                             const std::string& source) {
  const std::string where = "tensor '" + name + "': ";
  auto fail = [&](const std::string& why) { fail_in(source, where + why); };
  if (!value.is_object()) fail("expected an object with dtype, shape and data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) fail("missing '" + std::string(key) + "'");
  SafetensorsEntry e;
  e.name = name;
  if (!value["dtype"].is_string()) fail("dtype is not a string");
  e.dtype = value["dtype"].get<std::string>();
  const size_t element = safetensors_dtype_size(e.dtype);
  if (element == 0) fail("unknown dtype '" + e.dtype + "'");
  if (!value["shape"].is_array()) fail("shape is not a list");
  uint64_t count = 1;
  for (const auto& d : value["shape"]) {
    if (!d.is_number_unsigned()) fail("shape has a negative or non-integer size");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (dim != 0 && count > std::numeric_limits<uint64_t>::max() / dim)) {
      fail("shape is too large");
    }
    count *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  if (count > std::numeric_limits<uint64_t>::max() / element) fail("shape is too large");
  const auto& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail("data_offsets is not a pair of non-negative integers");
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end) fail("data_offsets end before they begin");
  if (e.end > data_size) {
    fail("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") run past the data area (" +
         std::to_string(data_size) + " bytes): truncated file?");
  }
  if (e.end - e.begin != count * element) {
    fail(std::to_string(e.end - e.begin) + " bytes of data, but dtype " + e.dtype + " and its shape need " +
         std::to_string(count * element));
  }
  return e;
}

// The tensors, sorted by offset, must tile the data area: no overlap, no hole, nothing after.
void check_data_area(std::vector<SafetensorsEntry>& entries, uint64_t data_size, const std::string& source) {
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  uint64_t position = 0;
  for (const auto& e : entries) {
    if (e.begin < position) fail_in(source, "tensor '" + e.name + "' overlaps the tensor before it in the data area");
    if (e.begin > position) fail_in(source, "a hole in the data area before tensor '" + e.name + "'");
    position = e.end;
  }
  if (position != data_size) {
    fail_in(source, "the data area has " + std::to_string(data_size) + " bytes but the tensors cover " +
                        std::to_string(position));
  }
}

}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  auto fail = [&](const std::string& why) { fail_in(source, why); };
  if (size < 8) fail("not a safetensors file (" + std::to_string(size) + " bytes, shorter than the length prefix)");
  const uint64_t n = read_u64(data);
  if (n > kMaxHeader) fail("header length " + std::to_string(n) + " exceeds the 100 MiB limit (corrupt file?)");
  if (n > size - 8) {
    fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) +
         " bytes): truncated or not safetensors");
  }
  if (n < 2 || data[8] != '{') fail("the header is not a JSON object");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data + 8, data + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("malformed JSON header: ") + e.what());
  }
  if (!header.is_object()) fail("the header is not a JSON object");

  SafetensorsHeader out;
  out.data_offset = 8 + n;
  const uint64_t data_size = size - out.data_offset;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail("__metadata__ is not an object of strings");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail("__metadata__: '" + k + "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    out.entries.push_back(parse_entry(name, value, data_size, source));
  }
  check_data_area(out.entries, data_size, source);
  return out;
}

std::string safetensors_header_bytes(std::vector<SafetensorsEntry>& entries,
                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t position = 0;
  for (auto& e : entries) {
    uint64_t bytes = safetensors_dtype_size(e.dtype);
    if (bytes == 0) throw SafetensorsError("tensor '" + e.name + "': unknown dtype '" + e.dtype + "'");
    for (int64_t d : e.shape) bytes *= static_cast<uint64_t>(d);
    e.begin = position, e.end = position + bytes;
    position = e.end;
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i) & 0xff);
  return out + json;
}

}  // namespace zoo
