// Bad input gets a clear error and nothing is lost. Each bad file is built
// with the HDF5 C API and run through run_batch (the code path of `linattn
// run`) next to a good file. For every case the batch must: fail the bad case
// with one line naming the file, the dataset and the problem; leave no output
// (nor .partial) for it; leave the input byte-for-byte and mtime unchanged; and
// still complete the good case.
#include "app/batch_run.hpp"
#include "core/gate.hpp"
#include "core/half_types.hpp"
#include "core/random_tensor.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "pipeline/read_stage.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace linattn {
namespace {

using testing::read_bytes;
using testing::TempDir;
namespace fs = std::filesystem;

// The C API, plainly: one dataset of the given type and shape, filled with
// `fill` converted by HDF5 from double.
void raw_dataset(hid_t file, const std::string& path, hid_t type, const std::vector<hsize_t>& dims,
                 const std::function<double(std::size_t)>& fill) {
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = fill(i);
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t ds = H5Dcreate2(file, path.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << path;
  ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(ds);
  H5Pclose(lcpl);
  H5Sclose(space);
}

double nonzero(std::size_t i) { return 0.25 + 0.5 * std::sin(0.37 * static_cast<double>(i + 1)) + 0.01; }

// Shapes of one case: q, k [B, T, H, DK], v [B, T, H, DV].
struct CaseShapes {
  std::vector<hsize_t> q = {1, 40, 2, 8}, k = {1, 40, 2, 8}, v = {1, 40, 2, 12};
};

// Writes group/{q,k,v} as float32 with the given shapes, skipping `omit`.
void raw_case(hid_t file, const std::string& group, const CaseShapes& s, const std::string& omit = "") {
  const std::pair<const char*, const std::vector<hsize_t>*> parts[] = {{"q", &s.q}, {"k", &s.k}, {"v", &s.v}};
  for (const auto& [name, dims] : parts)
    if (name != omit) raw_dataset(file, group + "/" + name, H5T_IEEE_F32LE, *dims, nonzero);
}

// Creates path with the C API and lets `build` fill it.
void make_file(const std::string& path, const std::function<void(hid_t)>& build) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  build(f);
  H5Fclose(f);
}

class BadInput : public ::testing::Test {
 protected:
  TempDir dir{"bad-input"};
  std::string good = dir / "good.h5";
  int runs = 0;

  void SetUp() override {
    Problem p;
    p.B = 1; p.T = 33; p.H = 2; p.DK = 8; p.DV = 8;
    const ProblemInputs in = random_inputs(p, DType::bf16, 3, false);
    write_input_file(good, {{"case0", {in.q, in.k, in.v, {}}}});
  }

  struct Batch {
    std::vector<CaseResult> results;
    std::string progress, errors, outdir;
  };

  // Each run writes to a fresh output directory unless options name one.
  Batch run(const std::vector<std::string>& inputs, RunOptions options = {}) {
    options.inputs = inputs;
    if (options.outdir.empty()) options.outdir = dir / ("out" + std::to_string(runs++));
    options.chunk = 16;
    std::ostringstream progress, errors;
    Batch b;
    b.outdir = options.outdir;
    b.results = run_batch(options, progress, errors);
    b.progress = progress.str();
    b.errors = errors.str();
    return b;
  }

  // Runs [good, bad] and checks everything the issue promises for bad's first case:
  // the error starts with `prefix` (file and dataset), contains `problem`, is
  // one line and is printed as a FAILED line; no output file; the input is
  // untouched; the good case still ran.
  void expect_rejected(const std::string& bad, const std::string& group, const std::string& prefix,
                       const std::string& problem, RunOptions options = {}) {
    const bool existed = fs::exists(bad);
    const std::string before = existed ? read_bytes(bad) : "";
    const auto mtime = existed ? fs::last_write_time(bad) : fs::file_time_type{};

    const Batch b = run({good, bad}, options);

    ASSERT_GE(b.results.size(), 2u);  // the good case, then the bad file's (first) case
    EXPECT_TRUE(b.results[0].ok) << b.results[0].error;
    EXPECT_TRUE(fs::exists(output_path(b.outdir, good, "case0")));
    const CaseResult& r = b.results[1];
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error.rfind(prefix, 0), 0u) << "error does not start with '" << prefix << "': " << r.error;
    EXPECT_NE(r.error.find(problem), std::string::npos) << "error does not mention '" << problem << "': " << r.error;
    EXPECT_EQ(r.error.find('\n'), std::string::npos) << "error is not one line: " << r.error;
    const std::string line = "[2/" + std::to_string(b.results.size()) + "] " + r.label() + "  FAILED: " + r.error + "\n";
    EXPECT_NE(b.errors.find(line), std::string::npos) << b.errors;
    const std::string out = output_path(b.outdir, bad, group);
    EXPECT_FALSE(fs::exists(out)) << out;
    EXPECT_FALSE(fs::exists(out + ".partial")) << out;
    if (existed) {
      EXPECT_TRUE(read_bytes(bad) == before) << "the input file changed";
      EXPECT_TRUE(fs::last_write_time(bad) == mtime) << "the input file was touched";
    }
  }
};

TEST_F(BadInput, MissingFile) {
  const std::string bad = dir / "missing.h5";
  expect_rejected(bad, "", bad + ": ", "no such file");
}

TEST_F(BadInput, NotAnHdf5File) {
  const std::string bad = dir / "text.h5";
  std::ofstream(bad) << "q,k,v\n1,2,3\n";
  expect_rejected(bad, "", bad + ": ", "not an HDF5 file");
}

TEST_F(BadInput, TruncatedFile) {
  const std::string bad = dir / "truncated.h5";
  make_file(bad, [](hid_t f) { raw_case(f, "case0", CaseShapes{}); });
  fs::resize_file(bad, fs::file_size(bad) / 2);
  expect_rejected(bad, "case0", bad + ": ", "truncated");
}

TEST_F(BadInput, MissingQKOrV) {
  for (const std::string name : {"q", "k", "v"}) {
    SCOPED_TRACE(name);
    const std::string bad = dir / ("no_" + name + ".h5");
    make_file(bad, [&](hid_t f) { raw_case(f, "case0", CaseShapes{}, name); });
    expect_rejected(bad, "case0", bad + ": dataset 'case0/" + name + "': ", "missing");
  }
}

TEST_F(BadInput, WrongRank) {
  const std::string bad = dir / "rank.h5";
  CaseShapes s;
  s.q = {40, 2, 8};
  make_file(bad, [&](hid_t f) { raw_case(f, "case0", s); });
  expect_rejected(bad, "case0", bad + ": dataset 'case0/q': ", "rank 3 [40, 2, 8], expected rank 4");
}

TEST_F(BadInput, QkDkMismatch) {
  const std::string bad = dir / "dk.h5";
  CaseShapes s;
  s.k = {1, 40, 2, 16};
  make_file(bad, [&](hid_t f) { raw_case(f, "case0", s); });
  expect_rejected(bad, "case0", bad + ": dataset 'case0/k': ", "DK = 16 differs from q's DK = 8");
}

TEST_F(BadInput, SequenceLengthMismatch) {
  const std::string bad = dir / "t.h5";
  CaseShapes s;
  s.v = {1, 39, 2, 12};
  make_file(bad, [&](hid_t f) { raw_case(f, "case0", s); });
  expect_rejected(bad, "case0", bad + ": dataset 'case0/v': ", "T = 39 differs from q's T = 40");
}

TEST_F(BadInput, BatchMismatch) {
  const std::string bad = dir / "b.h5";
  CaseShapes s;
  s.k = {2, 40, 2, 8};
  make_file(bad, [&](hid_t f) { raw_case(f, "case0", s); });
  expect_rejected(bad, "case0", bad + ": dataset 'case0/k': ", "B = 2 differs from q's B = 1");
}

TEST_F(BadInput, IntegerDtype) {
  const std::string bad = dir / "int.h5";
  make_file(bad, [](hid_t f) {
    CaseShapes s;
    raw_case(f, "case0", s, "v");
    raw_dataset(f, "case0/v", H5T_STD_I32LE, s.v, [](std::size_t i) { return static_cast<double>(i % 7 + 1); });
  });
  expect_rejected(bad, "case0", bad + ": dataset 'case0/v': ", "integer datatype (32-bit) is not supported");
}

TEST_F(BadInput, NanOrInfUnlessAllowed) {
  const std::string bad = dir / "nonfinite.h5";
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  make_file(bad, [&](hid_t f) {
    CaseShapes s;
    raw_case(f, "a", s, "q");
    raw_dataset(f, "a/q", H5T_IEEE_F32LE, s.q, [&](std::size_t i) { return i == 2 * 8 + 3 ? nan : nonzero(i); });
    raw_case(f, "b", s, "v");
    raw_dataset(f, "b/v", H5T_IEEE_F32LE, s.v, [&](std::size_t i) { return i >= 100 ? -inf : nonzero(i); });
  });
  expect_rejected(bad, "a", bad + ": dataset 'a/q': ",
                  "1 non-finite element, the first NaN at [0, 1, 0, 3] (--allow-nonfinite accepts them)");
  const Batch b = run({bad});
  ASSERT_EQ(b.results.size(), 2u);
  EXPECT_EQ(b.results[1].error.rfind(bad + ": dataset 'b/v': 860 non-finite elements, the first -Inf at [0, 4, 0, 4]", 0),
            0u)
      << b.results[1].error;
  EXPECT_FALSE(fs::exists(output_path(b.outdir, bad, "b")));

  RunOptions allow;
  allow.allow_nonfinite = true;
  const Batch a = run({bad}, allow);
  ASSERT_EQ(a.results.size(), 2u);
  for (const CaseResult& r : a.results) EXPECT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(fs::exists(output_path(a.outdir, bad, "a")));
  EXPECT_TRUE(fs::exists(output_path(a.outdir, bad, "b")));
}

TEST_F(BadInput, MixedDtypes) {
  const std::string bad = dir / "mixed.h5";
  make_file(bad, [](hid_t f) {
    CaseShapes s;
    raw_case(f, "case0", s, "k");
    raw_dataset(f, "case0/k", H5T_IEEE_F64LE, s.k, nonzero);
  });
  expect_rejected(bad, "case0", bad + ": dataset 'case0/k': ", "dtype fp64 differs from q's fp32");
}

// q, k, v [1, 40, 2, 8|12] and cu_seqlens with the given entries and HDF5 type.
void packed_case(hid_t f, const std::vector<double>& cu, hid_t type = H5T_STD_I64LE, CaseShapes s = {}) {
  raw_case(f, "case0", s);
  raw_dataset(f, "case0/cu_seqlens", type, {cu.size()}, [&](std::size_t i) { return cu[i]; });
}

TEST_F(BadInput, BadCuSeqlens) {
  const std::string dataset = ": dataset 'case0/cu_seqlens': ";
  const struct {
    const char* name;
    std::vector<double> cu;
    const char* problem;
  } cases[] = {
      {"decreasing", {0, 30, 20, 40}, "cu_seqlens is not increasing: entry 2 = 20 after 30"},
      {"repeated", {0, 20, 20, 40}, "cu_seqlens is not increasing"},
      {"short", {0, 20, 39}, "cu_seqlens ends at 39, but T = 40 (the last entry must be T)"},
      {"long", {0, 41}, "the last entry must be T"},
      {"offset", {2, 40}, "cu_seqlens must start at 0"},
      {"single", {0}, "at least one sequence"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string bad = dir / (std::string("cu_") + c.name + ".h5");
    make_file(bad, [&](hid_t f) { packed_case(f, c.cu); });
    expect_rejected(bad, "case0", bad + dataset, c.problem);
  }
  const std::string batch = dir / "cu_batch.h5";
  CaseShapes two;
  two.q = two.k = {2, 40, 2, 8};
  two.v = {2, 40, 2, 12};
  make_file(batch, [&](hid_t f) { packed_case(f, {0, 40}, H5T_STD_I64LE, two); });
  expect_rejected(batch, "case0", batch + dataset, "cu_seqlens needs B = 1");
  const std::string floats = dir / "cu_float.h5";
  make_file(floats, [&](hid_t f) { packed_case(f, {0, 10, 40}, H5T_IEEE_F32LE); });
  expect_rejected(floats, "case0", floats + dataset, "is not an integer dataset");
}

TEST_F(BadInput, PackedStatesNeedOnePerSequence) {
  const std::string bad = dir / "packed_state.h5";
  make_file(bad, [&](hid_t f) {
    packed_case(f, {0, 10, 40});
    raw_dataset(f, "case0/initial_state", H5T_IEEE_F32LE, {1, 2, 8, 12}, nonzero);  // [B, ...], not [N, ...]
  });
  expect_rejected(bad, "case0", bad + ": dataset 'case0/initial_state': ",
                  "shape [1, 2, 8, 12], expected [N (sequences), H, DK, DV] = [2, 2, 8, 12]");
  const std::string z = dir / "packed_z.h5";
  make_file(z, [&](hid_t f) {
    packed_case(f, {0, 10, 40});
    raw_dataset(f, "case0/z_state", H5T_IEEE_F32LE, {2, 2, 12}, nonzero);  // DV where DK belongs
  });
  RunOptions normalized;
  normalized.forward.normalize = true;
  expect_rejected(z, "case0", z + ": dataset 'case0/z_state': ",
                  "shape [2, 2, 12], expected [N (sequences), H, DK] = [2, 2, 8]", normalized);
  const std::string nan_z = dir / "nan_z.h5";
  make_file(nan_z, [&](hid_t f) {
    raw_case(f, "case0", CaseShapes{});
    raw_dataset(f, "case0/z_state", H5T_IEEE_F32LE, {1, 2, 8}, [](std::size_t i) { return i == 5 ? std::nan("") : 1.0; });
  });
  expect_rejected(nan_z, "case0", nan_z + ": dataset 'case0/z_state': ", "non-finite", normalized);
  const std::string unused_z = dir / "unused_z.h5";
  make_file(unused_z, [&](hid_t f) {
    raw_case(f, "case0", CaseShapes{});
    raw_dataset(f, "case0/z_state", H5T_IEEE_F32LE, {1, 2, 8}, nonzero);
  });
  expect_rejected(unused_z, "case0", unused_z + ": dataset 'case0/z_state': ", "pass --normalize");
}

// Gates (docs/HDF5.md, "Gates"): g, g_gamma and GLA's gk are refused when
// their shape does not match q, when a case holds two of them, and when a
// value is not a log-decay (positive, NaN, Inf, below -1e36), naming the first such index:
// --allow-nonfinite does not cover gates.
TEST_F(BadInput, BadGatesAreRefused) {
  auto gated = [&](const std::string& name, const std::vector<std::pair<std::string, std::vector<hsize_t>>>& gates,
                   const std::function<double(std::size_t)>& fill) {
    const std::string bad = dir / (name + ".h5");
    make_file(bad, [&](hid_t f) {
      raw_case(f, "case0", CaseShapes{});
      for (const auto& [dataset, shape] : gates) raw_dataset(f, "case0/" + dataset, H5T_IEEE_F32LE, shape, fill);
    });
    return bad;
  };
  auto decay = [](std::size_t i) { return -0.05 - std::fabs(nonzero(i)); };  // valid log-decays, never 0
  const std::string gk = gated("gate_gk", {{"gk", {1, 40, 2, 7}}}, decay);
  expect_rejected(gk, "case0", gk + ": dataset 'case0/gk': ", "shape [1, 40, 2, 7], expected [B, T, H, DK] = [1, 40, 2, 8]");
  const std::string gk_and_g = gated("gate_gk_and_g", {{"g", {1, 40, 2}}, {"gk", {1, 40, 2, 8}}}, decay);
  expect_rejected(gk_and_g, "case0", gk_and_g + ": dataset 'case0/gk': ", "holds both g and gk");
  // Element (17 * 2 + 1) * 8 + 3 = [0, 17, 1, 3] of gk is the first that is not a log-decay.
  for (double bad_value : {0.5, std::nan(""), static_cast<double>(INFINITY), 2.0 * kLowestLogDecay}) {
    SCOPED_TRACE(bad_value);
    const std::string gk_value = gated("gate_gk_value", {{"gk", {1, 40, 2, 8}}}, [&](std::size_t i) {
      return i == 283 ? bad_value : decay(i);
    });
    expect_rejected(gk_value, "case0", gk_value + ": dataset 'case0/gk': ", "1 element is not a log-decay");
    expect_rejected(gk_value, "case0", gk_value + ": dataset 'case0/gk': ", "at [0, 17, 1, 3]");
  }
  const std::string g_shape = gated("gate_g_shape", {{"g", {1, 40, 3}}}, decay);
  expect_rejected(g_shape, "case0", g_shape + ": dataset 'case0/g': ", "shape [1, 40, 3], expected [B, T, H] = [1, 40, 2]");
  const std::string gamma_shape = gated("gate_gamma_shape", {{"g_gamma", {1, 2}}}, decay);
  expect_rejected(gamma_shape, "case0", gamma_shape + ": dataset 'case0/g_gamma': ", "expected [H] = [2]");
  const std::string both = gated("gate_both", {{"g_gamma", {2}}, {"g", {1, 40, 2}}}, decay);
  expect_rejected(both, "case0", both + ": dataset 'case0/g': ", "holds both g_gamma and g");
  // Element 2 * 17 + 1 = [0, 17, 1] is the first that is not a log-decay.
  for (double bad_value : {0.5, std::nan(""), -static_cast<double>(INFINITY), 2.0 * kLowestLogDecay}) {
    SCOPED_TRACE(bad_value);
    const std::string positive = gated("gate_value", {{"g", {1, 40, 2}}}, [&](std::size_t i) {
      return i == 35 || i == 60 ? bad_value : decay(i);
    });
    RunOptions allowing;
    allowing.allow_nonfinite = true;
    expect_rejected(positive, "case0", positive + ": dataset 'case0/g': ", "2 elements are not log-decays", allowing);
    expect_rejected(positive, "case0", positive + ": dataset 'case0/g': ", "at [0, 17, 1]");
  }
}

TEST_F(BadInput, OutputExistsUnlessForced) {
  const std::string other = dir / "other.h5";
  make_file(other, [](hid_t f) { raw_case(f, "case0", CaseShapes{}); });
  RunOptions options;
  options.outdir = dir / "out";
  const std::string out = output_path(options.outdir, other, "case0");
  fs::create_directories(options.outdir);
  std::ofstream(out) << "an earlier result";
  const Batch b = run({good, other}, options);
  ASSERT_EQ(b.results.size(), 2u);
  EXPECT_TRUE(b.results[0].ok);
  EXPECT_EQ(b.results[1].error, out + ": output exists (pass --force to overwrite, or --skip-existing to keep it)");
  EXPECT_EQ(read_bytes(out), "an earlier result");

  options.force = true;
  const Batch forced = run({good, other}, options);
  EXPECT_TRUE(forced.results[1].ok) << forced.results[1].error;
  EXPECT_EQ(read_output_file(out).record.input_group, "case0");
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

TEST_F(BadInput, UnwritableOutdirFailsEveryCase) {
  // A regular file where a directory should be: nobody, root included, can
  // create the output directory below it.
  const std::string blocker = dir / "blocker";
  std::ofstream(blocker) << "x";
  RunOptions options;
  options.outdir = blocker + "/out";
  const std::string before = read_bytes(good);
  const Batch b = run({good, good}, options);
  ASSERT_EQ(b.results.size(), 2u);
  for (const CaseResult& r : b.results) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error.rfind(options.outdir + ": cannot create output directory: ", 0), 0u) << r.error;
  }
  EXPECT_NE(b.errors.find("[1/2]"), std::string::npos);
  EXPECT_NE(b.errors.find("[2/2]"), std::string::npos);
  EXPECT_EQ(read_bytes(good), before);

  if (::geteuid() != 0) {  // permission bits only bind non-root users
    const std::string locked = dir / "locked";
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    options.outdir = locked;
    const Batch l = run({good}, options);
    fs::permissions(locked, fs::perms::owner_all);
    ASSERT_EQ(l.results.size(), 1u);
    EXPECT_EQ(l.results[0].error.rfind(locked + ": output directory is not writable", 0), 0u) << l.results[0].error;
  }
}

TEST_F(BadInput, TwoInputsWithOneNameDoNotOverwriteEachOther) {
  fs::create_directories(dir / "again");
  const std::string twin = dir / "again/good.h5";
  fs::copy_file(good, twin);
  RunOptions force;
  force.force = true;
  const Batch b = run({good, twin}, force);
  ASSERT_EQ(b.results.size(), 2u);
  EXPECT_TRUE(b.results[0].ok);
  EXPECT_EQ(b.results[1].error, output_path(b.outdir, twin, "case0") +
                                    ": already written by an earlier case of this batch (two inputs with one name?)");
  EXPECT_EQ(read_output_file(output_path(b.outdir, good, "case0")).record.input_file, good);
}

// A file whose reading hangs (a FIFO: opening it blocks forever) costs only
// its own file: the reader is killed at --case-timeout, the file fails with
// a line saying so, and the good file after it still runs.
TEST_F(BadInput, AHangingReaderIsKilledAtTheCaseTimeout) {
  const std::string fifo = dir / "hangs.h5";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  RunOptions options;
  options.case_timeout = 1.0;
  const auto start = std::chrono::steady_clock::now();
  const Batch b = run({fifo, good}, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(b.results.size(), 2u);
  EXPECT_FALSE(b.results[0].ok);
  EXPECT_NE(b.results[0].error.find("timed out while listing " + fifo), std::string::npos) << b.results[0].error;
  EXPECT_TRUE(b.results[1].ok) << b.results[1].error;
  EXPECT_TRUE(fs::exists(output_path(b.outdir, good, "case0")));
  EXPECT_LT(seconds, 30.0);
}

// A reader that dies by a signal (what a SIGSEGV inside libhdf5 looks like
// from the batch process) fails the cases it was reading, names the signal,
// and the batch process itself finishes every case and reports them.
TEST_F(BadInput, AReaderThatDiesFailsItsCasesNotTheBatch) {
  const std::string crasher = dir / "crashing-reader.sh";
  std::ofstream(crasher) << "#!/bin/sh\nkill -SEGV $$\n";
  fs::permissions(crasher, fs::perms::owner_all);
  RunOptions options;
  options.reader_exe = crasher;
  const Batch b = run({good, good}, options);
  ASSERT_EQ(b.results.size(), 2u);
  for (const CaseResult& r : b.results) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("the reader process died of signal 11"), std::string::npos) << r.error;
  }
  EXPECT_EQ(b.errors.find("[2/2]") != std::string::npos, true) << b.errors;
}

// The batch tells a hung reader from a crashed one by ReaderLost's cause, not
// by the text of its message (a hung file is not read again; a crash fails
// only the case it was reading).
TEST_F(BadInput, AReaderLostSaysWhetherItTimedOutOrCrashed) {
  const std::string hangs = dir / "hanging-reader.sh", crashes = dir / "crashing-reader.sh";
  std::ofstream(hangs) << "#!/bin/sh\nexec sleep 30\n";
  std::ofstream(crashes) << "#!/bin/sh\nkill -SEGV $$\n";
  for (const std::string& script : {hangs, crashes}) fs::permissions(script, fs::perms::owner_all);
  const int shared = ::open(good.c_str(), O_RDONLY);  // any descriptor stands for the input region
  ASSERT_GE(shared, 0);
  auto cause = [&](const std::string& exe) {
    pipeline::ReaderProcess reader(exe, shared, 0);
    try {
      reader.list_cases(good, pipeline::Clock::now() + std::chrono::milliseconds(500));
    } catch (const pipeline::ReaderLost& e) {
      return e.cause;
    }
    ADD_FAILURE() << exe << " did not lose its reader";
    return pipeline::ReaderLost::Cause::gone;
  };
  EXPECT_EQ(cause(hangs), pipeline::ReaderLost::Cause::timed_out);
  EXPECT_EQ(cause(crashes), pipeline::ReaderLost::Cause::crashed);
  ::close(shared);
}

}  // namespace
}  // namespace linattn
