#include "pipeline/grad_write_stage.hpp"

#include <chrono>

namespace linattn::pipeline {

GradWriteStage::GradWriteStage(GradOutputStream& out, std::size_t depth) : out_(out), jobs_(depth) {
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

double GradWriteStage::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_;
}

}  // namespace linattn::pipeline
