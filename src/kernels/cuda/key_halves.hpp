// The two element-wise passes of fp32 heads run as two halves of their key
// channels (tile_rules.hpp, fp32_key_parts; fused_tensor_core.hpp,
// run_fp32_key_halves): each head's values (and per-token gate) copied to
// both of its halves, and each head's output as the sum of its halves'.
// Rows are tokens (B * T of them), each holding H heads of `width` floats.
#pragma once

#include "kernels/cuda/device_memory.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace linattn::cuda {
namespace detail {

// dst[r][2h + p][w] = src[r][h][w] for p = 0, 1; V is float or float4 (width in V's).
template <class V>
__global__ void copy_to_halves_kernel(const V* __restrict__ src, V* __restrict__ dst, std::size_t rows_heads,
                                      int width) {
  const std::size_t n = rows_heads * width;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t rh = i / width, w = i % width;
    const V x = src[i];
    dst[(2 * rh) * width + w] = x;
    dst[(2 * rh + 1) * width + w] = x;
  }
}

__device__ inline float add_halves(float a, float b) { return a + b; }
__device__ inline float4 add_halves(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// dst[r][h][w] = src[r][2h][w] + src[r][2h + 1][w].
template <class V>
__global__ void sum_halves_kernel(const V* __restrict__ src, V* __restrict__ dst, std::size_t rows_heads, int width) {
  const std::size_t n = rows_heads * width;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t rh = i / width, w = i % width;
    dst[i] = add_halves(src[(2 * rh) * width + w], src[(2 * rh + 1) * width + w]);
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// One thread per element in blocks of 256, at most 65536 blocks (the loops stride over the rest).
inline dim3 elementwise_grid(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return dim3(static_cast<unsigned>(blocks < 65536 ? blocks : 65536));
}

// Launches kernel<float4> when the width and both pointers allow it, else
// kernel<float>, over rows_heads rows of `width` floats.
template <template <class> class Kernel>
void launch_over_halves(const float* src, float* dst, std::size_t rows_heads, int width, cudaStream_t stream,
                        const char* what) {
  if (rows_heads == 0 || width == 0) return;
  if (width % 4 == 0 && aligned16(src) && aligned16(dst)) {
    const int w4 = width / 4;
    Kernel<float4>::launch(elementwise_grid(rows_heads * w4), stream, reinterpret_cast<const float4*>(src),
                           reinterpret_cast<float4*>(dst), rows_heads, w4);
  } else {
    Kernel<float>::launch(elementwise_grid(rows_heads * width), stream, src, dst, rows_heads, width);
  }
  check_launch(cudaGetLastError(), what);
}

template <class V>
struct CopyToHalves {
  static void launch(dim3 grid, cudaStream_t s, const V* src, V* dst, std::size_t rows_heads, int width) {
    copy_to_halves_kernel<<<grid, 256, 0, s>>>(src, dst, rows_heads, width);
  }
};
template <class V>
struct SumHalves {
  static void launch(dim3 grid, cudaStream_t s, const V* src, V* dst, std::size_t rows_heads, int width) {
    sum_halves_kernel<<<grid, 256, 0, s>>>(src, dst, rows_heads, width);
  }
};

}  // namespace detail

inline void copy_to_key_halves(const float* src, float* dst, std::size_t rows_heads, int width, cudaStream_t stream) {
  detail::launch_over_halves<detail::CopyToHalves>(src, dst, rows_heads, width, stream,
                                                   "tensor-core fp32 key halves: copy launch");
}

inline void sum_key_halves(const float* src, float* dst, std::size_t rows_heads, int width, cudaStream_t stream) {
  detail::launch_over_halves<detail::SumHalves>(src, dst, rows_heads, width, stream,
                                                "tensor-core fp32 key halves: sum launch");
}

}  // namespace linattn::cuda
