#include "pipeline/read_process.hpp"

#include "io/dataset_storage.hpp"
#include "io/file_error.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_errors.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_types.hpp"
#include "io/input_file.hpp"
#include "pipeline/block_read.hpp"
#include "pipeline/read_protocol.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

namespace linattn::pipeline {
namespace {

// Everything beyond the socket, the shared region and stdio belongs to the
// parent (its output files, its GPU): close it.
void close_inherited_descriptors(int keep_a, int keep_b) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  std::vector<int> fds;
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd > 2 && fd != keep_a && fd != keep_b && fd != ::dirfd(dir)) fds.push_back(fd);
  }
  ::closedir(dir);
  for (int fd : fds) ::close(fd);
}

// The case being read: its file stays open from open_case to close_case.
struct OpenCase {
  std::string file, group;
  bool allow_nonfinite = false;
  CaseSchema schema;
  hdf5::File handle;
  hdf5::Dataset q, k, v, initial_state, initial_z, gate;
};

class Worker {
 public:
  Worker(int socket, unsigned char* shared, std::int64_t shared_bytes)
      : socket_(socket), shared_(shared), shared_bytes_(shared_bytes) {}

  // Serves requests until the parent closes the socket.
  void serve() {
    std::string payload;
    while (true) {
      MessageKind kind;
      try {
        kind = receive_message(socket_, payload);
      } catch (const ChannelClosed&) {
        return;
      }
      try {
        MessageReader m(payload);
        switch (kind) {
          case MessageKind::list_cases: reply_cases(m.str()); break;
          case MessageKind::open_case: {
            const std::string file = m.str(), group = m.str();
            const bool allow_nonfinite = m.i64() != 0;
            // The batch's --allow-external-data, for this case's datasets (opened, so checked, here).
            hdf5::set_external_data_allowed(m.i64() != 0);
            open(file, group, allow_nonfinite);
            break;
          }
          case MessageKind::read_window: read(decode_window_read(payload)); break;
          case MessageKind::read_blocks: read(decode_block_reads(payload)); break;
          case MessageKind::inspect_backward: {
            const std::string forward = m.str(), grad = m.str();
            const bool recompute_h = m.i64() != 0;
            hdf5::set_external_data_allowed(m.i64() != 0);
            send_message(socket_, MessageKind::backward_case, encode(inspect_backward_case(forward, grad, recompute_h)));
            break;
          }
          case MessageKind::close_case:
            open_.reset();
            blocks_.clear();
            send_message(socket_, MessageKind::done, "");
            break;
          default: throw std::runtime_error("unknown request");
        }
      } catch (const ChannelClosed&) {
        return;
      } catch (const std::exception& e) {
        send_message(socket_, MessageKind::failed, MessageWriter().str(e.what()).bytes());
      }
    }
  }

 private:
  void reply_cases(const std::string& file) {
    const std::vector<std::string> cases = list_cases(file);
    MessageWriter w;
    w.i64(static_cast<std::int64_t>(cases.size()));
    for (const std::string& c : cases) w.str(c);
    send_message(socket_, MessageKind::cases, w.bytes());
  }

  void open(const std::string& file, const std::string& group, bool allow_nonfinite) {
    open_.reset();
    OpenCase c;
    c.file = file;
    c.group = group;
    c.allow_nonfinite = allow_nonfinite;
    c.handle = hdf5::open_read_only(file);
    c.schema = inspect_case(c.handle.get(), file, group);
    c.q = hdf5::open_dataset(c.handle.get(), file, dataset_path(group, "q"));
    c.k = hdf5::open_dataset(c.handle.get(), file, dataset_path(group, "k"));
    c.v = hdf5::open_dataset(c.handle.get(), file, dataset_path(group, "v"));
    if (c.schema.has_initial_state)
      c.initial_state = hdf5::open_dataset(c.handle.get(), file, dataset_path(group, "initial_state"));
    if (c.schema.has_initial_z) c.initial_z = hdf5::open_dataset(c.handle.get(), file, dataset_path(group, "z_state"));
    if (c.schema.gate != GateKind::none)
      c.gate = hdf5::open_dataset(c.handle.get(), file, dataset_path(group, gate_dataset_name(c.schema.gate)));
    send_message(socket_, MessageKind::schema, encode(c.schema));
    open_ = std::move(c);
  }

  unsigned char* at(std::int64_t offset, std::int64_t bytes) const {
    if (offset < 0 || bytes < 0 || offset > shared_bytes_ || bytes > shared_bytes_ - offset)
      throw std::runtime_error("window outside the shared input region");
    return shared_ + offset;
  }

  void read(const WindowRead& r) {
    const auto start = std::chrono::steady_clock::now();
    if (!open_) throw std::runtime_error("read_window without open_case");
    const OpenCase& c = *open_;
    const auto& s = c.schema.q.shape;
    const hsize_t B = s[0], H = s[2], DK = s[3], DV = c.schema.v.shape[3];
    if (r.t0 < 0 || r.t1 <= r.t0 || r.t1 > s[1]) throw std::runtime_error("window outside the sequence");
    const hsize_t T = static_cast<hsize_t>(r.t1 - r.t0);
    const DType in = c.schema.q.dtype, acc = static_cast<DType>(r.accumulation_dtype);
    const hdf5::Datatype in_type = hdf5::datatype_of(in), acc_type = hdf5::datatype_of(acc);
    const std::string window =
        r.t0 == 0 && r.t1 == s[1] ? "" : "in tokens [" + std::to_string(r.t0) + ", " + std::to_string(r.t1) + ")";
    struct Part {
      const hdf5::Dataset* ds;
      const char* name;
      std::int64_t offset;
      std::vector<hsize_t> start, count;
      hid_t type;
      DType dtype;
      bool along_t;  // q, k, v, g: a window of the sequence
      bool log_decays;  // the gate: checked as log-decays, always
    };
    std::vector<Part> parts = {
        {&c.q, "q", r.q_offset, {0, hsize_t(r.t0), 0, 0}, {B, T, H, DK}, in_type.get(), in, true, false},
        {&c.k, "k", r.k_offset, {0, hsize_t(r.t0), 0, 0}, {B, T, H, DK}, in_type.get(), in, true, false},
        {&c.v, "v", r.v_offset, {0, hsize_t(r.t0), 0, 0}, {B, T, H, DV}, in_type.get(), in, true, false}};
    if (r.state_rows > 0)
      parts.push_back({&c.initial_state, "initial_state", r.state_offset, {hsize_t(r.state_row0), 0, 0, 0},
                       {hsize_t(r.state_rows), H, DK, DV}, acc_type.get(), acc, false, false});
    if (r.z_rows > 0)
      parts.push_back({&c.initial_z, "z_state", r.z_offset, {hsize_t(r.z_row0), 0, 0}, {hsize_t(r.z_rows), H, DK},
                       acc_type.get(), acc, false, false});
    if (r.gate != static_cast<std::int64_t>(c.schema.gate))
      throw std::runtime_error("read_window for another gate than the case's");
    if (c.schema.gate == GateKind::per_token)
      parts.push_back({&c.gate, "g", r.gate_offset, {0, hsize_t(r.t0), 0}, {B, T, H}, acc_type.get(), acc, true, true});
    else if (c.schema.gate == GateKind::per_head)
      parts.push_back({&c.gate, "g_gamma", r.gate_offset, {0}, {H}, acc_type.get(), acc, false, true});
    else if (c.schema.gate == GateKind::per_channel)
      parts.push_back(
          {&c.gate, "gk", r.gate_offset, {0, hsize_t(r.t0), 0, 0}, {B, T, H, DK}, acc_type.get(), acc, true, true});
    for (const Part& p : parts) {
      std::int64_t bytes = static_cast<std::int64_t>(dtype_size(p.dtype));
      for (hsize_t d : p.count) bytes *= static_cast<std::int64_t>(d);
      const std::string path = dataset_path(c.group, p.name);
      if (!p.ds->valid()) throw FileError(c.file, path, "missing");
      unsigned char* dst = at(p.offset, bytes);
      if (p.along_t && !p.log_decays && !c.allow_nonfinite) {  // q, k, v: tested piece by piece in cache
        read_finite_block(p.ds->get(), p.type, p.dtype, p.start, p.count, dst, c.file, path, window);
        continue;
      }
      hdf5::read_block(p.ds->get(), p.type, p.start, p.count, dst, c.file, path);
      const std::vector<std::int64_t> shape(p.count.begin(), p.count.end());
      const std::vector<std::int64_t> origin(p.start.begin(), p.start.end());
      if (p.log_decays) check_log_decays(dst, p.dtype, shape, origin, c.file, path, p.along_t ? window : "");
      else if (!c.allow_nonfinite) check_finite(dst, p.dtype, shape, origin, c.file, path, p.along_t ? window : "");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    send_message(socket_, MessageKind::done, MessageWriter().i64(static_cast<std::int64_t>(seconds * 1e9)).bytes());
  }

  // A window given as blocks of any datasets (the streamed backward's).
  void read(const BlockReads& r) {
    const auto start = std::chrono::steady_clock::now();
    hdf5::set_external_data_allowed(r.allow_external_data);
    read_blocks(r.blocks, shared_, shared_bytes_, blocks_);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    send_message(socket_, MessageKind::done, MessageWriter().i64(static_cast<std::int64_t>(seconds * 1e9)).bytes());
  }

  int socket_;
  unsigned char* shared_;
  std::int64_t shared_bytes_;
  std::optional<OpenCase> open_;
  OpenDatasets blocks_;  // the datasets block reads opened, until close_case
};

}  // namespace

bool is_read_worker(int argc, char** argv) { return argc >= 2 && std::strcmp(argv[1], kReadWorkerArgument) == 0; }

int read_worker_main(int argc, char** argv) {
  if (argc != 5) return 2;
  // Die with the batch process, and leave its signals to it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::signal(SIGINT, SIG_IGN);
  const int socket = std::atoi(argv[2]), shared_fd = std::atoi(argv[3]);
  const std::int64_t shared_bytes = std::atoll(argv[4]);
  close_inherited_descriptors(socket, shared_fd);
  // A corrupt size field can make libhdf5 ask for gigabytes (an attribute
  // read once asked for 8 GiB): bound the reader's private memory, so that
  // such an allocation fails in the reader instead of exhausting the machine.
  const rlimit data{kReaderDataLimit, kReaderDataLimit};
  ::setrlimit(RLIMIT_DATA, &data);
  void* shared = shared_bytes > 0
                     ? ::mmap(nullptr, static_cast<std::size_t>(shared_bytes), PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd, 0)
                     : nullptr;
  if (shared == MAP_FAILED) return 3;
  hdf5::silence_errors();
  Worker(socket, static_cast<unsigned char*>(shared), shared_bytes).serve();
  return 0;
}

}  // namespace linattn::pipeline
