// Kernel 2 of the tensor-core backward for every head size
// (tensor_core_backward.hpp; the chunk kernel of chunk_gradient.hpp holds a
// whole 64..128-wide head in shared memory, these hold 64 x 64 tiles): per
// (chunk, head), DK and DV in blocks of 64 columns, zero-padded on chip,
//   dq, dk of one DK block (query_key_gradient_kernel), over the DV blocks:
//     P = scale tril(dO V^T),  dQ = scale dO h^T + P K,  dK = P^T Q + V dh^T
//   dv of one DV block (value_gradient_kernel), over the DK blocks:
//     A = scale tril(Q K^T),   dV = A^T dO + K dh
// P is summed over all of DV and A over all of DK before they are used, so
// each DK block computes P again (and each DV block A), as fla's
// chunk_bwd_dqkwg and chunk_bwd_dv do: about a third more products at 256 x 256
// for blocks whose accumulators (3 x 32 floats a thread) fit in registers.
// Each stage's tiles are double-buffered. P and A are rounded once to 16 bits,
// as in chunk_gradient.hpp (but gk's A, for dV, as hi + lo: load_channel_scores). fp32 inputs keep fp32 tiles (P and A unrounded)
// and multiply in three products of split operands (mma_primitives.hpp, Elem<float>).
// Gated (gate_gradient.hpp), as chunk_gradient.hpp: P and A take exp(b_i - b_j),
// dO h^T's rows exp(b_i), V dh^T's and K dh's rows exp(b_L - b_j) (they are
// summed first already), and each DK block leaves its share of q . dq - k . dk.
// Per key channel (kChannel, GLA's gk; channel_gate_gradient.hpp): the value
// kernel reads the decayed keys kg and the scores A of channel_gate_prep.hpp
// instead of computing Q K^T; the query-key kernel leaves dA = P (fp32), dO h^T
// and V dh^T in fp32 and the rows of sum_v h[c] dh[c], and channel_gate_gradient.hpp
// adds the products with P that each channel decays on its own.
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/gate_gradient.hpp"
#include "kernels/cuda/state_gradient.hpp"
#include "kernels/cuda/tile_rules.hpp"
#include "kernels/cuda/warp_tiles.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace linattn::cuda::detail {

constexpr int kGradientBlock = 64;     // DK and DV columns of one block of the tiled kernels
constexpr int kTiledGradientThreads = 128;  // 4 warps, warp w owns the 16 token rows 16 w..
template <class E>
constexpr int kTileStrideOf = kGradientBlock + kPadOf<E>;
template <class E>
constexpr int kTileElemsOf = kChunk * kTileStrideOf<E>;  // one 64 x 64 tile (also DK or DV rows of h, dh)

// 16-column steps that cover `cols` columns of a block (at most the block's 4).
__device__ inline int steps16(int cols) { return cols >= kGradientBlock ? kGradientBlock / 16 : (cols + 15) / 16; }

// Snapshot tile h[c][r0.., c0..] (64 x 64, rows past DK and columns past DV
// zero) into shared memory as E: asynchronous when h is stored in E and rows
// are 16-byte aligned, else converted on the way (bf16 snapshots of fp16
// inputs, fp32 snapshots), element by element at the edges.
template <class E, class SnapT>
__device__ inline void load_snapshot_tile(E* dst, const SnapT* h, int DK, int DV, int r0, int c0, int cw) {
  constexpr int kThreads = kTiledGradientThreads, kTileStride = kTileStrideOf<E>;
  if constexpr (std::is_same<SnapT, E>::value) {
    copy_tile_bounded<kThreads>(dst, kTileStride, h + std::size_t(r0) * DV + c0, DV, kGradientBlock, kGradientBlock,
                                DK - r0, DV - c0, cw);
  } else {
    for (int i = threadIdx.x; i < kGradientBlock * kGradientBlock / 2; i += kThreads) {
      const int r = i / (kGradientBlock / 2), col = 2 * (i % (kGradientBlock / 2));
      const int row = r0 + r, c = c0 + col;
      float x0 = 0.0f, x1 = 0.0f;
      if (row < DK) {
        const SnapT* p = h + std::size_t(row) * DV + c;
        if (c < DV) x0 = float(p[0]);
        if (c + 1 < DV) x1 = float(p[1]);
      }
      store_pair<E>(dst + r * kTileStride + col, x0, x1);
    }
  }
}

// Scores of warp row tile rt (16 x 64, keys past the diagonal zero) scaled
// and rounded to 16 bits into a tile stored [query][key].
// Gated: times exp(b_i - b_j) (decays non-null).
template <class E>
__device__ inline void store_causal_scores(E* p, const float (&sc)[8][4], float scale, int lane,
                                           const ChunkDecays* decays = nullptr) {
  constexpr int kTileStride = kTileStrideOf<E>;
  const int rt = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  #pragma unroll
  for (int nt = 0; nt < 8; ++nt)
    #pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = 16 * rt + g + 8 * half, col = 8 * nt + 2 * t4;
      const float s0 = decays ? scale * decays->pair(row, col) : scale;
      const float s1 = decays ? scale * decays->pair(row, col + 1) : scale;
      const float x0 = col <= row ? s0 * sc[nt][2 * half] : 0.0f;
      const float x1 = col + 1 <= row ? s1 * sc[nt][2 * half + 1] : 0.0f;
      store_pair<E>(p + row * kTileStride + col, x0, x1);
    }
}

// kChannel: the scores A of channel_gate_prep.hpp (fp32, scaled, zero past
// the diagonal) into a tile stored [query][key] as E; rows past the chunk zero.
// 16-bit E: as hi + lo, A = hi + lo to about 2^-16 (Elem<E>::split), lo into
// lo_s: dV's A^T dO then keeps A at fp32's level, as fla's chunk_gla does
// (its dv takes A in fp32); rounded once, A gave dv 2.38e-3 against fla's
// 1.70e-3 with bf16 inputs (BENCHMARKS.md).
template <class E>
__device__ inline void load_channel_scores(E* a_s, E* lo_s, const TensorCoreBackwardArgs& a, const BackwardChunk& ch,
                                           int head) {
  constexpr int kTileStride = kTileStrideOf<E>;
  for (int i = threadIdx.x; i < kChunk * kChunk / 2; i += kTiledGradientThreads) {
    const int r = i / (kChunk / 2), c = 2 * (i % (kChunk / 2));
    float2 x = make_float2(0.0f, 0.0f);
    if (r < ch.length)
      x = *reinterpret_cast<const float2*>(a.scores + ((std::size_t(ch.token0) + r) * a.H + head) * kChunk + c);
    if constexpr (std::is_same<E, float>::value) {
      store_pair<E>(a_s + r * kTileStride + c, x.x, x.y);
    } else {
      std::uint32_t hi, lo;
      Elem<E>::split(x.x, x.y, hi, lo);
      *reinterpret_cast<std::uint32_t*>(a_s + r * kTileStride + c) = hi;
      *reinterpret_cast<std::uint32_t*>(lo_s + r * kTileStride + c) = lo;
    }
  }
}

// kChannel: the warp's rows of P = scale tril(dO V^T) into args.scores in fp32
// (channel_gate_gradient.hpp reads them as dA), rows of the chunk only.
template <int kN>
__device__ inline void store_channel_scores(const TensorCoreBackwardArgs& a, const BackwardChunk& ch, int head,
                                            const float (&p)[kN][4], int lane) {
  const int rt = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = 16 * rt + g + 8 * half;
    if (row >= ch.length) continue;
    float* out = a.scores + ((std::size_t(ch.token0) + row) * a.H + head) * kChunk;
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt) {
      const int col = 8 * nt + 2 * t4;
      *reinterpret_cast<float2*>(out + col) = make_float2(col <= row ? a.scale * p[nt][2 * half] : 0.0f,
                                                          col + 1 <= row ? a.scale * p[nt][2 * half + 1] : 0.0f);
    }
  }
}

// kChannel: this thread's half of row threadIdx.x / 2 of sum_col x y, both
// 64 x 64 tiles [row][col] in shared memory (kTiledGradientThreads = 128: two threads a row).
template <class E>
__device__ inline float half_row_dot(const E* x, const E* y, int stride) {
  const int r = threadIdx.x / 2, c0 = (threadIdx.x % 2) * (kChunk / 2);
  float s = 0.0f;
  #pragma unroll 4
  for (int c = c0; c < c0 + kChunk / 2; c += 2) {
    const float2 u = load_pair(x + r * stride + c), v = load_pair(y + r * stride + c);
    s += u.x * v.x + u.y * v.y;
  }
  return s;
}

// Stages of the tiled kernels' loops. 16-bit tiles are double-buffered (the
// next block's loads overlap this one's products). fp32 tiles (17 KB each)
// double-buffered took 191 KB (query-key kernel) and 139 KB (value kernel):
// one block of 4 warps per SM, issue slots 27-29% busy (ncu, H100,
// 8,4096,16,128). Single-buffered, with P over the stage's tiles once the
// loop is done, they take 104 KB and 87 KB: two blocks per SM, each hiding
// the other's loads (BENCHMARKS.md, "fp32 inputs on tensor cores").
template <class E>
constexpr int kTiledStages = std::is_same<E, float>::value ? 1 : 2;
// Shared memory of query_key_gradient_kernel: Q and K of the DK block, then
// per stage dO, V of a DV block and h, dh of (DK block, DV block); P (its own
// tile when double-buffered, else the stage's dO tile).
// Gated: + the chunk's b log2(e) (64 floats) after the tiles.
template <class E>
constexpr int kQueryKeyTiles = 2 + 4 * kTiledStages<E> + (kTiledStages<E> == 2 ? 1 : 0);
template <class E>
constexpr std::size_t kQueryKeyGradientBytes = std::size_t(kQueryKeyTiles<E>) * kTileElemsOf<E> * sizeof(E);
// Of value_gradient_kernel: dO of the DV block, A; per stage Q, K of a DK
// block and dh of (DK block, DV block).
template <class E>
constexpr std::size_t kValueGradientBytes = std::size_t(2 + 3 * kTiledStages<E>) * kTileElemsOf<E> * sizeof(E);
// gk's value kernel with 16-bit inputs: one more tile, the low parts of A (load_channel_scores).
template <class E>
constexpr std::size_t kChannelValueGradientBytes =
    kValueGradientBytes<E> + (std::is_same<E, float>::value ? 0 : kTileElemsOf<E> * sizeof(E));
constexpr std::size_t kGateBytes = (kChunk + 8) * sizeof(float);  // b log2(e), a float per warp

// blockIdx.x = DK block + (DK blocks) * (head + H * chunk): the blocks of one
// chunk run side by side and share its dO and V in L2.
template <class E, class SnapT, bool kBounded, bool kGated = false, bool kChannel = false>
__global__ void __launch_bounds__(kTiledGradientThreads) query_key_gradient_kernel(TensorCoreBackwardArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kThreads = kTiledGradientThreads, kN = kGradientBlock / 8;
  constexpr int kTileStride = kTileStrideOf<E>, kTileElems = kTileElemsOf<E>;
  const int H = a.H, DK = a.DK, DV = a.DV, nkb = (DK + kGradientBlock - 1) / kGradientBlock;
  const int k0 = (blockIdx.x % nkb) * kGradientBlock, rest = blockIdx.x / nkb, head = rest % H;
  const BackwardChunk ch = a.chunks[rest / H];
  const int lane = threadIdx.x & 31, rt = threadIdx.x >> 5;
  const int cw = kBounded ? row_copy_bytes(DK, DV, int(sizeof(E))) : 16;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  E* q_s = reinterpret_cast<E*>(shared_raw);
  E* k_s = q_s + kTileElems;
  constexpr int kStages = kTiledStages<E>;
  E* stage = k_s + kTileElems;  // [kStages][dO, V, h, dh]
  E* p_s = kStages == 2 ? stage + 8 * kTileElems : stage;
  float* b_s = reinterpret_cast<float*>(q_s + kQueryKeyTiles<E> * kTileElems);  // gated: the chunk's b log2(e)
  const ChunkDecays cd{b_s, ch.length - 1};
  const std::size_t tok = std::size_t(ch.token0) * H + head;
  const std::size_t qk_row = std::size_t(H) * DK, v_row = std::size_t(H) * DV;
  const E* d_o = static_cast<const E*>(a.d_o) + tok * DV;
  const E* v = static_cast<const E*>(a.v) + tok * DV;
  const SnapT* h = static_cast<const SnapT*>(a.h) + (std::size_t(ch.h_chunk) * H + head) * DK * DV;
  const E* dh = static_cast<const E*>(a.dh) + (std::size_t(ch.h_chunk) * H + head) * a.dh_rows * a.dh_cols;

  if constexpr (!kChannel) {  // kChannel: the products with P are channel_gate_gradient.hpp's
    copy_tile_bounded<kThreads>(q_s, kTileStride, static_cast<const E*>(a.q) + tok * DK + k0, qk_row, kChunk,
                                kGradientBlock, ch.length, DK - k0, cw);
    copy_tile_bounded<kThreads>(k_s, kTileStride, static_cast<const E*>(a.k) + tok * DK + k0, qk_row, kChunk,
                                kGradientBlock, ch.length, DK - k0, cw);
  }
  if constexpr (kGated) load_decays_async(b_s, a, ch, head);  // in load(0)'s group
  auto load = [&](int vb) {
    E* s = stage + (vb % kStages) * 4 * kTileElems;
    const int c0 = vb * kGradientBlock;
    copy_tile_bounded<kThreads>(s, kTileStride, d_o + c0, v_row, kChunk, kGradientBlock, ch.length, DV - c0, cw);
    copy_tile_bounded<kThreads>(s + kTileElems, kTileStride, v + c0, v_row, kChunk, kGradientBlock, ch.length, DV - c0, cw);
    load_snapshot_tile(s + 2 * kTileElems, h, DK, DV, k0, c0, cw);
    if constexpr (kBounded)
      copy_tile_bounded<kThreads>(s + 3 * kTileElems, kTileStride, dh + std::size_t(k0) * a.dh_cols + c0, a.dh_cols,
                                  kGradientBlock, kGradientBlock, a.dh_rows - k0, a.dh_cols - c0, 16);
    else
      copy_tile_async<kThreads>(s + 3 * kTileElems, kTileStride, dh + std::size_t(k0) * a.dh_cols + c0, a.dh_cols,
                                kGradientBlock, kGradientBlock, kGradientBlock);
    cp_async_commit();
  };
  // Products stop at the head's last 16 columns: padded blocks cost what their columns need
  // (unbounded heads keep compile-time loop bounds: measured 3.87 against 4.22 ms at 4,8192,16,256).
  const int dk_pairs = kBounded ? steps16(DK - k0) : kN / 2;
  float p[kN][4], gq[kN][4], gk[kN][4];  // P, dO h^T, V dh^T of the warp's 16 rows
  [[maybe_unused]] float hdh = 0.0f;    // gated: this thread's share of <h[c], dh[c]> over the DK block
  [[maybe_unused]] float hdh_row = 0.0f;  // kChannel: of row threadIdx.x / 2's sum over DV
  zero(p);
  zero(gq);
  zero(gk);
  const int nvb = (DV + kGradientBlock - 1) / kGradientBlock;
  load(0);
  for (int vb = 0; vb < nvb; ++vb) {
    cp_async_wait_all();
    __syncthreads();  // block vb is in shared memory; every thread is done with the other buffer
    if (kStages == 2 && vb + 1 < nvb) load(vb + 1);
    const E* s = stage + (vb % kStages) * 4 * kTileElems;
    const E *o_t = s, *v_t = s + kTileElems, *h_t = s + 2 * kTileElems, *d_t = s + 3 * kTileElems;
    if constexpr (kGated) hdh += tile_dot<kThreads>(h_t, d_t, kTileStride);  // <h[c], dh[c]> over this block
    if constexpr (kChannel) hdh_row += half_row_dot(h_t, d_t, kTileStride);
    const int k_end = kBounded ? 16 * steps16(DV - vb * kGradientBlock) : kGradientBlock;
    mma_rows<E, kN>(p, 0, k_end, [&](FragOf<E>* f, int kk) { a_rows(f, o_t, kTileStride, 16 * rt, kk, lane); },
                    [&](FragOf<E>* f, int n, int kk) { b_rows(f, v_t, kTileStride, n, kk, lane); }, rt + 1);
    mma_rows<E, kN>(gq, 0, k_end, [&](FragOf<E>* f, int kk) { a_rows(f, o_t, kTileStride, 16 * rt, kk, lane); },
                    [&](FragOf<E>* f, int n, int kk) { b_rows(f, h_t, kTileStride, n, kk, lane); }, dk_pairs);
    mma_rows<E, kN>(gk, 0, k_end, [&](FragOf<E>* f, int kk) { a_rows(f, v_t, kTileStride, 16 * rt, kk, lane); },
                    [&](FragOf<E>* f, int n, int kk) { b_rows(f, d_t, kTileStride, n, kk, lane); }, dk_pairs);
    if (kStages == 1) __syncthreads();  // every warp is done with the stage: the next block's loads, or P, go there
    if (kStages == 1 && vb + 1 < nvb) load(vb + 1);
  }
  if constexpr (kChannel) {
    if (k0 == 0) store_channel_scores(a, ch, head, p, lane);
    hdh_row += __shfl_xor_sync(0xffffffffu, hdh_row, 1);
    const int row = k0 + int(threadIdx.x) / 2;
    if (threadIdx.x % 2 == 0 && row < DK) a.state_rows[(std::size_t(ch.h_chunk) * H + head) * DK + row] = hdh_row;
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) gq[nt][e] *= a.scale;
    const bool pairs = DK % 2 == 0;
    store_rows_bounded<float, kN>(a.dq_state + tok * DK, qk_row, gq, 16 * rt, k0, ch.length, DK, pairs, lane);
    store_rows_bounded<float, kN>(a.dk_state + tok * DK, qk_row, gk, 16 * rt, k0, ch.length, DK, pairs, lane);
    return;
  }
  store_causal_scores(p_s, p, a.scale, lane, kGated ? &cd : nullptr);
  __syncthreads();  // P is in shared memory
  #pragma unroll
  for (int nt = 0; nt < kN; ++nt)
    #pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kGated) gq[nt][e] *= a.scale * cd.row(16 * rt + (lane >> 2) + 8 * (e / 2));
      else gq[nt][e] *= a.scale;
    }
  [[maybe_unused]] float state_dot = 0.0f;  // gated: <S_{c+1}, dh[c]> over the DK block (gate_gradient.hpp)
  if constexpr (kGated) {
    decay_key_rows(gk, cd, 16 * rt, lane);  // V dh^T's rows, before P^T Q is added
    state_dot = cd.whole() * hdh + acc_dot<E, kN>(gk, k_s, kTileStride, 16 * rt, 0, lane);
  }
  // dQ += P K over the keys up to the diagonal; dK += P^T Q over the queries from it on.
  mma_rows<E, kN>(gq, 0, 16 * (rt + 1), [&](FragOf<E>* f, int kk) { a_rows(f, p_s, kTileStride, 16 * rt, kk, lane); },
                  [&](FragOf<E>* f, int n, int kk) { b_cols(f, k_s, kTileStride, n, kk, lane); }, dk_pairs);
  mma_rows<E, kN>(gk, 16 * rt, kChunk, [&](FragOf<E>* f, int kk) { a_cols(f, p_s, kTileStride, 16 * rt, kk, lane); },
                  [&](FragOf<E>* f, int n, int kk) { b_cols(f, q_s, kTileStride, n, kk, lane); }, dk_pairs);
  if constexpr (kGated) {  // this DK block's share of q . dq - k . dk (columns past DK are zero in q_s, k_s)
    float dots[2] = {0.0f, 0.0f};
    add_row_dots<E, kN>(dots, gq, q_s, kTileStride, 16 * rt, 0, 1.0f, lane);
    add_row_dots<E, kN>(dots, gk, k_s, kTileStride, 16 * rt, 0, -1.0f, lane);
    store_row_dots(a, blockIdx.x % nkb, ch, head, 16 * rt, dots, lane);
    store_state_part(a, blockIdx.x % nkb, ch, head, block_sum(state_dot, b_s + kChunk));
  }
  const bool pairs = DK % 2 == 0;
  store_rows_bounded<E, kN>(static_cast<E*>(a.dq) + tok * DK, qk_row, gq, 16 * rt, k0, ch.length, DK, pairs, lane);
  store_rows_bounded<E, kN>(static_cast<E*>(a.dk) + tok * DK, qk_row, gk, 16 * rt, k0, ch.length, DK, pairs, lane);
#endif
}

// blockIdx.x = DV block + (DV blocks) * (head + H * chunk).
template <class E, bool kBounded, bool kGated = false, bool kChannel = false>
__global__ void __launch_bounds__(kTiledGradientThreads) value_gradient_kernel(TensorCoreBackwardArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kThreads = kTiledGradientThreads, kN = kGradientBlock / 8;
  constexpr int kTileStride = kTileStrideOf<E>, kTileElems = kTileElemsOf<E>;
  const int H = a.H, DK = a.DK, DV = a.DV, nvb = (DV + kGradientBlock - 1) / kGradientBlock;
  const int c0 = (blockIdx.x % nvb) * kGradientBlock, rest = blockIdx.x / nvb, head = rest % H;
  const BackwardChunk ch = a.chunks[rest / H];
  const int lane = threadIdx.x & 31, rt = threadIdx.x >> 5;
  const int cw = kBounded ? row_copy_bytes(DK, DV, int(sizeof(E))) : 16;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  E* o_s = reinterpret_cast<E*>(shared_raw);
  E* a_s = o_s + kTileElems;
  constexpr int kStages = kTiledStages<E>;
  E* stage = a_s + kTileElems;  // [kStages][Q, K, dh]
  float* b_s = reinterpret_cast<float*>(stage + 3 * kStages * kTileElems);  // gated: the chunk's b log2(e)
  // kChannel with 16-bit inputs: A's low parts (kChannelValueGradientBytes), where b_s would be.
  constexpr bool kSplitScores = kChannel && !std::is_same<E, float>::value;
  E* alo_s = stage + 3 * kStages * kTileElems;
  const ChunkDecays cd{b_s, ch.length - 1};
  const std::size_t tok = std::size_t(ch.token0) * H + head;
  const std::size_t qk_row = std::size_t(H) * DK, v_row = std::size_t(H) * DV;
  const E* q = static_cast<const E*>(a.q) + tok * DK;
  const E* k = static_cast<const E*>(kChannel ? a.kg : a.k) + tok * DK;
  const E* dh = static_cast<const E*>(a.dh) + (std::size_t(ch.h_chunk) * H + head) * a.dh_rows * a.dh_cols + c0;

  copy_tile_bounded<kThreads>(o_s, kTileStride, static_cast<const E*>(a.d_o) + tok * DV + c0, v_row, kChunk,
                              kGradientBlock, ch.length, DV - c0, cw);
  if constexpr (kGated) load_decays_async(b_s, a, ch, head);  // in load(0)'s group
  auto load = [&](int kb) {
    E* s = stage + (kb % kStages) * 3 * kTileElems;
    const int r0 = kb * kGradientBlock;
    if constexpr (!kChannel)
      copy_tile_bounded<kThreads>(s, kTileStride, q + r0, qk_row, kChunk, kGradientBlock, ch.length, DK - r0, cw);
    copy_tile_bounded<kThreads>(s + kTileElems, kTileStride, k + r0, qk_row, kChunk, kGradientBlock, ch.length, DK - r0, cw);
    if constexpr (kBounded)
      copy_tile_bounded<kThreads>(s + 2 * kTileElems, kTileStride, dh + std::size_t(r0) * a.dh_cols, a.dh_cols,
                                  kGradientBlock, kGradientBlock, a.dh_rows - r0, a.dh_cols - c0, 16);
    else
      copy_tile_async<kThreads>(s + 2 * kTileElems, kTileStride, dh + std::size_t(r0) * a.dh_cols, a.dh_cols,
                                kGradientBlock, kGradientBlock, kGradientBlock);
    cp_async_commit();
  };
  const int dv_pairs = kBounded ? steps16(DV - c0) : kN / 2;
  float sa[kN][4], gv[kN][4];  // Q K^T and K dh of the warp's 16 rows
  zero(sa);
  zero(gv);
  const int nkb = (DK + kGradientBlock - 1) / kGradientBlock;
  load(0);
  for (int kb = 0; kb < nkb; ++kb) {
    cp_async_wait_all();
    __syncthreads();
    if (kStages == 2 && kb + 1 < nkb) load(kb + 1);
    const E* s = stage + (kb % kStages) * 3 * kTileElems;
    const E *q_t = s, *k_t = s + kTileElems, *d_t = s + 2 * kTileElems;
    const int k_end = kBounded ? 16 * steps16(DK - kb * kGradientBlock) : kGradientBlock;
    if constexpr (!kChannel)
      mma_rows<E, kN>(sa, 0, k_end, [&](FragOf<E>* f, int kk) { a_rows(f, q_t, kTileStride, 16 * rt, kk, lane); },
                      [&](FragOf<E>* f, int n, int kk) { b_rows(f, k_t, kTileStride, n, kk, lane); }, rt + 1);
    mma_rows<E, kN>(gv, 0, k_end, [&](FragOf<E>* f, int kk) { a_rows(f, k_t, kTileStride, 16 * rt, kk, lane); },
                    [&](FragOf<E>* f, int n, int kk) { b_cols(f, d_t, kTileStride, n, kk, lane); }, dv_pairs);
    if (kStages == 1 && kb + 1 < nkb) {  // every warp is done with the stage before the next block's loads
      __syncthreads();
      load(kb + 1);
    }
  }
  if constexpr (kChannel) load_channel_scores(a_s, alo_s, a, ch, head);  // A (scaled, causal), hi + lo
  else store_causal_scores(a_s, sa, a.scale, lane, kGated ? &cd : nullptr);
  if constexpr (kGated) decay_key_rows(gv, cd, 16 * rt, lane);  // K dh's rows, before A^T dO is added
  __syncthreads();  // A is in shared memory
  // dV += A^T dO over the queries from the diagonal on.
  mma_rows<E, kN>(gv, 16 * rt, kChunk, [&](FragOf<E>* f, int kk) { a_cols(f, a_s, kTileStride, 16 * rt, kk, lane); },
                  [&](FragOf<E>* f, int n, int kk) { b_cols(f, o_s, kTileStride, n, kk, lane); }, dv_pairs);
  if constexpr (kSplitScores)  // + A_lo^T dO
    mma_rows<E, kN>(gv, 16 * rt, kChunk, [&](FragOf<E>* f, int kk) { a_cols(f, alo_s, kTileStride, 16 * rt, kk, lane); },
                    [&](FragOf<E>* f, int n, int kk) { b_cols(f, o_s, kTileStride, n, kk, lane); }, dv_pairs);
  store_rows_bounded<E, kN>(static_cast<E*>(a.dv) + tok * DV, v_row, gv, 16 * rt, c0, ch.length, DV, DV % 2 == 0, lane);
#endif
}

}  // namespace linattn::cuda::detail
