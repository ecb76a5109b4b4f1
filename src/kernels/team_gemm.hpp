// The one team-level tile GEMM every kernel calls: C = alpha * op(A) op(B) + beta * C
// on scratch tiles of one element type. Two implementations sit behind it:
// the portable KokkosBatched::TeamGemm (every backend), and on host execution
// spaces the register-blocked host tile GEMM (host_tile_gemm.hpp), which is
// about 30x faster there. The kernel says which one through TileGemm; the
// portable one stays selectable (GemmPath::kokkos_kernels). Ends with a team
// barrier so that C is ready for all threads of the team.
#pragma once

#include "kernels/execution.hpp"
#include "kernels/host_tile_gemm.hpp"

#include <KokkosBatched_Gemm_Decl.hpp>

#include <type_traits>

namespace linattn {

using NoTrans = KokkosBatched::Trans::NoTranspose;
using Trans = KokkosBatched::Trans::Transpose;
using host_gemm::Triangle;

enum class TileGemm {
  portable,  // KokkosBatched::TeamGemm
  host,      // host_gemm::gemm_rows; only where host_execution holds
};

// The host implementation on Views: each thread of the team takes a
// contiguous range of row blocks of C (so that it packs each B panel once).
template <class TransA, class TransB, class Scalar, class AView, class BView, class CView>
void host_team_gemm(const Member& member, Triangle tri, Scalar alpha, const AView& A, const BView& B, Scalar beta,
                    const CView& C) {
  static_assert(std::is_same<typename AView::array_layout, Kokkos::LayoutRight>::value &&
                    std::is_same<typename BView::array_layout, Kokkos::LayoutRight>::value &&
                    std::is_same<typename CView::array_layout, Kokkos::LayoutRight>::value,
                "the host tile GEMM reads rows as contiguous");
  constexpr bool ta = std::is_same<TransA, Trans>::value, tb = std::is_same<TransB, Trans>::value;
  const int M = static_cast<int>(C.extent(0)), N = static_cast<int>(C.extent(1));
  const int K = static_cast<int>(ta ? A.extent(0) : A.extent(1));
  const int blocks = (M + host_gemm::kMR - 1) / host_gemm::kMR;
  const int threads = member.team_size();
  const int per_thread = (blocks + threads - 1) / threads;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, threads), [&](const int t) {
    const int begin = t * per_thread * host_gemm::kMR;
    const int end = (t + 1) * per_thread * host_gemm::kMR < M ? (t + 1) * per_thread * host_gemm::kMR : M;
    if (begin < end)
      host_gemm::gemm_rows<ta, tb>(tri, begin, end, N, K, alpha, A.data(), static_cast<int>(A.stride(0)), B.data(),
                                   static_cast<int>(B.stride(0)), beta, C.data(), static_cast<int>(C.stride(0)));
  });
}

// `tri` is a hint the host implementation uses to skip work on the causal
// mask's zeros (see host_gemm::Triangle); the portable one computes the full
// product, which gives the same result.
template <class TransA, class TransB, class Scalar, class AView, class BView, class CView>
KOKKOS_INLINE_FUNCTION void team_gemm(const Member& member, TileGemm path, Scalar alpha, const AView& A,
                                      const BView& B, Scalar beta, const CView& C, Triangle tri = Triangle::full) {
  if constexpr (host_execution) {
    if (path == TileGemm::host) {
      host_team_gemm<TransA, TransB>(member, tri, alpha, A, B, beta, C);
      member.team_barrier();
      return;
    }
  }
  (void)path;
  (void)tri;
  KokkosBatched::TeamGemm<Member, TransA, TransB, KokkosBatched::Algo::Gemm::Unblocked>::invoke(member, alpha, A, B,
                                                                                               beta, C);
  member.team_barrier();
}

}  // namespace linattn
