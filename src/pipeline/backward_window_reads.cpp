#include "pipeline/backward_window_reads.hpp"

#include "io/input_file.hpp"

#include <cstring>

namespace linattn {
namespace {

constexpr std::int64_t kAlignment = 64;  // each block starts on a cache line of the slot

std::string window_text(const Problem& p, const Window& w) {
  return w.t0 == 0 && w.t1 == p.T ? "" : "in tokens [" + std::to_string(w.t0) + ", " + std::to_string(w.t1) + ")";
}

}  // namespace

BackwardWindowRead backward_window_read(const BackwardSources& src, const Problem& whole, const Window& w,
                                        const WindowParts& parts) {
  using pipeline::BlockCheck;
  BackwardWindowRead r;
  const Problem& p = whole;
  const BlockCheck inputs = src.allow_nonfinite ? BlockCheck::none : BlockCheck::finite;
  const std::string window = window_text(p, w);
  auto add = [&](const std::string& file, const std::string& path, std::vector<std::int64_t> start,
                 std::vector<std::int64_t> count, DType dtype, BlockCheck check, const std::string& where) {
    pipeline::BlockRead b{file, path, std::move(start), std::move(count), dtype, check, where, r.bytes};
    r.bytes += (b.bytes() + kAlignment - 1) / kAlignment * kAlignment;
    r.blocks.push_back(std::move(b));
    return static_cast<int>(r.blocks.size()) - 1;
  };
  const std::vector<std::int64_t> start = {0, w.t0, 0, 0};
  const std::vector<std::int64_t> qk = {p.B, w.tokens(), p.H, p.DK}, v = {p.B, w.tokens(), p.H, p.DV};
  const std::string& in = src.input_file;
  r.q = add(in, dataset_path(src.input_group, "q"), start, qk, src.input, inputs, window);
  r.k = add(in, dataset_path(src.input_group, "k"), start, qk, src.input, inputs, window);
  r.v = add(in, dataset_path(src.input_group, "v"), start, v, src.input, inputs, window);
  if (parts.d_o) r.d_o = add(src.grad_file, dataset_path(src.grad_group, "do"), start, v, src.input, inputs, window);
  if (parts.h)  // a packed case's B is 1, as is its h's
    r.h = add(src.forward_file, "h", {0, w.chunk0, 0, 0, 0}, {p.B, w.chunks, p.H, p.DK, p.DV}, src.h_dtype,
              BlockCheck::none, "");
  if (src.gate != GateKind::none) {
    const std::string path = dataset_path(src.input_group, gate_dataset_name(src.gate));
    if (src.gate == GateKind::per_head)
      r.gate = add(in, path, {0}, {p.H}, src.accumulation, BlockCheck::log_decays, "");
    else if (src.gate == GateKind::per_token)
      r.gate = add(in, path, {0, w.t0, 0}, {p.B, w.tokens(), p.H}, src.accumulation, BlockCheck::log_decays, window);
    else
      r.gate = add(in, path, start, qk, src.accumulation, BlockCheck::log_decays, window);
  }
  if (parts.initial_rows > 0 && src.has_initial_state)
    r.initial = add(in, dataset_path(src.input_group, "initial_state"), {parts.initial_row0, 0, 0, 0},
                    {parts.initial_rows, p.H, p.DK, p.DV}, src.initial_dtype, inputs, "");
  if (parts.dht_rows > 0 && src.has_dht)
    r.dht = add(src.grad_file, dataset_path(src.grad_group, "dht"), {parts.dht_row0, 0, 0, 0},
                {parts.dht_rows, p.H, p.DK, p.DV}, src.accumulation, inputs, "");
  return r;
}

BackwardWindowData unpack(const BackwardWindowRead& read, const BackwardSources& src, unsigned char* slot) {
  auto span = [&](int i) {
    if (i < 0) return TensorSpan();
    const pipeline::BlockRead& b = read.blocks[static_cast<std::size_t>(i)];
    return TensorSpan(b.dtype, b.count, slot + b.offset);
  };
  BackwardWindowData d;
  d.q = span(read.q);
  d.k = span(read.k);
  d.v = span(read.v);
  d.d_o = span(read.d_o);
  d.h = span(read.h);
  d.gate = span(read.gate);
  d.initial_rows = span(read.initial).copy();
  // As run_backward converts a whole initial_state (forward_typed.hpp, converted).
  if (!d.initial_rows.empty() && d.initial_rows.dtype != src.accumulation)
    d.initial_rows = Tensor::from_double(src.accumulation, d.initial_rows.shape, d.initial_rows.to_double());
  d.dht_rows = span(read.dht).copy();
  return d;
}

}  // namespace linattn
