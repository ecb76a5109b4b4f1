// read_counting_nonfinite (src/pipeline/block_read.hpp): a block read in
// cache-sized pieces lands where one read would put it, and the pieces' count
// of NaN and Inf is the block's, wherever they lie.
#include "core/random_tensor.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_types.hpp"
#include "pipeline/block_read.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace linattn {
namespace {

using testing::TempDir;

// The block [r0, r0 + rows) x [t0, t0 + tokens) x everything of x, row-major.
std::vector<unsigned char> expected_block(const Tensor& x, std::int64_t r0, std::int64_t rows, std::int64_t t0,
                                          std::int64_t tokens) {
  const std::int64_t T = x.shape[1], token_bytes = x.numel() / (x.shape[0] * T) * static_cast<std::int64_t>(dtype_size(x.dtype));
  std::vector<unsigned char> out(static_cast<std::size_t>(rows * tokens * token_bytes));
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + r * tokens * token_bytes, x.bytes.data() + ((r0 + r) * T + t0) * token_bytes,
                static_cast<std::size_t>(tokens * token_bytes));
  return out;
}

TEST(BlockRead, PiecesLandWhereOneReadWouldAndCountEveryNonFinite) {
  TempDir dir("block_read");
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // 640 or 320 bytes a token: 819 or 1638 tokens a piece, so several pieces per row
    Tensor x = random_tensor(dtype, {3, 4000, 4, 40}, 29);
    const double inf = std::numeric_limits<double>::infinity();
    const std::int64_t per_token = 4 * 40;
    x.set((1 * 4000 + 3500) * per_token + 2 * 40 + 7, std::nan(""));  // row 1, in a late piece
    x.set((2 * 4000 + 300) * per_token, -inf);                         // row 2, the first piece
    x.set((0 * 4000 + 10) * per_token, inf);                           // before the block: not counted
    const std::string path = dir / (std::string("x_") + dtype_name(dtype) + ".h5");
    {
      hdf5::NewFile f(path);
      hdf5::write_tensor(f.id(), path, "x", x, {});
      f.commit();
    }
    const hdf5::File f = hdf5::open_read_only(path);
    const hdf5::Dataset ds = hdf5::open_dataset(f.get(), path, "x");
    const hdf5::Datatype type = hdf5::datatype_of(dtype);
    const std::int64_t r0 = 1, rows = 2, t0 = 100, tokens = 3700;
    const std::vector<unsigned char> want = expected_block(x, r0, rows, t0, tokens);
    std::vector<unsigned char> got(want.size(), 0xA5);  // poisoned
    const std::int64_t counted = pipeline::read_counting_nonfinite(
        ds.get(), type.get(), dtype, {hsize_t(r0), hsize_t(t0), 0, 0}, {hsize_t(rows), hsize_t(tokens), 4, 40},
        got.data(), path, "x");
    EXPECT_TRUE(got == want) << "the pieces put bytes elsewhere than one read";
    EXPECT_EQ(counted, 2);
    // a block without them counts none
    std::vector<unsigned char> clean(static_cast<std::size_t>(1 * 200 * per_token * dtype_size(dtype)));
    EXPECT_EQ(pipeline::read_counting_nonfinite(ds.get(), type.get(), dtype, {0, 1000, 0, 0}, {1, 200, 4, 40},
                                                clean.data(), path, "x"),
              0);
  }
}

}  // namespace
}  // namespace linattn
