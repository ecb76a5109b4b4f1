// The forward variants with fp16 inputs, compiled here once (run_variant.hpp).
#include "kernels/run_variant.hpp"

namespace linattn {

LINATTN_RUN_VARIANTS_FP16()

}  // namespace linattn
