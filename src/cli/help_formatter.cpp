#include "cli/help_formatter.h"

namespace vitpipe::cli {

std::string HelpFormatter::make_option_name(const CLI::Option* option, bool positional) const {
  std::string name = CLI::Formatter::make_option_name(option, positional);
  for (size_t open = name.find('{'); open != std::string::npos; open = name.find('{', open)) {
    const size_t close = name.find('}', open);
    if (close == std::string::npos) break;
    name.erase(open, close - open + 1);
  }
  return name;
}

}  // namespace vitpipe::cli
