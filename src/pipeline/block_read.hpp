// A read of one hyperslab block of one dataset into memory at an offset of a
// region, described as plain data so that a reader process can do it for the
// batch process (read_protocol.hpp, read_process.cpp): the streamed
// backward's windows (backward_window_reads.hpp) are lists of these, over
// three files (the input case, the gradient input, the forward output).
#pragma once

#include "core/dtype.hpp"
#include "io/hdf5_handles.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace linattn::pipeline {

// What is checked once a block is in memory (io/input_file.hpp).
enum class BlockCheck : std::int64_t {
  none = 0,        // snapshots (written by linattn), or inputs under --allow-nonfinite
  finite = 1,      // check_finite: NaN and Inf refused
  log_decays = 2,  // check_log_decays: gates, whatever --allow-nonfinite says
};

struct BlockRead {
  std::string file, path;                  // the dataset
  std::vector<std::int64_t> start, count;  // the block
  DType dtype = DType::f32;                // in memory (HDF5 converts from the file's type)
  BlockCheck check = BlockCheck::none;
  std::string window;       // appended to a check's message ("in tokens [a, b)"), or ""
  std::int64_t offset = 0;  // where the block goes in the region
  std::int64_t bytes() const;
};

// The files and datasets that block reads opened, kept open for the next
// reads (a case's windows read the same datasets); clear() closes them.
class OpenDatasets {
 public:
  hid_t dataset(const std::string& file, const std::string& path);
  void clear();
  ~OpenDatasets() { clear(); }

 private:
  std::map<std::string, hdf5::File> files_;
  std::map<std::pair<std::string, std::string>, hdf5::Dataset> datasets_;
};

// Reads the block `start`/`count` of a [rows, tokens, ...] dataset into dst
// (row-major, as one hdf5::read_block would) a row and at most
// kCachedBlockBytes at a time, and returns how many of its elements are NaN or
// Inf, each piece counted right after its read, while it is still in cache
// (the whole block counted after the read came back from memory a second time).
constexpr std::int64_t kCachedBlockBytes = std::int64_t(512) << 10;
std::int64_t read_counting_nonfinite(hid_t dataset, hid_t memory_type, DType dtype,
                                     const std::vector<hsize_t>& start, const std::vector<hsize_t>& count,
                                     unsigned char* dst, const std::string& file, const std::string& path);

// Reads the block as read_counting_nonfinite does and, where it holds a NaN or
// Inf, throws check_finite's FileError for the whole block (its count and the
// first one, with `window` appended): the one way q, k, v and do are read.
void read_finite_block(hid_t dataset, hid_t memory_type, DType dtype, const std::vector<hsize_t>& start,
                       const std::vector<hsize_t>& count, unsigned char* dst, const std::string& file,
                       const std::string& path, const std::string& window);

// Reads every block into region + its offset, in order, and checks it. Throws
// FileError (naming the file, the dataset and the element) or
// std::runtime_error for a block outside the region.
void read_blocks(const std::vector<BlockRead>& blocks, unsigned char* region, std::int64_t region_bytes,
                 OpenDatasets& open);

}  // namespace linattn::pipeline
