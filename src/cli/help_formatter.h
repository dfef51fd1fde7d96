// `vitpipe ... --help` as a user reads it: CLI11 prints a flag with its negation as "--augment,--no-augment{false}",
// the value the negation sets, which reads as "augment is off by default". The formatter drops those braces; each
// flag's help says its default instead (train's option table adds "(default on|off)").
#pragma once

#include <CLI/CLI.hpp>

namespace vitpipe::cli {

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* option, bool positional) const override;
};

}  // namespace vitpipe::cli
