#include "io/input_file.hpp"

#include "core/problem.hpp"
#include "io/dataset_storage.hpp"
#include "io/file_error.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
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

// What listing a file finds: the case groups, and the external links, which
// the listing does not follow (a "no case found" names them).
struct Listing {
  std::set<std::string> cases;
  std::vector<std::string> external_links;
};

herr_t collect_case(hid_t, const char* name, const H5L_info_t* info, void* out) {
  Listing& listing = *static_cast<Listing*>(out);
  const std::string path = name;
  const std::size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base == "q" || base == "k" || base == "v")
    listing.cases.insert(slash == std::string::npos ? "" : path.substr(0, slash));
  else if (info->type == H5L_TYPE_EXTERNAL)
    listing.external_links.push_back(path);
  return 0;
}

// Non-finite elements of n IEEE values whose exponent field is Mask: all ones
// in the exponent means Inf or NaN. A plain loop over the bit patterns, which
// the compiler vectorizes.
template <class Bits, unsigned long long Mask>
std::int64_t count_nonfinite(const void* data, std::int64_t n) {
  const Bits* x = static_cast<const Bits*>(data);
  constexpr Bits mask = static_cast<Bits>(Mask);
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) count += (x[i] & mask) == mask;
  return count;
}

double element_as_double(const unsigned char* p, DType dtype) {
  Tensor one(dtype, {1});
  std::memcpy(one.bytes.data(), p, dtype_size(dtype));
  return one.get(0);
}

// The index of element `flat` of a row-major block of `shape`, in the
// dataset's coordinates (`origin` added: a window's place in it).
std::vector<std::int64_t> dataset_index(std::int64_t flat, const std::vector<std::int64_t>& shape,
                                        const std::vector<std::int64_t>& origin) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t a = shape.size(); a-- > 0;) {
    idx[a] = flat % shape[a] + (a < origin.size() ? origin[a] : 0);
    flat /= shape[a];
  }
  return idx;
}

// Sizes checked before anything is allocated from them: the element count and
// the bytes in checked 64-bit arithmetic, the limits the kernels index with,
// and the bytes a contiguous dataset stores against what its shape needs.
void check_sizes(hid_t f, const std::string& file, const std::string& path, const hdf5::DatasetInfo& info) {
  std::int64_t bytes = static_cast<std::int64_t>(dtype_size(info.dtype));
  for (std::int64_t d : info.shape)
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes))
      throw FileError(file, path, "shape " + shape_string(info.shape) + " is too large (its byte count overflows 64 bits)");
  if (info.shape.size() == 4 && info.shape[1] > kMaxTokens)
    throw FileError(file, path, "T = " + std::to_string(info.shape[1]) + " exceeds linattn's limit of " +
                                    std::to_string(kMaxTokens) + " tokens per row");
  hdf5::check_stored_bytes(f, file, path, bytes);
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
  Listing listing;
  if (H5Lvisit(f.get(), H5_INDEX_NAME, H5_ITER_INC, collect_case, &listing) < 0)
    throw FileError(file, "cannot list its contents (corrupt file?)");
  std::vector<std::string> cases(listing.cases.begin(), listing.cases.end());
  std::sort(cases.begin(), cases.end(), natural_less);
  if (cases.empty()) {
    const std::size_t n = listing.external_links.size();
    throw FileError(file, "no case found: expected datasets q, k and v at the root or in groups" +
                              (n == 0 ? std::string()
                                      : " (external links, which point outside the file, are not followed: '" +
                                            listing.external_links[0] + "'" +
                                            (n > 1 ? " and " + std::to_string(n - 1) + " more" : "") + ")"));
  }
  return cases;
}

CaseSchema inspect_case(hid_t id, const std::string& file, const std::string& group) {
  // Schema first, from the metadata alone: nothing is read before it holds.
  CaseSchema schema;
  hdf5::DatasetInfo* info[3] = {&schema.q, &schema.k, &schema.v};
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const std::string path = dataset_path(group, names[i]);
    if (!hdf5::link_exists(id, path))
      throw FileError(file, path, "missing (a case needs datasets q, k and v)");
    *info[i] = hdf5::dataset_info(id, file, path);
    const auto& s = info[i]->shape;
    if (s.size() != 4)
      throw FileError(file, path, "rank " + std::to_string(s.size()) + " " + shape_string(s) + ", expected rank 4 [B, T, H, " +
                                      (i == 2 ? "DV]" : "DK]"));
    const char* dims[4] = {"B", "T", "H", i == 2 ? "DV" : "DK"};
    for (int d = 0; d < 4; ++d)
      if (s[d] == 0) throw FileError(file, path, std::string("dimension ") + dims[d] + " is 0 in shape " + shape_string(s));
    check_layout(id, file, path);
    check_sizes(id, file, path, *info[i]);
  }
  for (int i = 1; i < 3; ++i) {
    const std::string path = dataset_path(group, names[i]);
    if (info[i]->dtype != info[0]->dtype)
      throw FileError(file, path, std::string("dtype ") + dtype_name(info[i]->dtype) + " differs from q's " +
                                      dtype_name(info[0]->dtype) + " (q, k and v must share one dtype)");
    const int ndims = i == 1 ? 4 : 3;  // k must match q in DK too; v only in B, T, H
    const char* dims[4] = {"B", "T", "H", "DK"};
    for (int d = 0; d < ndims; ++d)
      if (info[i]->shape[d] != info[0]->shape[d])
        throw FileError(file, path, std::string(dims[d]) + " = " + std::to_string(info[i]->shape[d]) + " differs from q's " +
                                        dims[d] + " = " + std::to_string(info[0]->shape[d]) + " (q " +
                                        shape_string(info[0]->shape) + ", " + names[i] + " " +
                                        shape_string(info[i]->shape) + ")");
  }
  // Packed sequences: their offsets decide how many states the case carries.
  // At most T + 1 offsets can be valid (every sequence holds a token), so a
  // longer vector is refused before it is read.
  const std::string cu_path = dataset_path(group, "cu_seqlens");
  if (hdf5::link_exists(id, cu_path)) {
    schema.cu_seqlens = hdf5::read_index_vector(id, file, cu_path, schema.q.shape[1] + 1);
    Problem packed;
    packed.B = schema.q.shape[0];
    packed.T = schema.q.shape[1];
    packed.cu_seqlens = schema.cu_seqlens;
    try {
      validate_sequences(packed);
    } catch (const std::invalid_argument& e) {
      throw FileError(file, cu_path, std::string(e.what()) + " (q " + shape_string(schema.q.shape) + ")");
    }
  }
  const std::int64_t N = schema.num_sequences();
  const char* per = schema.cu_seqlens.empty() ? "[B, " : "[N (sequences), ";
  const std::string s0_path = dataset_path(group, "initial_state");
  schema.has_initial_state = hdf5::link_exists(id, s0_path);
  if (schema.has_initial_state) {
    const hdf5::DatasetInfo s0 = hdf5::dataset_info(id, file, s0_path);
    const std::vector<std::int64_t> expected = {N, schema.q.shape[2], schema.q.shape[3], schema.v.shape[3]};
    if (s0.shape != expected)
      throw FileError(file, s0_path, "shape " + shape_string(s0.shape) + ", expected " + per + "H, DK, DV] = " +
                                         shape_string(expected));
    check_sizes(id, file, s0_path, s0);
  }
  const std::string z_path = dataset_path(group, "z_state");
  schema.has_initial_z = hdf5::link_exists(id, z_path);
  if (schema.has_initial_z) {
    const hdf5::DatasetInfo z = hdf5::dataset_info(id, file, z_path);
    const std::vector<std::int64_t> expected = {N, schema.q.shape[2], schema.q.shape[3]};
    if (z.shape != expected)
      throw FileError(file, z_path, "shape " + shape_string(z.shape) + ", expected " + per + "H, DK] = " +
                                        shape_string(expected));
    check_sizes(id, file, z_path, z);
  }
  // Gates (docs/HDF5.md, "Gates"): at most one of g_gamma, g and gk, in any
  // float dtype (read as fp32), shaped by q.
  const std::int64_t B = schema.q.shape[0], T = schema.q.shape[1], H = schema.q.shape[2], DK = schema.q.shape[3];
  for (GateKind kind : {GateKind::per_head, GateKind::per_token, GateKind::per_channel}) {
    const std::string path = dataset_path(group, gate_dataset_name(kind));
    if (!hdf5::link_exists(id, path)) continue;
    if (schema.gate != GateKind::none)
      throw FileError(file, path, std::string("the case holds both ") + gate_dataset_name(schema.gate) + " and " +
                                      gate_dataset_name(kind) +
                                      "; a case takes one gate (g_gamma [H]: one decay per head, g [B, T, H]: one per "
                                      "token and head, gk [B, T, H, DK]: one per token, head and key channel)");
    const hdf5::DatasetInfo g = hdf5::dataset_info(id, file, path);
    const std::vector<std::int64_t> expected = kind == GateKind::per_head    ? std::vector<std::int64_t>{H}
                                               : kind == GateKind::per_token ? std::vector<std::int64_t>{B, T, H}
                                                                             : std::vector<std::int64_t>{B, T, H, DK};
    const char* form = kind == GateKind::per_head ? "[H] = " : kind == GateKind::per_token ? "[B, T, H] = " : "[B, T, H, DK] = ";
    if (g.shape != expected)
      throw FileError(file, path, "shape " + shape_string(g.shape) + ", expected " + form + shape_string(expected) +
                                      " (q " + shape_string(schema.q.shape) + ")");
    check_sizes(id, file, path, g);
    schema.gate = kind;
  }
  for (const char* name : {"q", "k", "v", "initial_state", "z_state", "cu_seqlens", "g_gamma", "g", "gk"}) {
    const std::string path = dataset_path(group, name);
    if (hdf5::link_exists(id, path) && hdf5::reads_other_files(hdf5::open_dataset(id, file, path).get()))
      schema.external_data.push_back(name);
  }
  return schema;
}

std::int64_t nonfinite_count(const void* data, DType dtype, std::int64_t n) {
  switch (dtype) {
    case DType::f16: return count_nonfinite<std::uint16_t, 0x7c00u>(data, n);
    case DType::bf16: return count_nonfinite<std::uint16_t, 0x7f80u>(data, n);
    case DType::f32: return count_nonfinite<std::uint32_t, 0x7f800000u>(data, n);
    case DType::f64: return count_nonfinite<std::uint64_t, 0x7ff0000000000000ull>(data, n);
  }
  return 0;
}

void check_finite(const void* data, DType dtype, const std::vector<std::int64_t>& shape,
                  const std::vector<std::int64_t>& origin, const std::string& file, const std::string& path,
                  const std::string& window) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  const std::int64_t count = nonfinite_count(data, dtype, n);
  if (count == 0) return;
  // Only now, on the failure path, find the first one element by element.
  const std::size_t size = dtype_size(dtype);
  std::int64_t first = 0;
  double x = 0;
  for (; first < n; ++first) {
    x = element_as_double(static_cast<const unsigned char*>(data) + first * size, dtype);
    if (!std::isfinite(x)) break;
  }
  throw FileError(file, path,
                  std::to_string(count) + " non-finite element" + (count > 1 ? "s" : "") +
                      (window.empty() ? "" : " " + window) + ", the first " +
                      (std::isnan(x) ? "NaN" : x > 0 ? "+Inf" : "-Inf") + " at " +
                      shape_string(dataset_index(first, shape, origin)) +
                      " (--allow-nonfinite accepts them)");
}

void check_log_decays(const void* data, DType dtype, const std::vector<std::int64_t>& shape,
                      const std::vector<std::int64_t>& origin, const std::string& file, const std::string& path,
                      const std::string& window) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  const std::size_t size = dtype_size(dtype);
  std::vector<double> g(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) g[i] = element_as_double(static_cast<const unsigned char*>(data) + i * size, dtype);
  const std::int64_t first = first_bad_log_decay(g);  // the one rule (core/gate.hpp)
  if (first < 0) return;
  const std::int64_t bad = std::count_if(g.begin(), g.end(), [](double e) { return !is_log_decay(e); });
  const double x = g[static_cast<std::size_t>(first)];
  throw FileError(file, path,
                  std::to_string(bad) + " element" + (bad > 1 ? "s are not log-decays" : " is not a log-decay") +
                      " (finite, <= 0 and >= -1e36)" + (window.empty() ? "" : " " + window) + ", the first " +
                      (std::isnan(x) ? std::string("NaN") : std::isinf(x) ? (x > 0 ? "+Inf" : "-Inf") : std::to_string(x)) +
                      " at " + shape_string(dataset_index(first, shape, origin)) +
                      " (a gate holds log(decay): logsigmoid of the gate logits)");
}

CaseData read_case(const std::string& file, const std::string& group, const ReadOptions& options) {
  const hdf5::File f = hdf5::open_read_only(file);
  const hid_t id = f.get();
  const CaseSchema schema = inspect_case(id, file, group);
  CaseData data;
  const std::pair<Tensor*, std::string> parts[] = {
      {&data.q, dataset_path(group, "q")},
      {&data.k, dataset_path(group, "k")},
      {&data.v, dataset_path(group, "v")},
      {schema.has_initial_state ? &data.initial_state : nullptr, dataset_path(group, "initial_state")},
      {schema.has_initial_z ? &data.initial_z : nullptr, dataset_path(group, "z_state")}};
  for (const auto& [tensor, path] : parts) {
    if (!tensor) continue;
    *tensor = hdf5::read_tensor(id, file, path);
    if (!options.allow_nonfinite) check_finite(tensor->bytes.data(), tensor->dtype, tensor->shape, {}, file, path);
  }
  if (schema.gate != GateKind::none) {
    const std::string path = dataset_path(group, gate_dataset_name(schema.gate));
    const hdf5::Dataset g = hdf5::open_dataset(id, file, path);
    const hdf5::DatasetInfo info = hdf5::dataset_info(id, file, path);
    data.log_decay = Tensor(DType::f32, info.shape);
    const std::vector<hsize_t> start(info.shape.size(), 0), count(info.shape.begin(), info.shape.end());
    hdf5::read_block(g.get(), H5T_NATIVE_FLOAT, start, count, data.log_decay.bytes.data(), file, path);
    check_log_decays(data.log_decay.bytes.data(), DType::f32, info.shape, {}, file, path);
    data.gate = schema.gate;
  }
  data.cu_seqlens = schema.cu_seqlens;
  data.external_data = schema.external_data;
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
    if (c.data.gate != GateKind::none)
      hdf5::write_tensor(out.id(), path, dataset_path(c.group, gate_dataset_name(c.data.gate)), c.data.log_decay, options);
  }
  out.commit();
}

}  // namespace linattn
