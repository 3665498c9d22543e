#include "interop/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>
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

// The byte ranges of the live mappings, for release_file_pages.
std::mutex g_mapped_mutex;
std::vector<std::pair<const uint8_t*, size_t>> g_mapped;

// A private mapping of a whole file (copy on write: a tensor on it may be changed in place without
// changing the file), unmapped when it goes out of scope.
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
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw SafetensorsError(path + ": cannot map (" + std::strerror(errno) + ")");
      }
      data_ = static_cast<const uint8_t*>(p);
      std::lock_guard<std::mutex> lock(g_mapped_mutex);
      g_mapped.emplace_back(data_, size_);
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data_ == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(g_mapped_mutex);
      std::erase(g_mapped, std::pair<const uint8_t*, size_t>(data_, size_));
    }
    ::munmap(const_cast<uint8_t*>(data_), size_);
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
  auto file = std::make_shared<Mapping>(path);
  static const uint8_t kEmpty[1] = {0};
  const SafetensorsHeader header = parse_safetensors(file->size() ? file->data() : kEmpty, file->size(), path);
  SafetensorsFile out;
  out.metadata = header.metadata;
  for (const auto& e : header.entries) {
    const auto dtype = dtype_of(e.dtype);
    const uint8_t* at = file->data() + header.data_offset + e.begin;
    torch::Tensor tensor;
    if (e.end > e.begin && reinterpret_cast<uintptr_t>(at) % c10::elementSize(dtype) == 0) {
      // A view of the mapping, which lives as long as the tensor: nothing is copied, and a page
      // is read when it is first touched.
      tensor = torch::from_blob(const_cast<uint8_t*>(at), e.shape, [file](void*) {}, torch::TensorOptions().dtype(dtype));
    } else {
      // Data not aligned for its dtype (or none): copied.
      tensor = torch::empty(e.shape, torch::TensorOptions().dtype(dtype));
      if (e.end > e.begin) std::memcpy(tensor.data_ptr(), at, e.end - e.begin);
    }
    out.tensors.emplace(e.name, std::move(tensor));
  }
  return out;
}

void release_file_pages(const torch::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  // A contiguous view's own bytes, else its whole storage's.
  const bool own = tensor.is_contiguous();
  const auto* begin = static_cast<const uint8_t*>(own ? tensor.data_ptr() : tensor.storage().data());
  const size_t size = own ? static_cast<size_t>(tensor.numel()) * tensor.element_size() : tensor.storage().nbytes();
  if (begin == nullptr || size == 0) return;
  std::lock_guard<std::mutex> lock(g_mapped_mutex);
  const bool mapped = std::any_of(g_mapped.begin(), g_mapped.end(), [&](const auto& m) {
    return begin >= m.first && begin + size <= m.first + m.second;
  });
  if (!mapped) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + size) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
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
