// `vitpipe info`: what this build can use on this machine (CPU model and features, the kernel level chosen,
// oneDNN's ISA, threads; the NVIDIA driver, GPUs and CUDA module), for bug reports and benchmarks. `--json` prints
// one object.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/cpu_backend_factory.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_level.h"
#include "backend/device_selection.h"
#include "cli/commands.h"
#include "util/threads.h"

namespace vitpipe::cli {
namespace {

nlohmann::json info_json() {
  using namespace cpu;
  const CpuFeatures& f = cpu_features();
  const CpuLevel level = selected_cpu_level();  // first: it may cap oneDNN's ISA
  nlohmann::json features = nlohmann::json::array();
  const std::pair<const char*, bool> flags[] = {{"avx2", f.avx2 && f.os_avx},
                                                {"fma", f.fma},
                                                {"f16c", f.f16c},
                                                {"avx512f", f.avx512f && f.os_avx512},
                                                {"avx512bw", f.avx512bw},
                                                {"avx512vl", f.avx512vl},
                                                {"avx512dq", f.avx512dq},
                                                {"avx512_bf16", f.avx512_bf16},
                                                {"amx_bf16", f.amx_bf16 && f.os_amx},
                                                {"amx_tile", f.amx_tile && f.os_amx}};
  for (const auto& [name, present] : flags) {
    if (present) features.push_back(name);
  }
  nlohmann::json runnable = nlohmann::json::array();
  for (CpuLevel l : runnable_cpu_levels()) runnable.push_back(cpu_level_name(l));
  nlohmann::json compiled = nlohmann::json::array();
  for (int i = 0; i < kCpuLevelCount; ++i) {
    if (cpu_level_compiled(static_cast<CpuLevel>(i))) compiled.push_back(cpu_level_name(static_cast<CpuLevel>(i)));
  }
  const char* cap = std::getenv("VITPIPE_CPU");
  const dnnl_version_t* v = dnnl_version();
  return {
      {"version", "0.1.0"},
      {"cpu", {{"model", f.model}, {"features", features}, {"best_level", cpu_level_name(best_cpu_level())}}},
      {"cpu_kernels", cpu_level_name(level)},
      {"bf16_attention", attention_unit_at(level)},
      {"amx_tile_state_granted", f.amx_permitted},
      {"cpu_kernels_compiled", compiled},
      {"cpu_levels_runnable", runnable},
      {"cpu_cap", cap && *cap ? nlohmann::json(cap) : nlohmann::json(nullptr)},
      {"bf16_in_hardware", has_native_bf16(level)},
      {"precision_auto", has_native_bf16(level) ? "bf16" : "fp32"},
      {"onednn",
       {{"version", std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch)},
        {"isa", onednn_isa_name()}}},
      {"cores_available", available_cores()},
      {"cuda", cuda_status().to_json()},
  };
}

void print_cuda(const nlohmann::json& cuda) {
  const auto text = [](const nlohmann::json& v, const char* none) {
    return v.is_null() ? std::string(none) : v.get<std::string>();
  };
  std::printf("CUDA module: %s%s\n", text(cuda["module"], "not found").c_str(),
              cuda["loaded"].get<bool>() ? " (loaded)"
              : cuda["module"].is_null() ? ""
                                         : " (not loaded)");
  if (!cuda["built_with"].is_null()) {
    const nlohmann::json& l = cuda["libraries"];
    std::printf("  built with %s; runs CUDA runtime %s, cuBLASLt %s, cuDNN %s, NCCL %s\n",
                cuda["built_with"].get<std::string>().c_str(), text(l["cuda_runtime"], "?").c_str(),
                text(l["cublaslt"], "?").c_str(), text(l["cudnn"], "?").c_str(), text(l["nccl"], "?").c_str());
  }
  std::printf("NVIDIA driver: %s\n", text(cuda["driver"], "none").c_str());
  for (const auto& d : cuda["devices"]) {
    std::printf("  GPU %d: %s, compute capability %s, %.1f GiB\n", d["index"].get<int>(),
                d["name"].get<std::string>().c_str(), d["compute_capability"].get<std::string>().c_str(),
                static_cast<double>(d["memory_bytes"].get<uint64_t>()) / (1ull << 30));
  }
  std::printf("--device cuda: %s\n", cuda["usable"].get<bool>() ? "usable" : text(cuda["error"], "?").c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print this build's versions and the CPU features it uses");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print one JSON object");
  cmd->callback([json] {
    const nlohmann::json j = info_json();
    if (*json) {
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::string features;
    for (const auto& name : j["cpu"]["features"]) features += " " + name.get<std::string>();
    std::string compiled;
    for (const auto& name : j["cpu_kernels_compiled"]) compiled += " " + name.get<std::string>();
    const bool bf16 = j["bf16_in_hardware"].get<bool>();
    std::printf("vitpipe %s\n", j["version"].get<std::string>().c_str());
    std::printf("CPU: %s\n  features:%s\n", j["cpu"]["model"].get<std::string>().c_str(),
                features.empty() ? " (none of AVX2's or above)" : features.c_str());
    std::printf("kernels: %s (best this CPU runs: %s; VITPIPE_CPU %s; this build has:%s)\n",
                j["cpu_kernels"].get<std::string>().c_str(), j["cpu"]["best_level"].get<std::string>().c_str(),
                j["cpu_cap"].is_null() ? "unset" : ("= " + j["cpu_cap"].get<std::string>()).c_str(), compiled.c_str());
    const std::string attention = j["bf16_attention"].get<std::string>();
    std::printf("bf16 attention: %s\n", attention == "amx-tiles"        ? "on AMX tiles"
                                        : attention == "emulated-tiles" ? "on emulated tiles (VITPIPE_ATTENTION_TILES)"
                                        : attention == "onednn"         ? "oneDNN GEMMs per tile"
                                                                        : attention.c_str());
    std::printf("bf16: %s; --precision auto = %s\n",
                bf16 ? "in hardware" : "no bf16 instructions: fp32 GEMMs on bf16-rounded operands, no faster than fp32",
                j["precision_auto"].get<std::string>().c_str());
    std::printf("oneDNN %s, ISA %s\ncores available: %d\n", j["onednn"]["version"].get<std::string>().c_str(),
                j["onednn"]["isa"].get<std::string>().c_str(), j["cores_available"].get<int>());
    print_cuda(j["cuda"]);
  });
}

}  // namespace vitpipe::cli
