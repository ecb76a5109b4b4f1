// What every portable kernel knows of the problem and of its league, in one
// place (named fields, not positional ints): the kernels take both as base
// members, so their bodies read H, DK, DV, C, block_dv, num_blocks and level.
#pragma once

#include "core/problem.hpp"
#include "kernels/scratch_plan.hpp"

namespace linattn {

// Heads, key and value widths, chunk length.
struct KernelShape {
  int H, DK, DV, C;
};

inline KernelShape kernel_shape(const Problem& p) {
  return {static_cast<int>(p.H), static_cast<int>(p.DK), static_cast<int>(p.DV), static_cast<int>(p.chunk)};
}

// The league's DV blocks (block_dv columns each, num_blocks of them over DV)
// and the team scratch level their tiles live in.
struct BlockPlan {
  int block_dv, num_blocks, level;
};

inline BlockPlan block_plan(const ScratchPlan& plan, std::int64_t DV) {
  return {static_cast<int>(plan.block_dv), static_cast<int>(ceil_div(DV, plan.block_dv)), plan.level};
}

}  // namespace linattn
