// GLA's per-key-channel decay gk (issue 28) before the fused tensor-core
// kernel: one block per (chunk, head) turns the chunk's gk into what the fused
// kernel reads instead of a gate, so that its products stay level 1's
// (fused_tensor_core_kernel.hpp, kChannel):
//   qg[i]        = q_i * exp(b_i)                  (the inter-chunk term's rows)
//   kg[j]        = k_j * exp(b_L - b_j)            (the state update's keys)
//   decay[d]     = exp(b_L,d)                      (the state's rows, per chunk)
//   scores[i][j] = scale * sum_d q_id k_jd exp(b_id - b_jd), j <= i, else 0
// with b the inclusive cumulative sum of gk over the chunk, channel by channel
// (kernels/chunk_gate.hpp has the same factors for the portable kernels).
// Every exponent is a difference of cumulative sums that is <= 0, so no
// factor overflows at any decay that fp32 holds, unlike a product
// (q exp(b)) (k exp(-b))^T, which overflows once a channel decays by more than
// fp32's range over the chunk (docs/NUMERICS.md). The scores are taken by
// 16-token sub-chunks, as fla's chunk_gla takes them: a query i of sub-chunk I
// meets the keys j of the earlier sub-chunks through the token r = 16 I that
// starts I, (q_i exp(b_i - b_r)) . (k_j exp(b_r - b_j)), both factors <= 1,
// so those off-diagonal blocks are matrix products on tensor cores (mma.sync
// over the decayed queries and keys in the operand type M, accumulated in fp32
// over the channels; M = float splits them hi + lo); the diagonal blocks are
// fp32 sums on CUDA cores by the same device one level down, 4-token blocks
// (diagonal_tile). The forward takes M = the input type; the backward takes
// M = float for bf16 (tensor_core_backward.hpp, ScoreOperand): fla's
// chunk_gla multiplies these fp32 operands in TF32 (11 significant bits), and
// bf16's 8 put dv about 2% further from its fp64 value (docs/NUMERICS.md).
// qg and kg are rounded to the input type (fla's chunk_gla rounds them the
// same way); scores stay fp32, [token][H][64] like fla's A.
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/log2_units.hpp"
#include "kernels/cuda/warp_tiles.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

namespace linattn::cuda {

struct ChannelGateArgs {
  const void* q;
  const void* k;
  const float* gk;  // [rows, H, DK] fp32, <= 0
  void* qg;         // [rows, H, DK], the input type
  void* kg;         // [rows, H, DK]
  float* scores;    // [rows, H, 64]
  float* decay;     // [chunks, H, DK], chunk indexed as h is
  int B, T, H, DK;
  float scale;
  // Packed batches: chunk x (its decay row x) is chunks[x], the backward's
  // table (backward_args.hpp); null for plain batches, whose chunk x is chunk
  // x % NT of batch row x / NT.
  const BackwardChunk* chunks;
};

namespace detail {

// What the fused kernel's channel instantiation reads besides its level-1
// operands: the scores [rows, H, 64] and the state decay [chunks, H, DK].
struct ChannelGateOperands {
  const float* scores;
  const float* decay;
  // Split sequences: each segment's decay per key channel, exp(sum of gk over
  // its tokens) ([segment rows, DK], segment_sums.hpp); null for whole sequences.
  const float* seg_decay = nullptr;
};

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }
template <class E>
__device__ inline E from_float(float x) {
  if constexpr (std::is_same<E, float>::value) return x;
  else if constexpr (std::is_same<E, __half>::value) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}

constexpr int kPrepThreads = 256;
constexpr int kPrepSlice = 32;  // key channels per pass
constexpr int kSubChunk = 16;
// Blocks resident per SM: the prep is bound by issue and latency, and 4
// blocks (64 registers) keep more warps to issue from than 2 (128); fp32
// operands take 3 (80), since their split operands spill at 64.
template <class M>
constexpr int kPrepBlocksPerSm = std::is_same<M, float>::value ? 3 : 4;

// One slice of key channels d0..d0+31 of a chunk into fp32 tiles [64][P]:
// b = the chunk's inclusive cumulative sums of gk in log2 units (by a scan in
// two steps: each thread its kRows tokens, then the parts before it), q and k,
// zero past the chunk's tokens and the head's channels. Thread x loads channel
// x % 32 of tokens kRows (x / 32)..; part_s: [parts][32] scratch. Ends after
// a barrier, with every tile complete.
template <int kThreads, class E>
__device__ inline void load_channel_slice(const float* gk, const E* q, const E* k, std::size_t token0, int len,
                                          std::size_t row_stride, std::size_t head_off, int d0, int dk, float* b_s,
                                          float* q_s, float* k_s, float* part_s) {
  constexpr int S = 32, P = S + 1, kParts = kThreads / S, kRows = kChunk / kParts;
  const int d = threadIdx.x % S, part = threadIdx.x / S;
  const bool channel = d0 + d < dk;
  // Offsets step by a row from the thread's first token (one 64-bit add a
  // token, not a product); elements past the chunk or the head are not read.
  std::size_t off = (token0 + std::size_t(part) * kRows) * row_stride + head_off + d0 + d;
  float run = 0.0f;
  #pragma unroll
  for (int r = 0; r < kRows; ++r, off += row_stride) {
    const int t = part * kRows + r;
    const bool live = channel && t < len;  // past the chunk's tokens: gk 0, the rest 0
    run += live ? gk[off] * kLog2e : 0.0f;
    b_s[t * P + d] = run;
    q_s[t * P + d] = live ? to_float(q[off]) : 0.0f;
    k_s[t * P + d] = live ? to_float(k[off]) : 0.0f;
  }
  part_s[part * S + d] = run;
  __syncthreads();
  float before = 0.0f;
  #pragma unroll
  for (int p = 0; p < kParts - 1; ++p)
    if (p < part) before += part_s[p * S + d];
  #pragma unroll
  for (int r = 0; r < kRows; ++r) b_s[(part * kRows + r) * P + d] += before;
  __syncthreads();
}

// Shared memory of the prep: b, q, k (64 x 33 fp32 each) and the per-part sums,
// then the off-diagonal operands in the operand type M: the queries of
// sub-chunks 1..3 decayed from the token that starts theirs (48 rows) and, for
// each query sub-chunk I = 1, 2, 3, the keys before it decayed to its start
// (16 I rows each, 96 in all).
template <class M>
struct PrepLayout {
  static constexpr int stride = kPrepSlice + kPadOf<M>;
  static constexpr std::size_t floats = std::size_t(3) * kChunk * (kPrepSlice + 1) + kPrepThreads;
  static constexpr std::size_t bytes = floats * sizeof(float) + std::size_t(48 + 96) * stride * sizeof(M);
};
// First row of query sub-chunk I's keys in the decayed-key tile.
__device__ inline int prep_key_rows_of(int I) { return I == 1 ? 0 : I == 2 ? 16 : 48; }

// 2^x for x <= 0: one MUFU instruction (results below 2^-126 flush to zero,
// which is what they round to beside the terms they are summed with).
__device__ inline float exp2_nonpositive(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The diagonal 16-blocks of the scores in fp32 on CUDA cores, by 4 x 4 tiles
// of 4-token blocks: a query i of block I4 meets a key j of an earlier block
// J4 < I4 through the token r that starts I4, (q_i 2^(b_i - b_r)) (k_j 2^(b_r - b_j)),
// both factors <= 1 (as the 16-token sub-chunks do on tensor cores), so such
// a tile costs 7 exps per channel for its 16 terms; a tile on the diagonal
// (J4 = I4) takes one exp per term, j < i. Of the tiles with J4 <= I4 in each
// 16-block, warps 3..5 own the 24 with J4 < I4 and warps 6, 7 the 16 with
// J4 = I4, 8 tiles a warp; lane = 4 tile + quarter, and quarter c sums
// channels c, c + 4, ... of each slice (so that a warp's rows fall in distinct
// banks). tiles [t][P]: q, k, b (log2 units) of load_channel_slice.
struct DiagonalTile {
  int i0, j0;  // first query and first key token
  bool on_diagonal;
};
__device__ inline DiagonalTile diagonal_tile_of(int warp, int lane) {
  const int t = lane / 4;
  if (warp < 6) {
    // tile p of a 16-block: (I4, J4) = (1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)
    const int u = 8 * (warp - 3) + t, blk = u / 6, p = u % 6, I4 = p < 1 ? 1 : p < 3 ? 2 : 3, J4 = p - I4 * (I4 - 1) / 2;
    return {16 * blk + 4 * I4, 16 * blk + 4 * J4, false};
  }
  const int u = 8 * (warp - 6) + t;
  return {4 * u, 4 * u, true};
}

template <int P, int kN>
__device__ inline void diagonal_tile(float (&acc)[kN][4], int warp, int lane, const float* q_s, const float* k_s,
                                     const float* b_s) {
  const DiagonalTile tile = diagonal_tile_of(warp, lane);
  const int quarter = lane % 4;
  if (!tile.on_diagonal) {
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int e = quarter + 4 * s;
      const float br = b_s[tile.i0 * P + e];
      float qf[4], kf[4];
      qf[0] = q_s[tile.i0 * P + e];
      #pragma unroll
      for (int a = 1; a < 4; ++a) qf[a] = q_s[(tile.i0 + a) * P + e] * exp2_nonpositive(b_s[(tile.i0 + a) * P + e] - br);
      #pragma unroll
      for (int c = 0; c < 4; ++c) kf[c] = k_s[(tile.j0 + c) * P + e] * exp2_nonpositive(br - b_s[(tile.j0 + c) * P + e]);
      #pragma unroll
      for (int a = 0; a < 4; ++a)
        #pragma unroll
        for (int c = 0; c < 4; ++c) acc[a][c] = __fmaf_rn(qf[a], kf[c], acc[a][c]);
    }
  } else {
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int e = quarter + 4 * s;
      float qv[4], kv[4], bv[4];
      #pragma unroll
      for (int a = 0; a < 4; ++a) {
        qv[a] = q_s[(tile.i0 + a) * P + e];
        kv[a] = k_s[(tile.i0 + a) * P + e];
        bv[a] = b_s[(tile.i0 + a) * P + e];
      }
      #pragma unroll
      for (int a = 0; a < 4; ++a) {
        acc[a][a] = __fmaf_rn(qv[a], kv[a], acc[a][a]);
        #pragma unroll
        for (int c = 0; c < a; ++c) acc[a][c] = __fmaf_rn(qv[a] * kv[c], exp2_nonpositive(bv[a] - bv[c]), acc[a][c]);
      }
    }
  }
}

// Sums a tile over its four quarters and writes it: lane quarter c writes row
// i0 + c (zeros above the diagonal of a tile on it).
template <int kN>
__device__ inline void store_diagonal_tile(float (&acc)[kN][4], int warp, int lane, int len, float scale,
                                           float* scores, std::size_t srow) {
  #pragma unroll
  for (int a = 0; a < 4; ++a)
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      acc[a][c] += __shfl_xor_sync(0xffffffffu, acc[a][c], 1);
      acc[a][c] += __shfl_xor_sync(0xffffffffu, acc[a][c], 2);
    }
  const DiagonalTile tile = diagonal_tile_of(warp, lane);
  const int a = lane % 4, i = tile.i0 + a;
  float row[4];
  #pragma unroll
  for (int r = 0; r < 4; ++r)
    #pragma unroll
    for (int c = 0; c < 4; ++c)
      if (r == a) row[c] = tile.on_diagonal && c > a ? 0.0f : scale * acc[r][c];
  if (i < len) *reinterpret_cast<float4*>(scores + i * srow + tile.j0) = make_float4(row[0], row[1], row[2], row[3]);
}

// grid: (chunks, H). Thread x scans channel x % 32 over tokens 8(x / 32)..+7
// of each slice; warps 0..2 own the off-diagonal rows of query sub-chunks 1..3
// (tensor cores), warps 3..7 the diagonal 16-blocks' tiles (diagonal_tile).
// E: the input type; M: the off-diagonal operands' (E or float).
template <class E, class M>
__global__ void __launch_bounds__(kPrepThreads, kPrepBlocksPerSm<M>) channel_gate_prep_kernel(ChannelGateArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = PrepLayout<M>;
  constexpr int S = kPrepSlice, P = S + 1, kParts = kPrepThreads / S, kRows = kChunk / kParts, OS = L::stride;
  static_assert(S == 32, "load_channel_slice takes slices of 32 channels");
  extern __shared__ __align__(16) unsigned char prep_raw[];
  float* b_s = reinterpret_cast<float*>(prep_raw);  // b log2(e)
  float* q_s = b_s + kChunk * P;
  float* k_s = q_s + kChunk * P;
  float* part_s = k_s + kChunk * P;  // [kParts][S]
  M* qh_m = reinterpret_cast<M*>(prep_raw + L::floats * sizeof(float));  // [48][OS]
  M* kr_m = qh_m + 48 * OS;                                                // [96][OS]
  const int x = blockIdx.x, hh = blockIdx.y, H = a.H, dk = a.DK;
  std::size_t token0;
  int len;
  if (a.chunks) {
    const BackwardChunk ch = a.chunks[x];
    token0 = std::size_t(ch.token0);
    len = ch.length;
  } else {
    const int NT = (a.T + kChunk - 1) / kChunk, b = x / NT, c = x % NT;
    token0 = std::size_t(b) * a.T + std::size_t(c) * kChunk;
    len = min(kChunk, a.T - c * kChunk);
  }
  const E* q = static_cast<const E*>(a.q);
  const E* k = static_cast<const E*>(a.k);
  E* qg = static_cast<E*>(a.qg);
  E* kg = static_cast<E*>(a.kg);
  const std::size_t row_stride = std::size_t(H) * dk, head_off = std::size_t(hh) * dk;
  const int d = threadIdx.x % S, part = threadIdx.x / S, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // warp w < 3: rows of query sub-chunk w + 1, keys 0..16 (w + 1); warps 3..7:
  // rows 0..3 are their 4 x 4 tile of the diagonal 16-blocks (diagonal_tile)
  float acc[6][4];
  zero(acc);

  for (int d0 = 0; d0 < dk; d0 += S) {
    const bool channel = d0 + d < dk;
    load_channel_slice<kPrepThreads>(a.gk, q, k, token0, len, row_stride, head_off, d0, dk, b_s, q_s, k_s, part_s);
    // The fused kernel's operands and the chunk's state decay (b_L: row 63, as gk is 0 past len).
    const float bl = b_s[(kChunk - 1) * P + d];
    const std::size_t step = kParts * row_stride;
    std::size_t off = (token0 + part) * row_stride + head_off + d0 + d;
    #pragma unroll
    for (int r = 0; r < kRows; ++r, off += step) {
      const int t = part + r * kParts;
      if (channel && t < len) {
        const float bt = b_s[t * P + d];
        qg[off] = from_float<E>(q_s[t * P + d] * exp2_nonpositive(bt));
        kg[off] = from_float<E>(k_s[t * P + d] * exp2_nonpositive(bl - bt));
      }
    }
    if (part == 0 && channel) {
      const std::size_t chunk_row = std::size_t(x) * H + hh;
      a.decay[chunk_row * dk + d0 + d] = exp2_nonpositive(bl);
    }
    // The off-diagonal operands (row x % 32 of the tiles is channel d). Warp
    // `part` takes rows part + kParts u; unrolled, each u's rows lie in one
    // sub-chunk, so that the sub-chunk and its reference token are constants
    // (a rolled loop worked them out row by row, with branches and divisions).
    static_assert(16 % kParts == 0, "a step of the rows stays within one sub-chunk");
    #pragma unroll
    for (int u = 0; u < (48 + 96) / kParts; ++u) {
      const int row = part + kParts * u;
      if (kParts * u < 48) {  // query rows 16.. (sub-chunks 1..3), decayed from the token that starts theirs
        const int i = 16 + row, r0 = 16 * ((16 + kParts * u) / 16);
        qh_m[row * OS + d] = from_float<M>(q_s[i * P + d] * exp2_nonpositive(b_s[i * P + d] - b_s[r0 * P + d]));
      } else {  // the keys before query sub-chunk I, decayed to its first token
        const int kr = row - 48, kr_step = kParts * u - 48;
        const int I = kr_step < 16 ? 1 : kr_step < 48 ? 2 : 3, j = kr - prep_key_rows_of(I), r0 = 16 * I;
        kr_m[kr * OS + d] = from_float<M>(k_s[j * P + d] * exp2_nonpositive(b_s[r0 * P + d] - b_s[j * P + d]));
      }
    }
    __syncthreads();
    if (warp < 3) {  // query sub-chunk I = warp + 1 against the keys before it, over this slice's channels
      const int I = warp + 1, kr0 = prep_key_rows_of(I);
      mma_rows<M, 6>(acc, 0, S, [&](FragOf<M>* f, int kk) { a_rows(f, qh_m, OS, 16 * warp, kk, lane); },
                     [&](FragOf<M>* f, int n, int kk) { b_rows(f, kr_m + kr0 * OS, OS, n, kk, lane); }, I);
    }
    // The diagonal 16-blocks by 4-token blocks (see diagonal_tile).
    if (warp >= 3) diagonal_tile<P>(acc, warp, lane, q_s, k_s, b_s);
    __syncthreads();  // the tiles are refilled by the next slice
  }
  float* scores = a.scores + (token0 * H + hh) * kChunk;  // row i at i * H * 64
  const std::size_t srow = std::size_t(H) * kChunk;
  if (warp >= 3) store_diagonal_tile(acc, warp, lane, len, a.scale, scores, srow);
  if (warp < 3) {
    const int I = warp + 1;
    #pragma unroll
    for (int nt = 0; nt < 6; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 16 * I + (lane >> 2) + 8 * (e / 2), j = 8 * nt + 2 * (lane & 3) + e % 2;
        if (nt < 2 * I && i < len) scores[i * srow + j] = a.scale * acc[nt][e];
      }
  }
  // Keys past a query's 4-token block: zero (no tile writes them).
  for (int e = threadIdx.x; e < kChunk * kChunk / 4; e += kPrepThreads) {
    const int i = e / (kChunk / 4), j4 = e % (kChunk / 4);
    if (i < len && j4 > i / 4) *reinterpret_cast<float4*>(scores + i * srow + 4 * j4) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#endif
}

}  // namespace detail

// M: the type of the off-diagonal scores' operands (see the top of this file).
template <class E, class M = E>
void launch_channel_gate_prep(const ChannelGateArgs& args, int chunks, cudaStream_t stream) {
  if (chunks == 0) return;
  constexpr std::size_t bytes = detail::PrepLayout<M>::bytes;
  cudaFuncSetAttribute(detail::channel_gate_prep_kernel<E, M>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(bytes));
  detail::channel_gate_prep_kernel<E, M><<<dim3(chunks, args.H), detail::kPrepThreads, bytes, stream>>>(args);
}

}  // namespace linattn::cuda
