// Kernel 2 of the tensor-core backward (tensor_core_backward.hpp) for heads
// that fit shared memory whole, DK and DV up to 128 in tiles of 64 or 128
// (tile_rules.hpp, whole_head_gradient; kBounded: the head is smaller than
// its tiles, zero-filled on chip past DK and DV, never padded in memory but
// for dh's rows and columns up to 16): one block per (chunk, head),
// all of them independent, reads Q, K, V, dO of the chunk, h[c] and dh[c],
// and writes
//   dQ_c = scale dO_c h[c]^T + P K_c,          P = scale tril(dO_c V_c^T)
//   dK_c = P^T Q_c + V_c dh[c]^T
//   dV_c = A^T dO_c + K_c dh[c],               A = scale tril(Q_c K_c^T)
// Gated (gate_gradient.hpp): P and A take exp(b_i - b_j), dO h^T's rows
// exp(b_i), the dh terms of dK and dV the rows exp(b_L - b_j) (so they are
// computed first, then the score terms added), and each warp leaves its
// columns' share of q . dq - k . dk for dg.
// Other head sizes take chunk_gradient_tiled.hpp.
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/gate_gradient.hpp"
#include "kernels/cuda/state_gradient.hpp"
#include "kernels/cuda/warp_tiles.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace linattn::cuda::detail {

template <int DK, int DV, bool kCompact, bool kGated = false>
struct ChunkGradientLayout {
  static constexpr int k_stride = DK + kPad, v_stride = DV + kPad, p_stride = kChunk + kPad;
  static constexpr int k_tile = kChunk * k_stride, v_tile = kChunk * v_stride, s_tile = DK * v_stride;
  static constexpr int p_tile = kChunk * p_stride;
  // Q, K, V, dO, h[c] and dh[c], P and A, all 16-bit; compact: h[c] then
  // dh[c] in one tile, P then A in one tile (113.7 KB at 128 x 128: two
  // blocks per SM, each one's loads overlapping the other's products).
  static constexpr int state_tiles = kCompact ? 1 : 2, score_tiles = kCompact ? 1 : 2;
  static constexpr std::size_t tile_bytes =
      std::size_t(2 * k_tile + 2 * v_tile + state_tiles * s_tile + score_tiles * p_tile) * 2;
  static constexpr std::size_t bytes = tile_bytes + (kGated ? (kChunk + 8) * sizeof(float) : 0);  // + b log2(e), a float per warp
};
constexpr int kChunkGradientThreads = 256;

// Warp w's scores of row tile rt = w % 4, key tiles 2 (w / 4), 2 (w / 4) + 1
// (those right of the diagonal are zero): scale tril(X Y^T) over D columns,
// X and Y stored [token][D].
// Gated: times exp(b_i - b_j) (decays non-null).
template <class E, int D>
__device__ inline void scores(float (&sc)[4][4], const E* x, const E* y, int stride, float scale, int lane,
                              const ChunkDecays* decays = nullptr, int d_live = D) {
  const int warp = threadIdx.x >> 5, rt = warp & 3, col_half = warp >> 2, g = lane >> 2, t4 = lane & 3;
  zero(sc);
  #pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    const int j = 2 * col_half + jj;
    if (j > rt) continue;
    float part[2][4];
    zero(part);
    mma_rows<E, 2>(part, 0, d_live, [&](std::uint32_t* f, int k0) { a_rows(f, x, stride, 16 * rt, k0, lane); },
                   [&](std::uint32_t* f, int, int k0) { b_rows(f, y, stride, 16 * j, k0, lane); });
    #pragma unroll
    for (int n = 0; n < 2; ++n)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 16 * rt + g + 8 * (e / 2), col = 16 * j + 8 * n + 2 * t4 + (e % 2);
        sc[2 * jj + n][e] = col <= row ? part[n][e] * (decays ? scale * decays->pair(row, col) : scale) : 0.0f;
      }
  }
}
template <class E>
__device__ inline void store_scores(E* p, int stride, const float (&sc)[4][4], int lane) {
  const int warp = threadIdx.x >> 5, rt = warp & 3, col_half = warp >> 2, g = lane >> 2, t4 = lane & 3;
  #pragma unroll
  for (int nt = 0; nt < 4; ++nt)
    #pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = 16 * rt + g + 8 * half, col = 32 * col_half + 8 * nt + 2 * t4;
      *reinterpret_cast<std::uint32_t*>(p + row * stride + col) = Elem<E>::pack(sc[nt][2 * half], sc[nt][2 * half + 1]);
    }
}

// h[c] (dk x dv in memory) into a DK x DV tile of row stride `stride`, zero
// past dk and dv (kBounded), converted on the way unless SnapT is E.
template <class E, int DK, int DV, class SnapT, bool kBounded>
__device__ inline void load_state_tile(E* dst, int stride, const SnapT* h, int dk, int dv, int cw) {
  constexpr int kThreads = kChunkGradientThreads;
  if constexpr (std::is_same<SnapT, E>::value) {
    if constexpr (kBounded) copy_tile_bounded<kThreads>(dst, stride, h, dv, DK, DV, dk, dv, cw);
    else copy_tile_async<kThreads>(dst, stride, h, DV, DK, DV, DK);
  } else {  // converted on the way (bf16 snapshots of fp16 inputs, fp32 snapshots)
    for (int i = threadIdx.x; i < DK * DV / 2; i += kThreads) {
      const int r = i / (DV / 2), col = 2 * (i % (DV / 2));
      float2 x = make_float2(0.0f, 0.0f);
      if constexpr (kBounded) {
        if (r < dk && col < dv) x.x = float(h[r * dv + col]);
        if (r < dk && col + 1 < dv) x.y = float(h[r * dv + col + 1]);
      } else {
        x = load_pair(h + r * DV + col);
      }
      *reinterpret_cast<std::uint32_t*>(dst + r * stride + col) = Elem<E>::pack(x.x, x.y);
    }
  }
}

// blockIdx.x = head + H * chunk. Warp w owns the 16 rows 16 (w % 4).. of each
// output and half of its columns (w / 4). DK, DV: the tiles (the head's own
// sizes a.DK, a.DV unless kBounded).
template <class E, int DK, int DV, class SnapT, bool kCompact, bool kGated = false, bool kBounded = false>
__global__ void __launch_bounds__(kChunkGradientThreads) chunk_gradient_kernel(TensorCoreBackwardArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = ChunkGradientLayout<DK, DV, kCompact, kGated>;
  constexpr int kThreads = kChunkGradientThreads;
  const int H = a.H, head = blockIdx.x % H;
  const int dk = kBounded ? a.DK : DK, dv = kBounded ? a.DV : DV;  // the head's sizes
  const int cw = kBounded ? row_copy_bytes(dk, dv, int(sizeof(E))) : 16;
  const BackwardChunk ch = a.chunks[blockIdx.x / H];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rt = warp & 3, col_half = warp >> 2;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  E* q_s = reinterpret_cast<E*>(shared_raw);  // [64][k_stride]
  E* k_s = q_s + L::k_tile;                   // [64][k_stride]
  E* v_s = k_s + L::k_tile;                   // [64][v_stride]
  E* o_s = v_s + L::v_tile;                   // dO [64][v_stride]
  E* h_s = o_s + L::v_tile;                   // h[c] [DK][v_stride]
  E* d_s = h_s + (kCompact ? 0 : L::s_tile);  // dh[c] [DK][v_stride]
  E* p_s = h_s + L::state_tiles * L::s_tile;  // P [64][p_stride]
  E* a_s = p_s + (kCompact ? 0 : L::p_tile);  // A [64][p_stride]
  const std::size_t tok = std::size_t(ch.token0) * H + head;
  const std::size_t qk_row = std::size_t(H) * dk, v_row = std::size_t(H) * dv;
  const std::size_t state = (std::size_t(ch.h_chunk) * H + head) * dk * dv;  // h[c] in memory: dk x dv
  const E* dh = static_cast<const E*>(a.dh) + (std::size_t(ch.h_chunk) * H + head) * a.dh_rows * a.dh_cols;
  auto load_dh = [&](E* dst) {  // dh_rows x dh_cols in memory (DK, DV up to 16), zero past them
    if constexpr (kBounded)
      copy_tile_bounded<kThreads>(dst, L::v_stride, dh, a.dh_cols, DK, DV, a.dh_rows, a.dh_cols, 16);
    else
      copy_tile_async<kThreads>(dst, L::v_stride, dh, DV, DK, DV, DK);
  };
  float* b_s = reinterpret_cast<float*>(shared_raw + L::tile_bytes);  // gated: the chunk's b log2(e)
  const ChunkDecays cd{b_s, ch.length - 1};
  const ChunkDecays* decays = kGated ? &cd : nullptr;
  // Bounded: the 16-wide steps of DK and DV that hold the head (tile_rules.hpp,
  // live_steps); the products over the zero steps past them are skipped, as
  // are the output columns of this warp's half wholly past the head.
  const int dk_live = kBounded ? 16 * live_steps(dk) : DK, dv_live = kBounded ? 16 * live_steps(dv) : DV;
  const int dk_pairs = kBounded ? min(DK / 32, live_steps(dk - (DK / 2) * col_half)) : DK / 32;
  const int dv_pairs = kBounded ? min(DV / 32, live_steps(dv - (DV / 2) * col_half)) : DV / 32;
  float dots[2] = {0.0f, 0.0f};  // gated: q . dq - k . dk over this warp's columns, rows g, g + 8
  float state_dot = 0.0f;        // gated: this thread's share of <S_{c+1}, dh[c]> (gate_gradient.hpp)

  // Groups of copies, each waited for just before its first use: the
  // chunk's tiles, h[c], then dh[c] (compact: once h[c] is used up).
  auto load_rows = [&](E* dst, int stride, const void* src, std::size_t row, int cols, int valid_cols) {
    const E* from = static_cast<const E*>(src) + tok * valid_cols;
    if constexpr (kBounded) copy_tile_bounded<kThreads>(dst, stride, from, row, kChunk, cols, ch.length, valid_cols, cw);
    else copy_tile_async<kThreads>(dst, stride, from, row, kChunk, cols, ch.length);
  };
  load_rows(q_s, L::k_stride, a.q, qk_row, DK, dk);
  load_rows(k_s, L::k_stride, a.k, qk_row, DK, dk);
  load_rows(v_s, L::v_stride, a.v, v_row, DV, dv);
  load_rows(o_s, L::v_stride, a.d_o, v_row, DV, dv);
  if constexpr (kGated) load_decays_async(b_s, a, ch, head);
  cp_async_commit();
  load_state_tile<E, DK, DV, SnapT, kBounded>(h_s, L::v_stride, static_cast<const SnapT*>(a.h) + state, dk, dv, cw);
  cp_async_commit();
  if constexpr (!kCompact) {
    load_dh(d_s);
    cp_async_commit();
    cp_async_wait<2>();
  } else {
    cp_async_wait<1>();
  }
  __syncthreads();
  float sc[4][4];  // P = scale tril(dO V^T), then A = scale tril(Q K^T), rounded once to 16 bits
  scores<E, DV>(sc, o_s, v_s, L::v_stride, a.scale, lane, decays, dv_live);
  store_scores(p_s, L::p_stride, sc, lane);
  if constexpr (!kCompact) {
    scores<E, DK>(sc, q_s, k_s, L::k_stride, a.scale, lane, decays, dk_live);
    store_scores(a_s, L::p_stride, sc, lane);
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();  // P (and A) and h[c] are in shared memory

  // dQ = scale dO h^T + P K: columns (DK / 2) * col_half.., key tiles up to the diagonal.
  {
    constexpr int kN = DK / 16;
    const int n0 = (DK / 2) * col_half;
    float acc[kN][4];
    zero(acc);
    mma_rows<E, kN>(acc, 0, dv_live, [&](std::uint32_t* f, int k0) { a_rows(f, o_s, L::v_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_rows(f, h_s, L::v_stride, n0 + n, k0, lane); }, dk_pairs);
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kGated) acc[nt][e] *= a.scale * cd.row(16 * rt + (lane >> 2) + 8 * (e / 2));
        else acc[nt][e] *= a.scale;
      }
    mma_rows<E, kN>(acc, 0, 16 * (rt + 1), [&](std::uint32_t* f, int k0) { a_rows(f, p_s, L::p_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_cols(f, k_s, L::k_stride, n0 + n, k0, lane); }, dk_pairs);
    if constexpr (kGated) add_row_dots<E, kN>(dots, acc, q_s, L::k_stride, 16 * rt, n0, 1.0f, lane);
    store_tile_rows<E, kN, kBounded>(static_cast<E*>(a.dq) + tok * dk, qk_row, acc, 16 * rt, n0, ch.length, dk, lane);
  }
  if constexpr (kCompact) {
    __syncthreads();  // h[c] is used up: dh[c] takes its tile, while A is computed
    load_dh(d_s);
    cp_async_commit();
    scores<E, DK>(sc, q_s, k_s, L::k_stride, a.scale, lane, decays, dk_live);
  }
  cp_async_wait<0>();
  __syncthreads();  // dh[c] is in shared memory
  if constexpr (kGated) {  // exp(b_L) <h[c], dh[c]>: h[c] from memory again (its tile now holds dh[c])
    const SnapT* hp = static_cast<const SnapT*>(a.h) + state;
    float s = 0.0f;
    for (int i = threadIdx.x; i < dk * DV / 2; i += kThreads) {  // dh[c] is zero past dv
      const int r = i / (DV / 2), col = 2 * (i % (DV / 2));
      const float2 y = load_pair(d_s + r * L::v_stride + col);
      if constexpr (kBounded) {  // rows of odd width start off pairs: element by element
        if (col < dv) s += float(hp[r * dv + col]) * y.x;
        if (col + 1 < dv) s += float(hp[r * dv + col + 1]) * y.y;
      } else {
        const float2 x = load_pair(hp + r * DV + col);
        s += x.x * y.x + x.y * y.y;
      }
    }
    state_dot = cd.whole() * s;
  }

  // dK = P^T Q + V dh^T: key rows 16 rt.., query tiles from the diagonal on.
  {
    constexpr int kN = DK / 16;
    const int n0 = (DK / 2) * col_half;
    float acc[kN][4];
    zero(acc);
    auto score_term = [&] {
      mma_rows<E, kN>(acc, 16 * rt, kChunk, [&](std::uint32_t* f, int k0) { a_cols(f, p_s, L::p_stride, 16 * rt, k0, lane); },
                      [&](std::uint32_t* f, int n, int k0) { b_cols(f, q_s, L::k_stride, n0 + n, k0, lane); }, dk_pairs);
    };
    if constexpr (!kGated) score_term();
    mma_rows<E, kN>(acc, 0, dv_live, [&](std::uint32_t* f, int k0) { a_rows(f, v_s, L::v_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_rows(f, d_s, L::v_stride, n0 + n, k0, lane); }, dk_pairs);
    if constexpr (kGated) {  // V dh^T's rows by exp(b_L - b_j), then + P^T Q
      decay_key_rows(acc, cd, 16 * rt, lane);
      state_dot += acc_dot<E, kN>(acc, k_s, L::k_stride, 16 * rt, n0, lane);  // sum_j k_j . exp(b_L - b_j) dh[c] v_j
      score_term();
      add_row_dots<E, kN>(dots, acc, k_s, L::k_stride, 16 * rt, n0, -1.0f, lane);
      store_row_dots(a, col_half, ch, head, 16 * rt, dots, lane);
    }
    store_tile_rows<E, kN, kBounded>(static_cast<E*>(a.dk) + tok * dk, qk_row, acc, 16 * rt, n0, ch.length, dk, lane);
  }
  if constexpr (kCompact) {
    __syncthreads();  // P is used up: A takes its tile
    store_scores(a_s, L::p_stride, sc, lane);
    __syncthreads();
  }
  // dV = A^T dO + K dh.
  {
    constexpr int kN = DV / 16;
    const int n0 = (DV / 2) * col_half;
    float acc[kN][4];
    zero(acc);
    auto score_term = [&] {
      mma_rows<E, kN>(acc, 16 * rt, kChunk, [&](std::uint32_t* f, int k0) { a_cols(f, a_s, L::p_stride, 16 * rt, k0, lane); },
                      [&](std::uint32_t* f, int n, int k0) { b_cols(f, o_s, L::v_stride, n0 + n, k0, lane); }, dv_pairs);
    };
    if constexpr (!kGated) score_term();
    mma_rows<E, kN>(acc, 0, dk_live, [&](std::uint32_t* f, int k0) { a_rows(f, k_s, L::k_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_cols(f, d_s, L::v_stride, n0 + n, k0, lane); }, dv_pairs);
    if constexpr (kGated) {  // K dh's rows by exp(b_L - b_j), then + A^T dO
      decay_key_rows(acc, cd, 16 * rt, lane);
      score_term();
    }
    store_tile_rows<E, kN, kBounded>(static_cast<E*>(a.dv) + tok * dv, v_row, acc, 16 * rt, n0, ch.length, dv, lane);
  }
  if constexpr (kGated) {  // the chunk's <S_{c+1}, dS_{c+1}> whole in part 0
    const float share = block_sum(state_dot, b_s + kChunk);
    store_state_part(a, 0, ch, head, share);
    store_state_part(a, 1, ch, head, 0.0f);
  }
#endif
}

}  // namespace linattn::cuda::detail
