// The output schema (docs/HDF5.md): o [B, T, H, DV] (layout="BTHD"),
// h [B, NT, H, DK, DV] (the state before each chunk; absent when snapshots
// were not asked for; [1, total_chunks, H, DK, DV] for packed sequences),
// final_state [N, H, DK, DV] and, for normalized runs, z_state [N, H, DK]
// (N = B, or the number of packed sequences; their cu_seqlens is copied from
// the input), plus file attributes that
// record how the run was made, so that `linattn verify` can redo it.
#pragma once

#include "core/tensor.hpp"
#include "io/hdf5_dataset.hpp"

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

// The file attributes of an output file, one field per attribute.
struct RunRecord {
  std::int64_t chunk_size = 0;
  double scale = 1.0;
  std::string variant;
  std::string gemm_path;  // the tile-product path that ran: "kokkoskernels" or "tensorcore"
  std::string input_dtype, output_dtype, snapshot_dtype;  // snapshot_dtype "none" when h is absent
  std::string kokkos_backend, kokkos_version, linattn_version;
  double kernel_seconds = 0, upload_seconds = 0, download_seconds = 0;
  double flops = 0;      // the ledger's count for the variant
  double min_bytes = 0;  // the ledger's minimum bytes moved
  std::string input_file;           // absolute (outputs made before input_file_relative: as given on the command line)
  std::string input_file_relative;  // from the output file's folder; "" when absent (older outputs)
  std::string input_group;          // "/" for a case at the root
  bool normalize = false;           // attribute normalize (0/1); absent in older files: 0
  std::int64_t num_sequences = 0;   // attribute num_sequences (B, or N packed sequences)
  std::string gate = "none";        // attribute gate: the input's gate dataset, "g_gamma" or "g"; absent in older files: "none"
};

struct OutputData {
  Tensor o, h, final_state;  // h empty when not stored
  Tensor z_state;            // empty unless normalized
  std::vector<std::int64_t> cu_seqlens;  // the packed sequences of the input (copied for readers); empty if none
  RunRecord record;
};

// The file attributes of a run (one per RunRecord field) on the file's root.
void write_run_record(hid_t file, const std::string& path, const RunRecord& record);
// And back: FileError naming a missing attribute (normalize and num_sequences may be absent: 0).
RunRecord read_run_record(hid_t file, const std::string& path);

// Writes path.partial and renames it to path (replacing an existing file).
// Throws FileError; on failure no file named path is created.
void write_output_file(const std::string& path, const OutputData& out, const hdf5::WriteOptions& options = {});

// Reads an output file back (tensors bit-exact, attributes); FileError when a
// dataset or attribute is missing or malformed.
OutputData read_output_file(const std::string& path);

}  // namespace linattn
