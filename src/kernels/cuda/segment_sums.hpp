// The segment sums of split sequences (and of the state pass,
// state_pass_tensor_core.hpp): K^T V over the chunks of one segment, in fp32,
// with the fused kernel's accuracy rule.
#pragma once

#include "kernels/cuda/chunk_decay.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/fused_common.hpp"
#include "kernels/cuda/tile_rules.hpp"

#include <cuda_runtime.h>

#include <cstddef>

namespace linattn::cuda {
namespace detail {

// Split sequences, step 1: each block sums K_c^T V_c over the chunks of one
// segment for BV DV columns of one head into its row of sums[rows * H][DK][DV]
// (fp32; plain batches: grid (DV block, segment, batch * head), row
// b * segments + segment; packed: grid x = DV block + (DV / BV) * (head + H *
// item) over args.work, row sum_base + seg), and with normalization the key
// sum into zsums[rows * H][DK]. As in the fused
// kernel, groups of 4 warps own 32 columns each and warp w of a group holds
// state rows w*DK/4..; each chunk's product is summed in fresh accumulators
// and added in fp32 (the fused kernel's accuracy rule). The products are
// short, so chunks stream through kSumStages buffers to keep loads in flight,
// and blocks span BV = 128 columns where they can: with 32, every K tile was
// read from L2 four times and L2 bandwidth set the pace (267 us at
// 1,32768,32,128 with 8 segments, measured with ncu).
// fp32 tiles take twice the bytes: two buffers (four would need 270 KiB at DK 128).
// Gated (Gate = GatePointers): each segment's sum is its tokens' own state, the
// fused kernel's recurrence from zero (S = exp(b_L) S + the decayed K^T V, with
// chunk_decay.hpp's factors), and its decay log2(e) * sum(g) goes to
// seg_log2_decay[row]. Every warp makes the chunk's factors itself, in a
// buffer of its own, so that no barrier more is needed.
// gk (GLA's per-key-channel gate): args.k holds the prepared keys k exp(b_L - b)
// (channel_gate_prep.hpp), each chunk's update is S = diag(exp(b_L)) S + their
// K^T V with exp(b_L) read from `decay` [chunks, H, DK] (the fused kernel's own
// factors, so a split walk multiplies what the whole walk does), and each
// segment's decay per channel, the product of its chunks', goes to
// seg_decay[row][DK].
struct ChannelSumOperands {
  const float* decay;
  float* seg_decay;
};

template <class E>
constexpr int kSumStages = sizeof(E) == 2 ? 4 : 2;
template <class E, int DK, int BV, bool kGated = false>
struct SumLayout {
  static constexpr int k_stride = DK + kPadOf<E>, v_stride = BV + kPadOf<E>;
  static constexpr int k_tile = kChunk * k_stride, v_tile = kChunk * v_stride;
  static constexpr std::size_t tiles_bytes = std::size_t(kSumStages<E>) * (k_tile + v_tile) * sizeof(E);
  // Gated: each stage's 64 log-decays, then each warp's factors (GateRows).
  static constexpr std::size_t gate_bytes =
      kGated ? (std::size_t(kSumStages<E>) * kChunk + std::size_t(BV / 8) * GateRows::floats) * sizeof(float) : 0;
  static constexpr std::size_t bytes = tiles_bytes + gate_bytes;
};

template <class E, int DK, int BV, bool kNormalize, bool kPad, class... Gate>
__global__ void __launch_bounds__(4 * BV)
    segment_sum_kernel(FusedTensorCoreKernelArgs args, float* sums, float* zsums, Gate... gate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr bool kChannel = (std::is_same<Gate, ChannelSumOperands>::value || ...);
  constexpr bool kGated = sizeof...(Gate) == 1 && !kChannel;  // a scalar gate
  static_assert(!((kGated || kChannel) && kNormalize), "normalization with a gate is refused by the launcher");
  [[maybe_unused]] const GatePointers gp = gate_as<GatePointers>(gate...);               // level 1 and gk: none
  [[maybe_unused]] const ChannelSumOperands cs = gate_as<ChannelSumOperands>(gate...);  // gk's chunk decays
  using L = SumLayout<E, DK, BV, kGated>;
  static_assert(L::bytes <= 232448, "the block's shared memory");
  constexpr int kStages = kSumStages<E>;
  constexpr int kThreads = 4 * BV, kSRows = DK / 4, kSMTiles = kSRows / 16, kNTiles = kGroupWidth / 8;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  E* k_s = reinterpret_cast<E*>(shared_raw);  // [kStages][64][k_stride]
  E* v_s = k_s + kStages * L::k_tile;         // [kStages][64][v_stride]
  float* const g_s = reinterpret_cast<float*>(shared_raw + L::tiles_bytes);  // gated: [kStages][64]
  float* const rows_s = g_s + kStages * kChunk + (threadIdx.x >> 5) * GateRows::floats;  // gated: this warp's factors
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) % 4, cg = kGroupWidth * (threadIdx.x >> 7);
  const int g = lane >> 2, t4 = lane & 3;
  const int H = args.H, DV = args.DV;
  int T, hh, v0, c_begin, c_end;
  std::size_t token0, row, h_chunk0;  // the sequence's first token; the output row; its first chunk in h
  if (args.work) {
    const int nbv = (DV + BV - 1) / BV, rest = blockIdx.x / nbv;
    const TensorCoreWork item = args.work[rest / H];
    hh = rest % H;
    v0 = (blockIdx.x % nbv) * BV;
    T = item.length;
    token0 = std::size_t(item.token0);
    c_begin = item.c_begin;
    c_end = item.c_end;
    row = (std::size_t(item.sum_base) + item.seg) * H + hh;
    h_chunk0 = std::size_t(item.h_chunk0);
  } else {
    const int b = blockIdx.z / H, NT = (args.T + kChunk - 1) / kChunk;
    hh = blockIdx.z % H;
    v0 = blockIdx.x * BV;
    T = args.T;
    token0 = std::size_t(b) * args.T;
    c_begin = blockIdx.y * args.seg_chunks;
    c_end = min(NT, c_begin + args.seg_chunks);
    row = (std::size_t(b) * gridDim.y + blockIdx.y) * H + hh;
    h_chunk0 = std::size_t(b) * NT;
  }
  // The head's keys and this block's columns that exist (kPad, as in the fused kernel).
  const int dk = kPad ? args.DK : DK, n_cols = kPad ? DV - v0 : BV;
  const int cw = kPad ? row_copy_bytes(dk, DV, int(sizeof(E))) : 16;
  const E* k = static_cast<const E*>(args.k) + (token0 * H + hh) * dk;
  const E* v = static_cast<const E*>(args.v) + (token0 * H + hh) * DV + v0;
  auto load = [&](int c) {  // always commits a group (empty past the segment) so that waits count uniformly
    const int stage = (c - c_begin) % kStages;
    constexpr int n = kVec<E>;  // elements per 16-byte piece
    if (c < c_end) {
      if constexpr (kGated)
        if (threadIdx.x < 32) copy_chunk_gate(g_s + stage * kChunk, gp, token0, T, H, hh, c, lane);
      for (int i = threadIdx.x; i < kChunk * (DK / n); i += kThreads) {
        const int r = i / (DK / n), sg = i % (DK / n), t = c * kChunk + r;
        E* dst = k_s + stage * L::k_tile + r * L::k_stride + sg * n;
        if constexpr (kPad) load_row_piece(dst, k + std::size_t(t < T ? t : 0) * H * dk, sg * n, dk, t < T, cw);
        else cp_async16(dst, k + std::size_t(t < T ? t : 0) * H * DK + sg * n, t < T ? 16 : 0);
      }
      for (int i = threadIdx.x; i < kChunk * (BV / n); i += kThreads) {
        const int r = i / (BV / n), sg = i % (BV / n), t = c * kChunk + r;
        E* dst = v_s + stage * L::v_tile + r * L::v_stride + sg * n;
        if constexpr (kPad) load_row_piece(dst, v + std::size_t(t < T ? t : 0) * H * DV, sg * n, n_cols, t < T, cw);
        else cp_async16(dst, v + std::size_t(t < T ? t : 0) * H * DV + sg * n, t < T ? 16 : 0);
      }
    }
    cp_async_commit();
  };
  float s[kSMTiles][kNTiles][4] = {};
  float2 zacc = make_float2(0.0f, 0.0f);  // normalization: this thread's part of the key sum
  [[maybe_unused]] float log2_decay = 0.0f;  // gated: the segment's, log2(e) * sum(g)
  [[maybe_unused]] float seg_decay[kSMTiles][2];  // gk: the segment's decay of this thread's state rows
  if constexpr (kChannel)
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt) seg_decay[mt][0] = seg_decay[mt][1] = 1.0f;
  for (int c = c_begin; c < c_begin + kStages - 1; ++c) load(c);
  for (int c = c_begin; c < c_end; ++c) {
    const int stage = (c - c_begin) % kStages;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk c landed; every warp is done with chunk c - 1's stage
    load(c + kStages - 1);
    const E* kt = k_s + stage * L::k_tile;
    const E* vt = v_s + stage * L::v_tile + cg;
    float ds[kSMTiles][kNTiles][4] = {};
    if constexpr (kGated) {
      log2_decay += make_chunk_decay(g_s + stage * kChunk, last_token_of_chunk(c, T), lane, rows_s);
      __syncwarp();
    }
    #pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      typename Elem<E>::Frag vf[kNTiles / 2][4];
      #pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np)
        ldmatrix_x4_trans(vf[np], vt + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::v_stride + 16 * np + 8 * (lane >> 4));
      if constexpr (kGated) add_decayed_kv_step(ds, kt, L::k_stride, vf, kk, warp * kSRows, lane, rows_s + GateRows::to_end);
      else add_kv_step(ds, kt, L::k_stride, vf, kk, warp * kSRows, lane);
    }
    if constexpr (kGated) {
      decay_add_tiles(s, rows_s[GateRows::whole], ds);
    } else if constexpr (kChannel) {  // S = diag(exp(b_L)) S + the decayed K^T V, row by row
      const float* dec = cs.decay + ((h_chunk0 + c) * H + hh) * std::size_t(dk);
      #pragma unroll
      for (int mt = 0; mt < kSMTiles; ++mt)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = warp * kSRows + 16 * mt + g + 8 * half;
          const float d = !kPad || r < dk ? __ldg(dec + r) : 0.0f;
          seg_decay[mt][half] *= d;
          #pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt)
            #pragma unroll
            for (int e = 0; e < 2; ++e) s[mt][nt][2 * half + e] = __fmaf_rn(s[mt][nt][2 * half + e], d, ds[mt][nt][2 * half + e]);
        }
    } else {
      add_tiles(s, ds);
    }
    if constexpr (kNormalize) {
      const float2 x = key_sum_part<E, DK, kThreads>(kt, L::k_stride);
      zacc.x += x.x;
      zacc.y += x.y;
    }
  }
  cp_async_wait_all();
  if constexpr (kGated)
    if (v0 == 0 && threadIdx.x == 0) gp.seg_log2_decay[row] = log2_decay;
  if constexpr (kChannel)  // each row is held alike by the 4 lanes of its quad and by every group: one writes it
    if (v0 == 0 && cg == 0 && t4 == 0)
      #pragma unroll
      for (int mt = 0; mt < kSMTiles; ++mt)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = warp * kSRows + 16 * mt + g + 8 * half;
          if (!kPad || r < dk) cs.seg_decay[row * dk + r] = seg_decay[mt][half];
        }
  if constexpr (kNormalize) {  // the parts through the (now idle) stage buffers, added in order
    __syncthreads();
    float* parts = reinterpret_cast<float*>(shared_raw);
    *reinterpret_cast<float2*>(parts + (threadIdx.x / (DK / 2)) * DK + 2 * (threadIdx.x % (DK / 2))) = zacc;
    __syncthreads();
    if (v0 == 0 && threadIdx.x < DK / 2)
      store_z_pair<kPad>(zsums + row * dk, 2 * threadIdx.x, dk,
                         add_key_parts<DK, kThreads>(make_float2(0.0f, 0.0f), parts));
  }
  float* out = sums + row * dk * std::size_t(DV) + v0 + cg;
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt)
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp * kSRows + 16 * mt + g + 8 * half, col = 8 * nt + 2 * t4;
        float* p = out + std::size_t(row) * DV + col;
        if constexpr (kPad) {  // the state's rows < dk and columns < DV (an odd DV leaves pairs off 8 bytes)
          if (row < dk && cg + col < n_cols) p[0] = s[mt][nt][2 * half];
          if (row < dk && cg + col + 1 < n_cols) p[1] = s[mt][nt][2 * half + 1];
        } else {
          *reinterpret_cast<float2*>(p) = make_float2(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
        }
      }
#endif
}

// kGate 1 runs the gated kernel (args.g or args.g_gamma): seg_decays receives each
// row's log2 decay; kGate 2 the gk kernel on args.k's prepared keys and `chunk_decay`
// (the prep's [chunks, H, DK]): seg_decays receives each row's decay per key channel.
template <class E, int DK, int BV, bool kNormalize, bool kPad, int kGate = 0>
void launch_segment_sums(const FusedTensorCoreArgs& args, dim3 grid, float* sums, float* zsums, cudaStream_t stream,
                         float* seg_decays = nullptr, const float* chunk_decay = nullptr) {
  constexpr bool kGated = kGate == 1;
  static_assert(!(kGate != 0 && kNormalize), "normalization with a gate is refused by the launcher");
  auto launch = [&](auto kernel, auto... gate) {
    const std::size_t bytes = SumLayout<E, DK, BV, kGated>::bytes;
    check_launch(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                 "cudaFuncSetAttribute");
    kernel<<<grid, 4 * BV, bytes, stream>>>(args, sums, zsums, gate...);
    check_launch(cudaGetLastError(), "segment sum launch");
  };
  if constexpr (kGated)
    launch(segment_sum_kernel<E, DK, BV, false, kPad, GatePointers>, GatePointers{args.g, args.g_gamma, seg_decays});
  else if constexpr (kGate == 2)
    launch(segment_sum_kernel<E, DK, BV, false, kPad, ChannelSumOperands>, ChannelSumOperands{chunk_decay, seg_decays});
  else
    launch(segment_sum_kernel<E, DK, BV, kNormalize, kPad>);
}

}  // namespace detail
}  // namespace linattn::cuda
