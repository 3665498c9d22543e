#include "train/precision.h"

#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>

#include "models/config.h"

namespace zoo {

Precision resolve_precision(Precision requested, const ComputeDevice& device, std::string* why) {
  std::string reason = "as asked";
  Precision chosen = requested;
  switch (requested) {
    case Precision::kAuto:
      if (device.cuda) {
        chosen = Precision::kBf16, reason = "auto: bf16 on CUDA";
      } else {
        std::ostringstream speedup;
        // Two digits below 0.1x (an AVX2 CPU measures ~0.02x), where one would print 0.0x.
        speedup << std::fixed << std::setprecision(device.cpu_bf16_speedup < 0.1 ? 2 : 1) << device.cpu_bf16_speedup;
        const bool faster = device.cpu_bf16_speedup >= kBf16SpeedupForAuto;
        chosen = faster ? Precision::kBf16 : Precision::kFp32;
        reason = std::string("auto: ") + (faster ? "bf16" : "fp32") + ", bf16 matmuls run " + speedup.str() +
                 "x fp32's on this CPU (measured)";
      }
      break;
    case Precision::kFp32:
    case Precision::kBf16: break;
    case Precision::kFp16:
      if (!device.cuda) throw ConfigError("precision fp16 needs a CUDA device (on the CPU, mixed precision is bf16)");
      break;
  }
  if (why != nullptr) *why = reason;
  return chosen;
}

}  // namespace zoo
