#include "layers/variants.h"

namespace zoo {

bool is_gated(Activation a) {
  switch (a) {
    case Activation::kSwiGLU:
    case Activation::kGeGLU:
    case Activation::kGeGLUTanh: return true;
    case Activation::kReLU:
    case Activation::kGELU:
    case Activation::kGELUTanh:
    case Activation::kSiLU: return false;
  }
  return false;
}

}  // namespace zoo
