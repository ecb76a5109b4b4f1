// HDF5 I/O: every dtype survives a write and a read bit-exactly (special
// values included), 16-bit floats are stored with the documented bit layout
// and convert to float through HDF5 as h5py reads them, large and compressed
// datasets are chunked, and input/output files round-trip with their
// attributes. A write that is not committed leaves no file behind.
#include "core/half_types.hpp"
#include "core/random_tensor.hpp"
#include "io/file_error.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_handles.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

namespace linattn {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

const DType kAllDtypes[] = {DType::f16, DType::bf16, DType::f32, DType::f64};

// Random values plus the awkward ones: signed zero, infinities, NaN, the
// smallest subnormal and the largest finite value of the type.
Tensor tensor_with_specials(DType t, std::vector<std::int64_t> shape, std::uint64_t seed) {
  Tensor x = random_tensor(t, std::move(shape), seed);
  const double inf = std::numeric_limits<double>::infinity();
  const double tiny = t == DType::f16 ? 0x1p-24 : t == DType::bf16 ? 0x1p-133 : t == DType::f32 ? 0x1p-149 : 0x1p-1074;
  const double big = t == DType::f16 ? 65504.0 : t == DType::bf16 ? 0x1.fep127 : t == DType::f32 ? 0x1.fffffep127
                                                                                                 : 0x1.fffffffffffffp1023;
  const double specials[] = {-0.0, inf, -inf, std::nan(""), tiny, -big};
  for (std::size_t i = 0; i < std::size(specials); ++i) x.set(static_cast<std::int64_t>(i * 7), specials[i]);
  return x;
}

Tensor write_and_read(const TempDir& dir, const Tensor& t, const hdf5::WriteOptions& options) {
  const std::string path = dir / "t.h5";
  {
    hdf5::NewFile f(path);
    hdf5::write_tensor(f.id(), path, "group/x", t, options);
    f.commit();
  }
  const hdf5::File f = hdf5::open_read_only(path);
  return hdf5::read_tensor(f.get(), path, "group/x");
}

TEST(Hdf5RoundTrip, EveryDtypeBitExact) {
  TempDir dir("roundtrip");
  for (DType t : kAllDtypes) {
    for (bool compress : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (compress ? " compressed" : ""));
      const Tensor x = tensor_with_specials(t, {2, 37, 3, 5}, 42);
      const Tensor y = write_and_read(dir, x, {compress});
      EXPECT_EQ(y.dtype, x.dtype);
      EXPECT_EQ(y.shape, x.shape);
      EXPECT_TRUE(y.bytes == x.bytes) << "bytes differ after the round trip";
    }
  }
}

TEST(Hdf5RoundTrip, LargeDatasetsAreChunked) {
  TempDir dir("chunked");
  // 1024 x 4 x 80 fp32 = 1.3 MB > 1 MiB: chunked even without compression.
  const Tensor x = random_tensor(DType::f32, {1, 1024, 4, 80}, 7);
  for (bool compress : {false, true}) {
    const Tensor y = write_and_read(dir, x, {compress});
    EXPECT_TRUE(y.bytes == x.bytes);
    const std::string path = dir / "t.h5";
    const hdf5::File f = hdf5::open_read_only(path);
    const hdf5::Dataset ds(H5Dopen2(f.get(), "group/x", H5P_DEFAULT));
    const hdf5::PropertyList dcpl(H5Dget_create_plist(ds.get()));
    EXPECT_EQ(H5Pget_layout(dcpl.get()), H5D_CHUNKED);
    EXPECT_EQ(H5Pget_nfilters(dcpl.get()), compress ? 1 : 0);
  }
  // A small dataset stays contiguous unless compressed.
  const Tensor small = random_tensor(DType::f32, {1, 8, 2, 4}, 8);
  write_and_read(dir, small, {false});
  const hdf5::File f = hdf5::open_read_only(dir / "t.h5");
  const hdf5::Dataset ds(H5Dopen2(f.get(), "group/x", H5P_DEFAULT));
  const hdf5::PropertyList dcpl(H5Dget_create_plist(ds.get()));
  EXPECT_EQ(H5Pget_layout(dcpl.get()), H5D_CONTIGUOUS);
}

TEST(Hdf5RoundTrip, ChunkDimsKeepTrailingDimensions) {
  EXPECT_EQ(hdf5::chunk_dims({2, 100000, 4, 64}, 4), (std::vector<hsize_t>{1, 1024, 4, 64}));
  EXPECT_EQ(hdf5::chunk_dims({1, 300, 2, 32}, 2), (std::vector<hsize_t>{1, 300, 2, 32}));  // fits whole
  // One state of 1024 x 1024 fp32 (4 MiB) is cut along DK.
  EXPECT_EQ(hdf5::chunk_dims({1, 4, 1, 1024, 1024}, 4), (std::vector<hsize_t>{1, 1, 1, 256, 1024}));
}

// The on-disk 16-bit types have the documented bit fields, and HDF5's own
// conversion turns them into the same floats linattn's conversions give (this
// is how h5py reads bfloat16).
TEST(Hdf5RoundTrip, HalfTypesOnDiskConvertToFloat) {
  TempDir dir("halves");
  struct Expect { DType t; std::size_t spos, epos, esize, mpos, msize, bias; };
  for (const Expect& e : {Expect{DType::f16, 15, 10, 5, 0, 10, 15}, Expect{DType::bf16, 15, 7, 8, 0, 7, 127}}) {
    SCOPED_TRACE(dtype_name(e.t));
    Tensor x = random_tensor(e.t, {3, 50, 2, 4}, 11);
    x.set(0, 1.0);
    x.set(1, -2.5);
    write_and_read(dir, x, {});
    const hdf5::File f = hdf5::open_read_only(dir / "t.h5");
    const hdf5::Dataset ds(H5Dopen2(f.get(), "group/x", H5P_DEFAULT));
    const hdf5::Datatype type(H5Dget_type(ds.get()));
    std::size_t spos, epos, esize, mpos, msize;
    ASSERT_GE(H5Tget_fields(type.get(), &spos, &epos, &esize, &mpos, &msize), 0);
    EXPECT_EQ(H5Tget_class(type.get()), H5T_FLOAT);
    EXPECT_EQ(H5Tget_size(type.get()), 2u);
    EXPECT_EQ(spos, e.spos);
    EXPECT_EQ(epos, e.epos);
    EXPECT_EQ(esize, e.esize);
    EXPECT_EQ(mpos, e.mpos);
    EXPECT_EQ(msize, e.msize);
    EXPECT_EQ(H5Tget_ebias(type.get()), e.bias);

    std::vector<float> as_float(static_cast<std::size_t>(x.numel()));
    ASSERT_GE(H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, as_float.data()), 0);
    EXPECT_EQ(as_float[0], 1.0f);
    EXPECT_EQ(as_float[1], -2.5f);
    for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(as_float[i], static_cast<float>(x.get(i))) << "element " << i;
  }
}

TEST(Hdf5RoundTrip, InputFileWithCasesAndInitialState) {
  TempDir dir("input");
  Problem p;
  p.B = 2; p.T = 45; p.H = 3; p.DK = 8; p.DV = 12;
  std::vector<NamedCase> cases;
  for (int i : {11, 2, 0}) {  // written out of order, listed in natural order
    const DType t = kAllDtypes[i % 4];
    ProblemInputs in = random_inputs(p, t, 100 + i, i == 2);
    cases.push_back({"case" + std::to_string(i), {in.q, in.k, in.v, in.initial_state}});
  }
  const std::string path = dir / "in.h5";
  write_input_file(path, cases);
  EXPECT_EQ(list_cases(path), (std::vector<std::string>{"case0", "case2", "case11"}));
  for (const NamedCase& c : cases) {
    SCOPED_TRACE(c.group);
    const CaseData back = read_case(path, c.group);
    EXPECT_TRUE(back.q.bytes == c.data.q.bytes && back.q.dtype == c.data.q.dtype && back.q.shape == c.data.q.shape);
    EXPECT_TRUE(back.k.bytes == c.data.k.bytes);
    EXPECT_TRUE(back.v.bytes == c.data.v.bytes);
    EXPECT_EQ(back.initial_state.empty(), c.data.initial_state.empty());
    EXPECT_TRUE(back.initial_state.bytes == c.data.initial_state.bytes);
  }
  // A case at the root is listed as "".
  const std::string root = dir / "root.h5";
  write_input_file(root, {{"", cases[0].data}});
  EXPECT_EQ(list_cases(root), (std::vector<std::string>{""}));
  EXPECT_TRUE(read_case(root, "").v.bytes == cases[0].data.v.bytes);
}

TEST(Hdf5RoundTrip, OutputFileWithAttributes) {
  TempDir dir("output");
  Problem p;
  p.B = 1; p.T = 70; p.H = 2; p.DK = 4; p.DV = 6; p.chunk = 32;
  OutputData out;
  out.o = random_tensor(DType::bf16, p.o_shape(), 1);
  out.h = random_tensor(DType::f32, p.h_shape(), 2);
  out.final_state = random_tensor(DType::f32, p.state_shape(), 3);
  RunRecord& r = out.record;
  r.chunk_size = 32; r.scale = 0.125; r.variant = "materialized"; r.gemm_path = "kokkoskernels";
  r.input_dtype = "bf16"; r.output_dtype = "bf16"; r.snapshot_dtype = "fp32";
  r.kokkos_backend = "Serial"; r.kokkos_version = "3.4.1"; r.linattn_version = LINATTN_VERSION;
  r.kernel_seconds = 1.5e-3; r.upload_seconds = 2e-4; r.download_seconds = 3e-4;
  r.flops = 123456789.0; r.min_bytes = 98765.0; r.input_file = "inputs/x.h5"; r.input_group = "runs/a";
  const std::string path = dir / "out.h5";
  write_output_file(path, out, {true});
  EXPECT_FALSE(fs::exists(path + ".partial"));

  const OutputData back = read_output_file(path);
  EXPECT_TRUE(back.o.bytes == out.o.bytes && back.o.dtype == DType::bf16 && back.o.shape == p.o_shape());
  EXPECT_TRUE(back.h.bytes == out.h.bytes && back.h.shape == p.h_shape());
  EXPECT_TRUE(back.final_state.bytes == out.final_state.bytes);
  const RunRecord& b = back.record;
  EXPECT_EQ(b.chunk_size, 32);
  EXPECT_EQ(b.scale, 0.125);
  EXPECT_EQ(b.variant, "materialized");
  EXPECT_EQ(b.gemm_path, "kokkoskernels");
  EXPECT_EQ(b.input_dtype, "bf16");
  EXPECT_EQ(b.output_dtype, "bf16");
  EXPECT_EQ(b.snapshot_dtype, "fp32");
  EXPECT_EQ(b.kokkos_backend, "Serial");
  EXPECT_EQ(b.kokkos_version, "3.4.1");
  EXPECT_EQ(b.linattn_version, LINATTN_VERSION);
  EXPECT_EQ(b.kernel_seconds, 1.5e-3);
  EXPECT_EQ(b.upload_seconds, 2e-4);
  EXPECT_EQ(b.download_seconds, 3e-4);
  EXPECT_EQ(b.flops, 123456789.0);
  EXPECT_EQ(b.min_bytes, 98765.0);
  EXPECT_EQ(b.input_file, "inputs/x.h5");
  EXPECT_EQ(b.input_group, "runs/a");

  // Without snapshots there is no h.
  out.h = Tensor();
  out.record.snapshot_dtype = "none";
  write_output_file(path, out);
  const hdf5::File f = hdf5::open_read_only(path);
  EXPECT_FALSE(hdf5::link_exists(f.get(), "h"));
  EXPECT_TRUE(read_output_file(path).h.empty());
}

TEST(Hdf5RoundTrip, UncommittedFileLeavesNothing) {
  TempDir dir("partial");
  const std::string path = dir / "never.h5";
  try {
    hdf5::NewFile f(path);
    hdf5::write_tensor(f.id(), path, "x", random_tensor(DType::f32, {4, 4}, 1), {});
    EXPECT_TRUE(fs::exists(path + ".partial"));
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".partial"));
}

}  // namespace
}  // namespace linattn
