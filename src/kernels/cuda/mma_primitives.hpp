// The tensor-core building blocks every linattn CUDA kernel shares: the
// element types of the operand tiles and their mma.sync (fp32 accumulation),
// ldmatrix, cp.async copies (16-byte, and 8/4-byte or element-wise for padded
// tiles), stores of pairs and pieces, and the K^T V step of the state.
// 16-bit tiles multiply in m16n8k16; fp32 tiles (fp32 inputs) in three
// products of split operands per product (Elem<float>), behind the same
// fragment interface.
// Nothing here knows a kernel's schedule (docs/ARCHITECTURE.md, "The tensor-core kernels").
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace linattn::cuda::detail {

constexpr int kChunk = 64;  // the chunk of every tensor-core kernel
constexpr int kPad = 8;  // 16-bit elements of padding per shared row: spreads ldmatrix rows over the banks

template <class E>
struct Elem;
template <>
struct Elem<__nv_bfloat16> {
  using Frag = std::uint32_t;  // one fragment register: a packed pair
  __device__ static std::uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  }
  __device__ static float round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
  __device__ static float2 unpack(std::uint32_t x) { return make_float2(__uint_as_float(x << 16), __uint_as_float(x & 0xffff0000u)); }
  // (x0, x1) = hi + lo, each a packed pair: one conversion for hi, its halves
  // read back by bit operations (bf16 is the top half of an fp32).
  __device__ static void split(float x0, float x1, std::uint32_t& hi, std::uint32_t& lo) {
    hi = pack(x0, x1);
    lo = pack(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
  }
  __device__ static void mma(float* c, const std::uint32_t* a, std::uint32_t b0, std::uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct Elem<__half> {
  using Frag = std::uint32_t;
  __device__ static std::uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  }
  __device__ static float round(float x) { return __half2float(__float2half_rn(x)); }
  __device__ static float2 unpack(std::uint32_t x) { return __half22float2(*reinterpret_cast<const __half2*>(&x)); }
  __device__ static void split(float x0, float x1, std::uint32_t& hi, std::uint32_t& lo) {
    hi = pack(x0, x1);
    const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&hi));
    lo = pack(x0 - h.x, x1 - h.y);
  }
  __device__ static void mma(float* c, const std::uint32_t* a, std::uint32_t b0, std::uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// fp32 operands (fp32 inputs). A fragment register of an fp32 tile stands
// for the fp32 pair that a 16-bit fragment register packs, at the same
// positions, so every kernel's fragment indexing is unchanged; products keep
// fp32-class accuracy by splitting each operand x = hi + lo (docs/NUMERICS.md,
// "fp32 inputs on tensor cores"). Two splits were measured on the H200
// (BENCHMARKS.md, "fp32 inputs on tensor cores"):
//  - default: bf16 hi + lo pairs made once per fragment (SplitPair), three
//    m16n8k16 bf16 products (lo*hi + hi*lo + hi*hi, lo*lo dropped): about
//    4e-6 relative per product;
//  - LINATTN_FP32_TF32: the fp32 pairs themselves (float2), each m16n8k16
//    product as two m16n8k8 TF32 ones (the 16 keys taken in the order 2t,
//    2t + 1 for the thread's k = t, t + 4, one permutation of k for both
//    operands), each operand split into TF32 hi + lo at every product, three
//    products each: about 1e-7 relative, and slower.
struct SplitPair {
  std::uint32_t hi, lo;  // packed bf16 pairs: hi = round(x), lo = round(x - hi)
};
__device__ inline std::uint32_t to_tf32(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
__device__ inline void mma_tf32(float* c, const std::uint32_t* a, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#if defined(LINATTN_FP32_TF32)
template <>
struct Elem<float> {
  using Frag = float2;
  __device__ static float2 from_pair(float x0, float x1) { return make_float2(x0, x1); }
  __device__ static float2 unpack(float2 x) { return x; }
  __device__ static void mma(float* c, const float2* a, float2 b0, float2 b1) {
    #pragma unroll
    for (int s = 0; s < 2; ++s) {  // keys 0..7 (registers 0, 1 and b0), then 8..15 (2, 3 and b1)
      const float2 r0 = a[2 * s], r1 = a[2 * s + 1], b = s ? b1 : b0;
      const float av[4] = {r0.x, r1.x, r0.y, r1.y}, bv[2] = {b.x, b.y};
      std::uint32_t ah[4], al[4], bh[2], bl[2];
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        ah[i] = to_tf32(av[i]);
        al[i] = to_tf32(av[i] - __uint_as_float(ah[i]));
      }
      #pragma unroll
      for (int i = 0; i < 2; ++i) {
        bh[i] = to_tf32(bv[i]);
        bl[i] = to_tf32(bv[i] - __uint_as_float(bh[i]));
      }
      mma_tf32(c, al, bh[0], bh[1]);  // the small terms first
      mma_tf32(c, ah, bl[0], bl[1]);
      mma_tf32(c, ah, bh[0], bh[1]);
    }
  }
};
#else
template <>
struct Elem<float> {
  using Frag = SplitPair;
  __device__ static SplitPair from_pair(float x0, float x1) {
    SplitPair r;
    Elem<__nv_bfloat16>::split(x0, x1, r.hi, r.lo);
    return r;
  }
  __device__ static float2 unpack(SplitPair x) {  // hi + lo: the pair to about 2^-17 relative
    const float2 h = Elem<__nv_bfloat16>::unpack(x.hi), l = Elem<__nv_bfloat16>::unpack(x.lo);
    return make_float2(h.x + l.x, h.y + l.y);
  }
  __device__ static void mma(float* c, const SplitPair* a, SplitPair b0, SplitPair b1) {
    const std::uint32_t ah[4] = {a[0].hi, a[1].hi, a[2].hi, a[3].hi}, al[4] = {a[0].lo, a[1].lo, a[2].lo, a[3].lo};
    Elem<__nv_bfloat16>::mma(c, al, b0.hi, b1.hi);  // the small terms first
    Elem<__nv_bfloat16>::mma(c, ah, b0.lo, b1.lo);
    Elem<__nv_bfloat16>::mma(c, ah, b0.hi, b1.hi);
  }
};
#endif

// Elements per 16 bytes: the unit of every copy and of the shared-row padding.
template <class E>
constexpr int kVec = 16 / int(sizeof(E));
// Padding per shared row (16 bytes) that spreads ldmatrix rows, and the fp32
// loads that stand in for them, over the banks.
template <class E>
constexpr int kPadOf = kVec<E>;
template <class E>
constexpr bool kFp32Tiles = sizeof(E) == 4;

__device__ inline std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ inline void ldmatrix_x4(std::uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ inline void ldmatrix_x4_trans(std::uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// ldmatrix for fp32 tiles: the same fragments as ldmatrix.x4 (.trans) gives
// 16-bit tiles, each register an fp32 pair. Lane 8m + r points at row r of
// matrix m, as for ldmatrix; lane l reads its elements from the rows it needs
// (their addresses shuffled from the lanes that hold them).
__device__ inline void ldmatrix_x4(float2* r, const float* p) {
  const std::uint32_t a = smem_addr(p);
  const int lane = threadIdx.x & 31;
  #pragma unroll
  for (int m = 0; m < 4; ++m) {  // row lane / 4 of matrix m, columns 2 (lane % 4), + 1
    const std::uint32_t row = __shfl_sync(0xffffffffu, a, 8 * m + (lane >> 2));
    asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];\n" : "=f"(r[m].x), "=f"(r[m].y) : "r"(row + 8 * (lane & 3)));
  }
}
__device__ inline void ldmatrix_x4_trans(float2* r, const float* p) {
  const std::uint32_t a = smem_addr(p);
  const int lane = threadIdx.x & 31;
  #pragma unroll
  for (int m = 0; m < 4; ++m) {  // rows 2 (lane % 4), + 1 of matrix m, column lane / 4
    const std::uint32_t row0 = __shfl_sync(0xffffffffu, a, 8 * m + 2 * (lane & 3));
    const std::uint32_t row1 = __shfl_sync(0xffffffffu, a, 8 * m + 2 * (lane & 3) + 1);
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(r[m].x) : "r"(row0 + 4 * (lane >> 2)));
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(r[m].y) : "r"(row1 + 4 * (lane >> 2)));
  }
}
// The same fragments split once for the bf16 products (Elem<float> by default).
__device__ inline void ldmatrix_x4(SplitPair* r, const float* p) {
  float2 x[4];
  ldmatrix_x4(x, p);
  #pragma unroll
  for (int m = 0; m < 4; ++m) Elem<__nv_bfloat16>::split(x[m].x, x[m].y, r[m].hi, r[m].lo);
}
__device__ inline void ldmatrix_x4_trans(SplitPair* r, const float* p) {
  float2 x[4];
  ldmatrix_x4_trans(x, p);
  #pragma unroll
  for (int m = 0; m < 4; ++m) Elem<__nv_bfloat16>::split(x[m].x, x[m].y, r[m].hi, r[m].lo);
}
// 16-byte asynchronous copy; src_bytes = 0 zero-fills (rows past the end of a ragged chunk).
__device__ inline void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
// 8- and 4-byte asynchronous copies (through L1: .cg takes 16 bytes only), for rows that start off 16 bytes.
__device__ inline void cp_async8(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ inline void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

// ds += K^T V over keys 16kk..16kk+15, for the state rows row0 + 16mt.. of a
// warp (K stored [key][d], kt its tile with row stride k_stride) by the warp's
// V fragments vf (8-column pairs, from ldmatrix.trans of V stored [key][dv]).
// Only the first rows_live of the warp's rows and cols_live of its columns
// are computed (in tiles of 16): a zero-padded head's tiles past its DK and
// DV are zero on chip, and so are their products (tile_rules.hpp,
// live_steps); the vf pairs past cols_live are never read.
template <class E, int kSMTiles, int kNTiles>
__device__ inline void add_kv_step(float (&ds)[kSMTiles][kNTiles][4], const E* kt, int k_stride,
                                   const typename Elem<E>::Frag (&vf)[kNTiles / 2][4], int kk, int row0, int lane,
                                   int rows_live = 16 * kSMTiles, int cols_live = 8 * kNTiles) {
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt) {
    if (16 * mt >= rows_live) continue;
    typename Elem<E>::Frag kf[4];  // K^T rows (state rows) x 16 keys
    ldmatrix_x4_trans(kf, kt + (16 * kk + (lane & 7) + 8 * (lane >> 4)) * k_stride + row0 + 16 * mt + 8 * ((lane >> 3) & 1));
    #pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      if (16 * np >= cols_live) continue;
      Elem<E>::mma(ds[mt][2 * np], kf, vf[np][0], vf[np][1]);
      Elem<E>::mma(ds[mt][2 * np + 1], kf, vf[np][2], vf[np][3]);
    }
  }
}

// add_kv_step with key j's row of K scaled by w[j] (the gated state update,
// kernels/chunk_gate.hpp: w[j] = exp(b_L - b_j), fp32). The scaled keys exist
// only in fp32, so they keep fp32-class accuracy as the kernel's other fp32
// operands do (docs/NUMERICS.md): 16-bit tiles as hi + lo parts (two products
// instead of one), fp32 tiles scaled before Elem<float>'s own split. Register
// r of a K^T fragment holds keys 16kk + 2(lane % 4) + 8(r / 2), + 1.
template <class E, int kSMTiles, int kNTiles>
__device__ inline void add_decayed_kv_step(float (&ds)[kSMTiles][kNTiles][4], const E* kt, int k_stride,
                                           const typename Elem<E>::Frag (&vf)[kNTiles / 2][4], int kk, int row0,
                                           int lane, const float* w, int rows_live = 16 * kSMTiles,
                                           int cols_live = 8 * kNTiles) {
  const float2 w01[2] = {*reinterpret_cast<const float2*>(w + 16 * kk + 2 * (lane & 3)),
                         *reinterpret_cast<const float2*>(w + 16 * kk + 8 + 2 * (lane & 3))};
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt) {
    if (16 * mt >= rows_live) continue;
    const E* p = kt + (16 * kk + (lane & 7) + 8 * (lane >> 4)) * k_stride + row0 + 16 * mt + 8 * ((lane >> 3) & 1);
    if constexpr (sizeof(E) == 4) {
      float2 x[4];
      ldmatrix_x4_trans(x, p);
      typename Elem<E>::Frag kf[4];
      #pragma unroll
      for (int r = 0; r < 4; ++r) kf[r] = Elem<E>::from_pair(x[r].x * w01[r >> 1].x, x[r].y * w01[r >> 1].y);
      #pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        if (16 * np >= cols_live) continue;
        Elem<E>::mma(ds[mt][2 * np], kf, vf[np][0], vf[np][1]);
        Elem<E>::mma(ds[mt][2 * np + 1], kf, vf[np][2], vf[np][3]);
      }
    } else {
      std::uint32_t kf[4], hi[4], lo[4];
      ldmatrix_x4_trans(kf, p);
      #pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float2 x = Elem<E>::unpack(kf[r]);
        Elem<E>::split(x.x * w01[r >> 1].x, x.y * w01[r >> 1].y, hi[r], lo[r]);
      }
      #pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        if (16 * np >= cols_live) continue;
        Elem<E>::mma(ds[mt][2 * np], hi, vf[np][0], vf[np][1]);
        Elem<E>::mma(ds[mt][2 * np + 1], hi, vf[np][2], vf[np][3]);
        Elem<E>::mma(ds[mt][2 * np], lo, vf[np][0], vf[np][1]);
        Elem<E>::mma(ds[mt][2 * np + 1], lo, vf[np][2], vf[np][3]);
      }
    }
  }
}

// s += ds element by element, in IEEE fp32 (the tensor cores' own fp32 sums are not IEEE-rounded).
template <int kSMTiles, int kNTiles>
__device__ inline void add_tiles(float (&s)[kSMTiles][kNTiles][4], const float (&ds)[kSMTiles][kNTiles][4]) {
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt)
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] += ds[mt][nt][e];
}
// The gated form: s = decay * s + ds, one IEEE fp32 rounding per element (decay 1 gives add_tiles' bits).
template <int kSMTiles, int kNTiles>
__device__ inline void decay_add_tiles(float (&s)[kSMTiles][kNTiles][4], float decay,
                                       const float (&ds)[kSMTiles][kNTiles][4]) {
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt)
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = __fmaf_rn(s[mt][nt][e], decay, ds[mt][nt][e]);
}

template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <class T>
__device__ inline void store_pair(T* p, float a, float b);
template <>
__device__ inline void store_pair<float>(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
template <>
__device__ inline void store_pair<__nv_bfloat16>(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
template <>
__device__ inline void store_pair<__half>(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}
__device__ inline void store_one(float* p, float a) { *p = a; }
__device__ inline void store_one(__nv_bfloat16* p, float a) { *p = __float2bfloat16_rn(a); }
__device__ inline void store_one(__half* p, float a) { *p = __float2half_rn(a); }

// Padded tiles: 16 bytes of a row (8 16-bit or 4 fp32 elements) into shared
// memory, those at columns >= n (or all, when the row is past the end) zero,
// in asynchronous copies of cw bytes (row_copy_bytes in tile_rules.hpp: every
// row starts on a whole copy, n is a multiple of one), or element by element
// when 16-bit rows start on odd elements.
template <class E>
__device__ inline void load_row_piece(E* dst, const E* row, int col, int n, bool in, int cw) {
  constexpr int kN = kVec<E>;
  if (cw == 16) {
    const bool any = in && col < n;
    cp_async16(dst, any ? row + col : row, any ? 16 : 0);
  } else if (cw == 8) {
    constexpr int per = 8 / int(sizeof(E));
    #pragma unroll
    for (int e = 0; e < kN; e += per) {
      const bool any = in && col + e < n;
      cp_async8(dst + e, any ? row + col + e : row, any ? 8 : 0);
    }
  } else if (cw == 4) {
    constexpr int per = 4 / int(sizeof(E));
    #pragma unroll
    for (int e = 0; e < kN; e += per) {
      const bool any = in && col + e < n;
      cp_async4(dst + e, any ? row + col + e : row, any ? 4 : 0);
    }
  } else if constexpr (sizeof(E) == 2) {
    const std::uint16_t* src = reinterpret_cast<const std::uint16_t*>(row);
    std::uint16_t* out = reinterpret_cast<std::uint16_t*>(dst);
    #pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = in && col + e < n ? src[col + e] : std::uint16_t(0);
  }
}
// 16 bytes from shared memory to device memory, the elements at columns < n,
// in stores of cw bytes (at least one element).
__device__ inline void store_bytes(void* dst, const void* src, int bytes) {
  switch (bytes) {
    case 16: *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src); break;
    case 8: *static_cast<uint2*>(dst) = *static_cast<const uint2*>(src); break;
    case 4: *static_cast<std::uint32_t*>(dst) = *static_cast<const std::uint32_t*>(src); break;
    default: *static_cast<std::uint16_t*>(dst) = *static_cast<const std::uint16_t*>(src); break;
  }
}
template <class T>
__device__ inline void store_piece(T* dst, const T* src, int col, int n, int cw) {
  constexpr int n_per = 16 / int(sizeof(T));
  const int bytes = cw < int(sizeof(T)) ? int(sizeof(T)) : cw, per = bytes / int(sizeof(T));
  for (int e = 0; e < n_per; e += per)
    if (col + e < n) store_bytes(dst + e, src + e, bytes);
}

}  // namespace linattn::cuda::detail
