#include "interop/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "core/files.h"

namespace zoo {
namespace {

const std::pair<const char*, torch::Dtype> kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};

torch::Dtype dtype_of(const std::string& name) {
  for (const auto& [n, d] : kDtypes)
    if (name == n) return d;
  throw SafetensorsError("unknown dtype " + name);
}

// A read-only mapping of a whole file, unmapped when it goes out of scope.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw SafetensorsError(path + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw SafetensorsError(path + ": not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw SafetensorsError(path + ": cannot map (" + std::strerror(errno) + ")");
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  Mapping file(path);
  static const uint8_t kEmpty[1] = {0};
  const SafetensorsHeader header = parse_safetensors(file.size() ? file.data() : kEmpty, file.size(), path);
  SafetensorsFile out;
  out.metadata = header.metadata;
  for (const auto& e : header.entries) {
    const auto dtype = dtype_of(e.dtype);
    auto tensor = torch::empty(e.shape, torch::TensorOptions().dtype(dtype));
    // memcpy rather than from_blob: the data need not be aligned for its dtype.
    if (e.end > e.begin) std::memcpy(tensor.data_ptr(), file.data() + header.data_offset + e.begin, e.end - e.begin);
    out.tensors.emplace(e.name, std::move(tensor));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsEntry> entries;
  std::vector<torch::Tensor> data;
  for (const auto& [name, tensor] : tensors) {
    SafetensorsEntry e;
    e.name = name;
    for (const auto& [n, d] : kDtypes)
      if (tensor.scalar_type() == d) e.dtype = n;
    if (e.dtype.empty()) {
      throw SafetensorsError(path + ": tensor '" + name + "' has dtype " + std::string(c10::toString(tensor.scalar_type())) +
                             ", which safetensors cannot hold");
    }
    e.shape = tensor.sizes().vec();
    entries.push_back(e);
    data.push_back(tensor.detach().to(torch::kCPU).contiguous());
  }
  const std::string header = safetensors_header_bytes(entries, metadata);
  try {
    AtomicFile out(path);
    out.write(header);
    for (const auto& t : data) out.write(t.data_ptr(), t.nbytes());
    out.commit();
  } catch (const std::runtime_error& e) {
    throw SafetensorsError(e.what());
  }
}

}  // namespace zoo
