// A disk that fills up while `linattn run` writes: the case fails with one
// line that names the dataset and the output ("No space left on device while
// writing dataset 'h' of OUT.h5") and nothing of HDF5's message (its buffer
// addresses and byte counts, "bytes actually written = 18446744073709551615"),
// and no file is left behind. full_disk_preload.c plays the full disk.
#include "cli_runner.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <filesystem>

namespace linattn {
namespace {

using testing::contains;
using testing::Exit;
using testing::linattn_cli;
using testing::TempDir;
namespace fs = std::filesystem;

TEST(FullDisk, OneLineNamesTheDatasetAndTheOutput) {
  const std::string preload = LINATTN_FULL_DISK_PRELOAD;
  if (!fs::exists(preload)) GTEST_SKIP() << preload << " is not here (binaries carried to another machine)";
  TempDir dir{"full-disk"};
  const std::string input = dir / "in.h5", outdir = dir / "out";
  ASSERT_EQ(linattn_cli(dir, "generate -o '" + input + "' --shape 1,512,2,64,64 --dtype fp32 --seed 31").code, 0);
  // o [1, 512, 2, 64] fp32 is 256 KiB and fits; h [1, 32, 2, 64, 64] (chunks of 16) is 1 MiB, written after o,
  // and passes the disk's 512 KiB.
  const Exit e = linattn_cli(dir, "run '" + input + "' -o '" + outdir + "' --chunk 16 --writers 1",
                             "LD_PRELOAD='" + preload + "' LINATTN_TEST_DISK_BYTES=524288");
  EXPECT_EQ(e.code, 1) << e.output;
  const std::string output = outdir + "/in.case0.h5";
  EXPECT_TRUE(contains(e.output, "FAILED: No space left on device while writing dataset 'h' of " + output + "\n"))
      << e.output;
  EXPECT_FALSE(contains(e.output, "HDF5")) << e.output;
  EXPECT_FALSE(contains(e.output, "bytes")) << e.output;
  EXPECT_FALSE(contains(e.output, "errno")) << e.output;
  EXPECT_FALSE(fs::exists(output));
  EXPECT_FALSE(fs::exists(output + ".partial"));

  // Written through memory by several threads (mapped_output.hpp), the page
  // past the disk's end raises SIGBUS: the same line, the process alive.
  const Exit mapped = linattn_cli(dir, "run '" + input + "' -o '" + outdir + "' --chunk 16 --writers 2",
                                  "LD_PRELOAD='" + preload + "' LINATTN_TEST_DISK_BYTES=524288");
  EXPECT_EQ(mapped.code, 1) << mapped.output;
  EXPECT_TRUE(contains(mapped.output, "FAILED: No space left on device while writing dataset 'h' of " + output + "\n"))
      << mapped.output;
  EXPECT_TRUE(contains(mapped.output, "(2 threads, 1 file mapped)")) << mapped.output;
  EXPECT_FALSE(fs::exists(output));
  EXPECT_FALSE(fs::exists(output + ".partial"));

  // The same run with room to spare completes: the preload only fills the disk when asked.
  for (const char* writers : {"1", "2"}) {
    fs::remove_all(outdir);
    const Exit room = linattn_cli(dir, "run '" + input + "' -o '" + outdir + "' --chunk 16 --writers " + writers,
                                  "LD_PRELOAD='" + preload + "' LINATTN_TEST_DISK_BYTES=4194304");
    EXPECT_EQ(room.code, 0) << room.output;
    EXPECT_TRUE(fs::exists(output)) << writers << " writers";
  }
}

}  // namespace
}  // namespace linattn
