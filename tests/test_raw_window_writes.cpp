// Output windows written without HDF5 (pipeline/raw_window_writes.hpp, the
// write stage's raw writers): the bytes land exactly where HDF5's own block
// writes put them. Each case writes one output file through HDF5 and another
// through raw runs (cut into small pieces, windows in reverse order, or
// through a WriteStage with several raw writers), from the same seeded
// random slot bytes, and compares every dataset read back through HDF5,
// bit for bit: plain and packed batches, with and without snapshots, with
// normalization's z_state, 16-bit and fp32 outputs.
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/output_stream.hpp"
#include "pipeline/host_buffers.hpp"
#include "pipeline/progress_reporter.hpp"
#include "pipeline/raw_window_writes.hpp"
#include "pipeline/window_plan.hpp"
#include "pipeline/write_stage.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <future>
#include <random>
#include <sstream>

namespace linattn {
namespace {

using pipeline::RawRun;
using testing::TempDir;

struct Case {
  std::string name;
  Problem p;
  OutputLayout layout;
};

Problem problem(std::int64_t B, std::int64_t T, std::vector<std::int64_t> cu_seqlens = {}) {
  Problem p;
  p.B = B; p.T = T; p.H = 2; p.DK = 16; p.DV = 24; p.chunk = 16; p.scale = 0.5;
  p.cu_seqlens = std::move(cu_seqlens);
  return p;
}

std::vector<Case> cases() {
  auto layout = [](const Problem& p, DType o, DType h, bool snapshots, bool normalize) {
    return output_layout(p, o, h, DType::f32, snapshots, normalize, false);
  };
  const Problem plain = problem(3, 200), packed = problem(1, 300, {0, 37, 40, 170, 300});
  return {{"plain, bf16 o, fp32 h", plain, layout(plain, DType::bf16, DType::f32, true, false)},
          {"plain, fp32 o, bf16 h, normalized", plain, layout(plain, DType::f32, DType::bf16, true, true)},
          {"plain, no snapshots", plain, layout(plain, DType::bf16, DType::f32, false, false)},
          {"packed, fp16 o, bf16 h", packed, layout(packed, DType::f16, DType::bf16, true, false)},
          {"packed, fp32 o, fp32 h, normalized", packed, layout(packed, DType::f32, DType::f32, true, true)}};
}

CaseStorage storage_of(const OutputLayout& l) {
  CaseStorage s;
  s.input = DType::bf16;
  s.output = l.o;
  s.snapshot = l.h;
  s.snapshots = l.snapshots;
  s.normalize = l.normalize;
  return s;
}

// Small windows, so that every case has several (packed: cut inside sequences too).
std::vector<Window> windows_of(const Case& c) {
  const std::int64_t kib = 1024;
  return plan_windows(c.p, storage_of(c.layout), {12 * kib, 24 * kib, 1024 * kib});
}

// Each window's output slot: seeded random bytes of its layout's size.
std::vector<std::string> slot_bytes(const Case& c, const std::vector<Window>& windows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> slots;
  for (const Window& w : windows) {
    std::string s(static_cast<std::size_t>(window_layout(c.p, storage_of(c.layout), w).output_bytes), '\0');
    for (char& b : s) b = static_cast<char>(rng());
    slots.push_back(std::move(s));
  }
  return slots;
}

RunRecord record() {
  RunRecord r;
  r.chunk_size = 16;
  r.variant = "fused";
  return r;
}

void write_through_hdf5(const std::string& path, const Case& c, const std::vector<Window>& windows,
                        const std::vector<std::string>& slots) {
  OutputStream out(path, c.p, c.layout);
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const Window& w = windows[i];
    const WindowLayout l = window_layout(c.p, storage_of(c.layout), w);
    const auto* base = reinterpret_cast<const unsigned char*>(slots[i].data());
    out.write_o(w.t0, w.t1, base + l.o);
    out.write_h(w.chunk0, w.chunks, base + l.h);
    out.write_final(l.finished_row0, l.finished_rows, base + l.final_state, base + l.final_z);
  }
  out.finish(record(), false);
}

// The datasets of an output file, read back through HDF5.
std::vector<Tensor> datasets(const std::string& path, const OutputLayout& l) {
  const hdf5::File f = hdf5::open_read_only(path);
  std::vector<std::string> names = {"o", "final_state"};
  if (l.snapshots) names.push_back("h");
  if (l.normalize) names.push_back("z_state");
  std::vector<Tensor> out;
  for (const std::string& n : names) out.push_back(hdf5::read_tensor(f.get(), path, n));
  return out;
}

void expect_same_datasets(const std::string& a, const std::string& b, const OutputLayout& l) {
  const std::vector<Tensor> x = datasets(a, l), y = datasets(b, l);
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE("dataset " + std::to_string(i));
    EXPECT_EQ(x[i].shape, y[i].shape);
    EXPECT_EQ(x[i].dtype, y[i].dtype);
    EXPECT_TRUE(x[i].bytes == y[i].bytes) << "the raw bytes differ from HDF5's";
  }
}

TEST(RawWindowWrites, RunsPutTheBytesWhereHdf5Does) {
  std::uint64_t seed = 4100;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    TempDir dir{"raw-writes"};
    const std::vector<Window> windows = windows_of(c);
    ASSERT_GT(windows.size(), 2u);
    const std::vector<std::string> slots = slot_bytes(c, windows, ++seed);
    write_through_hdf5(dir / "hdf5.h5", c, windows, slots);

    OutputStream out(dir / "raw.h5", c.p, c.layout);
    ASSERT_TRUE(out.raw_offsets().complete(c.layout.snapshots, c.layout.normalize));
    const int fd = ::open(out.partial_path().c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    for (std::size_t i = windows.size(); i-- > 0;) {  // last window first: offsets, not order, place the bytes
      const WindowLayout l = window_layout(c.p, storage_of(c.layout), windows[i]);
      const std::vector<RawRun> runs =
          pipeline::cut_runs(pipeline::window_runs(c.p, c.layout, out.raw_offsets(), windows[i], l), 1000);
      for (const RawRun& r : runs)
        pipeline::write_run(fd, r, reinterpret_cast<const unsigned char*>(slots[i].data()), dir / "raw.h5");
    }
    ::close(fd);
    out.finish(record(), false);
    expect_same_datasets(dir / "hdf5.h5", dir / "raw.h5", c.layout);
  }
}

// The write stage with raw writers: windows queued by one thread, written by
// several, the file closed and renamed only after its last window; beside a
// stage writing through HDF5 alone.
TEST(RawWindowWrites, WriteStageWithRawWritersGivesHdf5sFile) {
  std::uint64_t seed = 4200;
  for (int writers : {1, 3}) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(c.name + ", " + std::to_string(writers) + " raw writers");
      TempDir dir{"raw-stage"};
      const std::vector<Window> windows = windows_of(c);
      const std::vector<std::string> slots = slot_bytes(c, windows, ++seed);
      write_through_hdf5(dir / "hdf5.h5", c, windows, slots);

      std::int64_t slot_size = 0;
      for (const std::string& s : slots) slot_size = std::max<std::int64_t>(slot_size, s.size());
      slot_size = (slot_size + 4095) / 4096 * 4096;
      pipeline::HostRegion region(2 * slot_size, false);
      pipeline::SlotPool pool(region, 2);
      std::ostringstream lines, bar;
      ProgressReporter progress(lines, bar, false);
      std::promise<std::string> committed;
      {
        pipeline::WriteStage stage(pool, progress, writers);
        const auto cw = stage.open(dir / "raw.h5", c.p, c.layout, false);
        for (std::size_t i = 0; i < windows.size(); ++i) {
          const int slot = pool.acquire();
          std::copy(slots[i].begin(), slots[i].end(), pool.data(slot));
          stage.write(cw, windows[i], window_layout(c.p, storage_of(c.layout), windows[i]), slot, 0);
        }
        stage.finish(cw, record(), [&](const std::string& error) { committed.set_value(error); });
        stage.drain();
      }
      EXPECT_EQ(committed.get_future().get(), "");
      expect_same_datasets(dir / "hdf5.h5", dir / "raw.h5", c.layout);
    }
  }
}

// Where each run lies, for one plain window: o and h one run per batch row,
// then the final rows, offsets counted from each dataset's start.
TEST(RawWindowWrites, RunsOfAPlainWindow) {
  const Problem p = problem(2, 64);  // 4 chunks of 16
  const OutputLayout layout = output_layout(p, DType::bf16, DType::f32, DType::f32, true, false, false);
  const RawOffsets at{1000, 100000, 900000, -1};
  const std::vector<Window> windows = plain_windows(p, 2);  // chunks 0, 1 and 2, 3
  ASSERT_EQ(windows.size(), 2u);
  const Window& w = windows[1];
  ASSERT_EQ(w.t0, 32);
  ASSERT_EQ(w.chunk0, 2);
  const WindowLayout l = window_layout(p, storage_of(layout), w);
  const std::vector<RawRun> runs = pipeline::window_runs(p, layout, at, w, l);
  const std::int64_t o_token = 2 * 24 * 2, h_chunk = 2 * 16 * 24 * 4, state = 2 * 16 * 24 * 4;
  ASSERT_EQ(runs.size(), 5u);
  EXPECT_EQ(runs[0].file_offset, 1000 + 32 * o_token);              // row 0, tokens 32..63
  EXPECT_EQ(runs[1].file_offset, 1000 + (64 + 32) * o_token);       // row 1
  EXPECT_EQ(runs[1].slot_offset, l.o + 32 * o_token);
  EXPECT_EQ(runs[0].bytes, 32 * o_token);
  EXPECT_EQ(runs[2].file_offset, 100000 + 2 * h_chunk);             // row 0, chunks 2, 3
  EXPECT_EQ(runs[3].file_offset, 100000 + (4 + 2) * h_chunk);       // row 1
  EXPECT_EQ(runs[3].bytes, 2 * h_chunk);
  EXPECT_EQ(runs[4].file_offset, 900000);                           // both rows end here
  EXPECT_EQ(runs[4].bytes, 2 * state);
  EXPECT_EQ(std::string(runs[4].dataset), "final_state");
  const std::vector<RawRun> pieces = pipeline::cut_runs(runs, 1000);
  std::int64_t total = 0;
  for (const RawRun& r : pieces) {
    EXPECT_LE(r.bytes, 1000);
    total += r.bytes;
  }
  EXPECT_EQ(total, 2 * 32 * o_token + 2 * 2 * h_chunk + 2 * state);
}

}  // namespace
}  // namespace linattn
