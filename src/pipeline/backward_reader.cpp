#include "pipeline/backward_reader.hpp"

#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/input_file.hpp"

namespace linattn {

BackwardReader::BackwardReader(const BackwardSources& s, const Problem& whole)
    : src_(s), p_(plain_problem(whole, whole.B, whole.T)) {
  input_ = hdf5::open_read_only(s.input_file);
  const hid_t in = input_.get();
  q_ = hdf5::open_dataset(in, s.input_file, dataset_path(s.input_group, "q"));
  k_ = hdf5::open_dataset(in, s.input_file, dataset_path(s.input_group, "k"));
  v_ = hdf5::open_dataset(in, s.input_file, dataset_path(s.input_group, "v"));
  if (s.has_initial_state) {
    const std::string path = dataset_path(s.input_group, "initial_state");
    initial_dtype_ = hdf5::dataset_info(in, s.input_file, path).dtype;
    initial_ = hdf5::open_dataset(in, s.input_file, path);
  }
  if (s.gate != GateKind::none)
    gate_ = hdf5::open_dataset(in, s.input_file, dataset_path(s.input_group, gate_dataset_name(s.gate)));
  grad_ = hdf5::open_read_only(s.grad_file);
  do_ = hdf5::open_dataset(grad_.get(), s.grad_file, dataset_path(s.grad_group, "do"));
  if (s.has_dht) dht_ = hdf5::open_dataset(grad_.get(), s.grad_file, dataset_path(s.grad_group, "dht"));
  if (s.read_h) {
    forward_ = hdf5::open_read_only(s.forward_file);
    h_dtype_ = hdf5::dataset_info(forward_.get(), s.forward_file, "h").dtype;
    h_ = hdf5::open_dataset(forward_.get(), s.forward_file, "h");
  }
}

Tensor BackwardReader::block(const hdf5::Dataset& ds, const std::string& file, const std::string& path, DType dtype,
                             const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& count,
                             bool check, const std::string& window) const {
  Tensor t = hdf5::read_block_tensor(ds.get(), dtype, start, count, file, path);
  if (check && !src_.allow_nonfinite) check_finite(t.bytes.data(), t.dtype, t.shape, start, file, path, window);
  return t;
}

BackwardReader::Tokens BackwardReader::tokens(const Window& w, bool with_do) const {
  const std::string window =
      w.t0 == 0 && w.t1 == p_.T ? "" : "in tokens [" + std::to_string(w.t0) + ", " + std::to_string(w.t1) + ")";
  const std::vector<std::int64_t> start = {0, w.t0, 0, 0};
  const std::vector<std::int64_t> qk = {p_.B, w.tokens(), p_.H, p_.DK}, v = {p_.B, w.tokens(), p_.H, p_.DV};
  const std::string& in = src_.input_file;
  Tokens t;
  t.q = block(q_, in, dataset_path(src_.input_group, "q"), src_.input, start, qk, true, window);
  t.k = block(k_, in, dataset_path(src_.input_group, "k"), src_.input, start, qk, true, window);
  t.v = block(v_, in, dataset_path(src_.input_group, "v"), src_.input, start, v, true, window);
  if (with_do)
    t.d_o = block(do_, src_.grad_file, dataset_path(src_.grad_group, "do"), src_.input, start, v, true, window);
  return t;
}

Tensor BackwardReader::gate(const Window& w) const {
  if (src_.gate == GateKind::none) return Tensor();
  const std::string path = dataset_path(src_.input_group, gate_dataset_name(src_.gate));
  const bool per_token = src_.gate != GateKind::per_head;  // g [B, T, H] or gk [B, T, H, DK]: the window's tokens
  std::vector<std::int64_t> start = {0}, count = {p_.H};
  if (src_.gate == GateKind::per_token) start = {0, w.t0, 0}, count = {p_.B, w.tokens(), p_.H};
  if (src_.gate == GateKind::per_channel) start = {0, w.t0, 0, 0}, count = {p_.B, w.tokens(), p_.H, p_.DK};
  Tensor g = hdf5::read_block_tensor(gate_.get(), src_.accumulation, start, count, src_.input_file, path);
  const std::string window =
      !per_token || (w.t0 == 0 && w.t1 == p_.T) ? "" : "in tokens [" + std::to_string(w.t0) + ", " + std::to_string(w.t1) + ")";
  check_log_decays(g.bytes.data(), g.dtype, g.shape, start, src_.input_file, path, window);
  return g;
}

Tensor BackwardReader::h(const Window& w) const {
  const std::int64_t rows = p_.B;  // a packed case's B is 1, as is its h's
  return block(h_, src_.forward_file, "h", h_dtype_, {0, w.chunk0, 0, 0, 0}, {rows, w.chunks, p_.H, p_.DK, p_.DV},
               false, "");
}

Tensor BackwardReader::rows(const hdf5::Dataset& ds, const std::string& file, const std::string& path,
                            std::int64_t n0, std::int64_t count) const {
  const DType stored = &ds == &initial_ ? initial_dtype_ : src_.accumulation;
  Tensor t = block(ds, file, path, stored, {n0, 0, 0, 0}, {count, p_.H, p_.DK, p_.DV}, true, "");
  // As run_backward converts a whole initial_state (forward_typed.hpp, converted).
  return t.dtype == src_.accumulation ? t : Tensor::from_double(src_.accumulation, t.shape, t.to_double());
}

Tensor BackwardReader::initial_rows(std::int64_t n0, std::int64_t count) const {
  if (!src_.has_initial_state) return Tensor(src_.accumulation, {count, p_.H, p_.DK, p_.DV});
  return rows(initial_, src_.input_file, dataset_path(src_.input_group, "initial_state"), n0, count);
}

Tensor BackwardReader::dht_rows(std::int64_t n0, std::int64_t count) const {
  if (!src_.has_dht) return Tensor(src_.accumulation, {count, p_.H, p_.DK, p_.DV});
  return rows(dht_, src_.grad_file, dataset_path(src_.grad_group, "dht"), n0, count);
}

}  // namespace linattn
