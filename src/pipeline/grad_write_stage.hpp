// The streamed backward's writer (docs/ARCHITECTURE.md, "The streamed
// backward"): one thread makes a case's GradOutputStream calls while the
// kernels run on the next window, as run's writer thread does its windows
// (write_stage.hpp). It is the only thread of the batch process that calls
// HDF5 while it lives: the reads are in reader processes, and the stream is
// opened before the stage starts and finished after it is drained. At most
// `depth` jobs wait, so that the outputs of a slow disk do not pile up in
// memory. The first job that throws fails the case: the later ones are
// skipped, and submit() or drain() rethrows its error.
#pragma once

#include "io/grad_output_stream.hpp"
#include "pipeline/work_queue.hpp"

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace linattn::pipeline {

class GradWriteStage {
 public:
  using Job = std::function<void(GradOutputStream&)>;
  GradWriteStage(GradOutputStream& out, std::size_t depth);
  ~GradWriteStage();  // waits for the queued jobs (their errors are dropped: drain() first)
  GradWriteStage(const GradWriteStage&) = delete;
  GradWriteStage& operator=(const GradWriteStage&) = delete;

  void submit(Job job);  // rethrows the error of an earlier job
  void drain();          // waits until every job submitted is done; rethrows the first error
  double busy_seconds() const;

 private:
  void rethrow();
  GradOutputStream& out_;
  WorkQueue<Job> jobs_;
  mutable std::mutex mutex_;
  std::exception_ptr error_;
  std::size_t submitted_ = 0, done_ = 0;
  double busy_ = 0;
  std::condition_variable finished_;
  std::thread thread_;
};

}  // namespace linattn::pipeline
