#pragma once
// Reading and writing safetensors files as LibTorch tensors. The file is memory-mapped and
// validated whole (interop/safetensors_format.h) before a tensor is made; tensors are copied out
// of the mapping, so the file can change afterwards. Writes are atomic.

#include <map>
#include <string>

#include <torch/types.h>

#include "interop/safetensors_format.h"

namespace zoo {

struct SafetensorsFile {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Throws SafetensorsError naming the file for a missing, truncated or invalid file. The tensors
// are views of a private mapping of the file (copied where the data is not aligned for its
// dtype): a page is read when first touched, and the file stays mapped while any tensor lives.
SafetensorsFile load_safetensors(const std::string& path);

// Gives back the resident pages of a tensor load_safetensors mapped, or of a contiguous view of
// one (nothing for any other tensor): once its values are copied elsewhere, a large file need not stay in memory beside
// them. Touched again, the tensor reads the file again (changes made in place are lost).
void release_file_pages(const torch::Tensor& tensor);

// Tensors are written contiguous, on the CPU, in name order. Dtypes without a safetensors name
// (complex, unsigned wider than 8 bits) are an error naming the tensor.
void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace zoo
