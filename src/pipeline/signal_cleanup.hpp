// What SIGINT and SIGTERM must undo: the .partial files being written and the
// reader processes. The handler removes the one and kills the other with
// async-signal-safe calls only (unlink, kill), then exits with 128 + the
// signal, so that an interrupted run leaves no half-written output behind.
#pragma once

#include <sys/types.h>

#include <string>

namespace linattn::pipeline {

// Installs the handlers (idempotent). Also ignores SIGPIPE: a reader that
// died shows as a closed socket, not as a signal to the batch process.
void install_signal_cleanup();

// Registered paths are removed on a signal. The registry holds a fixed
// number of paths (one per output file being written); a path that does not
// fit is not registered (returns -1) and is then only removed on errors.
int register_partial(const std::string& path);
void unregister_partial(int token);

// register_partial for the life of a scope.
class PartialRegistration {
 public:
  explicit PartialRegistration(const std::string& path) : token_(register_partial(path)) {}
  ~PartialRegistration() { unregister_partial(token_); }
  PartialRegistration(const PartialRegistration&) = delete;
  PartialRegistration& operator=(const PartialRegistration&) = delete;

 private:
  int token_;
};

// Brackets the creation of a registered file: a signal that arrives between
// the two waits (a bounded while) for the file to exist before removing it,
// and creation_begins() returns false once a signal is being handled (the
// caller then creates nothing). Without this, a file created just after the
// handler looked would survive it.
bool creation_begins();
void creation_ends();

void register_child(pid_t pid);
void unregister_child(pid_t pid);

}  // namespace linattn::pipeline
