// EXPERIMENT (bench only, not used by linattn): the `fused` forward on
// Hopper's warpgroup tensor cores (wgmma, sm_90a), the same algorithm and
// block decomposition as src/kernels/cuda/fused_tensor_core_kernel.hpp with every
// product issued per warpgroup from shared memory. Built and timed beside the
// mma.sync kernel by bench/fused_tensor_core_bench.cu (nvcc -arch=sm_90a).
//
// Why it was tried: in the mma.sync kernel every warp of a group loads the
// whole state strip (hi and lo) for its 16 rows of Q S, four times the bytes
// the product needs; wgmma reads each operand once per warpgroup and leaves
// the registers to the accumulators. Measured on the H200 (BENCHMARKS.md,
// kernel log): same o, h and final state as the mma.sync kernel (bit for bit),
// 7% faster at 8,16384,16,64, 8% slower at 8,16384,16,128 (group width 64) and
// 12% slower at 1,32768,32,128: the per-chunk chain (loads, barrier, products,
// mask, barrier, products, state update, barrier) leaves the tensor cores idle
// either way; a warp-specialised pipeline would be the next step.
//
// Block = (DV block of BV columns, batch*head); BV/32 warpgroups, group g owns
// DV columns 32g..32g+31 of the block. Per chunk, group g computes
//   A[:, keys of g] = Q K^T            (64 x 64/groups, shared through smem)
//   O  = scale Q (S_hi + S_lo)         (64 x 32)
//   dS = K^T V                         (DK x 32, fresh fp32 accumulators)
//   O += (A_hi + A_lo) V               (A from registers)
//   S += dS                            (fp32, IEEE additions)
// Shared tiles use wgmma's no-swizzle layout (8 x 16-byte core matrices):
//   Q, K: element (t, d) at (t/8)*DK*16 + (d/8)*128 + (t%8)*16 + (d%8)*2 bytes,
//         K-major for Q (A) and K (B of Q K^T), M-major for K^T (A of K^T V);
//   V:    element (t, j) at (j/8)*1024 + (t/8)*128 + (t%8)*16 + (j%8)*2,
//         N-major B of A V and K^T V;
//   S:    element (d, j) at (j/8)*DK*16 + (d/8)*128 + (d%8)*16 + (j%8)*2,
//         N-major B of Q S; each 16-byte row is 8 columns of one state row,
//         which is also how the bf16 snapshots leave for device memory;
//   A:    scores (t, key) at (t/8)*1024 + (key/8)*128 + (t%8)*16 + (key%8)*2,
//         K-major A of A V (hi and lo tiles, written by the groups that
//         computed them, read by all).
// Each chunk's o is staged in shared memory and stored, and h[c] copied out,
// while the next chunk's products run on the tensor cores.
#pragma once

#include "kernels/cuda/fused_tensor_core.hpp"
#include "wgmma.hpp"

namespace linattn::cuda {
namespace detail {

template <int DK, int BV, class OutT>
struct WgmmaLayout {
  static constexpr int qk_bytes = kChunk * DK * 2;
  static constexpr int v_bytes = kChunk * BV * 2;
  static constexpr int s_bytes = DK * BV * 2;
  static constexpr int q_off = 0;                       // [2] Q tiles
  static constexpr int k_off = q_off + 2 * qk_bytes;    // [2] K tiles
  static constexpr int v_off = k_off + 2 * qk_bytes;    // [2] V tiles
  static constexpr int s_hi_off = v_off + 2 * v_bytes;  // S_hi
  static constexpr int s_lo_off = s_hi_off + s_bytes;   // S_lo
  static constexpr int o_off = s_lo_off + s_bytes;      // o staging [64][o_stride] OutT
  static constexpr int o_stride = BV + 16 / int(sizeof(OutT));
  static constexpr int a_hi_off = o_off + kChunk * o_stride * int(sizeof(OutT));  // scores hi, lo
  static constexpr int a_bytes = kChunk * kChunk * 2;
  static constexpr std::size_t bytes = std::size_t(a_hi_off) + 2 * a_bytes;
};

template <class E, int DK, int BV, int GW, class OutT, class SnapT>
__global__ void __launch_bounds__(128 * (BV / GW)) fused_wgmma_kernel(FusedTensorCoreKernelArgs args) {
#if defined(LINATTN_HAS_WGMMA)
  using L = WgmmaLayout<DK, BV, OutT>;
  constexpr int kGroups = BV / GW;
  constexpr int kThreads = 128 * kGroups;
  constexpr int kKeys = kChunk / kGroups;  // score columns each group computes: 64, 32 or 16
  constexpr int kMTiles = DK / 64;         // 64-row halves of the state
  constexpr int kNTiles = GW / 8;
  constexpr bool snapshots_from_shared = std::is_same<SnapT, E>::value;
  extern __shared__ __align__(128) unsigned char shared_raw[];
  unsigned char* q_s = shared_raw + L::q_off;
  unsigned char* k_s = shared_raw + L::k_off;
  unsigned char* v_s = shared_raw + L::v_off;
  unsigned char* s_hi = shared_raw + L::s_hi_off;
  unsigned char* s_lo = shared_raw + L::s_lo_off;
  OutT* o_s = reinterpret_cast<OutT*>(shared_raw + L::o_off);
  unsigned char* a_hi = shared_raw + L::a_hi_off;
  unsigned char* a_lo = a_hi + L::a_bytes;

  // The group index through a shuffle from lane 0: the compiler then knows it is
  // warp-uniform and keeps the wgmma descriptors in uniform registers (without
  // it, every descriptor was rebuilt and moved per instruction: ~25 extra
  // instructions per wgmma, measured as 13% more issued instructions than mma.sync).
  const int grp = __shfl_sync(0xffffffffu, int(threadIdx.x >> 7), 0), cg = GW * grp;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t4 = lane & 3;
  const int T = args.T, H = args.H, DV = args.DV;
  const int b = blockIdx.y / H, hh = blockIdx.y % H, v0 = blockIdx.x * BV;
  const int NT = (T + kChunk - 1) / kChunk;
  const E* q = static_cast<const E*>(args.q) + (std::size_t(b) * T * H + hh) * DK;
  const E* k = static_cast<const E*>(args.k) + (std::size_t(b) * T * H + hh) * DK;
  const E* v = static_cast<const E*>(args.v) + (std::size_t(b) * T * H + hh) * DV + v0;
  const std::size_t qk_token = std::size_t(H) * DK, v_token = std::size_t(H) * DV;

  // Eight consecutive threads fill one core matrix (128 contiguous bytes, no
  // bank conflicts); a warp reads 64 contiguous bytes of 8 token rows.
  auto load_chunk = [&](int c, int buf) {
    const int t0 = c * kChunk;
    for (int i = threadIdx.x; i < kChunk * DK / 8; i += kThreads) {
      const int r = (i / DK) * 8 + (i & 7), s = (i >> 3) % (DK / 8), t = t0 + r;
      const std::size_t off = std::size_t(t < T ? t : 0) * qk_token + s * 8;
      const int dst = buf * L::qk_bytes + (r / 8) * DK * 16 + s * 128 + (r & 7) * 16;
      cp_async16(q_s + dst, q + off, t < T ? 16 : 0);
      cp_async16(k_s + dst, k + off, t < T ? 16 : 0);
    }
    for (int i = threadIdx.x; i < kChunk * BV / 8; i += kThreads) {
      const int r = (i / BV) * 8 + (i & 7), s = (i >> 3) % (BV / 8), t = t0 + r;
      cp_async16(v_s + buf * L::v_bytes + s * 1024 + r * 16, v + std::size_t(t < T ? t : 0) * v_token + s * 8,
                 t < T ? 16 : 0);
    }
    cp_async_commit();
  };

  // State strip S[:, v0+cg .. +32] as wgmma accumulators of K^T V:
  // s[mt][4 nt + e] is S[64 mt + 16 warp + g + 8 (e/2), 8 nt + 2 t4 + e%2].
  float s[kMTiles][4 * kNTiles];
  auto state_row = [&](int mt, int e) { return 64 * mt + 16 * warp + g + 8 * (e / 2); };
  auto state_col = [&](int i) { return cg + 8 * (i / 4) + 2 * t4 + (i % 2); };
  #pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
    #pragma unroll
    for (int i = 0; i < 4 * kNTiles; ++i)
      s[mt][i] = args.initial_state
                     ? args.initial_state[((std::size_t(b) * H + hh) * DK + state_row(mt, i % 4)) * DV + v0 + state_col(i)]
                     : 0.0f;

  // hi/lo 16-bit copies of the state for Q S, and the snapshot h[c] (or the
  // final state when c == NT) when it does not leave from shared memory.
  auto publish_state = [&](int c) {
    #pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
      #pragma unroll
      for (int i = 0; i < 4 * kNTiles; i += 2) {
        const int row = state_row(mt, i % 4), col = state_col(i);
        const float x0 = s[mt][i], x1 = s[mt][i + 1];
        const float h0 = Elem<E>::round(x0), h1 = Elem<E>::round(x1);
        const int off = (col / 8) * DK * 16 + row * 16 + (col % 8) * 2;
        *reinterpret_cast<std::uint32_t*>(s_hi + off) = Elem<E>::pack(h0, h1);
        *reinterpret_cast<std::uint32_t*>(s_lo + off) = Elem<E>::pack(x0 - h0, x1 - h1);
        if (c == NT) {
          float* f = args.final_state + ((std::size_t(b) * H + hh) * DK + row) * DV + v0 + col;
          f[0] = x0;
          f[1] = x1;
        } else if (args.h && !snapshots_from_shared) {
          SnapT* p = static_cast<SnapT*>(args.h) + (((std::size_t(b) * NT + c) * H + hh) * DK + row) * DV + v0 + col;
          store_pair<SnapT>(p, x0, x1);
        }
      }
  };

  // o of the chunk before, staged in shared memory, leaves in 16-byte pieces.
  auto store_o = [&](int c) {
    constexpr int per = 16 / int(sizeof(OutT)), segs = BV / per;
    OutT* ob = static_cast<OutT*>(args.o);
    for (int i = threadIdx.x; i < kChunk * segs; i += kThreads) {
      const int r = i / segs, sg = i % segs, t = c * kChunk + r;
      if (t < T)
        *reinterpret_cast<uint4*>(ob + ((std::size_t(b) * T + t) * H + hh) * DV + v0 + sg * per) =
            *reinterpret_cast<const uint4*>(o_s + r * L::o_stride + sg * per);
    }
  };

  load_chunk(0, 0);
  publish_state(0);
  for (int c = 0; c < NT; ++c) {
    const int buf = c & 1;
    cp_async_wait_all();
    wgmma::fence_shared_for_async();
    __syncthreads();  // chunk c and the state before it are in shared memory, o of chunk c-1 staged
    if (c + 1 < NT) load_chunk(c + 1, buf ^ 1);  // overlaps this chunk's math

    const unsigned char* qt = q_s + buf * L::qk_bytes;
    const unsigned char* kt = k_s + buf * L::qk_bytes;
    const unsigned char* vt = v_s + buf * L::v_bytes;

    // Accumulators start with ScaleD = 0 products (no zeroing: see wgmma.hpp).
    float a[kKeys / 2], o[4 * kNTiles], ds[kMTiles][4 * kNTiles];
    // Descriptors of this chunk's tiles; a k-step of 16 moves 256 bytes (16 in descriptor units).
    const std::uint64_t q_desc = wgmma::descriptor(qt, 128, DK * 16);
    const std::uint64_t k_desc = wgmma::descriptor(kt + (kKeys * grp / 8) * DK * 16, 128, DK * 16);
    const std::uint64_t kt_desc = wgmma::descriptor(kt, DK * 16, 128);  // K^T, M-major
    const std::uint64_t v_desc = wgmma::descriptor(vt + (cg / 8) * 1024, 128, 1024);
    const std::uint64_t s_hi_desc = wgmma::descriptor(s_hi + (cg / 8) * DK * 16, 128, DK * 16);
    const std::uint64_t s_lo_desc = wgmma::descriptor(s_lo + (cg / 8) * DK * 16, 128, DK * 16);
    wgmma::fence();
    // A = Q K^T for this group's keys, and O = Q (S_hi + S_lo).
    #pragma unroll
    for (int kk = 0; kk < DK / 16; ++kk) {
      const std::uint64_t qd = q_desc + 16 * kk;
      if (kk == 0) {
        wgmma::SS<E, kKeys, 0, 0, 0>::run(a, qd, k_desc);
        wgmma::SS<E, GW, 0, 1, 0>::run(o, qd, s_hi_desc);
      } else {
        wgmma::SS<E, kKeys, 0, 0>::run(a, qd, k_desc + 16 * kk);
        wgmma::SS<E, GW, 0, 1>::run(o, qd, s_hi_desc + 16 * kk);
      }
      wgmma::SS<E, GW, 0, 1>::run(o, qd, s_lo_desc + 16 * kk);
    }
    wgmma::commit();
    // dS = K^T V (independent of the scores: runs while they are masked).
    #pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
      #pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const std::uint64_t kd = kt_desc + 64 * mt + 2 * DK * kk, vd = v_desc + 16 * kk;
        if (kk == 0) wgmma::SS<E, GW, 1, 1, 0>::run(ds[mt], kd, vd);
        else wgmma::SS<E, GW, 1, 1>::run(ds[mt], kd, vd);
      }
    wgmma::commit();

    // While the tensor cores work: h[c] = S_hi (the state before chunk c) and o of chunk c-1 leave.
    if (snapshots_from_shared && args.h) {
      E* hc = static_cast<E*>(args.h) + ((std::size_t(b) * NT + c) * H + hh) * std::size_t(DK) * DV + v0;
      for (int i = threadIdx.x; i < DK * BV / 8; i += kThreads) {
        const int r = (i / BV) * 8 + (i & 7), sg = (i >> 3) % (BV / 8);
        *reinterpret_cast<uint4*>(hc + std::size_t(r) * DV + sg * 8) =
            *reinterpret_cast<const uint4*>(s_hi + sg * DK * 16 + r * 16);
      }
    }
    if (c > 0) store_o(c - 1);

    wgmma::wait<1>();
    wgmma::pin(a);
    wgmma::pin(o);
    // Causal mask and scale, then publish as hi + lo tiles;
    // a[4 j + e] is A[16 warp + g + 8 (e/2), kKeys grp + 8 j + 2 t4 + e%2].
    #pragma unroll
    for (int i = 0; i < kKeys / 2; i += 2) {
      const int row = 16 * warp + g + 8 * ((i % 4) / 2), col = kKeys * grp + 8 * (i / 4) + 2 * t4;
      const float x0 = col <= row ? a[i] * args.scale : 0.0f, x1 = col + 1 <= row ? a[i + 1] * args.scale : 0.0f;
      const float h0 = Elem<E>::round(x0), h1 = Elem<E>::round(x1);
      const int off = (row / 8) * 1024 + (col / 8) * 128 + (row % 8) * 16 + (col % 8) * 2;
      *reinterpret_cast<std::uint32_t*>(a_hi + off) = Elem<E>::pack(h0, h1);
      *reinterpret_cast<std::uint32_t*>(a_lo + off) = Elem<E>::pack(x0 - h0, x1 - h1);
    }
    #pragma unroll
    for (int i = 0; i < 4 * kNTiles; ++i) o[i] *= args.scale;
    wgmma::pin(o);  // the scaling happens before the fence below
    wgmma::fence_shared_for_async();
    __syncthreads();  // all score tiles published; o of chunk c-1 has left o_s

    // O += (A_hi + A_lo) V.
    const std::uint64_t a_hi_desc = wgmma::descriptor(a_hi, 128, 1024), a_lo_desc = wgmma::descriptor(a_lo, 128, 1024);
    wgmma::fence();
    #pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma::SS<E, GW, 0, 1>::run(o, a_hi_desc + 16 * kk, v_desc + 16 * kk);
      wgmma::SS<E, GW, 0, 1>::run(o, a_lo_desc + 16 * kk, v_desc + 16 * kk);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(o);
    #pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      wgmma::pin(ds[mt]);
      #pragma unroll
      for (int i = 0; i < 4 * kNTiles; ++i) s[mt][i] += ds[mt][i];  // S += K^T V after the output: the right shift
    }
    #pragma unroll
    for (int i = 0; i < 4 * kNTiles; i += 2)
      store_pair<OutT>(o_s + (16 * warp + g + 8 * ((i % 4) / 2)) * L::o_stride + cg + 8 * (i / 4) + 2 * t4, o[i], o[i + 1]);
    __syncthreads();  // every group is done reading S_hi/S_lo and the scores; o is staged
    publish_state(c + 1);
  }
  store_o(NT - 1);
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: there is no wgmma
#endif
}

template <class E, int DK, int BV, int GW, class OutT, class SnapT>
void launch_fused_wgmma(const FusedTensorCoreArgs& args, cudaStream_t stream) {
  auto kernel = fused_wgmma_kernel<E, DK, BV, GW, OutT, SnapT>;
  const std::size_t bytes = WgmmaLayout<DK, BV, OutT>::bytes;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) throw std::runtime_error(std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(err));
  const dim3 grid(args.DV / BV, args.B * args.H);
  kernel<<<grid, 128 * (BV / GW), bytes, stream>>>(args);
  err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string("fused wgmma launch: ") + cudaGetErrorString(err));
}

}  // namespace detail

// The wgmma kernel, same contract and block choice as run_fused_tensor_core.
template <class E, class OutT, class SnapT>
int run_fused_wgmma(const FusedTensorCoreArgs& args, int block_dv, int num_sms, cudaStream_t stream, int group_width = 32) {
  if (block_dv == 0) block_dv = choose_block_dv(args.B, args.H, args.DK, args.DV, num_sms, true);
  if (block_dv != 32 && block_dv != 64 && block_dv != 128)
    throw std::invalid_argument("tensor-core fused: block_dv must be 32, 64 or 128");
  if (args.DV % block_dv != 0) throw std::invalid_argument("tensor-core fused: DV must be a multiple of block_dv");
  auto launch = [&](auto dk) {
    constexpr int DK = decltype(dk)::value;
    if (block_dv == 128 && group_width == 64) detail::launch_fused_wgmma<E, DK, 128, 64, OutT, SnapT>(args, stream);
    else if (block_dv == 128) detail::launch_fused_wgmma<E, DK, 128, 32, OutT, SnapT>(args, stream);
    else if (block_dv == 64 && group_width == 64) detail::launch_fused_wgmma<E, DK, 64, 64, OutT, SnapT>(args, stream);
    else if (block_dv == 64) detail::launch_fused_wgmma<E, DK, 64, 32, OutT, SnapT>(args, stream);
    else detail::launch_fused_wgmma<E, DK, 32, 32, OutT, SnapT>(args, stream);
  };
  if (args.DK == 128) launch(std::integral_constant<int, 128>{});
  else launch(std::integral_constant<int, 64>{});
  return block_dv;
}

}  // namespace linattn::cuda
