// Running the real linattn binary from a test: its exit code and everything it
// printed (stdout and stderr together, through a log file in the test's
// scratch directory).
#pragma once

#include "temp_dir.hpp"

#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace linattn::testing {

struct Exit {
  int code;
  std::string output;  // stdout and stderr together
};

// The binary built beside the tests, or LINATTN_EXE from the environment when
// the two binaries were carried to another machine (the GPU runs).
inline std::string linattn_exe() {
  const char* env = std::getenv("LINATTN_EXE");
  return env && *env ? env : LINATTN_EXE;
}

// `before` goes in front of the program on the shell's line: "cd 'DIR' &&" to
// run it from another folder, "NAME=VALUE" to set its environment.
inline Exit linattn_cli(const TempDir& dir, const std::string& args, const std::string& before = "") {
  const std::string log = dir / "cli.log";
  const std::string command = before + " '" + linattn_exe() + "' " + args + " > '" + log + "' 2>&1";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(log)};
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace linattn::testing
