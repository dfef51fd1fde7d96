// "Did you mean": a mistyped subcommand (`vitpipe trian`) or long flag (`train --bach-size`) is answered with the
// nearest name the command line takes, instead of CLI11's "A subcommand is required" or "arguments were not
// expected".
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vitpipe::cli {

// Optimal string alignment distance (Levenshtein plus adjacent transpositions: "trian" is 1 from "train").
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `typed`, when near enough to be a typo (at most a third of its length, at least 1);
// nullopt otherwise.
std::optional<std::string> nearest_name(const std::string& typed, const std::vector<std::string>& candidates);

// After `app` refused argv: one line naming the first unknown subcommand or long flag and its nearest match, or
// nullopt when argv holds none with a near match (CLI11's own message is then the right one).
std::optional<std::string> suggest_correction(CLI::App& app, int argc, const char* const* argv);

}  // namespace vitpipe::cli
