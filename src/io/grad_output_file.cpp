#include "io/grad_output_file.hpp"

#include "io/file_error.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"

namespace linattn {
namespace {

std::string required_string(hid_t f, const std::string& file, const std::string& name) {
  auto v = hdf5::read_string_attribute(f, file, "/", name);
  if (!v) throw FileError(file, "attribute '" + name + "' missing (not a gradient file of linattn backward?)");
  return *v;
}

}  // namespace

void write_grad_dataset_attributes(hid_t f, const std::string& path, bool packed) {
  for (const char* name : {"dq", "dk", "dv"}) hdf5::write_attribute(f, path, name, "layout", "BTHD");
  hdf5::write_attribute(f, path, "dh0", "layout", packed ? "N,H,DK,DV" : "B,H,DK,DV");
  hdf5::write_attribute(f, path, "dh0", "description", "the gradient of the initial state (of each sequence)");
}

void write_grad_record(hid_t f, const std::string& path, const GradRecord& r) {
  write_run_record(f, path, r.run);
  hdf5::write_attribute(f, path, "/", "forward_file", r.forward_file);
  hdf5::write_attribute(f, path, "/", "grad_file", r.grad_file);
  if (!r.forward_file_relative.empty())
    hdf5::write_attribute(f, path, "/", "forward_file_relative", r.forward_file_relative);
  if (!r.grad_file_relative.empty()) hdf5::write_attribute(f, path, "/", "grad_file_relative", r.grad_file_relative);
  hdf5::write_attribute(f, path, "/", "grad_group", r.grad_group);
  hdf5::write_attribute(f, path, "/", "recompute_h", static_cast<std::int64_t>(r.recompute_h ? 1 : 0));
}

void write_grad_output_file(const std::string& path, const GradOutputData& out, bool durable) {
  hdf5::NewFile file(path);
  const hid_t f = file.id();
  const bool packed = !out.cu_seqlens.empty();
  // 16-bit types are stored as write_output_file stores o: their own 2-byte float types (hdf5_types.hpp).
  const std::pair<const char*, const Tensor*> tensors[] = {
      {"dq", &out.dq}, {"dk", &out.dk}, {"dv", &out.dv}, {"dh0", &out.dh0}};
  for (const auto& [name, tensor] : tensors) hdf5::write_tensor(f, path, name, *tensor, {});
  if (!out.dg.empty()) hdf5::write_tensor(f, path, "dg", out.dg, {});
  if (!out.dg_gamma.empty()) hdf5::write_tensor(f, path, "dg_gamma", out.dg_gamma, {});
  if (!out.dgk.empty()) hdf5::write_tensor(f, path, "dgk", out.dgk, {});
  write_grad_dataset_attributes(f, path, packed);
  if (packed) hdf5::write_index_vector(f, path, "cu_seqlens", out.cu_seqlens);
  write_grad_record(f, path, out.record);
  file.commit(durable);
}

bool is_grad_output_file(const std::string& path) {
  const hdf5::File file = hdf5::open_read_only(path);
  return hdf5::link_exists(file.get(), "dq");
}

GradOutputData read_grad_output_file(const std::string& path) {
  const hdf5::File file = hdf5::open_read_only(path);
  const hid_t f = file.get();
  GradOutputData out;
  GradRecord& r = out.record;
  r.run = read_run_record(f, path);
  r.forward_file = required_string(f, path, "forward_file");
  r.grad_file = required_string(f, path, "grad_file");
  r.forward_file_relative = hdf5::read_string_attribute(f, path, "/", "forward_file_relative").value_or("");
  r.grad_file_relative = hdf5::read_string_attribute(f, path, "/", "grad_file_relative").value_or("");
  r.grad_group = required_string(f, path, "grad_group");
  r.recompute_h = hdf5::read_number_attribute(f, path, "/", "recompute_h").value_or(0.0) != 0.0;
  out.dq = hdf5::read_tensor(f, path, "dq");
  out.dk = hdf5::read_tensor(f, path, "dk");
  out.dv = hdf5::read_tensor(f, path, "dv");
  out.dh0 = hdf5::read_tensor(f, path, "dh0");
  if (hdf5::link_exists(f, "dg")) out.dg = hdf5::read_tensor(f, path, "dg");
  if (hdf5::link_exists(f, "dg_gamma")) out.dg_gamma = hdf5::read_tensor(f, path, "dg_gamma");
  if (hdf5::link_exists(f, "dgk")) out.dgk = hdf5::read_tensor(f, path, "dgk");
  if (hdf5::link_exists(f, "cu_seqlens")) out.cu_seqlens = hdf5::read_index_vector(f, path, "cu_seqlens");
  return out;
}

}  // namespace linattn
