// The backward on NVIDIA tensor cores (mma.sync m16n8k16, bf16/fp16 operands,
// fp32 accumulation), chunk 64, DK and DV in {64, 128}: two kernels
// (README.md "The backward", docs/ARCHITECTURE.md "The tensor-core backward").
//
//  1. state_gradient_kernel: one block per (DV block, sequence, head) walks the
//     chunks in reverse with its strip of dS (the gradient of the state) in
//     registers, stores dS after each chunk into dh[c] (16-bit, the layout of
//     h) and ends with dh0:  dS <- dS + scale Q_c^T dO_c, from dht.
//  2. chunk_gradient_kernel: one block per (chunk, head), all of them
//     independent, reads Q, K, V, dO of the chunk, h[c] and dh[c], and writes
//       dQ_c = scale dO_c h[c]^T + P K_c,          P = scale tril(dO_c V_c^T)
//       dK_c = P^T Q_c + V_c dh[c]^T
//       dV_c = A^T dO_c + K_c dh[c],               A = scale tril(Q_c K_c^T)
//
// Why not one reverse walk that also writes dq, dk, dv: dq and dk sum over
// every DV column, so a walk split into DV blocks (which the forward needs for
// enough blocks) would have to add partial dq and dk across blocks, and one
// block holding all of dS (64 KB of fp32 at 128 x 128) leaves one block per SM
// walking 256 chunks in series. The chunk pass instead has B * NT * H
// independent blocks; dh costs one more write and read of the size of h. P and
// A are rounded once to 16 bits, as dh and h are, as fla's backward rounds them
// (docs/NUMERICS.md, tensor_core_backward_level; BENCHMARKS.md has both sides'
// errors on the very same inputs).
#pragma once

#include "kernels/cuda/fused_tensor_core.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace linattn::cuda {

// One sequence of the batch (plain batches: one per batch row).
struct BackwardSequence {
  std::int64_t token0;  // its first token in the [B * T] rows
  int length;        // its tokens
  int h_chunk0;      // its first chunk in h and dh
  int seq;           // its row of dht and dh0
};

// One chunk of one sequence.
struct BackwardChunk {
  std::int64_t token0;  // its first token
  int length;        // its tokens, 1..64
  int h_chunk;       // its row in h and dh
};

struct TensorCoreBackwardArgs {
  const void* q;    // [tokens, H, DK], element E
  const void* k;    // [tokens, H, DK]
  const void* v;    // [tokens, H, DV]
  const void* d_o;  // [tokens, H, DV]
  const void* h;    // [chunks, H, DK, DV], SnapT: the forward's snapshots
  const float* dht; // [N, H, DK, DV] or null (zero)
  void* dh;         // [chunks, H, DK, DV], E: scratch, the gradient of the state after each chunk
  void* dq;         // [tokens, H, DK], E
  void* dk;
  void* dv;         // [tokens, H, DV], E
  float* dh0;       // [N, H, DK, DV]
  int H, DK, DV;
  float scale;
  const BackwardSequence* seqs;  // set by run_tensor_core_backward
  const BackwardChunk* chunks;
};

namespace detail {

template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Two consecutive elements of a snapshot as floats.
__device__ inline float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ inline float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ inline float2 load_pair(const __half* p) { return __half22float2(*reinterpret_cast<const __half2*>(p)); }

// rows x cols (cols a multiple of 8) of row stride src_stride into shared
// memory of row stride dst_stride, as 16-byte asynchronous copies by
// kThreads threads; rows at or past valid_rows are zero-filled.
template <int kThreads, class E>
__device__ inline void copy_tile_async(E* dst, int dst_stride, const E* src, std::size_t src_stride, int rows, int cols,
                                       int valid_rows) {
  const int segs = cols / 8;
  for (int i = threadIdx.x; i < rows * segs; i += kThreads) {
    const int r = i / segs, col = i % segs * 8;
    const bool valid = r < valid_rows;
    cp_async16(dst + r * dst_stride + col, src + (valid ? r : 0) * src_stride + col, valid ? 16 : 0);
  }
}

// ---------------------------------------------------------------- kernel 1

template <int DK, int BV>
struct StateGradientLayout {
  static constexpr int q_stride = DK + kPad, o_stride = BV + kPad;
  static constexpr int q_tile = kChunk * q_stride, o_tile = kChunk * o_stride;
  static constexpr std::size_t bytes = std::size_t(2) * (q_tile + o_tile) * 2;  // double-buffered, 16-bit
};
constexpr int kStateGradientThreads = 128;

// blockIdx.x = DV block + (DV / BV) * (head + H * sequence); warp w holds the
// state rows w * DK / 4 .. of the block's BV columns.
template <class E, int DK, int BV>
__global__ void __launch_bounds__(kStateGradientThreads) state_gradient_kernel(TensorCoreBackwardArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = StateGradientLayout<DK, BV>;
  constexpr int kThreads = kStateGradientThreads, kSRows = DK / 4, kSMTiles = kSRows / 16, kNTiles = BV / 8;
  const int nbv = a.DV / BV, rest = blockIdx.x / nbv;
  const int v0 = (blockIdx.x % nbv) * BV, head = rest % a.H, H = a.H, DV = a.DV;
  const BackwardSequence sq = a.seqs[rest / H];
  const int T = sq.length, NT = (T + kChunk - 1) / kChunk;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  E* q_s = reinterpret_cast<E*>(shared_raw);  // [2][64][q_stride]
  E* o_s = q_s + 2 * L::q_tile;               // [2][64][o_stride]
  const E* q = static_cast<const E*>(a.q) + (std::size_t(sq.token0) * H + head) * DK;
  const E* d_o = static_cast<const E*>(a.d_o) + (std::size_t(sq.token0) * H + head) * DV + v0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const std::size_t state_row = std::size_t(sq.seq) * H + head;

  float s[kSMTiles][kNTiles][4];  // s[mt][nt][e] = dS[warp*kSRows + 16mt + g + 8(e/2)][v0 + 8nt + 2t4 + e%2]
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt)
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * kSRows + 16 * mt + g + 8 * (e / 2), col = 8 * nt + 2 * t4 + (e % 2);
        s[mt][nt][e] = a.dht ? a.dht[(state_row * DK + row) * DV + v0 + col] : 0.0f;
      }
  auto load = [&](int c) {
    const int buf = c & 1, rows = min(kChunk, T - c * kChunk);
    const std::size_t t0 = std::size_t(c) * kChunk;
    copy_tile_async<kThreads>(q_s + buf * L::q_tile, L::q_stride, q + t0 * H * DK, std::size_t(H) * DK, kChunk, DK, rows);
    copy_tile_async<kThreads>(o_s + buf * L::o_tile, L::o_stride, d_o + t0 * H * DV, std::size_t(H) * DV, kChunk, BV, rows);
    cp_async_commit();
  };
  if (NT > 0) load(NT - 1);
  for (int c = NT - 1; c >= 0; --c) {
    const int buf = c & 1;
    cp_async_wait_all();
    __syncthreads();  // chunk c is in shared memory, and every thread is done with chunk c + 1's buffer
    if (c > 0) load(c - 1);
    // dh[c]: the gradient of the state after chunk c, before chunk c's own term.
    E* dh = static_cast<E*>(a.dh) + ((std::size_t(sq.h_chunk0) + c) * H + head) * DK * DV + v0;
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = warp * kSRows + 16 * mt + g + 8 * half, col = 8 * nt + 2 * t4;
          *reinterpret_cast<std::uint32_t*>(dh + std::size_t(row) * DV + col) =
              Elem<E>::pack(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
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
      std::uint32_t of[kNTiles / 2][4];
      #pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np)
        ldmatrix_x4_trans(of[np], ot + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::o_stride + 16 * np + 8 * (lane >> 4));
      add_kv_step(ds, qt, L::q_stride, of, kk, warp * kSRows, lane);
    }
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] += a.scale * ds[mt][nt][e];
  }
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt)
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp * kSRows + 16 * mt + g + 8 * half, col = 8 * nt + 2 * t4;
        *reinterpret_cast<float2*>(a.dh0 + (state_row * DK + row) * DV + v0 + col) =
            make_float2(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
      }
#endif
}

// ---------------------------------------------------------------- kernel 2

// Fragment loads (mma.sync m16n8k16). Operand A (16 x 16, rows m0..): from a
// tile stored [m][k] (a_rows), or stored [k][m] (a_cols). Operand B of two
// 8-column tiles n0.., n0 + 8..: from a tile stored [n][k] (b_rows: regs 0, 1
// the first tile, 2, 3 the second), or stored [k][n] (b_cols).
template <class E>
__device__ inline void a_rows(std::uint32_t* f, const E* t, int stride, int m0, int k0, int lane) {
  ldmatrix_x4(f, t + (m0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * stride + k0 + 8 * (lane >> 4));
}
template <class E>
__device__ inline void a_cols(std::uint32_t* f, const E* t, int stride, int m0, int k0, int lane) {
  ldmatrix_x4_trans(f, t + (k0 + (lane & 7) + 8 * (lane >> 4)) * stride + m0 + 8 * ((lane >> 3) & 1));
}
template <class E>
__device__ inline void b_rows(std::uint32_t* f, const E* t, int stride, int n0, int k0, int lane) {
  ldmatrix_x4(f, t + (n0 + (lane & 7) + 8 * (lane >> 4)) * stride + k0 + 8 * ((lane >> 3) & 1));
}
template <class E>
__device__ inline void b_cols(std::uint32_t* f, const E* t, int stride, int n0, int k0, int lane) {
  ldmatrix_x4_trans(f, t + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * stride + n0 + 8 * (lane >> 4));
}

// acc (16 rows x 8 * kN columns of this warp) in E pairs to rows row0.. of a
// [tokens][H][width] tensor, rows at or past `valid` left alone.
template <class E, int kN>
__device__ inline void store_rows(E* out, std::size_t row_stride, const float (&acc)[kN][4], int row0, int col0,
                                  int valid, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + g + 8 * half;
    if (r >= valid) continue;
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt)
      *reinterpret_cast<std::uint32_t*>(out + r * row_stride + col0 + 8 * nt + 2 * t4) =
          Elem<E>::pack(acc[nt][2 * half], acc[nt][2 * half + 1]);
  }
}

template <int kN>
__device__ inline void zero(float (&acc)[kN][4]) {
  #pragma unroll
  for (int nt = 0; nt < kN; ++nt)
    #pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
}

// acc += X Y over k in [k_begin, k_end) steps of 16: X rows m0.. loaded by
// load_a(f, k0), Y's 8 * kN columns n0.. by load_b(f, n, k0).
template <class E, int kN, class LoadA, class LoadB>
__device__ inline void mma_rows(float (&acc)[kN][4], int k_begin, int k_end, LoadA load_a, LoadB load_b) {
  for (int k0 = k_begin; k0 < k_end; k0 += 16) {
    std::uint32_t af[4];
    load_a(af, k0);
    #pragma unroll
    for (int np = 0; np < kN / 2; ++np) {
      std::uint32_t bf[4];
      load_b(bf, 16 * np, k0);
      Elem<E>::mma(acc[2 * np], af, bf[0], bf[1]);
      Elem<E>::mma(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

template <int DK, int DV, bool kCompact>
struct ChunkGradientLayout {
  static constexpr int k_stride = DK + kPad, v_stride = DV + kPad, p_stride = kChunk + kPad;
  static constexpr int k_tile = kChunk * k_stride, v_tile = kChunk * v_stride, s_tile = DK * v_stride;
  static constexpr int p_tile = kChunk * p_stride;
  // Q, K, V, dO, h[c] and dh[c], P and A, all 16-bit; compact: h[c] then
  // dh[c] in one tile, P then A in one tile (113.7 KB at 128 x 128: two
  // blocks per SM, each one's loads overlapping the other's products).
  static constexpr int state_tiles = kCompact ? 1 : 2, score_tiles = kCompact ? 1 : 2;
  static constexpr std::size_t bytes = std::size_t(2 * k_tile + 2 * v_tile + state_tiles * s_tile + score_tiles * p_tile) * 2;
};
constexpr int kChunkGradientThreads = 256;

// Warp w's scores of row tile rt = w % 4, key tiles 2 (w / 4), 2 (w / 4) + 1
// (those right of the diagonal are zero): scale tril(X Y^T) over D columns,
// X and Y stored [token][D].
template <class E, int D>
__device__ inline void scores(float (&sc)[4][4], const E* x, const E* y, int stride, float scale, int lane) {
  const int warp = threadIdx.x >> 5, rt = warp & 3, col_half = warp >> 2, g = lane >> 2, t4 = lane & 3;
  zero(sc);
  #pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    const int j = 2 * col_half + jj;
    if (j > rt) continue;
    float part[2][4];
    zero(part);
    mma_rows<E, 2>(part, 0, D, [&](std::uint32_t* f, int k0) { a_rows(f, x, stride, 16 * rt, k0, lane); },
                   [&](std::uint32_t* f, int, int k0) { b_rows(f, y, stride, 16 * j, k0, lane); });
    #pragma unroll
    for (int n = 0; n < 2; ++n)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 16 * rt + g + 8 * (e / 2), col = 16 * j + 8 * n + 2 * t4 + (e % 2);
        sc[2 * jj + n][e] = col <= row ? part[n][e] * scale : 0.0f;
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

// blockIdx.x = head + H * chunk. Warp w owns the 16 rows 16 (w % 4).. of each
// output and half of its columns (w / 4).
template <class E, int DK, int DV, class SnapT, bool kCompact>
__global__ void __launch_bounds__(kChunkGradientThreads) chunk_gradient_kernel(TensorCoreBackwardArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = ChunkGradientLayout<DK, DV, kCompact>;
  constexpr int kThreads = kChunkGradientThreads;
  const int H = a.H, head = blockIdx.x % H;
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
  const std::size_t qk_row = std::size_t(H) * DK, v_row = std::size_t(H) * DV;
  const std::size_t state = (std::size_t(ch.h_chunk) * H + head) * DK * DV;
  const E* dh = static_cast<const E*>(a.dh) + state;

  // Groups of copies, each waited for just before its first use: the
  // chunk's tiles, h[c], then dh[c] (compact: once h[c] is used up).
  copy_tile_async<kThreads>(q_s, L::k_stride, static_cast<const E*>(a.q) + tok * DK, qk_row, kChunk, DK, ch.length);
  copy_tile_async<kThreads>(k_s, L::k_stride, static_cast<const E*>(a.k) + tok * DK, qk_row, kChunk, DK, ch.length);
  copy_tile_async<kThreads>(v_s, L::v_stride, static_cast<const E*>(a.v) + tok * DV, v_row, kChunk, DV, ch.length);
  copy_tile_async<kThreads>(o_s, L::v_stride, static_cast<const E*>(a.d_o) + tok * DV, v_row, kChunk, DV, ch.length);
  cp_async_commit();
  if constexpr (std::is_same<SnapT, E>::value) {
    copy_tile_async<kThreads>(h_s, L::v_stride, static_cast<const E*>(a.h) + state, DV, DK, DV, DK);
  } else {  // converted on the way (bf16 snapshots of fp16 inputs, fp32 snapshots)
    const SnapT* hp = static_cast<const SnapT*>(a.h) + state;
    for (int i = threadIdx.x; i < DK * DV / 2; i += kThreads) {
      const int r = i / (DV / 2), col = 2 * (i % (DV / 2));
      const float2 x = load_pair(hp + r * DV + col);
      *reinterpret_cast<std::uint32_t*>(h_s + r * L::v_stride + col) = Elem<E>::pack(x.x, x.y);
    }
  }
  cp_async_commit();
  if constexpr (!kCompact) {
    copy_tile_async<kThreads>(d_s, L::v_stride, dh, DV, DK, DV, DK);
    cp_async_commit();
    cp_async_wait<2>();
  } else {
    cp_async_wait<1>();
  }
  __syncthreads();
  float sc[4][4];  // P = scale tril(dO V^T), then A = scale tril(Q K^T), rounded once to 16 bits
  scores<E, DV>(sc, o_s, v_s, L::v_stride, a.scale, lane);
  store_scores(p_s, L::p_stride, sc, lane);
  if constexpr (!kCompact) {
    scores<E, DK>(sc, q_s, k_s, L::k_stride, a.scale, lane);
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
    mma_rows<E, kN>(acc, 0, DV, [&](std::uint32_t* f, int k0) { a_rows(f, o_s, L::v_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_rows(f, h_s, L::v_stride, n0 + n, k0, lane); });
    #pragma unroll
    for (int nt = 0; nt < kN; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] *= a.scale;
    mma_rows<E, kN>(acc, 0, 16 * (rt + 1), [&](std::uint32_t* f, int k0) { a_rows(f, p_s, L::p_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_cols(f, k_s, L::k_stride, n0 + n, k0, lane); });
    store_rows<E, kN>(static_cast<E*>(a.dq) + tok * DK, qk_row, acc, 16 * rt, n0, ch.length, lane);
  }
  if constexpr (kCompact) {
    __syncthreads();  // h[c] is used up: dh[c] takes its tile, while A is computed
    copy_tile_async<kThreads>(d_s, L::v_stride, dh, DV, DK, DV, DK);
    cp_async_commit();
    scores<E, DK>(sc, q_s, k_s, L::k_stride, a.scale, lane);
  }
  cp_async_wait<0>();
  __syncthreads();  // dh[c] is in shared memory

  // dK = P^T Q + V dh^T: key rows 16 rt.., query tiles from the diagonal on.
  {
    constexpr int kN = DK / 16;
    const int n0 = (DK / 2) * col_half;
    float acc[kN][4];
    zero(acc);
    mma_rows<E, kN>(acc, 16 * rt, kChunk, [&](std::uint32_t* f, int k0) { a_cols(f, p_s, L::p_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_cols(f, q_s, L::k_stride, n0 + n, k0, lane); });
    mma_rows<E, kN>(acc, 0, DV, [&](std::uint32_t* f, int k0) { a_rows(f, v_s, L::v_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_rows(f, d_s, L::v_stride, n0 + n, k0, lane); });
    store_rows<E, kN>(static_cast<E*>(a.dk) + tok * DK, qk_row, acc, 16 * rt, n0, ch.length, lane);
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
    mma_rows<E, kN>(acc, 16 * rt, kChunk, [&](std::uint32_t* f, int k0) { a_cols(f, a_s, L::p_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_cols(f, o_s, L::v_stride, n0 + n, k0, lane); });
    mma_rows<E, kN>(acc, 0, DK, [&](std::uint32_t* f, int k0) { a_rows(f, k_s, L::k_stride, 16 * rt, k0, lane); },
                    [&](std::uint32_t* f, int n, int k0) { b_cols(f, d_s, L::v_stride, n0 + n, k0, lane); });
    store_rows<E, kN>(static_cast<E*>(a.dv) + tok * DV, v_row, acc, 16 * rt, n0, ch.length, lane);
  }
#endif
}

template <class Kernel>
void launch(Kernel kernel, std::size_t bytes, int blocks, int threads, const TensorCoreBackwardArgs& args,
            cudaStream_t stream, const char* what) {
  check_launch(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
               "cudaFuncSetAttribute");
  kernel<<<blocks, threads, bytes, stream>>>(args);
  check_launch(cudaGetLastError(), what);
}

}  // namespace detail

// The sequences and chunks of a plain batch (B rows of T tokens) or a packed
// one (cu_seqlens, B = 1): h's chunk rows in order, sequences longest first
// for the reverse walks (their time is the longest walk's).
struct BackwardWork {
  std::vector<BackwardSequence> seqs;
  std::vector<BackwardChunk> chunks;
};
inline BackwardWork backward_work(int B, std::int64_t T, const std::vector<std::int64_t>* cu_seqlens) {
  BackwardWork w;
  constexpr int C = detail::kChunk;
  auto add = [&](std::int64_t token0, std::int64_t length, int seq) {
    const int h_chunk0 = static_cast<int>(w.chunks.size());
    w.seqs.push_back({token0, static_cast<int>(length), h_chunk0, seq});
    for (std::int64_t t = 0; t < length; t += C)
      w.chunks.push_back({token0 + t, static_cast<int>(std::min<std::int64_t>(C, length - t)), static_cast<int>(w.chunks.size())});
  };
  if (cu_seqlens) {
    for (std::size_t n = 0; n + 1 < cu_seqlens->size(); ++n)
      add((*cu_seqlens)[n], (*cu_seqlens)[n + 1] - (*cu_seqlens)[n], static_cast<int>(n));
  } else {
    for (int b = 0; b < B; ++b) add(b * T, T, b);
  }
  std::stable_sort(w.seqs.begin(), w.seqs.end(),
                   [](const BackwardSequence& x, const BackwardSequence& y) { return x.length > y.length; });
  return w;
}

// DV block of the reverse walks: registers cap it at 32 for DK 128 (64 for
// DK 64); narrower while the walks would not give about two blocks per SM.
inline int choose_state_gradient_block(int DK, int DV, std::int64_t walks, int num_sms) {
  int bv = DK == 128 ? 32 : 64;
  while (bv > 16 && (DV % bv != 0 || walks * (DV / bv) < 2LL * num_sms)) bv /= 2;
  return bv;
}

// Runs both kernels on `stream`. E: the inputs' and outputs' type
// (__nv_bfloat16 or __half); SnapT: h's (E, __nv_bfloat16 or float).
// args.seqs and args.chunks are filled here; dh is allocated here.
template <class E, class SnapT>
void run_tensor_core_backward(TensorCoreBackwardArgs args, int B, std::int64_t T,
                              const std::vector<std::int64_t>* cu_seqlens, int num_sms, cudaStream_t stream,
                              bool compact = true) {
  if ((args.DK != 64 && args.DK != 128) || (args.DV != 64 && args.DV != 128))
    throw std::invalid_argument("tensor-core backward: DK and DV must be 64 or 128");
  const BackwardWork work = backward_work(B, T, cu_seqlens);
  const std::size_t seq_bytes = work.seqs.size() * sizeof(BackwardSequence);
  const std::size_t chunk_bytes = work.chunks.size() * sizeof(BackwardChunk);
  StreamBuffer tables(seq_bytes + chunk_bytes, stream, "tensor-core backward: work lists");
  std::vector<unsigned char> host(seq_bytes + chunk_bytes);
  std::copy_n(reinterpret_cast<const unsigned char*>(work.seqs.data()), seq_bytes, host.data());
  std::copy_n(reinterpret_cast<const unsigned char*>(work.chunks.data()), chunk_bytes, host.data() + seq_bytes);
  detail::check_launch(cudaMemcpyAsync(tables.ptr.get(), host.data(), host.size(), cudaMemcpyHostToDevice, stream),
                       "tensor-core backward: work list upload");  // pageable: copied out before the call returns
  args.seqs = tables.as<BackwardSequence>();
  args.chunks = reinterpret_cast<const BackwardChunk*>(tables.as<unsigned char>() + seq_bytes);
  StreamBuffer dh(work.chunks.size() * args.H * std::size_t(args.DK) * args.DV * sizeof(E), stream,
                  "tensor-core backward: dh");
  args.dh = dh.ptr.get();

  const std::int64_t walks = static_cast<std::int64_t>(work.seqs.size()) * args.H;
  const int bv = choose_state_gradient_block(args.DK, args.DV, walks, num_sms);
  auto walk = [&](auto dk, auto bvc) {
    constexpr int DK = decltype(dk)::value, BV = decltype(bvc)::value;
    detail::launch(detail::state_gradient_kernel<E, DK, BV>, detail::StateGradientLayout<DK, BV>::bytes,
                   static_cast<int>(walks * (args.DV / BV)), detail::kStateGradientThreads, args, stream,
                   "tensor-core backward: state gradient");
  };
  auto with_bv = [&](auto dk) {
    if constexpr (decltype(dk)::value == 64) {
      if (bv == 64) return walk(dk, std::integral_constant<int, 64>{});
    }
    if (bv == 32) walk(dk, std::integral_constant<int, 32>{});
    else walk(dk, std::integral_constant<int, 16>{});
  };
  if (args.DK == 128) with_bv(std::integral_constant<int, 128>{});
  else with_bv(std::integral_constant<int, 64>{});

  if (work.chunks.empty()) return;
  auto chunks = [&](auto dk, auto dv) {
    constexpr int DK = decltype(dk)::value, DV = decltype(dv)::value;
    if (!compact)
      return detail::launch(detail::chunk_gradient_kernel<E, DK, DV, SnapT, false>,
                            detail::ChunkGradientLayout<DK, DV, false>::bytes,
                            static_cast<int>(work.chunks.size() * args.H), detail::kChunkGradientThreads, args, stream,
                            "tensor-core backward: chunk gradients");
    detail::launch(detail::chunk_gradient_kernel<E, DK, DV, SnapT, true>, detail::ChunkGradientLayout<DK, DV, true>::bytes,
                   static_cast<int>(work.chunks.size() * args.H), detail::kChunkGradientThreads, args, stream,
                   "tensor-core backward: chunk gradients");
  };
  auto with_dv = [&](auto dk) {
    if (args.DV == 128) chunks(dk, std::integral_constant<int, 128>{});
    else chunks(dk, std::integral_constant<int, 64>{});
  };
  if (args.DK == 128) with_dv(std::integral_constant<int, 128>{});
  else with_dv(std::integral_constant<int, 64>{});
}

}  // namespace linattn::cuda
