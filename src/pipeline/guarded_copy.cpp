#include "pipeline/guarded_copy.hpp"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace linattn::pipeline {
namespace {

// The copy this thread is in, if any (static TLS: safe to read in a handler).
thread_local sigjmp_buf* t_copy = nullptr;

void on_sigbus(int sig, siginfo_t*, void*) {
  if (sigjmp_buf* copy = t_copy) siglongjmp(*copy, 1);
  // Not a guarded copy's: what SIGBUS would have done without us.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, nullptr);
  });
}

}  // namespace

bool guarded_copy(void* dst, const void* src, std::size_t n) {
  install_handler();
  sigjmp_buf copy;
  if (sigsetjmp(copy, 1) != 0) {  // back from the handler, with the signal mask restored
    t_copy = nullptr;
    return false;
  }
  t_copy = &copy;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_copy = nullptr;
  return true;
}

}  // namespace linattn::pipeline
