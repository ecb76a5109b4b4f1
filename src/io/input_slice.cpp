#include "io/input_slice.hpp"

#include "io/hdf5_dataset.hpp"
#include "io/hdf5_types.hpp"

namespace linattn {
namespace {

// The block [start, start + count) of dataset NAME of the case into a new tensor of `dtype`.
Tensor read_part(hid_t file, const std::string& file_name, const std::string& group, const char* name, DType dtype,
                 const std::vector<hsize_t>& start, const std::vector<hsize_t>& count, bool allow_nonfinite,
                 const std::string& window) {
  const std::vector<std::int64_t> shape(count.begin(), count.end());
  Tensor t = Tensor::uninitialized(dtype, shape);
  if (t.numel() == 0) return t;
  const std::string path = dataset_path(group, name);
  const hdf5::Dataset ds = hdf5::open_dataset(file, file_name, path);
  const hdf5::Datatype type = hdf5::datatype_of(dtype);
  hdf5::read_block(ds.get(), type.get(), start, count, t.bytes.data(), file_name, path);
  if (!allow_nonfinite) {
    const std::vector<std::int64_t> origin(start.begin(), start.end());
    check_finite(t.bytes.data(), dtype, shape, origin, file_name, path, window);
  }
  return t;
}

// The gate's block [start, start + count) into a new tensor of `dtype`, checked as log-decays (always, as the
// reader process checks its windows' gate).
Tensor read_gate_part(hid_t file, const std::string& file_name, const std::string& group, GateKind kind, DType dtype,
                      const std::vector<hsize_t>& start, const std::vector<hsize_t>& count, const std::string& window) {
  const std::vector<std::int64_t> shape(count.begin(), count.end());
  Tensor t = Tensor::uninitialized(dtype, shape);
  if (t.numel() == 0) return t;
  const std::string path = dataset_path(group, gate_dataset_name(kind));
  const hdf5::Dataset ds = hdf5::open_dataset(file, file_name, path);
  const hdf5::Datatype type = hdf5::datatype_of(dtype);
  hdf5::read_block(ds.get(), type.get(), start, count, t.bytes.data(), file_name, path);
  check_log_decays(t.bytes.data(), dtype, shape, std::vector<std::int64_t>(start.begin(), start.end()), file_name,
                   path, window);
  return t;
}

}  // namespace

CaseData read_slice(hid_t file, const std::string& file_name, const std::string& group, const CaseSchema& schema,
                    const SliceRequest& r) {
  const auto& s = schema.q.shape;
  const hsize_t B = s[0], H = s[2], DK = s[3], DV = schema.v.shape[3];
  const hsize_t t0 = static_cast<hsize_t>(r.t0), T = static_cast<hsize_t>(r.t1 - r.t0);
  const hsize_t row0 = static_cast<hsize_t>(r.row0), rows = static_cast<hsize_t>(r.rows);
  const DType in = schema.q.dtype;
  const std::string window =
      r.t0 == 0 && r.t1 == s[1] ? "" : "in tokens [" + std::to_string(r.t0) + ", " + std::to_string(r.t1) + ")";
  CaseData d;
  if (r.with_q)
    d.q = read_part(file, file_name, group, "q", in, {0, t0, 0, 0}, {B, T, H, DK}, r.allow_nonfinite, window);
  d.k = read_part(file, file_name, group, "k", in, {0, t0, 0, 0}, {B, T, H, DK}, r.allow_nonfinite, window);
  d.v = read_part(file, file_name, group, "v", in, {0, t0, 0, 0}, {B, T, H, DV}, r.allow_nonfinite, window);
  if (schema.has_initial_state && rows > 0)
    d.initial_state = read_part(file, file_name, group, "initial_state", r.accumulation, {row0, 0, 0, 0},
                                {rows, H, DK, DV}, r.allow_nonfinite, "");
  if (schema.has_initial_z && rows > 0)
    d.initial_z = read_part(file, file_name, group, "z_state", r.accumulation, {row0, 0, 0}, {rows, H, DK},
                            r.allow_nonfinite, "");
  d.gate = schema.gate;
  if (schema.gate == GateKind::per_token)
    d.log_decay = read_gate_part(file, file_name, group, schema.gate, r.accumulation, {0, t0, 0}, {B, T, H}, window);
  if (schema.gate == GateKind::per_head)
    d.log_decay = read_gate_part(file, file_name, group, schema.gate, r.accumulation, {0}, {H}, "");
  if (schema.gate == GateKind::per_channel)
    d.log_decay =
        read_gate_part(file, file_name, group, schema.gate, r.accumulation, {0, t0, 0, 0}, {B, T, H, DK}, window);
  return d;
}

}  // namespace linattn
