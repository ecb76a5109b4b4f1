// The (input, output, snapshot) element types the tensor-core forward is
// compiled for: inputs bf16 or fp16, o in the input type or fp32, snapshots
// fp32 or bf16; fp32 inputs with fp32 o. Each (input, output) pair is compiled once, in its own
// fused_tensor_core_<in>_<out>.cpp (explicit instantiation); the files that
// run it (tensor_core_dispatch.hpp) only declare it, so its kernels are not
// compiled again in each of them.
#pragma once

#define LINATTN_TC_SNAPSHOTS(X, E, O) X(E, O, float) X(E, O, __nv_bfloat16)
#define LINATTN_TC_FORWARD_TYPES(X)                  \
  LINATTN_TC_SNAPSHOTS(X, __nv_bfloat16, __nv_bfloat16) \
  LINATTN_TC_SNAPSHOTS(X, __nv_bfloat16, float)         \
  LINATTN_TC_SNAPSHOTS(X, __half, __half)               \
  LINATTN_TC_SNAPSHOTS(X, __half, float)               \
  LINATTN_TC_SNAPSHOTS(X, float, float)

// run_fused_tensor_core<E, O, S>, declared (extern template) or defined (template).
#define LINATTN_TC_FORWARD_SIGNATURE(E, O, S)                                                            \
  FusedTensorCorePlan run_fused_tensor_core<E, O, S>(FusedTensorCoreArgs, int, int, int, cudaStream_t, \
                                                     const std::vector<std::int64_t>*);
#define LINATTN_TC_FORWARD_EXTERN(E, O, S) extern template LINATTN_TC_FORWARD_SIGNATURE(E, O, S)
#define LINATTN_TC_FORWARD_INSTANCE(E, O, S) template LINATTN_TC_FORWARD_SIGNATURE(E, O, S)
