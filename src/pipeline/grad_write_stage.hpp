// The streamed backward's writer (docs/ARCHITECTURE.md, "The streamed
// backward"): one thread makes a case's GradOutputStream calls while the
// kernels run on the next window, as run's writer thread does its windows
// (write_stage.hpp). It is the only thread of the batch process that calls
// HDF5 while it lives: the reads are in reader processes, and the stream is
// opened before the stage starts and finished after it is drained. At most
// `depth` jobs wait, so that the outputs of a slow disk do not pile up in
// memory. The first job that throws fails the case: the later ones are
// skipped, and submit() or drain() rethrows its error. With several writers
// the output's datasets are mapped and a job copies its runs in with a pool
// of threads (copy(), as run's writers do: write_stage.hpp); HDF5 then writes
// only the metadata.
#pragma once

#include "io/grad_output_stream.hpp"
#include "pipeline/copy_pool.hpp"
#include "pipeline/mapped_output.hpp"
#include "pipeline/work_queue.hpp"

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace linattn::pipeline {

class GradWriteStage {
 public:
  using Job = std::function<void(GradOutputStream&)>;
  // writers > 1: the output mapped (when its datasets have offsets) and copied into by that many threads.
  GradWriteStage(GradOutputStream& out, std::size_t depth, int writers = 1);
  ~GradWriteStage();  // waits for the queued jobs (their errors are dropped: drain() first)
  GradWriteStage(const GradWriteStage&) = delete;
  GradWriteStage& operator=(const GradWriteStage&) = delete;

  void submit(Job job);  // rethrows the error of an earlier job
  void drain();          // waits until every job submitted is done; rethrows the first error
  double busy_seconds() const;
  bool mapped() const { return mapped_ != nullptr; }
  // Inside a job, when mapped(): copies the runs (their slot offsets from
  // base) into the file, shared among the pool's threads.
  void copy(const std::vector<RawRun>& runs, const unsigned char* base);

 private:
  void rethrow();
  GradOutputStream& out_;
  std::unique_ptr<CopyPool> copies_;
  std::unique_ptr<MappedOutput> mapped_;
  WorkQueue<Job> jobs_;
  mutable std::mutex mutex_;
  std::exception_ptr error_;
  std::size_t submitted_ = 0, done_ = 0;
  double busy_ = 0;
  std::condition_variable finished_;
  std::thread thread_;
};

}  // namespace linattn::pipeline
