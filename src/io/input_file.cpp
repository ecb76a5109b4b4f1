#include "io/input_file.hpp"

#include "core/problem.hpp"
#include "io/file_error.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace linattn {
namespace {

// Natural order, so that case2 comes before case10.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      const std::string ta = na.substr(std::min(na.find_first_not_of('0'), na.size()));
      const std::string tb = nb.substr(std::min(nb.find_first_not_of('0'), nb.size()));
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

herr_t collect_case(hid_t, const char* name, const H5L_info_t*, void* out) {
  const std::string path = name;
  const std::size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base == "q" || base == "k" || base == "v")
    static_cast<std::set<std::string>*>(out)->insert(slash == std::string::npos ? "" : path.substr(0, slash));
  return 0;
}

std::string multi_index(const std::vector<std::int64_t>& shape, std::int64_t flat) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t a = shape.size(); a-- > 0;) {
    idx[a] = flat % shape[a];
    flat /= shape[a];
  }
  return shape_string(idx);
}

void check_finite(const Tensor& t, const std::string& file, const std::string& path) {
  std::int64_t count = 0, first = -1;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(t.get(i))) {
      if (first < 0) first = i;
      ++count;
    }
  }
  if (count == 0) return;
  const double x = t.get(first);
  throw FileError(file, path,
                  std::to_string(count) + " non-finite element" + (count > 1 ? "s" : "") + ", the first " +
                      (std::isnan(x) ? "NaN" : x > 0 ? "+Inf" : "-Inf") + " at " + multi_index(t.shape, first) +
                      " (--allow-nonfinite accepts them)");
}

void check_layout(hid_t f, const std::string& file, const std::string& path) {
  const auto layout = hdf5::read_string_attribute(f, file, path, "layout");
  if (layout && *layout != "BTHD")
    throw FileError(file, path, "layout '" + *layout + "' is not supported; expected BTHD ([B, T, H, D])");
}

}  // namespace

std::string dataset_path(const std::string& group, const std::string& name) {
  return group.empty() ? name : group + "/" + name;
}

std::vector<std::string> list_cases(const std::string& file) {
  const hdf5::File f = hdf5::open_read_only(file);
  std::set<std::string> groups;
  if (H5Lvisit(f.get(), H5_INDEX_NAME, H5_ITER_INC, collect_case, &groups) < 0)
    throw FileError(file, "cannot list its contents (corrupt file?)");
  std::vector<std::string> cases(groups.begin(), groups.end());
  std::sort(cases.begin(), cases.end(), natural_less);
  if (cases.empty()) throw FileError(file, "no case found: expected datasets q, k and v at the root or in groups");
  return cases;
}

CaseData read_case(const std::string& file, const std::string& group, const ReadOptions& options) {
  const hdf5::File f = hdf5::open_read_only(file);
  const hid_t id = f.get();
  const std::string q_path = dataset_path(group, "q");

  // Schema first, from the metadata alone: nothing is read before it holds.
  hdf5::DatasetInfo info[3];
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const std::string path = dataset_path(group, names[i]);
    if (!hdf5::link_exists(id, path))
      throw FileError(file, path, "missing (a case needs datasets q, k and v)");
    info[i] = hdf5::dataset_info(id, file, path);
    const auto& s = info[i].shape;
    if (s.size() != 4)
      throw FileError(file, path, "rank " + std::to_string(s.size()) + " " + shape_string(s) + ", expected rank 4 [B, T, H, " +
                                      (i == 2 ? "DV]" : "DK]"));
    const char* dims[4] = {"B", "T", "H", i == 2 ? "DV" : "DK"};
    for (int d = 0; d < 4; ++d)
      if (s[d] == 0) throw FileError(file, path, std::string("dimension ") + dims[d] + " is 0 in shape " + shape_string(s));
    check_layout(id, file, path);
  }
  for (int i = 1; i < 3; ++i) {
    const std::string path = dataset_path(group, names[i]);
    if (info[i].dtype != info[0].dtype)
      throw FileError(file, path, std::string("dtype ") + dtype_name(info[i].dtype) + " differs from q's " +
                                      dtype_name(info[0].dtype) + " (q, k and v must share one dtype)");
    const int ndims = i == 1 ? 4 : 3;  // k must match q in DK too; v only in B, T, H
    const char* dims[4] = {"B", "T", "H", "DK"};
    for (int d = 0; d < ndims; ++d)
      if (info[i].shape[d] != info[0].shape[d])
        throw FileError(file, path, std::string(dims[d]) + " = " + std::to_string(info[i].shape[d]) + " differs from q's " +
                                        dims[d] + " = " + std::to_string(info[0].shape[d]) + " (q " +
                                        shape_string(info[0].shape) + ", " + names[i] + " " +
                                        shape_string(info[i].shape) + ")");
  }
  // Packed sequences: their offsets decide how many states the case carries.
  const std::string cu_path = dataset_path(group, "cu_seqlens");
  std::vector<std::int64_t> cu_seqlens;
  if (hdf5::link_exists(id, cu_path)) {
    cu_seqlens = hdf5::read_index_vector(id, file, cu_path);
    Problem packed;
    packed.B = info[0].shape[0];
    packed.T = info[0].shape[1];
    packed.cu_seqlens = cu_seqlens;
    try {
      validate_sequences(packed);
    } catch (const std::invalid_argument& e) {
      throw FileError(file, cu_path, std::string(e.what()) + " (q " + shape_string(info[0].shape) + ")");
    }
  }
  const std::int64_t N = cu_seqlens.empty() ? info[0].shape[0] : static_cast<std::int64_t>(cu_seqlens.size()) - 1;
  const char* per = cu_seqlens.empty() ? "[B, " : "[N (sequences), ";
  const std::string s0_path = dataset_path(group, "initial_state");
  const bool has_s0 = hdf5::link_exists(id, s0_path);
  if (has_s0) {
    const hdf5::DatasetInfo s0 = hdf5::dataset_info(id, file, s0_path);
    const std::vector<std::int64_t> expected = {N, info[0].shape[2], info[0].shape[3], info[2].shape[3]};
    if (s0.shape != expected)
      throw FileError(file, s0_path, "shape " + shape_string(s0.shape) + ", expected " + per + "H, DK, DV] = " +
                                         shape_string(expected));
  }
  const std::string z_path = dataset_path(group, "z_state");
  const bool has_z = hdf5::link_exists(id, z_path);
  if (has_z) {
    const hdf5::DatasetInfo z = hdf5::dataset_info(id, file, z_path);
    const std::vector<std::int64_t> expected = {N, info[0].shape[2], info[0].shape[3]};
    if (z.shape != expected)
      throw FileError(file, z_path, "shape " + shape_string(z.shape) + ", expected " + per + "H, DK] = " +
                                        shape_string(expected));
  }

  CaseData data;
  data.q = hdf5::read_tensor(id, file, q_path);
  data.k = hdf5::read_tensor(id, file, dataset_path(group, "k"));
  data.v = hdf5::read_tensor(id, file, dataset_path(group, "v"));
  if (has_s0) data.initial_state = hdf5::read_tensor(id, file, s0_path);
  if (has_z) data.initial_z = hdf5::read_tensor(id, file, z_path);
  data.cu_seqlens = cu_seqlens;
  if (!options.allow_nonfinite) {
    check_finite(data.q, file, q_path);
    check_finite(data.k, file, dataset_path(group, "k"));
    check_finite(data.v, file, dataset_path(group, "v"));
    if (has_s0) check_finite(data.initial_state, file, s0_path);
    if (has_z) check_finite(data.initial_z, file, z_path);
  }
  return data;
}

void write_input_file(const std::string& path, const std::vector<NamedCase>& cases, const hdf5::WriteOptions& options) {
  hdf5::NewFile out(path);
  for (const NamedCase& c : cases) {
    const std::pair<const char*, const Tensor*> tensors[] = {{"q", &c.data.q},
                                                             {"k", &c.data.k},
                                                             {"v", &c.data.v},
                                                             {"initial_state", &c.data.initial_state},
                                                             {"z_state", &c.data.initial_z}};
    for (const auto& [name, tensor] : tensors) {
      if (tensor->empty()) continue;
      const std::string ds = dataset_path(c.group, name);
      hdf5::write_tensor(out.id(), path, ds, *tensor, options);
      if (std::string(name).size() == 1)  // q, k, v
        hdf5::write_attribute(out.id(), path, ds, "layout", "BTHD");
    }
    if (!c.data.cu_seqlens.empty())
      hdf5::write_index_vector(out.id(), path, dataset_path(c.group, "cu_seqlens"), c.data.cu_seqlens);
  }
  out.commit();
}

}  // namespace linattn
