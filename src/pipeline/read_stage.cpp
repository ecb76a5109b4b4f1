#include "pipeline/read_stage.hpp"

#include "pipeline/signal_cleanup.hpp"
#include "io/file_error.hpp"
#include "pipeline/read_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

extern char** environ;

namespace linattn::pipeline {

ReaderProcess::ReaderProcess(std::string exe, int shared_fd, std::int64_t shared_bytes)
    : exe_(std::move(exe)), shared_fd_(shared_fd), shared_bytes_(shared_bytes) {}

ReaderProcess::~ReaderProcess() { stop(); }

void ReaderProcess::start() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    throw std::runtime_error(std::string("cannot create the reader's socket: ") + std::strerror(errno));
  // The child's ends at fixed numbers 3 and 4 (dup2 clears close-on-exec
  // there), from copies above them so that neither is overwritten first.
  const int socket_copy = ::fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
  const int shared_copy = ::fcntl(shared_fd_, F_DUPFD_CLOEXEC, 10);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, socket_copy, 3);
  posix_spawn_file_actions_adddup2(&actions, shared_copy, 4);
  const std::string bytes = std::to_string(shared_bytes_);
  char* argv[] = {const_cast<char*>(exe_.c_str()), const_cast<char*>(kReadWorkerArgument), const_cast<char*>("3"),
                  const_cast<char*>("4"), const_cast<char*>(bytes.c_str()), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe_.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  ::close(socket_copy);
  ::close(shared_copy);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("cannot start the reader process " + exe_ + ": " + std::strerror(rc));
  }
  pid_ = pid;
  socket_ = fds[0];
  outstanding_ = 0;
  register_child(pid_);
}

void ReaderProcess::stop() {
  if (pid_ > 0) {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("VmHWM:", 0) == 0) peak_rss_bytes_ = std::max<std::int64_t>(peak_rss_bytes_, std::atoll(line.c_str() + 6) * 1024);
  }
  if (socket_ >= 0) ::close(socket_);
  socket_ = -1;
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    unregister_child(pid_);
  }
  pid_ = -1;
  outstanding_ = 0;
}

void ReaderProcess::lost(ReaderLost::Cause cause, const std::string& why) {
  stop();
  throw ReaderLost(cause, why);
}

std::string ReaderProcess::wait_reply(MessageKind expected, Clock::time_point deadline, const char* doing) {
  std::string payload;
  MessageKind kind;
  try {
    kind = receive_message(socket_, payload, deadline);
  } catch (const ChannelTimeout&) {
    lost(ReaderLost::Cause::timed_out, "timed out " + std::string(doing) + " " + doing_ + " (--case-timeout); the reader process was killed");
  } catch (const ChannelClosed&) {
    // Reap it to say how it ended.
    int status = 0;
    pid_t got = -1;
    for (int i = 0; i < 100 && (got = ::waitpid(pid_, &status, WNOHANG)) == 0; ++i) ::usleep(10000);
    std::string how = "ended unexpectedly";
    if (got == pid_) {
      unregister_child(pid_);
      pid_ = -1;
      if (WIFSIGNALED(status)) how = std::string("died of signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                     ::strsignal(WTERMSIG(status)) + ")";
      else if (WIFEXITED(status)) how = "exited with status " + std::to_string(WEXITSTATUS(status));
    }
    lost(ReaderLost::Cause::crashed, "the reader process " + how + " " + doing + " " + doing_ + " (a corrupt file can crash libhdf5)");
  }
  if (kind == MessageKind::failed) {
    MessageReader m(payload);
    throw FileError::preformatted(m.str());
  }
  if (kind != expected) lost(ReaderLost::Cause::out_of_turn, "the reader process answered out of turn " + std::string(doing) + " " + doing_);
  return payload;
}

void ReaderProcess::send(MessageKind kind, const std::string& payload) {
  try {
    send_message(socket_, kind, payload);
  } catch (const ChannelClosed&) {
    // The reader is gone; waiting for the reply reaps it and says how it ended.
  }
}

std::vector<std::string> ReaderProcess::list_cases(const std::string& file, Clock::time_point deadline) {
  if (socket_ < 0) start();
  doing_ = file;
  send(MessageKind::list_cases, MessageWriter().str(file).bytes());
  const std::string payload = wait_reply(MessageKind::cases, deadline, "while listing");
  MessageReader m(payload);
  const std::int64_t n = m.i64();
  std::vector<std::string> cases;
  for (std::int64_t i = 0; i < n; ++i) cases.push_back(m.str());
  return cases;
}

CaseSchema ReaderProcess::open_case(const std::string& file, const std::string& group, bool allow_nonfinite,
                                    bool allow_external_data, Clock::time_point deadline) {
  if (socket_ < 0) start();
  doing_ = file + (group.empty() ? "" : ":" + group);
  send(MessageKind::open_case,
       MessageWriter().str(file).str(group).i64(allow_nonfinite).i64(allow_external_data).bytes());
  return decode_case_schema(wait_reply(MessageKind::schema, deadline, "while opening"));
}

BackwardCase ReaderProcess::inspect_backward(const std::string& forward, const std::string& grad, bool recompute_h,
                                             bool allow_external_data, Clock::time_point deadline) {
  if (socket_ < 0) start();
  doing_ = forward + " and " + grad;
  send(MessageKind::inspect_backward,
       MessageWriter().str(forward).str(grad).i64(recompute_h).i64(allow_external_data).bytes());
  return decode_backward_case(wait_reply(MessageKind::backward_case, deadline, "while checking"));
}

void ReaderProcess::close_case(Clock::time_point deadline) {
  if (socket_ < 0) return;
  send(MessageKind::close_case, "");
  wait_reply(MessageKind::done, deadline, "while closing");
}

void ReaderProcess::send_read(const WindowRead& read) {
  if (socket_ < 0) throw ReaderLost(ReaderLost::Cause::gone, "the reader process is gone");
  send(MessageKind::read_window, encode(read));
  ++outstanding_;
}

void ReaderProcess::send_read(const BlockReads& read) {
  if (socket_ < 0) start();
  if (outstanding_ == 0) {  // what a timeout or crash names: the files being read
    doing_.clear();
    for (const BlockRead& b : read.blocks)
      if (doing_.find(b.file) == std::string::npos) doing_ += (doing_.empty() ? "" : ", ") + b.file;
  }
  send(MessageKind::read_blocks, encode(read));
  ++outstanding_;
}

void ReaderProcess::wait_read(Clock::time_point deadline) {
  if (outstanding_ == 0) throw std::logic_error("no window read outstanding");
  --outstanding_;
  const std::string payload = wait_reply(MessageKind::done, deadline, "while reading");
  if (payload.size() == sizeof(std::int64_t)) busy_seconds_ += static_cast<double>(MessageReader(payload).i64()) * 1e-9;
}

void ReaderProcess::drain(Clock::time_point deadline) {
  while (outstanding_ > 0 && socket_ >= 0) {
    try {
      wait_read(deadline);
    } catch (const FileError&) {
    }
  }
}

}  // namespace linattn::pipeline
