// The forward variants with bf16 inputs, compiled here once (run_variant.hpp).
#include "kernels/run_variant.hpp"

namespace linattn {

LINATTN_RUN_VARIANTS_BF16()

}  // namespace linattn
