// Kernel 1 of the tensor-core backward (tensor_core_backward.hpp): one block
// per (DV block, sequence, head) walks the chunks in reverse with its strip of
// dS (the gradient of the state) in registers, stores dS after each chunk into
// dh[c] (the input type, rows and columns padded to dh_rows x dh_cols,
// tile_rules.hpp; zero past DK and DV) and ends with dh0:  dS <- dS + scale Q_c^T dO_c, from dht.
// Gated (gate_gradient.hpp): dS <- exp(b_L) dS + scale (exp(b_i) Q_c)^T dO_c,
// the query rows weighted in fp32 (add_decayed_kv_step).
// Per key channel (kChannel, GLA's gk): dS <- diag(exp(b_L)) dS + scale Qg_c^T dO_c,
// Qg = q exp(b) and exp(b_L) from channel_gate_prep.hpp (args.qg, args.channel_decay).
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/mma_primitives.hpp"
#include "kernels/cuda/tile_rules.hpp"

#include <cstddef>
#include <cstdint>

namespace linattn::cuda::detail {

// rows x cols (cols a multiple of 16 bytes) of row stride src_stride into
// shared memory of row stride dst_stride, as 16-byte asynchronous copies by
// kThreads threads; rows at or past valid_rows are zero-filled.
template <int kThreads, class E>
__device__ inline void copy_tile_async(E* dst, int dst_stride, const E* src, std::size_t src_stride, int rows, int cols,
                                       int valid_rows) {
  const int segs = cols / kVec<E>;
  for (int i = threadIdx.x; i < rows * segs; i += kThreads) {
    const int r = i / segs, col = i % segs * kVec<E>;
    const bool valid = r < valid_rows;
    cp_async16(dst + r * dst_stride + col, src + (valid ? r : 0) * src_stride + col, valid ? 16 : 0);
  }
}

// copy_tile_async for padded tiles: columns at or past valid_cols zero too,
// in copies of cw bytes (row_copy_bytes in tile_rules.hpp).
template <int kThreads, class E>
__device__ inline void copy_tile_bounded(E* dst, int dst_stride, const E* src, std::size_t src_stride, int rows,
                                         int cols, int valid_rows, int valid_cols, int cw) {
  const int segs = cols / kVec<E>;
  for (int i = threadIdx.x; i < rows * segs; i += kThreads) {
    const int r = i / segs, col = i % segs * kVec<E>;
    const bool valid = r < valid_rows;
    load_row_piece(dst + r * dst_stride + col, src + (valid ? r : 0) * src_stride, col, valid_cols, valid, cw);
  }
}

// Chunks in flight in a walk. A padded 64-row DK tile's step (bounded
// copies, narrow heads) is too short to hide the next chunk's load behind it,
// so those walks load 3 chunks ahead (H200, whole backward, 4 stages against
// 2: 8,8192,16,60 0.83 against 0.93 ms, DK 32 0.57 against 0.59); the exact
// heads keep 2 (8,16384,16,64: 1.24 against 1.22 ms with 4), as do wider DK
// tiles, whose 4 stages would halve the blocks per SM.
template <int DK, bool kBounded>
constexpr int kWalkStages = DK <= 64 && kBounded ? 4 : 2;

template <class E, int DK, int BV, bool kGated = false, bool kBounded = false>
struct StateGradientLayout {
  static constexpr int stages = kWalkStages<DK, kBounded>;
  static constexpr int q_stride = DK + kPadOf<E>, o_stride = BV + kPadOf<E>;
  static constexpr int q_tile = kChunk * q_stride, o_tile = kChunk * o_stride;
  static constexpr std::size_t tile_bytes = std::size_t(stages) * (q_tile + o_tile) * sizeof(E);
  static constexpr std::size_t bytes = tile_bytes + (kGated ? stages * kChunk * sizeof(float) : 0);  // + exp(b) per buffer
};
constexpr int kStateGradientThreads = 128;

// Blocks per SM the walk is compiled for (__launch_bounds__; 0: ptxas's own
// choice). The gated 16-bit walk of a 128-row DK tile took 153 registers,
// three blocks per SM: 8,16384,16,128's 512 blocks then ran as a full wave
// and a second of 116 blocks, each as long as the whole walk (ncu, H100: 1.59
// ms, 11 warps per SM). At four blocks (128 registers) they run as one
// (BENCHMARKS.md, "Gated backward on tensor cores").
template <class E, int DK, bool kGated>
constexpr int kWalkMinBlocks = kGated && DK == 128 && sizeof(E) == 2 ? 4 : 0;

// blockIdx.x = DV block + (dh_cols / BV) * (head + H * sequence); warp w holds
// the state rows w * DK / 4 .. of the block's BV columns. DK is the DK tile
// (tile_rules.hpp); kBounded: the head's DK or DV is not a whole number of
// tiles, so loads zero-fill past them and dht, dh0 are read and written within them.
template <class E, int DK, int BV, bool kBounded, bool kGated = false, bool kChannel = false>
__global__ void __launch_bounds__(kStateGradientThreads, (kWalkMinBlocks<E, DK, kGated>))
    state_gradient_kernel(TensorCoreBackwardArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = StateGradientLayout<E, DK, BV, kGated, kBounded>;
  constexpr int kThreads = kStateGradientThreads, kSRows = DK / 4, kSMTiles = kSRows / 16, kNTiles = BV / 8;
  const int nbv = a.dh_cols / BV, rest = blockIdx.x / nbv;
  const int v0 = (blockIdx.x % nbv) * BV, head = rest % a.H, H = a.H, DV = a.DV, dk = a.DK;
  const BackwardSequence sq = a.seqs[rest / H];
  const int T = sq.length, NT = (T + kChunk - 1) / kChunk;
  const int cw = row_copy_bytes(dk, DV, int(sizeof(E)));
  extern __shared__ __align__(16) unsigned char shared_raw[];
  constexpr int kStages = L::stages;
  E* q_s = reinterpret_cast<E*>(shared_raw);  // [kStages][64][q_stride]
  E* o_s = q_s + kStages * L::q_tile;         // [kStages][64][o_stride]
  float* w_s = reinterpret_cast<float*>(shared_raw + L::tile_bytes);  // gated: [kStages][64] exp(b_i)
  const E* q = static_cast<const E*>(kChannel ? a.qg : a.q) + (std::size_t(sq.token0) * H + head) * dk;
  const E* d_o = static_cast<const E*>(a.d_o) + (std::size_t(sq.token0) * H + head) * DV + v0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const std::size_t state_row = std::size_t(sq.seq) * H + head;
  auto in_head = [&](int row, int col) { return !kBounded || (row < dk && v0 + col < DV); };
  // Bounded: the rows and columns of this warp's strip that hold the head; the
  // 16-wide tiles past them stay zero, so their products are skipped.
  const int rows_live = kBounded ? dk - warp * kSRows : kSRows, cols_live = kBounded ? DV - v0 : BV;

  float s[kSMTiles][kNTiles][4];  // s[mt][nt][e] = dS[warp*kSRows + 16mt + g + 8(e/2)][v0 + 8nt + 2t4 + e%2]
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt)
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * kSRows + 16 * mt + g + 8 * (e / 2), col = 8 * nt + 2 * t4 + (e % 2);
        s[mt][nt][e] = a.dht && in_head(row, col) ? a.dht[(state_row * dk + row) * DV + v0 + col] : 0.0f;
      }
  auto load = [&](int c) {  // one commit group, empty past the first chunk
    if (c < 0) return cp_async_commit();
    const int buf = c % kStages, rows = min(kChunk, T - c * kChunk);
    const std::size_t t0 = std::size_t(c) * kChunk;
    if constexpr (kBounded) {
      copy_tile_bounded<kThreads>(q_s + buf * L::q_tile, L::q_stride, q + t0 * H * dk, std::size_t(H) * dk, kChunk, DK,
                                  rows, dk, cw);
      copy_tile_bounded<kThreads>(o_s + buf * L::o_tile, L::o_stride, d_o + t0 * H * DV, std::size_t(H) * DV, kChunk,
                                  BV, rows, DV - v0, cw);
    } else {
      copy_tile_async<kThreads>(q_s + buf * L::q_tile, L::q_stride, q + t0 * H * DK, std::size_t(H) * DK, kChunk, DK, rows);
      copy_tile_async<kThreads>(o_s + buf * L::o_tile, L::o_stride, d_o + t0 * H * DV, std::size_t(H) * DV, kChunk, BV, rows);
    }
    if constexpr (kGated)
      if (threadIdx.x < kChunk) {
        const int t = threadIdx.x;
        cp_async4(w_s + buf * kChunk + t, a.row_decay + (sq.token0 + t0 + (t < rows ? t : 0)) * H + head, t < rows ? 4 : 0);
      }
    cp_async_commit();
  };
  for (int i = 1; i < kStages; ++i) load(NT - i);
  for (int c = NT - 1; c >= 0; --c) {
    const int buf = c % kStages;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk c is in shared memory, and every thread is done with chunk c + 1's buffer
    load(c - (kStages - 1));  // into chunk c + 1's buffer
    // dh[c]: the gradient of the state after chunk c, before chunk c's own term.
    E* dh = static_cast<E*>(a.dh) + ((std::size_t(sq.h_chunk0) + c) * H + head) * a.dh_rows * a.dh_cols + v0;
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = warp * kSRows + 16 * mt + g + 8 * half, col = 8 * nt + 2 * t4;
          if (kBounded && row >= a.dh_rows) continue;  // the DK tile's rows past dh's (BV divides dh_cols)
          store_pair<E>(dh + std::size_t(row) * a.dh_cols + col, s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
        }
    // Q_c^T dO_c in fresh accumulators, added in IEEE fp32 (as the forward adds K^T V).
    float ds[kSMTiles][kNTiles][4];
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) ds[mt][nt][e] = 0.0f;
    const E* qt = q_s + buf * L::q_tile;
    const E* ot = o_s + buf * L::o_tile;
    #pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      typename Elem<E>::Frag of[kNTiles / 2][4];
      #pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np)
        ldmatrix_x4_trans(of[np], ot + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::o_stride + 16 * np + 8 * (lane >> 4));
      if constexpr (kGated)
        add_decayed_kv_step(ds, qt, L::q_stride, of, kk, warp * kSRows, lane, w_s + buf * kChunk, rows_live, cols_live);
      else add_kv_step(ds, qt, L::q_stride, of, kk, warp * kSRows, lane, rows_live, cols_live);
    }
    [[maybe_unused]] const float whole = kGated ? w_s[buf * kChunk + min(kChunk, T - c * kChunk) - 1] : 1.0f;  // exp(b_L)
    // kChannel: exp(b_L) of each of the thread's state rows (zero past DK, where dS is zero too).
    [[maybe_unused]] const float* row_whole =
        kChannel ? a.channel_decay + ((std::size_t(sq.h_chunk0) + c) * H + head) * dk : nullptr;
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (kChannel) {
            const int row = warp * kSRows + 16 * mt + g + 8 * (e / 2);
            const float w = row < dk ? __ldg(row_whole + row) : 0.0f;
            s[mt][nt][e] = w * s[mt][nt][e] + a.scale * ds[mt][nt][e];
          } else if constexpr (kGated) s[mt][nt][e] = whole * s[mt][nt][e] + a.scale * ds[mt][nt][e];
          else s[mt][nt][e] += a.scale * ds[mt][nt][e];
        }
  }
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt)
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp * kSRows + 16 * mt + g + 8 * half, col = 8 * nt + 2 * t4;
        float* out = a.dh0 + (state_row * dk + row) * DV + v0 + col;
        if (!kBounded) {
          *reinterpret_cast<float2*>(out) = make_float2(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
        } else {
          if (in_head(row, col)) out[0] = s[mt][nt][2 * half];
          if (in_head(row, col + 1)) out[1] = s[mt][nt][2 * half + 1];
        }
      }
#endif
}

}  // namespace linattn::cuda::detail
