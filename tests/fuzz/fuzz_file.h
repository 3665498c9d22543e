#pragma once
// The fuzz input as a file, for readers that take a path: one scratch file per process,
// rewritten for every input.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace zoo::fuzz {

inline std::string write_input(const uint8_t* data, size_t size, const std::string& extension) {
  const std::string path = "/tmp/zoo-fuzz-" + std::to_string(::getpid()) + extension;
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  return path;
}

}  // namespace zoo::fuzz
