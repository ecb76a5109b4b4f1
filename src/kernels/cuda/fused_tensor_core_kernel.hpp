// The `fused` forward on NVIDIA tensor cores (sm_80+: mma.sync m16n8k16 with
// bf16/fp16 operands and fp32 accumulation), for chunk 64 and every head size
// up to DK 256 (tile_rules.hpp): DK is zero-padded on chip to a tile of 64,
// 128 or 256 rows and DV to blocks of 32, 64 or 128 columns; shapes the tiles
// hold exactly run an instantiation without bounds checks (kPad = false).
//
// Why a CUDA kernel and not a Kokkos TeamPolicy: double-buffered bf16 tiles of
// Q, K, V plus the bf16 copy of the state need 80-120 KB of shared memory per
// block, and Kokkos' CUDA team scratch stops at 40936 bytes on the H200 with
// Kokkos 4.6 (docs/ARCHITECTURE.md, "Scratch plans"). This
// kernel runs on Kokkos' own stream over Kokkos View memory, behind the same
// variant interface; the TeamPolicy kernel stays the portable implementation.
//
// One block owns (DV block of BV columns, batch*head) and walks the chunks in
// order (README.md "The variants"); with few sequences, one segment of them
// (split sequences: segment_split.hpp, and segment_sum_kernel below). It has
// groups of 4 warps that share the Q and K tiles, each group owning 32 DV
// columns (16 for DK 64 in blocks of 64); warp w of a group does
//   A   = scale * tril(Q_c K_c^T)      16 token rows (a row tile), in registers
//   O_c = scale * Q_c S + A V_c        S from shared memory, A from registers
//   S  += K_c^T V_c                    state rows w*DK/4.., in registers (fp32)
// Each Q and K tile is read once per block, so wider blocks cut L2 traffic
// (ncu on the first version: L2 78% busy, tensor pipe 30%). Within a chunk,
// loads, stores and products added up nearly serially (ablation in
// BENCHMARKS.md), so h and o leave shared memory in pieces spread over the next
// chunk's first product loop rather than in bursts.
// The state never leaves the chip in fp32; each snapshot h[c] is stored as the
// loop passes. Operands rounded to 16 bits for the tensor cores are split into
// a high and a low 16-bit part, x = hi + lo, so that their rounding costs
// ~2^-16 instead of 2^-8 relative: the scores A always, the state S when o is
// fp32 (then o is as accurate as fp32 accumulation). With 16-bit o the state
// operand of Q S is rounded once, as fla's chunk_fwd_o reads bf16 snapshots
// (kSplitState below).
// fp32 inputs keep fp32 tiles in shared memory and multiply in three
// products of split operands (mma_primitives.hpp, Elem<float>): every
// operand, the state and the scores included, keeps fp32-class accuracy
// without a hi/lo tile pair.
// The gated levels 2 and 3 (args.g per token, args.g_gamma per head; the
// factors of kernels/chunk_gate.hpp) run a gated instantiation of the same
// kernel: each chunk's cumulative log-decays b sit in shared memory (GateRows),
// and the inter-chunk rows of O decay by exp(b_i), the scores by exp(b_i - b_j)
// (before their hi/lo split), the state by exp(b_L) (in fp32) and the keys of
// the state update by exp(b_L - b_j) (in fp32, then split like the other fp32
// operands: decay_key_tile, add_decayed_kv_step).
// GLA's per-key-channel decay gk runs the channel instantiation: a pass
// before it (channel_gate_prep.hpp) hands it Q and K already decayed, the
// chunk's scores and its state decay per key channel, so it runs level 1's
// products on those, reads the scores instead of computing Q K^T, and decays
// the state's rows by exp(b_L) (ChannelGateOperands).
#pragma once

#include "kernels/cuda/channel_gate_prep.hpp"
#include "kernels/cuda/chunk_decay.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/fused_common.hpp"
#include "kernels/cuda/mma_primitives.hpp"
#include "kernels/cuda/packed_schedule.hpp"
#include "kernels/cuda/tile_rules.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace linattn::cuda {
namespace detail {

// Where one block's work lies: its sequence's tokens, snapshots and state rows,
// its chunks, and the segment sums it starts from. Plain batches are decoded
// from the grid (DV block, batch * head, segment); packed ones read the walk.
struct BlockWork {
  std::size_t token0;   // first token of the sequence in the (packed) row
  int length;           // its tokens
  std::size_t h_chunk0; // its first chunk in h
  int state_row;        // its row of initial_state, final_state, z: sequence * H + head
  int head, v0;
  int c_begin, c_end;   // this block's chunks of the sequence
  int num_chunks;       // the sequence's
  int sum_row0;         // (row of the first earlier segment's sum) * H + head
  int seg;              // earlier segments to add
};

// kPacked is a template parameter so that the plain kernel reads T and the
// offsets straight from the kernel parameters, as before packed batches: as
// values in registers they cost the plain kernel 1-4% at block 128 (128
// registers; same-run A/B on the H200).
template <bool kPacked>
__device__ inline BlockWork block_work(const FusedTensorCoreKernelArgs& a, int BV) {
  BlockWork w;
  if constexpr (kPacked) {
    const int nbv = (a.DV + BV - 1) / BV, rest = blockIdx.x / nbv;
    const TensorCoreWork item = a.work[rest / a.H];
    w.head = rest % a.H;
    w.v0 = (blockIdx.x % nbv) * BV;
    w.token0 = std::size_t(item.token0);
    w.length = item.length;
    w.h_chunk0 = std::size_t(item.h_chunk0);
    w.state_row = item.seq * a.H + w.head;
    w.num_chunks = (item.length + kChunk - 1) / kChunk;
    w.c_begin = item.c_begin;
    w.c_end = item.c_end;
    w.sum_row0 = item.sum_base * a.H + w.head;
    w.seg = item.seg;
  } else {
    const int b = blockIdx.y / a.H, segments = gridDim.z;
    w.head = blockIdx.y % a.H;
    w.v0 = blockIdx.x * BV;
    w.token0 = std::size_t(b) * a.T;
    w.length = a.T;
    w.num_chunks = (a.T + kChunk - 1) / kChunk;
    w.h_chunk0 = std::size_t(b) * w.num_chunks;
    w.state_row = blockIdx.y;
    w.c_begin = a.seg_chunks ? blockIdx.z * a.seg_chunks : 0;
    w.c_end = a.seg_chunks ? min(w.num_chunks, w.c_begin + a.seg_chunks) : w.num_chunks;
    w.sum_row0 = b * segments * a.H + w.head;
    w.seg = blockIdx.z;
  }
  return w;
}

// The fused kernel's group width. DK 64 in blocks of 64 columns has little
// work per warp and, as one block per SM, ran on 8 warps per SM: groups of 16
// columns give it 16 (measured 0.510 -> 0.476 ms at 8,16384,16,64). fp32
// tiles of a 128-row DK tile allow one block of 32 columns per SM: groups of
// 16 give it 8 warps instead of 4.
template <class E, int DK, int BV>
constexpr int kFusedGroupWidth =
    (DK == 64 && BV == 64) || (kFp32Tiles<E> && DK == 128 && BV == 32) ? 16 : kGroupWidth;
template <class E, int DK, int BV>
constexpr int kFusedThreads = 4 * 32 * (BV / kFusedGroupWidth<E, DK, BV>);  // groups of 4 warps

// 16-bit tiles with fp32 o: the state as hi + lo tiles (fp32 tiles hold it whole).
template <class E, class OutT>
constexpr bool kSplitState = sizeof(E) == 2 && sizeof(OutT) == 4;

// 16-bit snapshots of another type than the operands (bf16 h of fp16 inputs)
// are staged in a tile of their own, so that they too leave shared memory in
// 16-byte pieces: stored from registers as scattered pairs they cost what
// fp32 snapshots cost (bench/results/fp16-snapshot-cost.txt). With fp32 o
// that tile holds S_lo, and such snapshots still leave from registers.
template <class E, class OutT, class SnapT>
constexpr bool kStageSnapshot =
    sizeof(E) == 2 && sizeof(SnapT) == 2 && !std::is_same<SnapT, E>::value && !kSplitState<E, OutT>;

// The gated state update's keys, scaled once per block of 512 threads
// (kKeysInRegisters in the kernel): row j of the chunk's K tile times w[j] =
// exp(b_L - b_j) in fp32, fp32 tiles in place, 16-bit ones as hi (in place) +
// lo (into lo_tile) so that the scaled keys keep fp32-class accuracy
// (docs/NUMERICS.md, hi + lo splits). Once per block rather than once per
// group in registers (add_decayed_kv_step), which spilled there; thread
// x takes columns 2(x % (DK/2)), + 1 of every (kThreads / (DK/2))-th row, one
// row at a time (unrolled, this loop too made block 128 spill).
template <class E, int DK, int kThreads>
__device__ inline void decay_key_tile(E* kt, E* lo_tile, int stride, const float* w) {
  constexpr int pairs = DK / 2, rows_per = kThreads / pairs;
  static_assert(kThreads % pairs == 0 && kChunk % rows_per == 0, "whole rows per pass");
  const int r0 = threadIdx.x / pairs, c = 2 * (threadIdx.x % pairs);
  #pragma unroll 1
  for (int r = r0; r < kChunk; r += rows_per) {
    const int off = r * stride + c;
    const float f = w[r];
    if constexpr (kFp32Tiles<E>) {
      float2* p = reinterpret_cast<float2*>(kt + off);
      const float2 x = *p;
      *p = make_float2(x.x * f, x.y * f);
    } else {
      std::uint32_t* p = reinterpret_cast<std::uint32_t*>(kt + off);
      const float2 x = Elem<E>::unpack(*p);
      std::uint32_t hi, lo;
      Elem<E>::split(x.x * f, x.y * f, hi, lo);
      *p = hi;
      *reinterpret_cast<std::uint32_t*>(lo_tile + off) = lo;
    }
  }
}

template <class E, int DK, int BV, class OutT, bool StagedSnapshot, bool Normalize, bool Gated = false,
          bool Channel = false>
struct Layout {
  static constexpr int qk_stride = DK + kPadOf<E>;
  static constexpr int v_stride = BV + kPadOf<E>;
  static constexpr int qk_tile = kChunk * qk_stride;  // elements of E
  static constexpr int v_tile = kChunk * v_stride;
  static constexpr int s_tile = DK * v_stride;
  // Q, K, V double-buffered, then S_hi (and S_lo or the staged snapshot), then the output tile (OutT).
  static constexpr int elements =
      2 * (2 * qk_tile + v_tile) + (kSplitState<E, OutT> || StagedSnapshot ? 2 : 1) * s_tile;
  static constexpr std::size_t o_offset = std::size_t(elements) * sizeof(E);
  static constexpr int o_stride = BV + 16 / int(sizeof(OutT));  // OutT elements, 16 bytes of padding
  static constexpr std::size_t a_offset = o_offset + std::size_t(kChunk) * o_stride * sizeof(OutT);
  // With several groups the scores tril(Q K^T) are computed once per block and
  // shared through shared memory as hi and lo 16-bit tiles [64][a_stride] (one fp32 tile).
  // fp32 tiles of a 128-row DK tile in blocks of 64 columns leave no room for
  // the shared scores: each group computes its own (twice the Q K^T).
  // The channel instantiation reads its scores from device memory, each warp its own rows.
  static constexpr bool share_scores =
      BV > kFusedGroupWidth<E, DK, BV> && !(kFp32Tiles<E> && DK == 128 && BV == 64) && !Channel;
  static constexpr int a_stride = kChunk + kPadOf<E>;
  static constexpr std::size_t a_bytes =
      share_scores ? std::size_t(kFp32Tiles<E> ? 1 : 2) * kChunk * a_stride * sizeof(E) : 0;
  // With normalization, z before the chunk (two buffers of DK fp32: z_s[c & 1]) and the key-sum parts.
  static constexpr std::size_t z_offset = a_offset + a_bytes;
  static constexpr std::size_t z_bytes =
      Normalize ? std::size_t(2 + KeySumShare<DK, kFusedThreads<E, DK, BV>>::parts) * DK * sizeof(float) : 0;
  // Gated: the two decay buffers (GateRows), then the next chunk's g as copied (64 floats).
  static constexpr std::size_t gate_offset = z_offset + z_bytes;
  static constexpr std::size_t gate_bytes = Gated ? std::size_t(2 * GateRows::floats + kChunk) * sizeof(float) : 0;
  static constexpr std::size_t bytes = gate_offset + gate_bytes;
};

// DK is the DK tile (tile_rules.hpp); args.DK the head's keys. With kPad the
// rows past args.DK and the columns past args.DV are zero on chip and never
// stored; without it the tiles hold the head exactly.
// Gate: empty for level 1; GatePointers for the gated levels (no
// normalization; a segment of a split sequence starts from the earlier
// segments' sums, each decayed through the segments after it). The gate's code is compiled only into the
// gated instantiations, so that level 1's kernels stay as they were.
template <class E, int DK, int BV, class OutT, class SnapT, bool kNormalize, bool kPacked, bool kPad, class... Gate>
__global__ void __launch_bounds__(kFusedThreads<E, DK, BV>)
    fused_tensor_core_kernel(FusedTensorCoreKernelArgs args, Gate... gate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr bool kChannel = (std::is_same<Gate, ChannelGateOperands>::value || ...);
  constexpr bool kGated = sizeof...(Gate) == 1 && !kChannel;  // a scalar gate (g or g_gamma)
  static_assert(!((kGated || kChannel) && kNormalize), "normalization with a gate is refused by the launcher");
  // The gated kernels' second parameter: a scalar gate's pointers, or GLA's gk
  // as the prepared operands (the channel instantiation); level 1 has none.
  [[maybe_unused]] const GatePointers gp = gate_as<GatePointers>(gate...);                // level 1 and gk: none
  [[maybe_unused]] const ChannelGateOperands cp = gate_as<ChannelGateOperands>(gate...);  // gk's prepared operands
  constexpr bool kStaged = kStageSnapshot<E, OutT, SnapT>;
  constexpr bool kSplit = kSplitState<E, OutT>;
  constexpr bool kF32 = kFp32Tiles<E>;
  using L = Layout<E, DK, BV, OutT, kStaged, kNormalize, kGated, kChannel>;
  using Frag = typename Elem<E>::Frag;
  static_assert(L::bytes <= 232448, "the block's shared memory (tile_rules.hpp, max_block_dv)");
  constexpr int kGW = kFusedGroupWidth<E, DK, BV>;
  constexpr int kThreads = kFusedThreads<E, DK, BV>;
  constexpr int kSRows = DK / 4;  // state rows per warp of a group
  constexpr int kSMTiles = kSRows / 16;
  constexpr int kNTiles = kGW / 8;
  constexpr int kKSteps = DK / 16;
  // Skipping the all-zero upper tiles of tril(Q K^T) leaves warp w with w+1 of
  // 4 key tiles. With 16 warps per SM that frees issue slots and shared-memory
  // reads (measured -8% at block_dv 128); with 4-8 warps per SM the branches
  // cost more latency hiding than they save (+15-50% at block_dv 32, 64).
  constexpr bool kSkipMasked = BV == 128;
  // Several groups: group j computes key tiles j, j + groups, ... of every warp
  // row's scores and all groups read them back (one Q K^T per block, not per group).
  constexpr bool kShareA = L::share_scores;
  constexpr int kGroups = BV / kGW;
  constexpr int kATiles = kShareA ? 4 / kGroups : 4;  // 16-key tiles of A this warp computes
  // Gated: the keys of the state update decayed in registers by each group
  // (add_decayed_kv_step) unless the block has 512 threads, whose cap of 128
  // registers made that spill; those scale the shared K tile once per block
  // (decay_key_tile), a pass and a barrier more. With 256 threads (DK 256 in
  // blocks of 64) the registers measured -12% (BENCHMARKS.md, "Gated forward on
  // tensor cores").
  constexpr bool kKeysInRegisters = !kShareA || kThreads <= 256;
  const int grp = threadIdx.x >> 7;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  E* smem = reinterpret_cast<E*>(shared_raw);
  E* q_s = smem;                      // [2][64][qk_stride]
  E* k_s = q_s + 2 * L::qk_tile;      // [2][64][qk_stride]
  E* v_s = k_s + 2 * L::qk_tile;      // [2][64][v_stride]
  E* s_hi = v_s + 2 * L::v_tile;      // [DK][v_stride]
  E* s_lo = s_hi + L::s_tile;         // [DK][v_stride], with kSplit only (else kStaged: the snapshot)
  OutT* o_s = reinterpret_cast<OutT*>(shared_raw + L::o_offset);  // [64][o_stride]
  E* a_hi = reinterpret_cast<E*>(shared_raw + L::a_offset);  // [64][a_stride], kShareA only (fp32: the scores)
  E* a_lo = a_hi + kChunk * L::a_stride;                       // 16-bit only
  // bf16 (fp16) snapshots of bf16 (fp16) inputs are exactly S_hi: they leave
  // from shared memory in whole 16-byte pieces instead of scattered pairs.
  constexpr bool snapshots_from_shared = std::is_same<SnapT, E>::value || kStaged;

  // Groups of 4 warps share the Q and K tiles (read once from L2 per block) and
  // each owns kGW columns of the block's DV range, at column cg.
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) % 4, cg = kGW * (threadIdx.x >> 7);
  const int g = lane >> 2, t4 = lane & 3;
  // This warp's token rows 16*rt..16*rt+15 (of O, A and the scores). Causal
  // masking gives row tile r (r+1)/4 of the A V work and warp w of every group
  // runs on scheduler w, so the groups take the row tiles in different orders
  // and each scheduler gets all four (scheduler w: w, 3-w, w+2, 1-w mod 4).
  const int rt = kShareA ? (((grp & 1) ? 3 - warp : warp) + 2 * (grp >> 1)) & 3 : warp;
  const BlockWork work = block_work<kPacked>(args, BV);
  const int H = args.H, DV = args.DV, hh = work.head, v0 = work.v0;
  const int T = work.length, NT = work.num_chunks;  // this block's sequence
  // This block's chunks [c_begin, c_end): a whole sequence, or one segment of it.
  const int c_begin = work.c_begin, c_end = work.c_end;
  // The head's keys, and this block's columns that exist (kPad; else the tiles' own).
  const int dk = kPad ? args.DK : DK, n_cols = kPad ? DV - v0 : BV;
  const int cw = kPad ? row_copy_bytes(dk, DV, int(sizeof(E))) : 16;  // bytes per copy of a row piece
  const E* q = static_cast<const E*>(args.q) + (work.token0 * H + hh) * dk;
  const E* k = static_cast<const E*>(args.k) + (work.token0 * H + hh) * dk;
  const E* v = static_cast<const E*>(args.v) + (work.token0 * H + hh) * DV + v0;
  const std::size_t qk_token = std::size_t(H) * dk, v_token = std::size_t(H) * DV;

  // Chunk c's tiles into buffer buf as 16-byte asynchronous copies, in
  // kLoadPieces pieces per thread (Q and K rows, then V rows), spread over the
  // previous chunk's first product loop like the stores (measured -4% at block
  // 32, -12% at block 64 with DK 64; at block 128, -5% once the hoisted piece
  // offsets let the spread loop fit 128 registers: it had spilled, +17%).
  auto pieces = [](int segments) { return (segments + kThreads - 1) / kThreads; };  // 16-byte pieces per thread
  constexpr int qk_segs = DK / kVec<E>, v_segs = BV / kVec<E>;
  constexpr int qk_pieces = pieces(kChunk * qk_segs);
  constexpr int kLoadPieces = qk_pieces + pieces(kChunk * v_segs);
  // Piece p of thread x is row x / segs + p * (kThreads / segs), column (x % segs) * 8, of its
  // tile: a fixed offset from the chunk's first row, computed once (the per-piece 64-bit index
  // arithmetic had been a quarter of the chunk loop's instructions, measured in the SASS).
  static_assert(kThreads % qk_segs == 0 && kThreads % v_segs == 0, "pieces advance by whole rows");
  const int qk_row = threadIdx.x / qk_segs, qk_col = threadIdx.x % qk_segs * kVec<E>;
  const int v_row = threadIdx.x / v_segs, v_col = threadIdx.x % v_segs * kVec<E>;
  auto load_piece = [&](int c, int buf, int p) {
    const int t0 = c * kChunk;
    if (p < qk_pieces) {
      const int r = qk_row + p * (kThreads / qk_segs), t = t0 + r;
      if (r >= kChunk) return;
      if constexpr (kPad) {
        const std::size_t row = std::size_t(t < T ? t : 0) * qk_token;
        load_row_piece(q_s + buf * L::qk_tile + r * L::qk_stride + qk_col, q + row, qk_col, dk, t < T, cw);
        load_row_piece(k_s + buf * L::qk_tile + r * L::qk_stride + qk_col, k + row, qk_col, dk, t < T, cw);
        return;
      }
      const std::size_t off = std::size_t(t < T ? t : 0) * qk_token + qk_col;
      cp_async16(q_s + buf * L::qk_tile + r * L::qk_stride + qk_col, q + off, t < T ? 16 : 0);
      cp_async16(k_s + buf * L::qk_tile + r * L::qk_stride + qk_col, k + off, t < T ? 16 : 0);
    } else {
      const int r = v_row + (p - qk_pieces) * (kThreads / v_segs), t = t0 + r;
      if (r >= kChunk) return;
      if constexpr (kPad) {
        load_row_piece(v_s + buf * L::v_tile + r * L::v_stride + v_col, v + std::size_t(t < T ? t : 0) * v_token, v_col,
                   n_cols, t < T, cw);
        return;
      }
      cp_async16(v_s + buf * L::v_tile + r * L::v_stride + v_col, v + std::size_t(t < T ? t : 0) * v_token + v_col,
                 t < T ? 16 : 0);
    }
  };

  // The state strip S[:, v0:v0+BV], warp w holding rows w*kSRows.., as mma accumulators:
  // s[mt][nt][e] is S[row, col] with row = w*kSRows + 16mt + g + 8(e/2), col = 8nt + 2t4 + e%2.
  // (One loop over zeroed accumulators adding the initial state, then each sum, gave the
  // same bits but a chunk loop 11% slower: 0.939 -> 1.045 ms at 8,16384,16,128, measured.)
  float s[kSMTiles][kNTiles][4];
  #pragma unroll
  for (int mt = 0; mt < kSMTiles; ++mt)
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = warp * kSRows + 16 * mt + g + 8 * (e / 2), col = 8 * nt + 2 * t4 + (e % 2);
        const bool held = !kPad || (row < dk && cg + col < n_cols);
        s[mt][nt][e] = args.initial_state && held
                           ? args.initial_state[(std::size_t(work.state_row) * dk + row) * DV + v0 + cg + col]
                           : 0.0f;
      }
  for (int j = 0; j < work.seg; ++j) {  // plus the sums of the segments before this one
    // Gated: the state decays through segment j first (S = exp(G_j) S + its sum, as a chunk's update);
    // gk: each state row by its own channel's decay over segment j.
    [[maybe_unused]] float decay = 1.0f;
    if constexpr (kGated) decay = exp2f(gp.seg_log2_decay[std::size_t(work.sum_row0) + std::size_t(j) * H]);
    [[maybe_unused]] const float* row_decays =
        kChannel ? cp.seg_decay + (std::size_t(work.sum_row0) + std::size_t(j) * H) * dk : nullptr;
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = warp * kSRows + 16 * mt + g + 8 * (e / 2), col = 8 * nt + 2 * t4 + (e % 2);
          if (!kPad || (row < dk && cg + col < n_cols)) {
            const float x = args.seg_sums[((std::size_t(work.sum_row0) + std::size_t(j) * H) * dk + row) * DV + v0 + cg + col];
            if constexpr (kGated) s[mt][nt][e] = __fmaf_rn(s[mt][nt][e], decay, x);
            else if constexpr (kChannel) s[mt][nt][e] = __fmaf_rn(s[mt][nt][e], __ldg(row_decays + row), x);
            else s[mt][nt][e] += x;
          }
        }
  }

  // Normalization: z before chunk c in z_s[c & 1]; thread p < DK/2 owns its
  // columns 2p, 2p+1 from the start (z0 + earlier segments' key sums) to
  // z_state, so that no barrier orders its own reads and writes.
  float* const z_s = reinterpret_cast<float*>(shared_raw + L::z_offset);  // [2][DK]
  float* const z_part = z_s + 2 * DK;                                     // [parts][DK]
  constexpr int kPairs = DK / 2;
  if constexpr (kNormalize) {
    if (threadIdx.x < kPairs) {
      const int d = 2 * threadIdx.x;
      float2 z = args.initial_z ? load_z_pair<kPad>(args.initial_z + std::size_t(work.state_row) * dk, d, dk)
                                : make_float2(0.0f, 0.0f);
      for (int j = 0; j < work.seg; ++j) {
        const float2 x = load_z_pair<kPad>(args.seg_zsums + (std::size_t(work.sum_row0) + std::size_t(j) * H) * dk, d, dk);
        z.x += x.x;
        z.y += x.y;
      }
      *reinterpret_cast<float2*>(z_s + (c_begin & 1) * DK + d) = z;
    }
  }
  // z after chunk c: the key-sum parts of its K tile (written before the
  // chunk's middle barrier) added to z before it (after that barrier).
  auto advance_z = [&](int c) {
    if (threadIdx.x < kPairs) {
      const int d = 2 * threadIdx.x;
      const float2 z = add_key_parts<DK, kThreads>(*reinterpret_cast<const float2*>(z_s + (c & 1) * DK + d), z_part);
      *reinterpret_cast<float2*>(z_s + ((c + 1) & 1) * DK + d) = z;
    }
  };

  // Gated (kernels/chunk_gate.hpp's factors): warp 0 makes each chunk's decay
  // once, into buffer c & 1 (GateRows), before the barrier that opens the chunk
  // (chunk c + 1's at the end of chunk c, from its g copied into g_next at the
  // start of chunk c, so the copy's latency hides behind the chunk's products).
  // Warp 0 of group 0 owns row tile 0, the fewest A V products of all.
  // Lane l holds tokens 2l, 2l + 1; g past the sequence's end reads as zero,
  // where the key rows are zero and the output rows are never stored.
  float* const gate_s = reinterpret_cast<float*>(shared_raw + L::gate_offset);  // [2][GateRows::floats]
  float* const g_next = gate_s + 2 * GateRows::floats;                         // [64]
  auto copy_gate = [&](int c) {  // a group of its own
    copy_chunk_gate(g_next, gp, work.token0, T, H, hh, c, lane);
    cp_async_commit();
  };
  auto make_decay = [&](int c) { make_chunk_decay(g_next, last_token_of_chunk(c, T), lane, gate_s + (c & 1) * GateRows::floats); };

  // Publishes the state: hi/lo 16-bit copies into shared memory for Q S, and
  // the snapshot h[c] (or the final state when c == NT) to device memory.
  auto publish_state = [&](int c) {
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = warp * kSRows + 16 * mt + g + 8 * half, col = 8 * nt + 2 * t4;
          const float x0 = s[mt][nt][2 * half], x1 = s[mt][nt][2 * half + 1];
          if constexpr (kF32) {
            *reinterpret_cast<float2*>(s_hi + row * L::v_stride + cg + col) = make_float2(x0, x1);
          } else if constexpr (kSplit) {
            std::uint32_t hi, lo;
            Elem<E>::split(x0, x1, hi, lo);
            *reinterpret_cast<std::uint32_t*>(s_hi + row * L::v_stride + cg + col) = hi;
            *reinterpret_cast<std::uint32_t*>(s_lo + row * L::v_stride + cg + col) = lo;
          } else {
            *reinterpret_cast<std::uint32_t*>(s_hi + row * L::v_stride + cg + col) = Elem<E>::pack(x0, x1);
            if constexpr (kStaged)
              *reinterpret_cast<std::uint32_t*>(s_lo + row * L::v_stride + cg + col) = Elem<SnapT>::pack(x0, x1);
          }
          const bool held0 = !kPad || (row < dk && cg + col < n_cols), held1 = !kPad || (row < dk && cg + col + 1 < n_cols);
          if (c == NT) {
            float* f = args.final_state + (std::size_t(work.state_row) * dk + row) * DV + v0 + cg + col;
            if (held0) f[0] = x0;
            if (held1) f[1] = x1;
          } else if (args.h && !snapshots_from_shared && c < c_end) {  // h[c_end] is the next segment's
            SnapT* p = static_cast<SnapT*>(args.h) + (((work.h_chunk0 + c) * H + hh) * dk + row) * DV + v0 + cg + col;
            if (!kPad || (held1 && DV % 2 == 0)) {
              store_pair<SnapT>(p, x0, x1);
            } else {  // an odd DV leaves pairs off 8 bytes
              if (held0) store_one(p, x0);
              if (held1) store_one(p + 1, x1);
            }
          }
        }
  };

  // The stores leave shared memory in 16-byte pieces, spread over the first
  // product loop of the next chunk instead of in one burst at its start (the
  // burst competed with that loop's fragment loads): piece j of h[c] = S_hi
  // (the state before chunk c) and, with several groups, piece j of o of the
  // chunk before (one group has no barrier between that loop and restaging o).
  constexpr int h_per = 16 / int(sizeof(SnapT)), h_segs = BV / h_per, o_per = 16 / int(sizeof(OutT)), o_segs = BV / o_per;
  constexpr int h_pieces = snapshots_from_shared ? pieces(DK * h_segs) : 0;
  constexpr int o_pieces_all = pieces(kChunk * o_segs);
  constexpr int o_pieces = kShareA ? o_pieces_all : 0;  // deferred to the next chunk's first loop
  static_assert(kThreads % h_segs == 0 && kThreads % o_segs == 0, "pieces advance by whole rows");
  const int h_row = threadIdx.x / h_segs, h_col = threadIdx.x % h_segs * h_per;
  const int o_row = threadIdx.x / o_segs, o_col = threadIdx.x % o_segs * o_per;
  SnapT* const h_block = static_cast<SnapT*>(args.h) + (work.h_chunk0 * H + hh) * std::size_t(dk) * DV + v0;
  const E* const h_tile = kStaged ? s_lo : s_hi;  // the snapshot's tile (of SnapT when snapshots_from_shared)
  OutT* const o_block = static_cast<OutT*>(args.o) + (work.token0 * H + hh) * DV + v0;
  auto store_h_piece = [&](int c, int j) {
    const int r = h_row + j * (kThreads / h_segs);
    if (r >= dk) return;
    const E* src = h_tile + r * L::v_stride + h_col;
    SnapT* dst = h_block + std::size_t(c) * H * dk * DV + r * DV + h_col;
    if constexpr (kPad && kF32)
      store_piece(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src), h_col, n_cols, cw);
    else if constexpr (kPad)
      store_piece(reinterpret_cast<std::uint16_t*>(dst), reinterpret_cast<const std::uint16_t*>(src), h_col, n_cols, cw);
    else
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  };
  auto store_o_piece = [&](int t0, int j) {
    const int r = o_row + j * (kThreads / o_segs), t = t0 + r;
    if (r >= kChunk || t >= T) return;
    if constexpr (kPad)
      store_piece(o_block + std::size_t(t) * H * DV + o_col, o_s + r * L::o_stride + o_col, o_col, n_cols, cw);
    else
      *reinterpret_cast<uint4*>(o_block + std::size_t(t) * H * DV + o_col) =
          *reinterpret_cast<const uint4*>(o_s + r * L::o_stride + o_col);
  };

  __shared__ int first_chunk;
  if (threadIdx.x == 0) first_chunk = c_begin;
  for (int p = 0; p < kLoadPieces; ++p) load_piece(c_begin, c_begin & 1, p);
  cp_async_commit();
  publish_state(c_begin);
  if constexpr (kGated) {
    if (threadIdx.x < 32) {
      copy_gate(c_begin);
      cp_async_wait_all();
      make_decay(c_begin);
    }
  }
  for (int c = c_begin; c < c_end; ++c) {
    const int buf = c & 1, t0 = c * kChunk;
    const bool has_next = c + 1 < c_end;
    cp_async_wait_all();
    __syncthreads();  // chunk c and the state before it are in shared memory (gated: and its decay)
    const float* const gc = gate_s + buf * GateRows::floats;  // gated: chunk c's decay
    if constexpr (kGated)
      if (has_next && threadIdx.x < 32) copy_gate(c + 1);  // its own group, before the tiles' (waited for below)

    const E* qt = q_s + buf * L::qk_tile;
    const E* kt = k_s + buf * L::qk_tile;
    const E* vt = v_s + buf * L::v_tile;

    // One pass over DK computes both products that read Q: A = Q K^T (rows
    // 16w.., all 64 keys) and O = Q (S_hi + S_lo); each Q fragment is loaded
    // once and dies at once, which keeps the kernel within 128 registers.
    float a[2 * kATiles][4], o[kNTiles][4];  // key tile j of a: 16 * (kShareA ? grp + j * kGroups : j)
    float qz[2] = {0.0f, 0.0f}, ra[2] = {0.0f, 0.0f};  // normalization: q . z and the scores' sum, rows g and g + 8
    #pragma unroll
    for (int nt = 0; nt < 2 * kATiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) a[nt][e] = 0.0f;
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) o[nt][e] = 0.0f;
    [[maybe_unused]] float row_decay[kSMTiles][2];  // gk: exp(b_L) of this warp's state rows
    if constexpr (kChannel) {
      // This warp's rows of the prepared scores (scaled, masked), in the
      // accumulator layout; key tiles past its rows are zero and not read.
      #pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = t0 + 16 * rt + g + 8 * half;
        const float* src = cp.scores + ((work.token0 + std::size_t(t < T ? t : 0)) * H + hh) * kChunk + 2 * t4;
        #pragma unroll
        for (int nt = 0; nt < 8; ++nt)
          if (t < T && nt / 2 <= rt) {
            const float2 x = __ldg(reinterpret_cast<const float2*>(src + 8 * nt));
            a[nt][2 * half] = x.x;
            a[nt][2 * half + 1] = x.y;
          }
      }
      const float* dec = cp.decay + ((work.h_chunk0 + c) * H + hh) * std::size_t(dk);
      #pragma unroll
      for (int mt = 0; mt < kSMTiles; ++mt)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = warp * kSRows + 16 * mt + g + 8 * half;
          row_decay[mt][half] = !kPad || row < dk ? __ldg(dec + row) : 0.0f;
        }
    }
    #pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      #pragma unroll
      for (int p = kk; p < kLoadPieces; p += kKSteps)
        if (has_next) load_piece(c + 1, buf ^ 1, p);  // the next chunk's loads overlap this chunk's math
      #pragma unroll
      for (int p = kk; p < h_pieces + o_pieces; p += kKSteps) {
        if (p < h_pieces) {
          if (args.h) store_h_piece(c, p);
        } else if (c > first_chunk) {  // read from shared memory: a register for it spills at block 128
          store_o_piece(t0 - kChunk, p - h_pieces);
        }
      }
      Frag qf[4];
      ldmatrix_x4(qf, qt + (16 * rt + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::qk_stride + 16 * kk + 8 * (lane >> 4));
      if constexpr (kNormalize) {  // qf: rows g, g + 8 (registers 0/2, 1/3) at columns 2t4.. and 2t4 + 8..
        const float* zc = z_s + (c & 1) * DK + 16 * kk + 2 * t4;
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float2 x = Elem<E>::unpack(qf[r]), z = *reinterpret_cast<const float2*>(zc + 8 * (r >> 1));
          qz[r & 1] += x.x * z.x + x.y * z.y;
        }
      }
      if constexpr (kChannel) {
        // the scores were read above
      } else if constexpr (kShareA) {
        #pragma unroll
        for (int j = 0; j < kATiles; ++j) {
          const int tile = grp + j * kGroups;
          if (tile > rt) continue;  // key tiles past this warp's rows are masked to zero
          Frag kf[4];
          ldmatrix_x4(kf, kt + (16 * tile + (lane & 7) + 8 * (lane >> 4)) * L::qk_stride + 16 * kk + 8 * ((lane >> 3) & 1));
          Elem<E>::mma(a[2 * j], qf, kf[0], kf[1]);
          Elem<E>::mma(a[2 * j + 1], qf, kf[2], kf[3]);
        }
      } else {
        #pragma unroll
        for (int np = 0; np < 4; ++np) {
          if (kSkipMasked && np > warp) continue;  // keys past this warp's rows: masked to zero anyway
          Frag kf[4];
          ldmatrix_x4(kf, kt + (16 * np + (lane & 7) + 8 * (lane >> 4)) * L::qk_stride + 16 * kk + 8 * ((lane >> 3) & 1));
          Elem<E>::mma(a[2 * np], qf, kf[0], kf[1]);
          Elem<E>::mma(a[2 * np + 1], qf, kf[2], kf[3]);
        }
      }
      #pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        const int off = (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::v_stride + cg + 16 * np + 8 * (lane >> 4);
        Frag sf[4];
        ldmatrix_x4_trans(sf, s_hi + off);
        Elem<E>::mma(o[2 * np], qf, sf[0], sf[1]);
        Elem<E>::mma(o[2 * np + 1], qf, sf[2], sf[3]);
        if constexpr (kSplit) {
          ldmatrix_x4_trans(sf, s_lo + off);
          Elem<E>::mma(o[2 * np], qf, sf[0], sf[1]);
          Elem<E>::mma(o[2 * np + 1], qf, sf[2], sf[3]);
        }
      }
    }
    if (has_next) cp_async_commit();
    if constexpr (kNormalize)
      *reinterpret_cast<float2*>(z_part + (threadIdx.x / kPairs) * DK + 2 * (threadIdx.x % kPairs)) =
          key_sum_part<E, DK, kThreads>(kt, L::qk_stride);
    #pragma unroll
    for (int nt = 0; nt < 2 * kATiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kChannel) continue;  // prepared scaled and masked
        const int row = 16 * rt + g + 8 * (e / 2);
        const int col = (kShareA ? 16 * (grp + (nt / 2) * kGroups) + 8 * (nt % 2) : 8 * nt) + 2 * t4 + (e % 2);
        if constexpr (kGated)  // and decayed by exp(b_row - b_col)
          a[nt][e] = col <= row ? a[nt][e] * (args.scale * exp2f(gc[GateRows::b + row] - gc[GateRows::b + col])) : 0.0f;
        else
          a[nt][e] = col <= row ? a[nt][e] * args.scale : 0.0f;  // causal mask: zero, no softmax
      }
    if constexpr (kShareA) {  // publish this warp's score tile as hi + lo, then wait for all tiles
      #pragma unroll
      for (int nt = 0; nt < 2 * kATiles; ++nt) {
        const int tile = grp + (nt / 2) * kGroups;
        if (tile > rt) continue;
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int off = (16 * rt + g + 8 * half) * L::a_stride + 16 * tile + 8 * (nt % 2) + 2 * t4;
            const float x0 = a[nt][2 * half], x1 = a[nt][2 * half + 1];
            if constexpr (kF32) {
              *reinterpret_cast<float2*>(a_hi + off) = make_float2(x0, x1);
            } else {
              std::uint32_t hi, lo;
              Elem<E>::split(x0, x1, hi, lo);
              *reinterpret_cast<std::uint32_t*>(a_hi + off) = hi;
              *reinterpret_cast<std::uint32_t*>(a_lo + off) = lo;
            }
          }
      }
      __syncthreads();
      if constexpr (kNormalize) advance_z(c);
      if constexpr (kGated && !kKeysInRegisters) {  // every warp is done with Q and K: the decayed keys into their tiles (hi: K, lo: Q)
        decay_key_tile<E, DK, kThreads>(k_s + buf * L::qk_tile, q_s + buf * L::qk_tile, L::qk_stride,
                                        gc + GateRows::to_end);
        __syncthreads();
      }
    }
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kGated)  // the inter-chunk term's row i by exp(b_i)
          o[nt][e] *= args.scale * gc[GateRows::decay + 16 * rt + g + 8 * (e / 2)];
        else
          o[nt][e] *= args.scale;
      }

    // Per 16 keys: O += (A_hi + A_lo) V, then dS += K^T V. This chunk's K^T V
    // is summed in fresh accumulators and added to the state in fp32 below:
    // the tensor cores' fp32 sums are not IEEE-rounded, and carrying the state
    // itself in the mma accumulators chunk after chunk let that error grow
    // with T (measured 1.2e-5 relative on the final state at T = 16384, above
    // the fp32 level of 1e-5).
    float ds[kSMTiles][kNTiles][4];
    #pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) ds[mt][nt][e] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      Frag vf[kNTiles / 2][4];
      #pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np)
        ldmatrix_x4_trans(vf[np], vt + (16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::v_stride + cg + 16 * np + 8 * (lane >> 4));
      if (!(kSkipMasked || kShareA || kChannel) || kk <= rt) {  // keys past this warp's rows contribute zero
        if constexpr (kF32) {  // the scores whole, in fp32
          Frag af[4];
          if constexpr (kShareA) {
            ldmatrix_x4(af, a_hi + (16 * rt + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::a_stride + 16 * kk + 8 * (lane >> 4));
          } else {
            #pragma unroll
            for (int r = 0; r < 4; ++r) {  // accumulator layout of two n-tiles = A-operand layout of one k-step
              const float* src = a[2 * kk + (r >> 1)] + 2 * (r & 1);
              af[r] = Elem<E>::from_pair(src[0], src[1]);
            }
          }
          if constexpr (kNormalize) {
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
              const float2 x = Elem<E>::unpack(af[r]);
              ra[r & 1] += x.x + x.y;
            }
          }
          #pragma unroll
          for (int np = 0; np < kNTiles / 2; ++np) {
            Elem<E>::mma(o[2 * np], af, vf[np][0], vf[np][1]);
            Elem<E>::mma(o[2 * np + 1], af, vf[np][2], vf[np][3]);
          }
        } else {
          std::uint32_t ahi[4], alo[4];
          if constexpr (kShareA) {
            const int off = (16 * rt + (lane & 7) + 8 * ((lane >> 3) & 1)) * L::a_stride + 16 * kk + 8 * (lane >> 4);
            ldmatrix_x4(ahi, a_hi + off);
            ldmatrix_x4(alo, a_lo + off);
          } else {
            #pragma unroll
            for (int r = 0; r < 4; ++r) {  // accumulator layout of two n-tiles = A-operand layout of one k-step
              const float* src = a[2 * kk + (r >> 1)] + 2 * (r & 1);
              Elem<E>::split(src[0], src[1], ahi[r], alo[r]);
            }
          }
          if constexpr (kNormalize) {  // registers 0, 2: row g; 1, 3: row g + 8
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
              const float2 x = Elem<E>::unpack(ahi[r]), y = Elem<E>::unpack(alo[r]);
              ra[r & 1] += (x.x + y.x) + (x.y + y.y);
            }
          }
          #pragma unroll
          for (int np = 0; np < kNTiles / 2; ++np) {
            Elem<E>::mma(o[2 * np], ahi, vf[np][0], vf[np][1]);
            Elem<E>::mma(o[2 * np + 1], ahi, vf[np][2], vf[np][3]);
            Elem<E>::mma(o[2 * np], alo, vf[np][0], vf[np][1]);
            Elem<E>::mma(o[2 * np + 1], alo, vf[np][2], vf[np][3]);
          }
        }
      }
      if constexpr (kGated && kKeysInRegisters) {  // key j by exp(b_L - b_j), in registers
        add_decayed_kv_step(ds, kt, L::qk_stride, vf, kk, warp * kSRows, lane, gc + GateRows::to_end);
      } else {
        add_kv_step(ds, kt, L::qk_stride, vf, kk, warp * kSRows, lane);  // gated: the decayed keys (16-bit: hi)
        if constexpr (kGated && !kF32) add_kv_step(ds, qt, L::qk_stride, vf, kk, warp * kSRows, lane);  // ... + lo
      }
    }
    // S += K^T V after the output: the right shift (gated: S = exp(b_L) S + the decayed K^T V)
    if constexpr (kGated) {
      decay_add_tiles(s, gc[GateRows::whole], ds);
    } else if constexpr (kChannel) {  // gk: S = diag(exp(b_L)) S + the decayed K^T V, row by row
      #pragma unroll
      for (int mt = 0; mt < kSMTiles; ++mt)
        #pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
          #pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = __fmaf_rn(s[mt][nt][e], row_decay[mt][e / 2], ds[mt][nt][e]);
    } else {
      add_tiles(s, ds);
    }
    if constexpr (kGated)
      if (has_next && threadIdx.x < 32) {  // chunk c + 1's decay, into the other buffer
        cp_async_wait<1>();                // its g (the newest group, chunk c + 1's tiles, may still fly)
        make_decay(c + 1);
      }
    if constexpr (kNormalize) {  // o_t / (scale q_t . z_t + 1e-10), the row's sums over its 4 lanes
      float den[2];
      #pragma unroll
      for (int i = 0; i < 2; ++i) {
        float x = args.scale * qz[i] + ra[i];
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        den[i] = x + 1e-10f;
      }
      #pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) o[nt][e] /= den[e / 2];
    }

    // Stage this chunk's rows of o in shared memory ...
    #pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
      #pragma unroll
      for (int half = 0; half < 2; ++half)
        store_pair<OutT>(o_s + (16 * rt + g + 8 * half) * L::o_stride + cg + 8 * nt + 2 * t4, o[nt][2 * half],
                         o[nt][2 * half + 1]);
    // The state is republished only once every warp has read the old one, and
    // o leaves now only once every warp has staged its rows. With several
    // groups the score barrier above already ordered those reads, and o leaves
    // in the next chunk's first loop (after its top barrier): only the last
    // chunk needs this barrier (measured -1% at 8,16384,16,128).
    if (!kShareA || !has_next) __syncthreads();
    if constexpr (kNormalize && !kShareA) advance_z(c);
    publish_state(c + 1);
    if (!kShareA || !has_next)  // ... and leaves now, or in the next chunk's first loop
      for (int j = 0; j < o_pieces_all; ++j) store_o_piece(t0, j);
  }
  cp_async_wait_all();  // an empty sequence's loads (zero-filled) are still in flight
  if constexpr (kNormalize)  // z after the sequence, from the thread that wrote it
    if (c_end == NT && v0 == 0 && threadIdx.x < kPairs)
      store_z_pair<kPad>(args.z_state + std::size_t(work.state_row) * dk, 2 * threadIdx.x, dk,
                         *reinterpret_cast<const float2*>(z_s + (c_end & 1) * DK + 2 * threadIdx.x));
#endif
}

// grid: plain batches (DV / BV, B * H, segments); packed ones (DV / BV * H * walks).
// seg_log2_decay: split gated sequences' segment decays (segment_sum_kernel's), else null.
// kGate: 0 level 1, 1 a scalar gate (args.g or args.g_gamma), 2 GLA's gk as
// the operands `channel` points to (args.q and args.k then its decayed ones).
template <class E, int DK, int BV, class OutT, class SnapT, bool kNormalize, bool kPad, int kGate>
void launch_fused_tensor_core(const FusedTensorCoreArgs& args, dim3 grid, cudaStream_t stream,
                              float* seg_log2_decay = nullptr, const ChannelGateOperands* channel = nullptr) {
  constexpr bool kGated = kGate == 1, kChannel = kGate == 2;
  if constexpr (kFp32Tiles<E> && BV > max_block_dv(DK, false, true)) {  // fp32 tiles of this block do not fit
    throw std::invalid_argument("tensor-core fused: block_dv too wide for fp32 inputs at this DK tile");
  } else {
  const std::size_t bytes =
      Layout<E, DK, BV, OutT, kStageSnapshot<E, OutT, SnapT>, kNormalize, kGated, kChannel>::bytes;
  auto launch = [&](auto kernel, auto... gate) {
    check_launch(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                 "cudaFuncSetAttribute");
    kernel<<<grid, kFusedThreads<E, DK, BV>, bytes, stream>>>(args, gate...);
    check_launch(cudaGetLastError(), "fused tensor-core launch");
  };
  if constexpr (kChannel) {
    if (!channel) throw std::logic_error("tensor-core fused: gk without its prepared operands");
    if (args.work) launch(fused_tensor_core_kernel<E, DK, BV, OutT, SnapT, false, true, kPad, ChannelGateOperands>, *channel);
    else launch(fused_tensor_core_kernel<E, DK, BV, OutT, SnapT, false, false, kPad, ChannelGateOperands>, *channel);
  } else if constexpr (kGated) {
    const GatePointers gate{args.g, args.g_gamma, seg_log2_decay};
    if (args.work) launch(fused_tensor_core_kernel<E, DK, BV, OutT, SnapT, false, true, kPad, GatePointers>, gate);
    else launch(fused_tensor_core_kernel<E, DK, BV, OutT, SnapT, false, false, kPad, GatePointers>, gate);
  } else {
    launch(args.work ? fused_tensor_core_kernel<E, DK, BV, OutT, SnapT, kNormalize, true, kPad>
                     : fused_tensor_core_kernel<E, DK, BV, OutT, SnapT, kNormalize, false, kPad>);
  }
  }
}

}  // namespace detail
}  // namespace linattn::cuda
