// A window's output blocks written straight into the output file, without
// HDF5: its contiguous datasets were allocated when the file was created
// (OutputStream::raw_offsets), so each block is a few runs of bytes at known
// offsets, which any process may pwrite while the one that created the file
// keeps it open in HDF5 for the metadata. Context parallel's ranks write
// their segments' windows into one output file this way (write_stage.hpp).
#pragma once

#include "io/output_stream.hpp"
#include "pipeline/window_plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace linattn::pipeline {

// bytes at slot_offset of the output slot go to file_offset of the file.
struct RawRun {
  std::int64_t file_offset = 0, slot_offset = 0, bytes = 0;
  const char* dataset = "";  // for messages
};

// The runs of window w (slot layout l): one per batch row of o and of h, then
// the final_state rows and z_state rows of the sequences that end in it, in
// the order the write stage's HDF5 path writes them.
std::vector<RawRun> window_runs(const Problem& whole, const OutputLayout& layout, const RawOffsets& at, const Window& w,
                                const WindowLayout& l);

// The end of the file's last dataset that `at` locates (the bytes a mapping
// of the file must cover).
std::int64_t raw_end(const Problem& whole, const OutputLayout& layout, const RawOffsets& at);

// The runs cut into pieces of at most max_bytes, in order, to share among threads.
std::vector<RawRun> split_runs(const std::vector<RawRun>& runs, std::int64_t max_bytes);

// Writes one run in full (pwrite, again after a short write or EINTR).
// Throws FileError "<reason> while writing dataset 'h' of FILE", the
// message the HDF5 path gives.
void write_run(int fd, const RawRun& run, const unsigned char* slot, const std::string& file);

}  // namespace linattn::pipeline
