#include "pipeline/raw_window_writes.hpp"

#include "io/file_error.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace linattn::pipeline {

std::vector<RawRun> window_runs(const Problem& whole, const OutputLayout& layout, const RawOffsets& at, const Window& w,
                                const WindowLayout& l) {
  std::vector<RawRun> runs;
  auto add = [&](std::int64_t file_offset, std::int64_t slot_offset, std::int64_t bytes, const char* dataset) {
    if (bytes > 0) runs.push_back({file_offset, slot_offset, bytes, dataset});
  };
  const std::int64_t o_token = whole.H * whole.DV * static_cast<std::int64_t>(dtype_size(layout.o));
  for (std::int64_t r = 0; r < l.rows; ++r)  // o [rows, T, H, DV]: tokens [t0, t1) of row r
    add(at.o + (r * whole.T + w.t0) * o_token, l.o + r * w.tokens() * o_token, w.tokens() * o_token, "o");
  if (layout.snapshots) {
    const std::int64_t h_chunk = whole.H * whole.DK * whole.DV * static_cast<std::int64_t>(dtype_size(layout.h));
    const std::int64_t chunks = whole.h_shape()[1];
    for (std::int64_t r = 0; r < l.rows; ++r)  // h [rows, chunks, H, DK, DV]: chunks [chunk0, + chunks) of row r
      add(at.h + (r * chunks + w.chunk0) * h_chunk, l.h + r * w.chunks * h_chunk, w.chunks * h_chunk, "h");
  }
  const std::int64_t s = static_cast<std::int64_t>(dtype_size(layout.state));
  const std::int64_t state_row = whole.H * whole.DK * whole.DV * s;
  add(at.final_state + l.finished_row0 * state_row, l.final_state, l.finished_rows * state_row, "final_state");
  if (layout.normalize) {
    const std::int64_t z_row = whole.H * whole.DK * s;
    add(at.z_state + l.finished_row0 * z_row, l.final_z, l.finished_rows * z_row, "z_state");
  }
  return runs;
}

std::int64_t raw_end(const Problem& whole, const OutputLayout& layout, const RawOffsets& at) {
  std::int64_t end = 0;
  auto add = [&](std::int64_t offset, DType dtype, const std::vector<std::int64_t>& shape) {
    if (offset >= 0) end = std::max(end, offset + tensor_bytes(dtype, shape));
  };
  add(at.o, layout.o, whole.o_shape());
  if (layout.snapshots) add(at.h, layout.h, whole.h_shape());
  add(at.final_state, layout.state, whole.state_shape());
  if (layout.normalize) add(at.z_state, layout.state, whole.z_shape());
  return end;
}

std::vector<RawRun> split_runs(const std::vector<RawRun>& runs, std::int64_t max_bytes) {
  std::vector<RawRun> pieces;
  const std::int64_t step = std::max<std::int64_t>(1, max_bytes);
  for (const RawRun& run : runs)
    for (std::int64_t done = 0; done < run.bytes; done += step)
      pieces.push_back({run.file_offset + done, run.slot_offset + done, std::min(step, run.bytes - done), run.dataset});
  return pieces;
}

void write_run(int fd, const RawRun& run, const unsigned char* slot, const std::string& file) {
  const unsigned char* src = slot + run.slot_offset;
  std::int64_t done = 0;
  while (done < run.bytes) {
    const ssize_t n = ::pwrite(fd, src + done, static_cast<std::size_t>(run.bytes - done), run.file_offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)  // 0 would loop forever: a device that takes nothing is full
      throw FileError::preformatted(std::string(std::strerror(n < 0 ? errno : ENOSPC)) + " while writing dataset '" +
                                    run.dataset + "' of " + file);
    done += n;
  }
}

}  // namespace linattn::pipeline
