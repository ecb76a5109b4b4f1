// The tensor-core forward for bf16 inputs and bf16 o, compiled once
// (fused_tensor_core_types.hpp); nothing in builds without CUDA.
#include <Kokkos_Macros.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cuda/fused_tensor_core.hpp"
#include "kernels/cuda/fused_tensor_core_types.hpp"

namespace linattn::cuda {
LINATTN_TC_SNAPSHOTS(LINATTN_TC_FORWARD_INSTANCE, __nv_bfloat16, __nv_bfloat16)
}  // namespace linattn::cuda
#endif
