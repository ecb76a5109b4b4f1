// Where the streamed backward (streamed_backward.hpp) puts a window's dq,
// dk, dv and the gate's dg: one slot of a page-locked output region, which
// the kernels' results are copied into straight from the device and the
// writer thread writes to the file from, so no window allocates (and faults
// in) fresh host memory.
#pragma once

#include "core/gate.hpp"
#include "core/problem.hpp"
#include "kernels/backward.hpp"

#include <cstdint>

namespace linattn {

// The bytes a window's outputs take in a slot: window problem wp (window_problem),
// dq, dk, dv in `output`, dg in `accumulation` when gated.
std::int64_t backward_window_output_bytes(const Problem& wp, DType output, DType accumulation, GateKind gate);

// Those outputs laid out from `slot`, as run_backward's targets (dg empty without a gate).
BackwardTargets backward_window_targets(const Problem& wp, DType output, DType accumulation, GateKind gate,
                                        unsigned char* slot);

}  // namespace linattn
