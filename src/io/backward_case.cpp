#include "io/backward_case.hpp"

#include "io/dataset_storage.hpp"
#include "io/file_error.hpp"
#include "io/grad_input_file.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_links.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "io/recorded_paths.hpp"

#include <stdexcept>

namespace linattn {
namespace {

std::string describe_sequences(const std::vector<std::int64_t>& cu_seqlens) {
  return cu_seqlens.empty() ? "none" : std::to_string(cu_seqlens.size() - 1) + " sequences";
}

// What the backward needs of a forward output: its attributes, the shapes of
// o and final_state (checked against the input; their data is not needed, and
// o is as large as the inputs), the shape and dtype of its snapshots (read in
// windows later, when not recomputed) and its cu_seqlens.
struct ForwardOutputParts {
  RunRecord record;
  std::vector<std::int64_t> o_shape, final_state_shape, h_shape;  // h_shape empty: no snapshots stored
  DType h_dtype = DType::f32;
  bool h_external = false;  // h's data are in other files (--allow-external-data)
  std::vector<std::int64_t> cu_seqlens;
};

ForwardOutputParts read_forward_parts(const std::string& path) {
  const hdf5::File file = hdf5::open_read_only(path);
  const hid_t f = file.get();
  ForwardOutputParts fw;
  fw.record = read_run_record(f, path);
  fw.o_shape = hdf5::dataset_info(f, path, "o").shape;
  fw.final_state_shape = hdf5::dataset_info(f, path, "final_state").shape;
  if (fw.record.snapshot_dtype != "none") {
    const hdf5::DatasetInfo h = hdf5::dataset_info(f, path, "h");
    fw.h_shape = h.shape;
    fw.h_dtype = h.dtype;
    fw.h_external = hdf5::reads_other_files(hdf5::open_dataset(f, path, "h").get());
  }
  if (hdf5::link_exists(f, "cu_seqlens")) fw.cu_seqlens = hdf5::read_index_vector(f, path, "cu_seqlens");
  return fw;
}

// The forward output against the input case it names: the same shapes and
// sequences, so that its snapshots belong to these q, k and v.
void check_forward_matches(const std::string& forward, const ForwardOutputParts& fw, const std::string& input_file,
                           const Problem& p) {
  const std::string its = "its input case " + input_file + ":" + fw.record.input_group;
  const std::string changed = " (the input changed since the forward?)";
  auto check_shape = [&](const char* name, const std::vector<std::int64_t>& shape,
                         const std::vector<std::int64_t>& expected) {
    if (shape != expected)
      throw FileError(forward, name, "shape " + shape_string(shape) + ", but " + its + " implies " +
                                         shape_string(expected) + " at chunk " + std::to_string(p.chunk) + changed);
  };
  check_shape("o", fw.o_shape, p.o_shape());
  if (fw.record.num_sequences != 0 && fw.record.num_sequences != p.num_sequences())
    throw FileError(forward, "attribute 'num_sequences' = " + std::to_string(fw.record.num_sequences) + ", but " +
                                 its + " holds " + std::to_string(p.num_sequences()) + " sequences" + changed);
  if (fw.cu_seqlens.size() != p.cu_seqlens.size())
    throw FileError(forward, "cu_seqlens (" + describe_sequences(fw.cu_seqlens) + ") differ from those of " + its +
                                 " (" + describe_sequences(p.cu_seqlens) + ")" + changed);
  for (std::size_t i = 0; i < p.cu_seqlens.size(); ++i)
    if (fw.cu_seqlens[i] != p.cu_seqlens[i])
      throw FileError(forward, "cu_seqlens", "entry " + std::to_string(i) + " is " + std::to_string(fw.cu_seqlens[i]) +
                                                 ", but " + its + " has " + std::to_string(p.cu_seqlens[i]) + changed);
  check_shape("final_state", fw.final_state_shape, p.state_shape());
  if (!fw.h_shape.empty()) check_shape("h", fw.h_shape, p.h_shape());
}

}  // namespace

BackwardCase inspect_backward_case(const std::string& forward, const std::string& grad, bool recompute) {
  BackwardCase c;
  const ForwardOutputParts fw = read_forward_parts(forward);
  const RunRecord& rec = fw.record;
  if (rec.normalize)
    throw FileError(forward, "is a normalized forward (--normalize): the backward takes unnormalized forwards");
  if (fw.h_shape.empty() && !recompute)
    throw FileError(forward, "holds no snapshots h (its forward ran with --snapshots none): pass --recompute-h to "
                               "recompute them from the input case");

  c.input_group = rec.input_group;
  const std::string group = c.group();
  CaseSchema in;
  c.input_file = resolve_recorded_path(forward, {rec.input_file, rec.input_file_relative}, "input_file");
  {
    const hdf5::File f = hdf5::open_read_only(c.input_file);
    in = inspect_case(f.get(), c.input_file, group);
    if (in.has_initial_state)
      c.initial_dtype = hdf5::dataset_info(f.get(), c.input_file, dataset_path(group, "initial_state")).dtype;
  }
  c.has_initial_state = in.has_initial_state;
  c.gate = in.gate;
  if (rec.gate != gate_dataset_name(in.gate))
    throw FileError(forward, "was made with gate '" + rec.gate + "', but its input case " + c.input_file + ":" +
                                   rec.input_group + " holds gate '" + gate_dataset_name(in.gate) +
                                   "' (the input changed since the forward?)");
  c.dtype = in.q.dtype;
  if (rec.input_dtype != dtype_name(c.dtype))
    throw FileError(c.input_file, dataset_path(group, "q"),
                    std::string("dtype ") + dtype_name(c.dtype) + ", but " + forward + " was made from " +
                        rec.input_dtype + " inputs (the input changed since the forward?)");
  try {
    // inspect_case checked initial_state's shape.
    c.p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, rec.chunk_size, rec.scale, nullptr,
                              in.cu_seqlens);
    validate(c.p);
  } catch (const std::invalid_argument& e) {
    throw FileError(forward, std::string("its input case ") + c.input_file + ":" + rec.input_group +
                                   " and attributes do not make a problem the backward runs: " + e.what());
  }
  check_forward_matches(forward, fw, c.input_file, c.p);
  const DType acc = accumulation_dtype(c.dtype);
  c.h_dtype = fw.h_dtype;
  if (!recompute && fw.h_dtype != DType::bf16 && fw.h_dtype != acc)
    throw FileError(forward, "h", std::string("dtype ") + dtype_name(fw.h_dtype) + ", expected bf16 or " +
                                        dtype_name(acc) + " (the accumulation type of " + dtype_name(c.dtype) +
                                        " inputs)");
  const hdf5::File f = hdf5::open_read_only(grad);
  const GradSchema g = inspect_grad_case(f.get(), grad, rec.input_group, c.p, c.dtype);
  c.grad_group = g.group;
  c.has_dht = g.has_dht;
  c.external_data = in.external_data;
  c.external_data.insert(c.external_data.end(), g.external_data.begin(), g.external_data.end());
  if (fw.h_external && !recompute) c.external_data.push_back("h");
  return c;
}


}  // namespace linattn
