// An output file written window by window: the datasets of the output schema
// (output_file.hpp) are created up front (contiguous; with --compress,
// chunked with chunks that whole windows cover), and each window's o, h and
// final rows are written as blocks into them. finish() adds the run's attributes and commits the file (.partial ->
// final name, with fsync unless asked not to); an OutputStream destroyed
// before finish() removes its .partial file. Contiguous datasets are
// allocated when created: raw_offsets() says where their bytes lie, so that
// other processes can write blocks without HDF5 (raw_window_writes.hpp).
#pragma once

#include "core/problem.hpp"
#include "io/hdf5_file.hpp"
#include "io/output_file.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

struct OutputLayout {
  DType o = DType::f32, h = DType::f32, state = DType::f32;
  bool snapshots = true, normalize = false;
  bool compress = false;
  // Chunk extents along the window axes: tokens of o, chunks of h, rows of
  // final_state and z_state (0: the whole axis).
  std::int64_t o_tokens = 0, h_chunks = 0, state_rows = 0;
};

// Chunk extents for a problem: about 1 MiB per chunk, o's token extent a
// multiple of the chunk length C.
OutputLayout output_layout(const Problem& p, DType o, DType h, DType state, bool snapshots, bool normalize,
                           bool compress);

// Where the datasets' data lie in the file (byte offsets; -1: none, or chunked).
struct RawOffsets {
  std::int64_t o = -1, h = -1, final_state = -1, z_state = -1;
  // Every dataset the stream writes has its offset: blocks may bypass HDF5.
  bool complete(bool snapshots, bool normalize) const {
    return o >= 0 && (!snapshots || h >= 0) && final_state >= 0 && (!normalize || z_state >= 0);
  }
};

class OutputStream {
 public:
  OutputStream(const std::string& path, const Problem& p, const OutputLayout& layout);

  // Blocks of the window [t0, t1) of every batch row (o: [rows, t1 - t0, H, DV]
  // contiguous), of chunks [c0, c0 + count) (h: [rows, count, H, DK, DV]), and
  // of final rows [n0, n0 + count) (final_state [count, H, DK, DV], z_state [count, H, DK]).
  void write_o(std::int64_t t0, std::int64_t t1, const void* data);
  void write_h(std::int64_t c0, std::int64_t count, const void* data);
  void write_final(std::int64_t n0, std::int64_t count, const void* state, const void* z);

  void finish(const RunRecord& record, bool durable);
  // finish() in two steps: the attributes and HDF5's close (the HDF5 thread),
  // then the flush to disk and the rename (any thread).
  void close(const RunRecord& record);
  void publish(bool durable) { file_.publish(durable); }
  const std::string& path() const { return file_.path(); }
  const std::string& partial_path() const { return file_.partial_path(); }
  const RawOffsets& raw_offsets() const { return raw_; }

 private:
  hdf5::NewFile file_;
  Problem p_;
  OutputLayout layout_;
  hdf5::Dataset o_, h_, final_state_, z_state_;
  hdf5::Datatype o_type_, h_type_, state_type_;
  RawOffsets raw_;
};

}  // namespace linattn
