#pragma once
// A set of token ids as a bitmask, as xgrammar lays out the tokens a grammar allows: bit t % 32 of
// 32-bit word t / 32. Structured output fills it (serve/token_grammar.h) and the decoding loop
// reads it (models/decoding.h).

#include <cstdint>
#include <vector>

namespace zoo {

inline bool token_in_bitmask(const std::vector<int32_t>& mask, int64_t token) {
  return (static_cast<uint32_t>(mask[static_cast<size_t>(token / 32)]) >> (token % 32)) & 1u;
}

}  // namespace zoo
