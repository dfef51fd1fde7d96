#include "model/precision.h"

#include "backend/cpu/cpu_level.h"
#include "util/error.h"

namespace vitpipe {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "auto") return cpu::has_native_bf16(cpu::selected_cpu_level()) ? Precision::bf16 : Precision::fp32;
  fail("--precision: expected fp32, bf16 or auto, got \"", name, "\"");
}

std::string bf16_speed_note(Precision precision) {
  const cpu::CpuLevel level = cpu::selected_cpu_level();
  if (precision != Precision::bf16 || cpu::has_native_bf16(level)) return "";
  return concat("note: bf16 without bf16 instructions (CPU kernels ", cpu::cpu_level_name(level),
                "): the same numbers from fp32 GEMMs on bf16-rounded operands, no faster than fp32 here; "
                "--precision auto picks fp32 on this CPU");
}

const char* precision_name(Precision precision) { return precision == Precision::bf16 ? "bf16" : "fp32"; }

}  // namespace vitpipe
