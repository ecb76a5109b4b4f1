#include "io/grad_output_stream.hpp"

#include "io/hdf5_dataset.hpp"

#include <algorithm>

namespace linattn {

GradOutputStream::GradOutputStream(const std::string& path, const Problem& p, DType tokens, DType state,
                                   GateKind gate)
    : file_(path), gate_(gate) {
  const hid_t f = file_.id();
  dq_ = hdf5::create_dataset(f, path, "dq", tokens, p.qk_shape(), {}, false);
  dk_ = hdf5::create_dataset(f, path, "dk", tokens, p.qk_shape(), {}, false);
  dv_ = hdf5::create_dataset(f, path, "dv", tokens, p.v_shape(), {}, false);
  dh0_ = hdf5::create_dataset(f, path, "dh0", state, p.state_shape(), {}, false);
  if (gate != GateKind::none)
    dg_ = hdf5::create_dataset(f, path, gate_gradient_name(gate), state, gate_shape(p, gate), {}, false);
  offsets_.tokens = tokens;
  offsets_.state = state;
  offsets_.dq = hdf5::data_offset(dq_.get());
  offsets_.dk = hdf5::data_offset(dk_.get());
  offsets_.dv = hdf5::data_offset(dv_.get());
  offsets_.dh0 = hdf5::data_offset(dh0_.get());
  if (gate != GateKind::none) offsets_.dg = hdf5::data_offset(dg_.get());
  auto end_of = [&](std::int64_t offset, DType dtype, const std::vector<std::int64_t>& shape) {
    if (offset >= 0) data_end_ = std::max(data_end_, offset + tensor_bytes(dtype, shape));
  };
  end_of(offsets_.dq, tokens, p.qk_shape());
  end_of(offsets_.dk, tokens, p.qk_shape());
  end_of(offsets_.dv, tokens, p.v_shape());
  end_of(offsets_.dh0, state, p.state_shape());
  if (gate != GateKind::none) end_of(offsets_.dg, state, gate_shape(p, gate));
  write_grad_dataset_attributes(f, path, p.varlen());
  if (p.varlen()) hdf5::write_index_vector(f, path, "cu_seqlens", p.cu_seqlens);
}

void GradOutputStream::write_tokens(std::int64_t t0, const TensorSpan& dq, const TensorSpan& dk, const TensorSpan& dv) {
  hdf5::write_block_tensor(dq_.get(), dq, {0, t0, 0, 0}, path(), "dq");
  hdf5::write_block_tensor(dk_.get(), dk, {0, t0, 0, 0}, path(), "dk");
  hdf5::write_block_tensor(dv_.get(), dv, {0, t0, 0, 0}, path(), "dv");
}

void GradOutputStream::write_dh0(std::int64_t n0, const Tensor& rows) {
  hdf5::write_block_tensor(dh0_.get(), rows, {n0, 0, 0, 0}, path(), "dh0");
}

void GradOutputStream::write_dg(std::int64_t t0, const TensorSpan& dg) {
  std::vector<std::int64_t> start(dg.shape.size(), 0);  // [rows, T', H] or [rows, T', H, DK] at token t0
  start.at(1) = t0;
  hdf5::write_block_tensor(dg_.get(), dg, start, path(), gate_gradient_name(gate_));
}

void GradOutputStream::write_dg_gamma(const Tensor& dg_gamma) {
  hdf5::write_block_tensor(dg_.get(), dg_gamma, {0}, path(), "dg_gamma");
}

void GradOutputStream::finish(const GradRecord& record, bool durable) {
  write_grad_record(file_.id(), path(), record);
  dq_.close();
  dk_.close();
  dv_.close();
  dh0_.close();
  if (dg_.valid()) dg_.close();
  file_.commit(durable);
}

}  // namespace linattn
