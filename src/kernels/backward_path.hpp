// The backward's kernels on the path choose_backward_path picked: the CUDA
// tensor-core backward, or the portable TeamPolicy one with its tile GEMM.
#pragma once

#include "kernels/fused_backward.hpp"
#include "kernels/path_choice.hpp"
#include "kernels/tensor_core_backward_dispatch.hpp"

namespace linattn {

template <class Views, class Acc>
void run_backward_path(const Problem& p, const Views& views, const SequenceMap& seqs, GemmPath path, int team_size) {
  if (path == GemmPath::tensor_core) return run_tensor_core_backward(p, views);
  run_fused_backward<Views, Acc>(p, views, seqs, team_size,
                                 path == GemmPath::host_tile ? TileGemm::host : TileGemm::portable);
}

}  // namespace linattn
