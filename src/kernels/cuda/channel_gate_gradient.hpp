// GLA's per-key-channel gate gk (issue 28) in the tensor-core backward: the
// last kernel, after the chunk kernels' channel instantiations
// (chunk_gradient_tiled.hpp, kChannel) left, per chunk, dA = scale tril(dO V^T)
// (args.scores), dq_state = scale dO h[c]^T, dk_state = V dh[c]^T and
// state_rows = sum_v h[c] dh[c] per key row. One block per (chunk, head), on
// CUDA cores in fp32, with b the chunk's inclusive cumulative sums of gk:
//   dq_id  = exp(b_id) dq_state_id + sum_{j <= i} dA_ij k_jd exp(b_id - b_jd)
//   dk_jd  = exp(b_L,d - b_jd) dk_state_jd + sum_{i >= j} dA_ij q_id exp(b_id - b_jd)
//   dgk_td = sum_{s >= t in c} (q_sd dq_sd - k_sd dk_sd) + D_d,
//   D_d    = sum_v S_{c+1}[d, v] dS_{c+1}[d, v]
//          = exp(b_L,d) state_rows_d + sum_j k_jd exp(b_L,d - b_jd) dk_state_jd
// since S_{c+1} = diag(exp(b_L)) h[c] + sum_j (k_j exp(b_L - b_j)) v_j^T
// (kernels/channel_gate_backward.hpp is the portable form, reference/channel_gated.hpp
// the fp64 one). Every exponent is a difference of cumulative sums <= 0, taken
// by 16-token sub-chunks, as fla's chunk_gla takes them: the products of a
// query sub-chunk I with the keys of the earlier ones go through the last
// token r = 16 I - 1 of the sub-chunk before I, exp(b_i - b_r) * exp(b_r - b_j),
// the products of a key sub-chunk J with the queries of the later ones through
// its own last token r = 16 J + 15 (all four factors <= 1), so that those
// off-diagonal blocks are matrix products on tensor cores (mma.sync over P and
// the decayed keys or queries in fp32, split hi + lo: with P rounded to 16 bits
// instead, dgk, whose terms cancel, was 3.3e-3 from fp64 against fla's 6.4e-4
// at 8,4096,16,128 bf16 on the H100, and 4.0e-4 when these products were fp32
// sums on CUDA cores, at 9edd928); the diagonal blocks are fp32 sums in
// registers by 4-token blocks, the same device one level down (below).
#pragma once

#include "kernels/cuda/backward_args.hpp"
#include "kernels/cuda/channel_gate_prep.hpp"
#include "kernels/cuda/gate_gradient.hpp"
#include "kernels/cuda/log2_units.hpp"
#include "kernels/cuda/warp_tiles.hpp"

#include <cstddef>

namespace linattn::cuda::detail {

constexpr int kChannelGradientThreads = 256;
constexpr int kChannelGradientSlice = 32;  // key channels per pass
constexpr int kChannelGradientPad = kChannelGradientSlice + 1;
// The off-diagonal operands: keys decayed to the end of the sub-chunk before
// each later query sub-chunk I = 1, 2, 3 (16 I rows each), queries decayed to
// the end of each earlier key sub-chunk J = 0, 1, 2 (64 - 16 (J + 1) rows each):
// 96 rows each.
constexpr int kOffDiagonalRows = 96;

// Shared memory, fp32: P (64 x 68), the decayed keys and queries (96 x 36
// each), the off-diagonal sums of dq and dk (64 x 33 each; dq's rows later
// hold the suffix sums of q dq), and per sub-chunk and channel the scan's
// totals and the parts of dgk (4 x 32 each).
template <class M>
struct ChannelGradientLayout {
  static constexpr int p_stride = kChunk + kPadOf<M>, op_stride = kChannelGradientSlice + kPadOf<M>;
  static constexpr int kTotals = 4;  // scan totals, sums of q dq, of k dk, D's terms
  static constexpr std::size_t floats =
      std::size_t(2) * kChunk * kChannelGradientPad + kTotals * 4 * kChannelGradientSlice;
  static constexpr std::size_t bytes =
      floats * sizeof(float) + (std::size_t(kChunk) * p_stride + 2 * kOffDiagonalRows * op_stride) * sizeof(M);
};

// First row of sub-chunk I's keys in the decayed-key tile, of J's queries in the decayed-query tile.
__device__ inline int key_rows_of(int I) { return I == 1 ? 0 : I == 2 ? 16 : 48; }
__device__ inline int query_rows_of(int J) { return J == 0 ? 0 : J == 1 ? 48 : 80; }

// v[i] for a warp-uniform i < 4 by selects: v stays in registers (an indexed
// read of a local array would put it in local memory).
__device__ inline float select4(const float (&v)[4], int i) { return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3]; }

__device__ inline void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// grid: (chunks, H), 8 warps. Lane: channel d0 + lane of each slice. Warp w < 4
// owns dq of sub-chunk w, warp 4 + J dk of sub-chunk J: each thread holds its
// sub-chunk's 16 tokens of b, q, k and the state gradient in registers, so
// the diagonal blocks are unrolled register code, and the warp's
// off-diagonal product is its own (no block barrier between the product and
// its use). E: the input type; the products' operands are fp32, split hi + lo.
template <class E>
__global__ void __launch_bounds__(kChannelGradientThreads, 2) channel_gate_gradient_kernel(TensorCoreBackwardArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using M = float;
  using L = ChannelGradientLayout<M>;
  constexpr int S = kChannelGradientSlice, P = kChannelGradientPad, PS = L::p_stride, OS = L::op_stride;
  static_assert(kChannelGradientThreads == 8 * 32 && S == 32, "a warp per sub-chunk and role, a lane per channel");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* off_q = reinterpret_cast<float*>(smem_raw);  // dq's off-diagonal sums; then the suffix sums of q dq
  float* off_k = off_q + kChunk * P;                   // dk's off-diagonal sums
  float* total_s = off_k + kChunk * P;                 // [4][S]: sum of b over each sub-chunk
  float* qdq_s = total_s + 4 * S;                      // [4][S]: sum of q dq over each sub-chunk
  float* kdk_s = qdq_s + 4 * S;                        // [4][S]: sum of k dk
  float* d_s = kdk_s + 4 * S;                          // [4][S]: D's terms
  M* p_m = reinterpret_cast<M*>(smem_raw + L::floats * sizeof(float));  // P [query][key]
  M* kr_m = p_m + kChunk * PS;                                          // decayed keys [key][channel]
  M* qr_m = kr_m + kOffDiagonalRows * OS;                               // decayed queries [query][channel]
  const BackwardChunk ch = a.chunks[blockIdx.x];
  const int hh = blockIdx.y, H = a.H, dk = a.DK, len = ch.length;
  const std::size_t token0 = std::size_t(ch.token0), row_stride = std::size_t(H) * dk, head_off = std::size_t(hh) * dk;
  const E* q_in = static_cast<const E*>(a.q);
  const E* k_in = static_cast<const E*>(a.k);
  E* dq_out = static_cast<E*>(a.dq);
  E* dk_out = static_cast<E*>(a.dk);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool dq_role = warp < 4;
  const int I = warp & 3, t0 = kSubChunk * I;  // this warp's sub-chunk and its first token

  // P, rows past the chunk's tokens zero (the upper triangle is copied and never read).
  {
    constexpr int kLoads = kChunk * kChunk / 4 / kChannelGradientThreads;
    float4 v[kLoads];
    #pragma unroll
    for (int x = 0; x < kLoads; ++x) {  // every load in flight before the first store
      const int e = threadIdx.x + x * kChannelGradientThreads, r = e / (kChunk / 4), c = 4 * (e % (kChunk / 4));
      v[x] = r < len && c <= r ? *reinterpret_cast<const float4*>(a.scores + ((token0 + r) * H + hh) * kChunk + c)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    #pragma unroll
    for (int x = 0; x < kLoads; ++x) {
      const int e = threadIdx.x + x * kChannelGradientThreads;
      *reinterpret_cast<float4*>(p_m + (e / (kChunk / 4)) * PS + 4 * (e % (kChunk / 4))) = v[x];
    }
  }
  for (int d0 = 0; d0 < dk; d0 += S) {
    const bool channel = d0 + lane < dk;
    // This sub-chunk's b (log2 units, cumulative within it for now), q, k and
    // the state gradient of this warp's role.
    float b[16], q[16], k[16], st[16];
    float run = 0.0f;
    #pragma unroll
    for (int t = 0; t < 16; ++t) {
      const bool live = channel && t0 + t < len;  // past the chunk's tokens: gk 0, the rest 0
      const std::size_t off = (token0 + (live ? t0 + t : 0)) * row_stride + head_off + d0 + lane;
      run += live ? a.gk[off] * kLog2e : 0.0f;
      b[t] = run;
      q[t] = live ? to_float(q_in[off]) : 0.0f;
      k[t] = live ? to_float(k_in[off]) : 0.0f;
      st[t] = live ? (dq_role ? a.dq_state[off] : a.dk_state[off]) : 0.0f;
    }
    if (dq_role) total_s[I * S + lane] = run;
    // sum_v h[c] dh[c] of this channel, for dgk at the end (loaded now, its latency hidden)
    const float state_row = !dq_role && channel ? a.state_rows[(std::size_t(ch.h_chunk) * H + hh) * dk + d0 + lane] : 0.0f;
    __syncthreads();
    // The next slice's rows into L2 while this one computes (its loads above
    // were the largest stall: ncu, BENCHMARKS.md).
    if (d0 + S + lane < dk)
      for (int t = warp; t < len; t += kChannelGradientThreads / 32) {
        const std::size_t off = (token0 + t) * row_stride + head_off + d0 + S + lane;
        prefetch_l2(a.gk + off);
        prefetch_l2(q_in + off);
        prefetch_l2(k_in + off);
        prefetch_l2(a.dq_state + off);
        prefetch_l2(a.dk_state + off);
      }
    // end[J]: b at the last token of sub-chunk J (end[3] = b_L: gk is 0 past the chunk's tokens).
    float end[4];
    end[0] = total_s[lane];
    #pragma unroll
    for (int J = 1; J < 4; ++J) end[J] = end[J - 1] + total_s[J * S + lane];
    const float before = I == 0 ? 0.0f : select4(end, I - 1);
    #pragma unroll
    for (int t = 0; t < 16; ++t) b[t] += before;
    // The off-diagonal operands: this sub-chunk's keys decayed to the end of
    // each later query sub-chunk's predecessor (dq warps), its queries decayed
    // to the end of each earlier key sub-chunk (dk warps).
    if (dq_role) {
      for (int Iq = I + 1; Iq < 4; ++Iq) {
        const float ref = select4(end, Iq - 1);
        M* dst = kr_m + (key_rows_of(Iq) + t0) * OS + lane;
        #pragma unroll
        for (int t = 0; t < 16; ++t) dst[t * OS] = k[t] * exp2_nonpositive(ref - b[t]);
      }
    } else {
      for (int Jk = 0; Jk < I; ++Jk) {
        const float ref = select4(end, Jk);
        M* dst = qr_m + (query_rows_of(Jk) + t0 - kSubChunk * (Jk + 1)) * OS + lane;
        #pragma unroll
        for (int t = 0; t < 16; ++t) dst[t * OS] = q[t] * exp2_nonpositive(b[t] - ref);
      }
    }
    __syncthreads();
    // This warp's off-diagonal product, to its own rows of off_q or off_k.
    if (dq_role && I > 0) {  // P[I, < 16 I] times the keys decayed to the end of sub-chunk I - 1
      float acc[4][4];
      zero(acc);
      mma_rows<M, 4>(acc, 0, t0, [&](FragOf<M>* f, int kk) { a_rows(f, p_m, PS, t0, kk, lane); },
                     [&](FragOf<M>* f, int n, int kk) { b_cols(f, kr_m + key_rows_of(I) * OS, OS, n, kk, lane); });
      #pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e)
          off_q[(t0 + (lane >> 2) + 8 * (e / 2)) * P + 8 * nt + 2 * (lane & 3) + e % 2] = acc[nt][e];
    } else if (!dq_role && I < 3) {  // P[> I, I]^T times the queries decayed to the end of sub-chunk I
      const int i0 = t0 + kSubChunk;
      float acc[4][4];
      zero(acc);
      mma_rows<M, 4>(acc, i0, kChunk, [&](FragOf<M>* f, int kk) { a_cols(f, p_m, PS, t0, kk, lane); },
                     [&](FragOf<M>* f, int n, int kk) { b_cols(f, qr_m + query_rows_of(I) * OS, OS, n, kk - i0, lane); });
      #pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e)
          off_k[(t0 + (lane >> 2) + 8 * (e / 2)) * P + 8 * nt + 2 * (lane & 3) + e % 2] = acc[nt][e];
    }
    __syncwarp();
    const float bl = end[3];
    float r[16];  // q dq (dq warps) or k dk (dk warps) of each token
    if (dq_role) {
      // dq_i = 2^b_i dq_state_i + 2^(b_i - end[I-1]) off_i + the diagonal
      // block by 4-token blocks: keys of earlier 4-blocks through the last
      // token of the 4-block before i's (both factors <= 1), the rest one exp a term.
      float dqv[16];
      #pragma unroll
      for (int t = 0; t < 16; ++t) {
        dqv[t] = st[t] * exp2_nonpositive(b[t]);
        if (I > 0) dqv[t] = __fmaf_rn(off_q[(t0 + t) * P + lane], exp2_nonpositive(b[t] - before), dqv[t]);
      }
      #pragma unroll
      for (int I4 = 0; I4 < 4; ++I4) {
        float kf[12];
        #pragma unroll
        for (int j = 0; j < 4 * I4; ++j) kf[j] = k[j] * exp2_nonpositive(b[4 * I4 - 1] - b[j]);  // j < 4 I4: I4 > 0
        #pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int i = 4 * I4 + x;
          const float* p_row = p_m + (t0 + i) * PS + t0;
          float sum = 0.0f;
          #pragma unroll
          for (int J4 = 0; J4 < I4; ++J4) {
            const float4 p4 = *reinterpret_cast<const float4*>(p_row + 4 * J4);
            sum = __fmaf_rn(p4.x, kf[4 * J4], sum);
            sum = __fmaf_rn(p4.y, kf[4 * J4 + 1], sum);
            sum = __fmaf_rn(p4.z, kf[4 * J4 + 2], sum);
            sum = __fmaf_rn(p4.w, kf[4 * J4 + 3], sum);
          }
          if (I4 > 0) dqv[i] = __fmaf_rn(sum, exp2_nonpositive(b[i] - b[I4 > 0 ? 4 * I4 - 1 : 0]), dqv[i]);
          const float4 p4 = *reinterpret_cast<const float4*>(p_row + 4 * I4);
          const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
          #pragma unroll
          for (int y = 0; y < x; ++y) {
            const int j = 4 * I4 + y;
            dqv[i] = __fmaf_rn(pv[y] * k[j], exp2_nonpositive(b[i] - b[j]), dqv[i]);
          }
          dqv[i] = __fmaf_rn(pv[x], k[i], dqv[i]);
        }
      }
      #pragma unroll
      for (int t = 0; t < 16; ++t) {
        r[t] = q[t] * dqv[t];
        if (channel && t0 + t < len) dq_out[(token0 + t0 + t) * row_stride + head_off + d0 + lane] = from_float<E>(dqv[t]);
      }
    } else {
      // dk_j = 2^(b_L - b_j) dk_state_j + 2^(end[J] - b_j) off_j + the
      // diagonal block: queries of later 4-blocks through the last token of
      // j's 4-block, the rest one exp a term. D's terms: k_j 2^(b_L - b_j) dk_state_j.
      const float own_end = select4(end, I);  // I < 3 where used
      float dkv[16], dterm = 0.0f;
      #pragma unroll
      for (int t = 0; t < 16; ++t) {
        const float to_end = exp2_nonpositive(bl - b[t]);
        dkv[t] = st[t] * to_end;
        dterm = __fmaf_rn(k[t] * to_end, st[t], dterm);
        if (I < 3) dkv[t] = __fmaf_rn(off_k[(t0 + t) * P + lane], exp2_nonpositive(own_end - b[t]), dkv[t]);
      }
      #pragma unroll
      for (int J4 = 0; J4 < 4; ++J4) {
        const float ref = b[4 * J4 + 3];
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int i = 4 * J4 + 4; i < 16; ++i) {
          const float qf = q[i] * exp2_nonpositive(b[i] - ref);
          const float4 p4 = *reinterpret_cast<const float4*>(p_m + (t0 + i) * PS + t0 + 4 * J4);
          sum[0] = __fmaf_rn(p4.x, qf, sum[0]);
          sum[1] = __fmaf_rn(p4.y, qf, sum[1]);
          sum[2] = __fmaf_rn(p4.z, qf, sum[2]);
          sum[3] = __fmaf_rn(p4.w, qf, sum[3]);
        }
        #pragma unroll
        for (int y = 0; y < 4; ++y) {
          const int j = 4 * J4 + y;
          if (J4 < 3) dkv[j] = __fmaf_rn(sum[y], exp2_nonpositive(ref - b[j]), dkv[j]);
        }
        #pragma unroll
        for (int x = 0; x < 4; ++x) {  // query i = 4 J4 + x meets the keys j <= i of its 4-block
          const int i = 4 * J4 + x;
          const float4 p4 = *reinterpret_cast<const float4*>(p_m + (t0 + i) * PS + t0 + 4 * J4);
          const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
          dkv[i] = __fmaf_rn(pv[x], q[i], dkv[i]);
          #pragma unroll
          for (int y = 0; y < x; ++y) {
            const int j = 4 * J4 + y;
            dkv[j] = __fmaf_rn(pv[y] * q[i], exp2_nonpositive(b[i] - b[j]), dkv[j]);
          }
        }
      }
      #pragma unroll
      for (int t = 0; t < 16; ++t) {
        r[t] = k[t] * dkv[t];
        if (channel && t0 + t < len) dk_out[(token0 + t0 + t) * row_stride + head_off + d0 + lane] = from_float<E>(dkv[t]);
      }
      d_s[I * S + lane] = dterm;
    }
    // dgk_t = sum_{s >= t in c} (q_s dq_s - k_s dk_s) + D: suffix sums within
    // the sub-chunk, the dq warps' to shared, then the dk warps add the rest.
    float tail = 0.0f;
    #pragma unroll
    for (int t = 15; t >= 0; --t) r[t] = tail += r[t];
    if (dq_role) {
      #pragma unroll
      for (int t = 0; t < 16; ++t) off_q[(t0 + t) * P + lane] = r[t];
      qdq_s[I * S + lane] = tail;
    } else {
      kdk_s[I * S + lane] = tail;
    }
    __syncthreads();
    if (!dq_role && channel) {
      float rest = exp2_nonpositive(bl) * state_row;
      #pragma unroll
      for (int J = 0; J < 4; ++J) {
        rest += d_s[J * S + lane];
        if (J > I) rest += qdq_s[J * S + lane] - kdk_s[J * S + lane];
      }
      #pragma unroll
      for (int t = 0; t < 16; ++t)
        if (t0 + t < len)
          a.dg[(token0 + t0 + t) * row_stride + head_off + d0 + lane] = off_q[(t0 + t) * P + lane] - r[t] + rest;
    }
    // The next slice writes total_s before its first barrier, and the rest
    // only after its second, which every thread reaches after this slice's reads.
  }
#endif
}

}  // namespace linattn::cuda::detail
