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

void register_child(pid_t pid);
void unregister_child(pid_t pid);

}  // namespace linattn::pipeline
