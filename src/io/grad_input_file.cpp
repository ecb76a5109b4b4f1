#include "io/grad_input_file.hpp"

#include "io/dataset_storage.hpp"
#include "io/file_error.hpp"
#include "io/hdf5_file.hpp"

namespace linattn {
namespace {

// Shape and dtype from the metadata, then the stored bytes, before any data
// is read (the input file's order: inspect_case).
void check_dataset(hid_t f, const std::string& file, const std::string& path, const std::vector<std::int64_t>& shape,
                   const std::string& shape_names, DType dtype, const std::string& dtype_rule) {
  const hdf5::DatasetInfo info = hdf5::dataset_info(f, file, path);
  if (info.shape != shape)
    throw FileError(file, path, "shape " + shape_string(info.shape) + ", but the forward's input case implies " +
                                    shape_names + " = " + shape_string(shape));
  if (info.dtype != dtype)
    throw FileError(file, path, std::string("dtype ") + dtype_name(info.dtype) + ", expected " + dtype_name(dtype) +
                                    " (" + dtype_rule + ")");
  std::int64_t bytes = static_cast<std::int64_t>(dtype_size(dtype));
  for (std::int64_t d : shape) bytes *= d;  // shapes of a validated problem: no overflow
  hdf5::check_stored_bytes(f, file, path, bytes);
}

}  // namespace

GradSchema inspect_grad_case(hid_t f, const std::string& file, const std::string& case_group, const Problem& p,
                             DType input) {
  GradSchema g;
  const std::string wanted = case_group == "/" ? "" : case_group;
  g.group = !wanted.empty() && hdf5::is_group(f, wanted) ? wanted : "";
  const std::string do_path = dataset_path(g.group, "do");
  if (!hdf5::link_exists(f, do_path))
    throw FileError(file, do_path,
                    "missing (a gradient file holds do [B, T, H, DV] " +
                        (wanted.empty() ? std::string("at the root") : "in group '" + wanted + "' or at the root") +
                        " for the forward's input case)");
  check_dataset(f, file, do_path, p.v_shape(), "[B, T, H, DV]", input,
                std::string("do takes the dtype of the inputs, ") + dtype_name(input));
  const std::string dht_path = dataset_path(g.group, "dht");
  g.has_dht = hdf5::link_exists(f, dht_path);
  if (g.has_dht) {
    const DType acc = accumulation_dtype(input);
    check_dataset(f, file, dht_path, p.state_shape(), p.varlen() ? "[N (sequences), H, DK, DV]" : "[B, H, DK, DV]",
                  acc, std::string("dht takes the accumulation type of ") + dtype_name(input) + " inputs");
  }
  for (const auto& [name, path] : {std::pair<const char*, std::string>{"do", do_path}, {"dht", dht_path}})
    if (hdf5::link_exists(f, path) && hdf5::reads_other_files(hdf5::open_dataset(f, file, path).get()))
      g.external_data.push_back(name);
  return g;
}

GradData read_grad_case(const std::string& file, const std::string& case_group, const Problem& p, DType input,
                        const ReadOptions& options) {
  const hdf5::File handle = hdf5::open_read_only(file);
  const hid_t f = handle.get();
  const GradSchema schema = inspect_grad_case(f, file, case_group, p, input);
  GradData g;
  g.group = schema.group;
  g.external_data = schema.external_data;
  const std::string do_path = dataset_path(g.group, "do"), dht_path = dataset_path(g.group, "dht");
  g.d_o = hdf5::read_tensor(f, file, do_path);
  if (schema.has_dht) g.dht = hdf5::read_tensor(f, file, dht_path);
  if (!options.allow_nonfinite) {
    check_finite(g.d_o.bytes.data(), g.d_o.dtype, g.d_o.shape, {}, file, do_path);
    if (schema.has_dht) check_finite(g.dht.bytes.data(), g.dht.dtype, g.dht.shape, {}, file, dht_path);
  }
  return g;
}

void write_grad_file(const std::string& path, const std::vector<NamedGrad>& cases, const hdf5::WriteOptions& options) {
  hdf5::NewFile out(path);
  for (const NamedGrad& c : cases) {
    const std::string do_path = dataset_path(c.group, "do");
    hdf5::write_tensor(out.id(), path, do_path, c.d_o, options);
    hdf5::write_attribute(out.id(), path, do_path, "layout", "BTHD");
    if (!c.dht.empty()) hdf5::write_tensor(out.id(), path, dataset_path(c.group, "dht"), c.dht, options);
  }
  out.commit();
}

}  // namespace linattn
