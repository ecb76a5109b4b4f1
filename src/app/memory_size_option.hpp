// The check of a --memory-budget option (run, backward): a size such as 512M
// or 8G, refused with pipeline::parse_memory_size's message.
#pragma once

#include "pipeline/memory_budget.hpp"

#include <CLI/CLI.hpp>

#include <exception>
#include <string>

namespace linattn {

inline CLI::Validator memory_size_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          pipeline::parse_memory_size(s);
          return "";
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      "SIZE");
}

}  // namespace linattn
