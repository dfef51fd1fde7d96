#include "cli/suggestions.h"

#include <algorithm>

namespace vitpipe::cli {

size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::optional<std::string> nearest_name(const std::string& typed, const std::vector<std::string>& candidates) {
  const size_t allowed = std::max<size_t>(1, typed.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = allowed + 1;
  for (const auto& candidate : candidates) {
    const size_t distance = edit_distance(typed, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

namespace {

// "vitpipe train", "vitpipe data prepare".
std::string command_path(const CLI::App* app) {
  std::string path;
  // The top app is named after argv[0] once parsed ("build/vitpipe"): always "vitpipe" here.
  for (; app != nullptr && app->get_parent() != nullptr; app = app->get_parent()) path = " " + app->get_name() + path;
  return "vitpipe" + path;
}

}  // namespace

std::optional<std::string> suggest_correction(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* current = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    if (token == "--") break;  // the rest are values
    if (token.starts_with("--")) {
      const std::string name = token.substr(2, token.find('=') - 2);
      std::vector<std::string> flags;
      bool known = false;
      for (const CLI::Option* option : current->get_options()) {
        for (const std::string& long_name : option->get_lnames()) {
          known |= long_name == name;
          flags.push_back(long_name);
        }
      }
      if (known) continue;
      const auto near = nearest_name(name, flags);
      if (!near) return std::nullopt;
      return "`" + command_path(current) + "` has no flag --" + name + "; did you mean --" + *near + "?";
    }
    if (token.starts_with("-")) continue;
    const std::vector<CLI::App*> subcommands = current->get_subcommands([](CLI::App*) { return true; });
    if (subcommands.empty()) continue;  // a value or a positional argument
    std::vector<std::string> names;
    CLI::App* next = nullptr;
    for (CLI::App* sub : subcommands) {
      names.push_back(sub->get_name());
      if (sub->get_name() == token) next = sub;
    }
    if (next != nullptr) {
      current = next;
      continue;
    }
    const auto near = nearest_name(token, names);
    if (!near) return std::nullopt;
    return "`" + command_path(current) + " " + token + "`: no such subcommand; did you mean `" + command_path(current) +
           " " + *near + "`?";
  }
  return std::nullopt;
}

}  // namespace vitpipe::cli
