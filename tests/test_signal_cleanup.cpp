// SIGINT and SIGTERM arriving together (two Ctrl-C, or a Ctrl-C and a kill)
// are handled once: one "interrupted; partial outputs removed" line, the
// partial file removed, and the exit code of the first signal. The handler
// blocks further signals only on its own thread; before the fix, a second
// signal taken by another thread ran the handler again and printed twice.
#include "pipeline/signal_cleanup.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace linattn {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

// The child: cleanup installed, a partial file registered and a creation in
// progress (so that a handler waits for it), two threads that can take
// signals while the main thread cannot. It ends the creation when the parent
// writes to `release`, after both signals were sent: both handlers would then
// go on at once.
[[noreturn]] void child(const std::string& partial, int ready, int release, int errors) {
  ::dup2(errors, 2);
  pipeline::install_signal_cleanup();
  std::ofstream(partial) << "half written";
  pipeline::register_partial(partial);
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &both, nullptr);
  auto wait_for_signals = [both] {
    pthread_sigmask(SIG_UNBLOCK, &both, nullptr);
    for (;;) ::pause();
  };
  std::thread(wait_for_signals).detach();
  std::thread(wait_for_signals).detach();
  pipeline::creation_begins();
  char byte = 1;
  (void)!::write(ready, &byte, 1);
  (void)!::read(release, &byte, 1);
  pipeline::creation_ends();
  std::this_thread::sleep_for(std::chrono::seconds(5));
  ::_exit(99);  // no handler ended the process
}

TEST(SignalCleanup, TwoSignalsAtOnceAreHandledOnce) {
  TempDir dir{"signals"};
  for (int round = 0; round < 10; ++round) {
    const std::string partial = dir / ("out" + std::to_string(round) + ".h5.partial");
    const std::string log = dir / ("stderr" + std::to_string(round));
    int ready[2], release[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(release), 0);
    std::FILE* errors = std::fopen(log.c_str(), "w");
    ASSERT_NE(errors, nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) child(partial, ready[1], release[0], ::fileno(errors));
    std::fclose(errors);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    ::kill(pid, SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::kill(pid, SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(::write(release[1], &byte, 1), 1);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);

    ASSERT_TRUE(WIFEXITED(status)) << "round " << round;
    EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << "round " << round << ": the first signal's handler exits";
    const std::string text = testing::read_bytes(log);
    const std::string line = "linattn: interrupted; partial outputs removed";
    const std::size_t first = text.find(line);
    EXPECT_NE(first, std::string::npos) << text;
    EXPECT_EQ(text.find(line, first + 1), std::string::npos) << "round " << round << ", printed twice:\n" << text;
    EXPECT_FALSE(fs::exists(partial)) << "round " << round;
  }
}

}  // namespace
}  // namespace linattn
