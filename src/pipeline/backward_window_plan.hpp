// The backward's windows (README.md "The backward", docs/ARCHITECTURE.md
// "The streamed backward"): a case whose working set exceeds the memory
// budget is cut along T into windows of whole chunks, the same Window as the
// forward's plan (window_plan.hpp): all B rows of tokens [t0, t1) for a plain
// batch, a piece of the one row for a packed one (a window may end inside a
// sequence, which then carries its state gradient into the window before).
// The backward walks them from the last to the first.
//
// A window's working set is what one run_backward call holds: the host
// tensors it reads (q, k, v, do, its h chunks or its start states, dht rows)
// and writes (dq, dk, dv, dh0 rows), and the kernels' copies of all of them
// (device memory, host memory on host backends), plus the recomputed o and h
// with --recompute-h. An estimate over byte counts, O(chunks) to plan.
#pragma once

#include "core/dtype.hpp"
#include "core/problem.hpp"
#include "core/gate.hpp"
#include "pipeline/window_plan.hpp"

#include <cstdint>
#include <vector>

namespace linattn {

struct BackwardStorage {
  DType input = DType::f32, output = DType::f32, accumulation = DType::f32;
  DType snapshot = DType::f32;  // h as stored (unused with recompute_h)
  bool recompute_h = false;
  GateKind gate = GateKind::none;  // g (and dg) per token, or gk (and dgk) per token and key channel, in the accumulation type
};

// The working set of window w of problem `whole`.
std::int64_t backward_window_bytes(const Problem& whole, const BackwardStorage& s, const Window& w);


// The working set a window of the case may take under --memory-budget
// `budget`: a third of it (while the kernels hold one window, the reads ahead
// fill up to three slots of at most half a window each, and three output slots hold
// what the kernels write and two windows waiting for the writer, each at most
// a third of a window), and at most kBackwardWindowCap, so that a
// case's reads, kernels and writes overlap over several windows, unless one
// chunk of every sequence needs more.
// 160 MiB: on the H100 host, 4 cases of (8,8192,16,128) bf16 took 2.33-2.43 s
// in windows of 160 MiB against 2.46-3.14 s in windows of 480 MiB (the first
// read and the last write of a case overlap nothing; BENCHMARKS.md).
constexpr std::int64_t kBackwardWindowCap = std::int64_t(160) << 20;
std::int64_t backward_window_limit(const Problem& whole, const BackwardStorage& s, std::int64_t budget);
// The bytes of a read slot for windows of at most `window_limit`: a window
// reads at most half its working set (each read is counted twice there), plus
// each block's alignment, page-aligned.
std::int64_t backward_read_slot_bytes(std::int64_t window_limit);

// One window when the whole case fits `budget`; else the fewest windows that
// fit (plain: all of equal length but the last; packed: greedy along the
// row). Throws BudgetError naming the sizes when one chunk of every sequence
// in it does not fit.
std::vector<Window> plan_backward_windows(const Problem& whole, const BackwardStorage& s, std::int64_t budget);

}  // namespace linattn
