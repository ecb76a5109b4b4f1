#include "io/output_stream.hpp"

#include "io/hdf5_dataset.hpp"
#include "io/hdf5_types.hpp"

#include <algorithm>

namespace linattn {
namespace {

constexpr std::int64_t kChunkBytes = std::int64_t(1) << 20;

// Chunk dimensions of a compressed dataset: the leading (row) axis 1, the
// window axis `extent`, the rest whole. Uncompressed datasets are contiguous
// (none): a window's block is then one run of bytes per row, which HDF5
// writes straight from the slot, where chunks would pass through its chunk
// cache first (the writer took about 1.4x as long; BENCHMARKS.md, "End to end").
std::vector<hsize_t> chunks_of(const std::vector<std::int64_t>& shape, int window_axis, std::int64_t extent,
                               bool compress) {
  if (!compress) return {};
  std::vector<hsize_t> chunk(shape.begin(), shape.end());
  for (int a = 0; a < window_axis; ++a) chunk[a] = 1;
  chunk[window_axis] = static_cast<hsize_t>(std::clamp<std::int64_t>(extent, 1, shape[window_axis]));
  return chunk;
}

}  // namespace

OutputLayout output_layout(const Problem& p, DType o, DType h, DType state, bool snapshots, bool normalize,
                           bool compress) {
  OutputLayout l;
  l.o = o;
  l.h = h;
  l.state = state;
  l.snapshots = snapshots;
  l.normalize = normalize;
  l.compress = compress;
  const std::int64_t o_token = p.H * p.DV * static_cast<std::int64_t>(dtype_size(o));
  l.o_tokens = std::max<std::int64_t>(1, kChunkBytes / (p.chunk * o_token)) * p.chunk;
  l.h_chunks = std::max<std::int64_t>(1, kChunkBytes / (p.H * p.DK * p.DV * static_cast<std::int64_t>(dtype_size(h))));
  l.state_rows = std::max<std::int64_t>(1, kChunkBytes / (p.H * p.DK * p.DV * static_cast<std::int64_t>(dtype_size(state))));
  return l;
}

OutputStream::OutputStream(const std::string& path, const Problem& p, const OutputLayout& layout)
    : file_(path), p_(p), layout_(layout) {
  const hid_t f = file_.id();
  const bool packed = p.varlen();
  o_type_ = hdf5::datatype_of(layout.o);
  h_type_ = hdf5::datatype_of(layout.h);
  state_type_ = hdf5::datatype_of(layout.state);
  o_ = hdf5::create_dataset(f, path, "o", layout.o, p.o_shape(),
                            chunks_of(p.o_shape(), 1, layout.o_tokens, layout.compress),
                            layout.compress);
  hdf5::write_attribute(f, path, "o", "layout", "BTHD");
  if (layout.snapshots) {
    h_ = hdf5::create_dataset(f, path, "h", layout.h, p.h_shape(),
                              chunks_of(p.h_shape(), 1, layout.h_chunks, layout.compress),
                              layout.compress);
    hdf5::write_attribute(f, path, "h", "layout", packed ? "1,total_chunks,H,DK,DV" : "B,NT,H,DK,DV");
    hdf5::write_attribute(f, path, "h", "description", "h[:, c] is the state before chunk c; h[:, 0] is the initial state");
  }
  final_state_ = hdf5::create_dataset(
      f, path, "final_state", layout.state, p.state_shape(),
      chunks_of(p.state_shape(), 0, layout.state_rows, layout.compress), layout.compress);
  hdf5::write_attribute(f, path, "final_state", "layout", packed ? "N,H,DK,DV" : "B,H,DK,DV");
  if (packed) hdf5::write_index_vector(f, path, "cu_seqlens", p.cu_seqlens);
  if (layout.normalize) {
    z_state_ = hdf5::create_dataset(
        f, path, "z_state", layout.state, p.z_shape(),
        chunks_of(p.z_shape(), 0, layout.state_rows * p.DV, layout.compress),
        layout.compress);
    hdf5::write_attribute(f, path, "z_state", "layout", packed ? "N,H,DK" : "B,H,DK");
    hdf5::write_attribute(f, path, "z_state", "description",
                          "the running key sum z after each sequence's last token (normalization); the z_state input of a run that resumes it");
  }
  if (!layout.compress) {  // contiguous: allocated at creation
    raw_.o = hdf5::data_offset(o_.get());
    if (layout.snapshots) raw_.h = hdf5::data_offset(h_.get());
    raw_.final_state = hdf5::data_offset(final_state_.get());
    if (layout.normalize) raw_.z_state = hdf5::data_offset(z_state_.get());
  }
}

void OutputStream::write_o(std::int64_t t0, std::int64_t t1, const void* data) {
  const hsize_t rows = static_cast<hsize_t>(p_.varlen() ? 1 : p_.B);
  hdf5::write_block(o_.get(), o_type_.get(), {0, hsize_t(t0), 0, 0},
                    {rows, hsize_t(t1 - t0), hsize_t(p_.H), hsize_t(p_.DV)}, data, path(), "o");
}

void OutputStream::write_h(std::int64_t c0, std::int64_t count, const void* data) {
  if (!layout_.snapshots || count == 0) return;
  const hsize_t rows = static_cast<hsize_t>(p_.varlen() ? 1 : p_.B);
  hdf5::write_block(h_.get(), h_type_.get(), {0, hsize_t(c0), 0, 0, 0},
                    {rows, hsize_t(count), hsize_t(p_.H), hsize_t(p_.DK), hsize_t(p_.DV)}, data, path(), "h");
}

void OutputStream::write_final(std::int64_t n0, std::int64_t count, const void* state, const void* z) {
  if (count == 0) return;
  hdf5::write_block(final_state_.get(), state_type_.get(), {hsize_t(n0), 0, 0, 0},
                    {hsize_t(count), hsize_t(p_.H), hsize_t(p_.DK), hsize_t(p_.DV)}, state, path(), "final_state");
  if (layout_.normalize)
    hdf5::write_block(z_state_.get(), state_type_.get(), {hsize_t(n0), 0, 0}, {hsize_t(count), hsize_t(p_.H), hsize_t(p_.DK)},
                      z, path(), "z_state");
}

void OutputStream::finish(const RunRecord& record, bool durable) {
  close(record);
  publish(durable);
}

void OutputStream::close(const RunRecord& record) {
  write_run_record(file_.id(), path(), record);
  o_.close();
  h_.close();
  final_state_.close();
  z_state_.close();
  o_type_.close();
  h_type_.close();
  state_type_.close();
  file_.close_file();  // after it, nothing of this object calls HDF5 again
}

}  // namespace linattn
