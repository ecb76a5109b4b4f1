// Writes in parallel (pipeline/mapped_output.hpp): a window's runs cut into
// pieces, the pool of threads that copies them, the mapped file they land in,
// and what happens when the file system refuses a page (SIGBUS turned into
// the full-disk message, the process alive).
#include "io/file_error.hpp"
#include "pipeline/copy_pool.hpp"
#include "pipeline/guarded_copy.hpp"
#include "pipeline/mapped_output.hpp"
#include "pipeline/raw_window_writes.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace linattn {
namespace {

using namespace pipeline;
using testing::TempDir;

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> b(n);
  for (unsigned char& x : b) x = static_cast<unsigned char>(rng() | 1);  // never zero: unwritten bytes are
  return b;
}

std::string file_bytes(const std::string& path) { return testing::read_bytes(path); }

TEST(SplitRuns, PiecesCoverEachRunInOrderWithinTheLimit) {
  const std::vector<RawRun> runs = {{1000, 0, 10, "o"}, {5000, 10, 1, "o"}, {9000, 11, 25, "h"}};
  const std::vector<RawRun> pieces = split_runs(runs, 4);
  std::vector<RawRun> expected;
  for (const RawRun& r : runs)
    for (std::int64_t d = 0; d < r.bytes; d += 4) expected.push_back({r.file_offset + d, r.slot_offset + d, std::min<std::int64_t>(4, r.bytes - d), r.dataset});
  ASSERT_EQ(pieces.size(), expected.size());  // 3 + 1 + 7
  EXPECT_EQ(pieces.size(), 11u);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].file_offset, expected[i].file_offset) << i;
    EXPECT_EQ(pieces[i].slot_offset, expected[i].slot_offset) << i;
    EXPECT_EQ(pieces[i].bytes, expected[i].bytes) << i;
    EXPECT_STREQ(pieces[i].dataset, expected[i].dataset) << i;
  }
  EXPECT_EQ(split_runs(runs, 1 << 20).size(), 3u);  // runs under the limit stay whole
}

TEST(RawEnd, IsTheEndOfTheLastDataset) {
  Problem p;
  p.B = 2; p.T = 100; p.H = 3; p.DK = 8; p.DV = 4; p.chunk = 16;  // 7 chunks
  OutputLayout l;
  l.o = DType::bf16; l.h = DType::f32; l.state = DType::f32;
  RawOffsets at;
  at.o = 4096;
  at.h = 10000;
  at.final_state = 9000;
  EXPECT_EQ(raw_end(p, l, at), 10000 + 2 * 7 * 3 * 8 * 4 * 4);  // h lies last
  l.snapshots = false;
  EXPECT_EQ(raw_end(p, l, at), 9000 + 2 * 3 * 8 * 4 * 4);  // without h: final_state
  at.final_state = 100;
  EXPECT_EQ(raw_end(p, l, at), 4096 + 2 * 100 * 3 * 4 * 2);  // o
}

TEST(CopyPool, RunsEveryTaskOnceOnSeveralThreads) {
  CopyPool pool(3);
  for (int round = 0; round < 20; ++round) {  // one pool, many batches
    std::vector<std::atomic<int>> runs(50);
    std::mutex m;
    std::set<std::thread::id> threads;
    std::vector<std::function<void()>> tasks;
    for (int i = 0; i < 50; ++i)
      tasks.push_back([&, i] {
        runs[i]++;
        std::lock_guard<std::mutex> lock(m);
        threads.insert(std::this_thread::get_id());
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      });
    pool.run(tasks);
    for (int i = 0; i < 50; ++i) ASSERT_EQ(runs[i].load(), 1) << "task " << i << ", round " << round;
    EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u) << "the pool's threads run them";
    if (round == 0) EXPECT_GE(threads.size(), 2u) << "50 sleeping tasks should spread over the threads";
  }
}

TEST(CopyPool, RethrowsTheFirstFailingTaskInOrderAfterTheOthersFinish) {
  CopyPool pool(2);
  std::atomic<int> done{0};
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 10; ++i)
    tasks.push_back([&, i] {
      if (i == 3) {  // fails last in time: the later failures are reported first without the order
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        throw std::runtime_error("piece 3 failed");
      }
      if (i >= 7) throw std::runtime_error("piece " + std::to_string(i) + " failed");
      done++;
    });
  try {
    pool.run(tasks);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "piece 3 failed");
  }
  EXPECT_EQ(done.load(), 6);
  std::atomic<int> again{0};
  pool.run({[&] { again++; }});  // usable after an error
  EXPECT_EQ(again.load(), 1);
}

TEST(MappedOutput, PiecesCopiedByThreadsLandAtTheirOffsets) {
  TempDir dir("mapped");
  const std::string path = dir / "out.h5.partial";
  const std::vector<unsigned char> head = random_bytes(3000, 1);  // what "HDF5" wrote before: kept
  { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(head.data()), head.size()); }
  const std::int64_t end = 3000 + (std::int64_t(3) << 20) + 123;
  const std::vector<unsigned char> slot = random_bytes(static_cast<std::size_t>(end - 3000), 2);
  {
    MappedOutput out(path, end, "out.h5");
    CopyPool pool(4);
    std::vector<std::function<void()>> tasks;
    // Two runs: the slot's second half first in the file, then its first half.
    const std::int64_t half = (end - 3000) / 2;
    const std::vector<RawRun> runs = {{3000, half, end - 3000 - half, "h"}, {3000 + (end - 3000 - half), 0, half, "o"}};
    for (const RawRun& piece : split_runs(runs, 100000))
      tasks.push_back([&out, piece, &slot] { out.copy(piece, slot.data()); });
    ASSERT_GT(tasks.size(), 30u);
    pool.run(tasks);
  }
  const std::string bytes = file_bytes(path);
  ASSERT_EQ(static_cast<std::int64_t>(bytes.size()), end);
  EXPECT_EQ(bytes.substr(0, 3000), std::string(head.begin(), head.end()));
  const std::int64_t half = (end - 3000) / 2;
  EXPECT_EQ(bytes.substr(3000, end - 3000 - half), std::string(slot.begin() + half, slot.end()));
  EXPECT_EQ(bytes.substr(3000 + (end - 3000 - half)), std::string(slot.begin(), slot.begin() + half));
}

TEST(MappedOutput, NeverShrinksTheFile) {
  TempDir dir("mapped-grow");
  const std::string path = dir / "f.partial";
  const std::vector<unsigned char> b = random_bytes(8192, 3);
  { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size()); }
  { MappedOutput out(path, 4096, "f"); }
  EXPECT_EQ(file_bytes(path), std::string(b.begin(), b.end()));
}

// A page the file system cannot back: the file is cut short after it was
// mapped (as the full-disk preload does, and as a full disk refuses a page),
// and the copy that touches it raises SIGBUS.
TEST(MappedOutput, APageTheFileSystemRefusesIsTheFullDiskMessage) {
  TempDir dir("mapped-sigbus");
  const std::string path = dir / "out.h5.partial";
  const std::int64_t end = 1 << 20;
  { std::ofstream(path, std::ios::binary); }
  const std::vector<unsigned char> slot = random_bytes(static_cast<std::size_t>(end), 4);
  MappedOutput out(path, end, "OUT.h5");
  out.copy({0, 0, 65536, "o"}, slot.data());  // within the file: fine
  ASSERT_EQ(::truncate(path.c_str(), 65536), 0);
  try {
    out.copy({65536, 65536, end - 65536, "h"}, slot.data());
    FAIL() << "a copy past the file's end succeeded";
  } catch (const FileError& e) {
    EXPECT_STREQ(e.what(), "No space left on device while writing dataset 'h' of OUT.h5");
  }
  // The guard is per copy: the process and later copies go on.
  out.copy({0, 100, 4096, "o"}, slot.data());
  EXPECT_EQ(file_bytes(path).substr(0, 4096), std::string(slot.begin() + 100, slot.begin() + 100 + 4096));
  try {
    out.copy({end - 10, 0, 20, "h"}, slot.data());
    FAIL() << "a run past the mapping was copied";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the mapped datasets"), std::string::npos) << e.what();
  }
}

// SIGBUS outside a guarded copy keeps its default action: the process dies of it.
TEST(GuardedCopyDeathTest, SigbusElsewhereStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir("sigbus-elsewhere");
  const std::string path = dir / "f";
  EXPECT_EXIT(
      {
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
        if (fd < 0 || ::ftruncate(fd, 8192) != 0) std::_Exit(3);
        auto* p = static_cast<unsigned char*>(::mmap(nullptr, 8192, PROT_WRITE, MAP_SHARED, fd, 0));
        unsigned char byte = 1;
        if (!guarded_copy(p, &byte, 1)) std::_Exit(4);  // installs the handler
        if (::ftruncate(fd, 0) != 0) std::_Exit(5);
        *reinterpret_cast<volatile unsigned char*>(p + 4096) = 7;  // unguarded: SIGBUS
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace linattn
