#include "pipeline/signal_cleanup.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace linattn::pipeline {
namespace {

constexpr int kPaths = 16, kPathBytes = 4096, kChildren = 8;

// A slot is published by storing its state after its bytes (release), and the
// handler reads the bytes only of slots it sees published (acquire).
struct PathSlot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 published
  char path[kPathBytes];
};
PathSlot paths[kPaths];
std::atomic<pid_t> children[kChildren];
std::atomic<int> exiting{0}, creating{0};

void on_signal(int sig) {
  // One handler cleans up and exits. The mask below blocks a second signal
  // only on the thread handling the first: another thread may take it, and
  // would then remove and print a second time while the first is at work.
  // That one waits here until the first one's _exit ends the process.
  if (exiting.exchange(1) != 0) {
    for (;;) ::pause();
  }
  // Files being created now: wait (at most about a second, in case this very
  // thread was the one creating) until they exist, so that they are removed below.
  for (int i = 0; i < 1000 && creating.load() > 0; ++i) {
    const timespec ms{0, 1000000};
    ::nanosleep(&ms, nullptr);
  }
  for (auto& c : children) {
    const pid_t pid = c.load(std::memory_order_acquire);
    if (pid > 0) ::kill(pid, SIGKILL);
  }
  for (auto& p : paths)
    if (p.state.load(std::memory_order_acquire) == 2) ::unlink(p.path);
  static const char msg[] = "\nlinattn: interrupted; partial outputs removed\n";
  (void)!::write(2, msg, sizeof msg - 1);
  ::_exit(128 + sig);
}

}  // namespace

void install_signal_cleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
  });
}

bool creation_begins() {
  creating.fetch_add(1);
  if (exiting.load() == 0) return true;
  creating.fetch_sub(1);
  return false;
}

void creation_ends() { creating.fetch_sub(1); }

int register_partial(const std::string& path) {
  if (path.size() >= kPathBytes) return -1;
  for (int i = 0; i < kPaths; ++i) {
    int expected = 0;
    if (!paths[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(paths[i].path, path.c_str(), path.size() + 1);
    paths[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_partial(int token) {
  if (token >= 0 && token < kPaths) paths[token].state.store(0, std::memory_order_release);
}

void register_child(pid_t pid) {
  for (auto& c : children) {
    pid_t expected = 0;
    if (c.compare_exchange_strong(expected, pid)) return;
  }
}

void unregister_child(pid_t pid) {
  for (auto& c : children) {
    pid_t expected = pid;
    if (c.compare_exchange_strong(expected, 0)) return;
  }
}

}  // namespace linattn::pipeline
