#include "model/residency.h"

namespace trainer {

const char* unit_pass_name(UnitPass p) {
  switch (p) {
    case UnitPass::forward: return "forward";
    case UnitPass::recompute: return "recompute";
    case UnitPass::backward: return "backward";
    case UnitPass::forward_backward: return "forward_backward";
  }
  return "?";
}

}  // namespace trainer
