// The forward variants with fp64 inputs, compiled here once (run_variant.hpp).
#include "kernels/run_variant.hpp"

namespace linattn {

LINATTN_RUN_VARIANTS_FP64()

}  // namespace linattn
