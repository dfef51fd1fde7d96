// --device cpu|cuda|auto on the commands that compute (train, plan, eval, predict, explain, bench).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "backend/device_selection.h"
#include "util/error.h"

namespace vitpipe::cli {

constexpr const char* kDeviceHelp =
    "cpu | cuda | auto (cuda where the CUDA module loads and sees a GPU, else cpu; default cpu)";

inline void add_device_flag(CLI::App* cmd, std::string* device) {
  cmd->add_option("--device", *device, kDeviceHelp)->type_name("DEVICE");
}

// Checks --device before any work: cpu passes, cuda refuses with the sentence of select_device() until the CUDA
// Backend exists, auto falls back to the CPU. The commands run on the CPU backend only, so a "cuda" answer (a module
// that offers a backend these commands do not use yet) is refused too, never run on the CPU in its place.
inline void require_cpu_device(const std::string& device, const char* command) {
  if (select_device(parse_device_choice(device)) == Device::cuda) {
    fail("--device cuda cannot run: `vitpipe ", command, "` does not use the CUDA backend yet; use --device cpu");
  }
}

}  // namespace vitpipe::cli
