// EXPERIMENT (bench only, see fused_wgmma.hpp). Hopper warpgroup MMA (wgmma.mma_async, sm_90a only): the four warps of a
// warpgroup multiply a 64-row A by an N-column B, reading the operands straight
// from shared memory instead of per-warp ldmatrix
// fragments. Only what the fused kernel needs: bf16 operands, fp32
// accumulators, N in {16, 32, 64} and no-swizzle ("interleave") layouts.
//
// Shared-memory operands are described by a 64-bit descriptor. In the
// interleave layout the unit is a core matrix: 8 rows of 16 contiguous bytes
// (128 bytes). LBO is the byte distance between core matrices adjacent along
// K, SBO along M (or N). "K-major" operands hold 8 consecutive K elements in
// each 16-byte row; "MN-major" (transposed) ones hold 8 consecutive M or N
// elements, the 8 rows being 8 consecutive K. PTX ISA, "Matrix Descriptor
// Format" and "Shared Memory Matrix Layout" of wgmma.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LINATTN_HAS_WGMMA 1
#endif

namespace linattn::cuda::wgmma {

__device__ inline std::uint64_t descriptor(const void* smem, std::uint32_t lbo_bytes, std::uint32_t sbo_bytes) {
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  return std::uint64_t((addr >> 4) & 0x3FFF) | std::uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16 |
         std::uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32;  // base offset 0, no swizzle
}

#if defined(LINATTN_HAS_WGMMA)
// Orders register writes (accumulators, A fragments) before the next wgmma.
__device__ inline void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int Pending>
__device__ inline void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
// Shared memory written by ordinary stores or cp.async becomes visible to the
// tensor cores' (async proxy) reads only after this fence and a barrier.
__device__ inline void fence_shared_for_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads/writes across wgmma issue and wait.
template <int N>
__device__ inline void pin(float (&acc)[N]) {
  #pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

// D[64 x N] = A[64 x 16] B[16 x N] (+ D if ScaleD) with both operands in
// shared memory; TransA = 1: A is M-major, TransB = 1: B is N-major. The first
// product of a sum passes ScaleD = 0 instead of zeroing the accumulators:
// register writes between wgmma.fence and wgmma make ptxas serialise them.
template <class E, int N, int TransA, int TransB, int ScaleD = 1>
struct SS;

template <int TransA, int TransB, int ScaleD>
struct SS<__nv_bfloat16, 16, TransA, TransB, ScaleD> {
  __device__ static void run(float* d, std::uint64_t a, std::uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %12, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %10, %11;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "n"(TransA), "n"(TransB), "n"(ScaleD));
  }
};
template <int TransA, int TransB, int ScaleD>
struct SS<__nv_bfloat16, 32, TransA, TransB, ScaleD> {
  __device__ static void run(float* d, std::uint64_t a, std::uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %20, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %18, %19;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "n"(TransA), "n"(TransB), "n"(ScaleD));
  }
};
template <int TransA, int TransB, int ScaleD>
struct SS<__nv_bfloat16, 64, TransA, TransB, ScaleD> {
  __device__ static void run(float* d, std::uint64_t a, std::uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %34, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "n"(TransA), "n"(TransB), "n"(ScaleD));
  }
};

#endif  // LINATTN_HAS_WGMMA

}  // namespace linattn::cuda::wgmma
