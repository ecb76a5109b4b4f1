// The tensor-core forward for fp32 inputs (fp32 o), compiled once
// (fused_tensor_core_types.hpp); nothing in builds without CUDA.
#include <Kokkos_Macros.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cuda/fused_tensor_core.hpp"
#include "kernels/cuda/fused_tensor_core_types.hpp"

namespace linattn::cuda {
LINATTN_TC_SNAPSHOTS(LINATTN_TC_FORWARD_INSTANCE, float, float)
}  // namespace linattn::cuda
#endif
