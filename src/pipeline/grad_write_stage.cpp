#include "pipeline/grad_write_stage.hpp"

#include <chrono>

namespace linattn::pipeline {

GradWriteStage::GradWriteStage(GradOutputStream& out, std::size_t depth, int writers) : out_(out), jobs_(depth) {
  const GradOffsets& at = out.offsets();
  const bool located = at.dq >= 0 && at.dk >= 0 && at.dv >= 0 && at.dh0 >= 0 &&
                       (out.gate() == GateKind::none || at.dg >= 0);
  if (writers > 1 && located) {
    mapped_ = std::make_unique<MappedOutput>(out.partial_path(), out.data_end(), out.path());
    copies_ = std::make_unique<CopyPool>(writers);
  }
  thread_ = std::thread([this] {
    while (std::optional<Job> job = jobs_.pop()) {
      bool skip;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        skip = error_ != nullptr;
      }
      const auto started = std::chrono::steady_clock::now();
      std::exception_ptr error;
      if (!skip) {
        try {
          (*job)(out_);
        } catch (...) {
          error = std::current_exception();
        }
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      busy_ += seconds;
      ++done_;
      finished_.notify_all();
    }
  });
}

GradWriteStage::~GradWriteStage() {
  jobs_.close();
  thread_.join();
}

void GradWriteStage::rethrow() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void GradWriteStage::submit(Job job) {
  rethrow();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++submitted_;
  }
  jobs_.push(std::move(job));
}

void GradWriteStage::drain() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_ == submitted_; });
  }
  rethrow();
}

void GradWriteStage::copy(const std::vector<RawRun>& runs, const unsigned char* base) {
  copy_runs(*mapped_, *copies_, runs, base);
}

double GradWriteStage::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_;
}

}  // namespace linattn::pipeline
