#include "train/precision.h"

#include <stdexcept>

#include "models/config.h"

namespace zoo {

Precision resolve_precision(Precision requested, bool cuda) {
  switch (requested) {
    case Precision::kAuto: return cuda ? Precision::kBf16 : Precision::kFp32;
    case Precision::kFp32: return Precision::kFp32;
    case Precision::kBf16:
    case Precision::kFp16:
      if (!cuda) {
        throw ConfigError("precision " + to_string(requested) + " needs a CUDA device (CPU training runs in fp32)");
      }
      return requested;
  }
  throw std::logic_error("unhandled precision");
}

}  // namespace zoo
