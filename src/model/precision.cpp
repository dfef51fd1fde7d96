#include "model/precision.h"

#include "util/error.h"

namespace vitpipe {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  fail("--precision: expected fp32 or bf16, got \"", name, "\"");
}

const char* precision_name(Precision precision) { return precision == Precision::bf16 ? "bf16" : "fp32"; }

}  // namespace vitpipe
