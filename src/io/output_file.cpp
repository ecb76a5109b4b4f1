#include "io/output_file.hpp"

#include "io/file_error.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/output_stream.hpp"

namespace linattn {
namespace {

std::string required_string(hid_t f, const std::string& file, const std::string& name) {
  auto v = hdf5::read_string_attribute(f, file, "/", name);
  if (!v) throw FileError(file, "attribute '" + name + "' missing (not a linattn output file?)");
  return *v;
}

double required_number(hid_t f, const std::string& file, const std::string& name) {
  auto v = hdf5::read_number_attribute(f, file, "/", name);
  if (!v) throw FileError(file, "attribute '" + name + "' missing (not a linattn output file?)");
  return *v;
}

}  // namespace

void write_run_record(hid_t f, const std::string& path, const RunRecord& r) {
  hdf5::write_attribute(f, path, "/", "chunk_size", r.chunk_size);
  hdf5::write_attribute(f, path, "/", "scale", r.scale);
  hdf5::write_attribute(f, path, "/", "variant", r.variant);
  hdf5::write_attribute(f, path, "/", "gemm_path", r.gemm_path);
  hdf5::write_attribute(f, path, "/", "input_dtype", r.input_dtype);
  hdf5::write_attribute(f, path, "/", "output_dtype", r.output_dtype);
  hdf5::write_attribute(f, path, "/", "snapshot_dtype", r.snapshot_dtype);
  hdf5::write_attribute(f, path, "/", "kokkos_backend", r.kokkos_backend);
  hdf5::write_attribute(f, path, "/", "kokkos_version", r.kokkos_version);
  hdf5::write_attribute(f, path, "/", "linattn_version", r.linattn_version);
  hdf5::write_attribute(f, path, "/", "kernel_seconds", r.kernel_seconds);
  hdf5::write_attribute(f, path, "/", "upload_seconds", r.upload_seconds);
  hdf5::write_attribute(f, path, "/", "download_seconds", r.download_seconds);
  hdf5::write_attribute(f, path, "/", "flops", r.flops);
  hdf5::write_attribute(f, path, "/", "min_bytes", r.min_bytes);
  hdf5::write_attribute(f, path, "/", "input_file", r.input_file);
  if (!r.input_file_relative.empty())
    hdf5::write_attribute(f, path, "/", "input_file_relative", r.input_file_relative);
  hdf5::write_attribute(f, path, "/", "input_group", r.input_group);
  hdf5::write_attribute(f, path, "/", "normalize", static_cast<std::int64_t>(r.normalize ? 1 : 0));
  hdf5::write_attribute(f, path, "/", "num_sequences", r.num_sequences);
  hdf5::write_attribute(f, path, "/", "gate", r.gate);
}

void write_output_file(const std::string& path, const OutputData& out, const hdf5::WriteOptions& options) {
  // The streamed writer with one window: one place creates the datasets and their attributes.
  Problem p;
  p.B = out.o.shape.at(0);
  p.T = out.o.shape.at(1);
  p.H = out.o.shape.at(2);
  p.DV = out.o.shape.at(3);
  p.DK = out.final_state.shape.at(2);
  p.chunk = out.record.chunk_size > 0 ? out.record.chunk_size : 64;
  p.cu_seqlens = out.cu_seqlens;
  if (!out.h.empty() && out.h.shape != p.h_shape())
    throw FileError(path, "h has shape " + shape_string(out.h.shape) + ", the other outputs need " +
                              shape_string(p.h_shape()));
  OutputStream stream(path, p,
                      output_layout(p, out.o.dtype, out.h.empty() ? DType::f32 : out.h.dtype, out.final_state.dtype,
                                    !out.h.empty(), !out.z_state.empty(), options.compress));
  stream.write_o(0, p.T, out.o.bytes.data());
  if (!out.h.empty()) stream.write_h(0, p.total_chunks(), out.h.bytes.data());
  stream.write_final(0, p.num_sequences(), out.final_state.bytes.data(),
                     out.z_state.empty() ? nullptr : out.z_state.bytes.data());
  stream.finish(out.record, false);
}

RunRecord read_run_record(hid_t f, const std::string& path) {
  RunRecord r;
  r.chunk_size = static_cast<std::int64_t>(required_number(f, path, "chunk_size"));
  r.scale = required_number(f, path, "scale");
  r.variant = required_string(f, path, "variant");
  r.gemm_path = required_string(f, path, "gemm_path");
  r.input_dtype = required_string(f, path, "input_dtype");
  r.output_dtype = required_string(f, path, "output_dtype");
  r.snapshot_dtype = required_string(f, path, "snapshot_dtype");
  r.kokkos_backend = required_string(f, path, "kokkos_backend");
  r.kokkos_version = required_string(f, path, "kokkos_version");
  r.linattn_version = required_string(f, path, "linattn_version");
  r.kernel_seconds = required_number(f, path, "kernel_seconds");
  r.upload_seconds = required_number(f, path, "upload_seconds");
  r.download_seconds = required_number(f, path, "download_seconds");
  r.flops = required_number(f, path, "flops");
  r.min_bytes = required_number(f, path, "min_bytes");
  r.input_file = required_string(f, path, "input_file");
  r.input_file_relative = hdf5::read_string_attribute(f, path, "/", "input_file_relative").value_or("");
  r.input_group = required_string(f, path, "input_group");
  r.normalize = hdf5::read_number_attribute(f, path, "/", "normalize").value_or(0.0) != 0.0;
  r.num_sequences = static_cast<std::int64_t>(hdf5::read_number_attribute(f, path, "/", "num_sequences").value_or(0.0));
  r.gate = hdf5::read_string_attribute(f, path, "/", "gate").value_or("none");
  return r;
}

OutputData read_output_file(const std::string& path) {
  const hdf5::File file = hdf5::open_read_only(path);
  const hid_t f = file.get();
  OutputData out;
  out.record = read_run_record(f, path);
  const RunRecord& r = out.record;
  out.o = hdf5::read_tensor(f, path, "o");
  if (r.snapshot_dtype != "none") out.h = hdf5::read_tensor(f, path, "h");
  out.final_state = hdf5::read_tensor(f, path, "final_state");
  if (r.normalize) out.z_state = hdf5::read_tensor(f, path, "z_state");
  if (hdf5::link_exists(f, "cu_seqlens")) out.cu_seqlens = hdf5::read_index_vector(f, path, "cu_seqlens");
  return out;
}

}  // namespace linattn
