// --device cpu|cuda|auto and --allow-tf32 on the commands that compute (train, plan, eval, predict, explain, bench).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "backend/device_selection.h"
#include "util/error.h"

namespace vitpipe::cli {

constexpr const char* kDeviceHelp =
    "cpu | cuda | auto (cuda where the CUDA module loads and sees a GPU, else cpu; default cpu)";

inline void add_device_flag(CLI::App* cmd, std::string* device) {
  cmd->add_option("--device", *device, kDeviceHelp)->type_name("DEVICE");
}

inline void add_allow_tf32_flag(CLI::App* cmd, bool* allow_tf32) {
  cmd->add_flag("--allow-tf32", *allow_tf32,
                "on a GPU, let fp32 GEMMs use TF32 tensor cores (10-bit mantissa products; off by default)");
}

// --device resolved before any work: cpu passes, cuda refuses with the sentence of select_device() where no CUDA
// backend can run, auto falls back to the CPU.
inline Device resolve_device(const std::string& device) { return select_device(parse_device_choice(device)); }

// For the commands that run on the CPU backend only: a "cuda" answer is refused, never run on the CPU in its place.
inline void require_cpu_device(const std::string& device, const char* command, const char* why) {
  if (resolve_device(device) == Device::cuda) {
    fail("--device cuda cannot run: `vitpipe ", command, "` ", why, "; use --device cpu");
  }
}

}  // namespace vitpipe::cli
