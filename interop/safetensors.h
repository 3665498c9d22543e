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

// Throws SafetensorsError naming the file for a missing, truncated or invalid file.
SafetensorsFile load_safetensors(const std::string& path);

// Tensors are written contiguous, on the CPU, in name order. Dtypes without a safetensors name
// (complex, unsigned wider than 8 bits) are an error naming the tensor.
void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace zoo
