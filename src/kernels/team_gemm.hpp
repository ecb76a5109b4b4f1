// The one team-level tile GEMM every kernel calls: C = alpha * op(A) op(B) + beta * C
// on scratch tiles of one element type. Its portable implementation is
// KokkosBatched::TeamGemm; a backend-specific one (tensor cores) can be added
// behind the same call. Ends with a team barrier so that C is ready for all
// threads of the team.
#pragma once

#include "kernels/execution.hpp"

#include <KokkosBatched_Gemm_Decl.hpp>

namespace linattn {

using NoTrans = KokkosBatched::Trans::NoTranspose;
using Trans = KokkosBatched::Trans::Transpose;

template <class TransA, class TransB, class Scalar, class AView, class BView, class CView>
KOKKOS_INLINE_FUNCTION void team_gemm(const Member& member, Scalar alpha, const AView& A, const BView& B,
                                      Scalar beta, const CView& C) {
  KokkosBatched::TeamGemm<Member, TransA, TransB, KokkosBatched::Algo::Gemm::Unblocked>::invoke(member, alpha, A, B,
                                                                                               beta, C);
  member.team_barrier();
}

}  // namespace linattn
