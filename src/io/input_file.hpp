// The input schema (docs/HDF5.md): datasets q, k [B, T, H, DK] and
// v [B, T, H, DV], optionally initial_state [N, H, DK, DV], z_state [N, H, DK]
// (the initial key sum of a normalized run), cu_seqlens (int64 [N + 1],
// packed variable-length sequences, B = 1; without it N = B) and one decay
// gate, g_gamma [H], g [B, T, H] or gk [B, T, H, DK] (log-decays <= 0, core/gate.hpp), at the
// root or in groups; each location holding q, k or v is one case of a batch.
#pragma once

#include "core/gate.hpp"
#include "core/tensor.hpp"
#include "io/hdf5_dataset.hpp"

#include <string>
#include <vector>

namespace linattn {

// Tokens per batch row linattn accepts (the kernels index tokens and chunks
// with 32-bit integers, with room for the chunk arithmetic).
constexpr std::int64_t kMaxTokens = (std::int64_t(1) << 30) - 1;

// The cases of an input file, in name order: "" for the root, else the group
// path ("case0", "runs/a"). Throws FileError when the file is missing, is not
// HDF5, cannot be opened, or holds no q, k or v anywhere.
std::vector<std::string> list_cases(const std::string& file);

// "GROUP/NAME", or "NAME" for the root case.
std::string dataset_path(const std::string& group, const std::string& name);

struct CaseData {
  Tensor q, k, v;
  Tensor initial_state;                 // empty when the case has none
  std::vector<std::int64_t> cu_seqlens;  // empty for a plain batch
  Tensor initial_z;                     // dataset z_state; empty when the case has none
  std::vector<std::string> external_data;  // as in CaseSchema
  GateKind gate = GateKind::none;       // which gate dataset the case holds
  Tensor log_decay;                     // g_gamma [H], g [B, T, H] or gk [B, T, H, DK] in fp32 (read_case; read_slice: the accumulation type); empty for none
};

// What a case holds, from its metadata alone (read_case's schema checks, and
// the checks on sizes: element counts in checked 64-bit arithmetic, T at most
// kMaxTokens, and the bytes a contiguous dataset stores against the
// bytes its shape needs). The streaming pipeline reads the data of a case in
// windows after this; read_case reads it whole.
struct CaseSchema {
  hdf5::DatasetInfo q, k, v;
  std::vector<std::int64_t> cu_seqlens;  // empty for a plain batch
  bool has_initial_state = false, has_initial_z = false;
  GateKind gate = GateKind::none;  // g_gamma, g or gk, its shape checked against q's B, T, H (and DK)
  // The datasets ("q", "cu_seqlens") whose data are in other files, which
  // --allow-external-data accepted (hdf5::check_storage); the result line names them.
  std::vector<std::string> external_data;
  std::int64_t num_sequences() const {
    return cu_seqlens.empty() ? q.shape[0] : static_cast<std::int64_t>(cu_seqlens.size()) - 1;
  }
};
CaseSchema inspect_case(hid_t file, const std::string& file_name, const std::string& group);

// Throws FileError naming the first non-finite element of `count` elements of
// `dtype` at `data` (shape `shape`, and `origin` added to its index: a window's
// place in the dataset); `window` is appended to the message when not empty.
void check_finite(const void* data, DType dtype, const std::vector<std::int64_t>& shape,
                  const std::vector<std::int64_t>& origin, const std::string& file, const std::string& path,
                  const std::string& window = "");

// How many of the `n` elements of `dtype` at `data` are NaN or Inf (the
// fast test beside check_finite, which names the first one).
std::int64_t nonfinite_count(const void* data, DType dtype, std::int64_t n);

struct ReadOptions {
  bool allow_nonfinite = false;  // accept NaN and Inf elements
};

// Throws FileError naming the first of `count` log-decays of `dtype` (fp32 or
// fp64) at `data` that is not a finite value <= 0 (NaN, Inf, positive), with
// its index (shape `shape`, `origin` added) and `window` as check_finite does.
void check_log_decays(const void* data, DType dtype, const std::vector<std::int64_t>& shape,
                      const std::vector<std::int64_t>& origin, const std::string& file, const std::string& path,
                      const std::string& window = "");

// Reads one case and checks it against the schema, so that nothing reaches a
// kernel unchecked. Throws FileError naming the file, the dataset and what is
// wrong: missing q/k/v, not a dataset, unsupported dtype, q/k/v dtypes
// differing, rank, a zero dimension, B/T/H or DK disagreeing, initial_state or
// z_state of the wrong shape, a layout other than BTHD, cu_seqlens that is not
// an integer vector or breaks the rules of validate_sequences (B = 1, starts
// at 0, increasing, ends at T), a gate of the wrong shape, more than one gate,
// a log-decay that is not a finite value <= 0 (always), and NaN or Inf
// elements of the other datasets unless allowed.
CaseData read_case(const std::string& file, const std::string& group, const ReadOptions& options = {});

// Writes cases in the input schema (q, k, v with layout="BTHD", and
// initial_state, z_state, cu_seqlens and the gate when present) to a new file at path, via path.partial. Used by
// `linattn generate` and the tests.
struct NamedCase {
  std::string group;  // "" for the root
  CaseData data;
};
void write_input_file(const std::string& path, const std::vector<NamedCase>& cases,
                      const hdf5::WriteOptions& options = {});

}  // namespace linattn
