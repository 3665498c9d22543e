#pragma once
// splitmix64's finaliser (Steele, Lea and Flood, 2014): every bit of the input reaches every bit
// of the output. The one hash zoo's portable draws and its prefix cache's keys are built from.

#include <cstdint>

namespace zoo {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace zoo
