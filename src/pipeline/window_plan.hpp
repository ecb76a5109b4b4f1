// A case cut into windows: contiguous token ranges that flow through the
// device one at a time, the state (and normalization's key sum) carried from
// one to the next. A window starts at a chunk boundary of its sequence, so the
// chunks it computes are the chunks of the whole case and its results are the
// same bits. A plain batch is cut along T for all B rows at once; a packed
// batch (cu_seqlens) is cut along its one row, so a window holds the end of
// one sequence, whole sequences, and the start of another.
//
// The plan is O(chunks) and decides nothing else: which bytes a window moves
// (WindowBytes) is what the memory budget is checked against.
#pragma once

#include "core/dtype.hpp"
#include "core/gate.hpp"
#include "core/problem.hpp"

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace linattn {

// The element types and optional parts of one case, as far as its windows' sizes go.
struct CaseStorage {
  DType input = DType::f32, output = DType::f32, accumulation = DType::f32;
  DType snapshot = DType::f32;
  bool snapshots = true;          // h is stored
  bool has_initial_state = false;  // the file holds initial_state rows
  bool has_initial_z = false;      // the file holds z_state rows
  bool normalize = false;
  GateKind gate = GateKind::none;  // g [rows, tokens, H] or g_gamma [H] in each window's input (accumulation type)
};

struct Window {
  std::int64_t t0 = 0, t1 = 0;                 // tokens [t0, t1) of every batch row (packed: of the one row)
  std::int64_t seq_begin = 0, seq_end = 0;     // sequences with tokens in the window
  bool continues = false;                      // its first sequence started before t0 (state carried in)
  bool carries = false;                        // its last sequence goes on after t1 (state carried out)
  std::int64_t chunk0 = 0, chunks = 0;         // along h's chunk axis

  std::int64_t tokens() const { return t1 - t0; }
  std::int64_t sequences() const { return seq_end - seq_begin; }
  // Sequences that start in the window (their initial state comes from the
  // file) and that end in it (their final state goes to the file).
  std::int64_t fresh_begin() const { return seq_begin + (continues ? 1 : 0); }
  std::int64_t finished_end() const { return seq_end - (carries ? 1 : 0); }
};

// What progress counts (fraction, tokens/s, ETA): every token of every batch
// row, so that a case of B rows is done when its windows' tokens add up to
// B * T (a packed batch has one row: its T tokens, every sequence's).
std::int64_t case_tokens(const Problem& whole);
std::int64_t window_tokens(const Problem& whole, const Window& w);  // its tokens times the rows it covers

// A plain batch (B rows of T tokens) cut along T into windows of `chunks`
// chunks (the last may be shorter), for all B rows at once.
std::vector<Window> plain_windows(const Problem& p, std::int64_t chunks);

// The bytes a window moves: host input slot (q, k, v and initial rows read
// from the file), host output slot (o, h, final rows written to the file),
// and what the device needs beside them (states, key sums, unnormalized o).
struct WindowBytes {
  std::int64_t input = 0, output = 0, device_extra = 0;
};
WindowBytes window_bytes(const Problem& whole, const CaseStorage& storage, const Window& w);

struct WindowLimits {
  std::int64_t input = 0, output = 0, device_extra = 0;  // per window
};

// Thrown when not even one chunk of every sequence fits the limits.
class BudgetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where a window's parts lie in its host slots (byte offsets, each aligned to
// 256 bytes). Input slot: q, k, v [rows, tokens, H, D], the initial_state and
// z_state rows of the sequences that start in the window, and the gate's
// g [rows, tokens, H] or g_gamma [H] (accumulation type).
// Output slot: o [rows, tokens, H, DV], h [rows, chunks, H, DK, DV], and the
// final_state and z_state rows of the sequences that end in it.
struct WindowLayout {
  std::int64_t rows = 1;              // batch rows of q, k, v, o (B, or 1 packed)
  std::int64_t states = 0;            // sequences (state rows) on the device: B, or the window's sequences
  std::int64_t fresh_row0 = 0, fresh_rows = 0;        // sequences starting in the window (file rows)
  std::int64_t finished_row0 = 0, finished_rows = 0;  // sequences ending in it (file rows)
  std::int64_t q = 0, k = 0, v = 0, initial_state = 0, initial_z = 0, gate = 0, input_bytes = 0;
  std::int64_t o = 0, h = 0, final_state = 0, final_z = 0, output_bytes = 0;
};
WindowLayout window_layout(const Problem& whole, const CaseStorage& storage, const Window& w);

// Cuts the case into the fewest windows within the limits (greedy, in token
// order). A plain batch's windows are whole multiples of `granule` chunks
// where one granule fits (so that they cover whole chunks of the output
// datasets), else of one chunk.
std::vector<Window> plan_windows(const Problem& whole, const CaseStorage& storage, const WindowLimits& limits,
                                 std::int64_t granule = 1);

// The whole case as one window.
Window whole_case_window(const Problem& whole);

// The windows of a part of the case (a context-parallel rank's segment, a
// Window of the case cut at chunk boundaries of its sequences): planned as
// the problem the part is (plan_windows), then placed in the case's tokens,
// chunks and sequences; the first continues what the part continues, the
// last carries what it carries.
std::vector<Window> plan_part_windows(const Problem& whole, const Window& part, const CaseStorage& storage,
                                      const WindowLimits& limits, std::int64_t granule = 1);

// The problem one window is: the same heads, dimensions, chunk and scale, its
// tokens, and (packed) its pieces of sequences as cu_seqlens from 0.
Problem window_problem(const Problem& whole, const Window& w);

}  // namespace linattn
