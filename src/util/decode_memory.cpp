#include "util/decode_memory.h"

namespace vitpipe {
namespace {

thread_local DecodeMemoryScope* active_scope = nullptr;

std::string mebibytes(int64_t bytes) { return concat((bytes + (1 << 20) - 1) >> 20, " MiB"); }

}  // namespace

DecodeMemoryBudget::DecodeMemoryBudget(int64_t bytes) : total_(bytes) {
  VP_REQUIRE(bytes >= (int64_t{1} << 20), "decode memory budget: expected at least 1 MiB, got ", bytes, " bytes");
}

int64_t DecodeMemoryBudget::reserved() const {
  std::lock_guard lock(mutex_);
  return reserved_;
}

void DecodeMemoryBudget::reserve(int64_t bytes, const std::string& name) {
  if (bytes > total_)
    throw DecodeMemoryRefused(concat(name, ": decoding it needs ", mebibytes(bytes), ", more than the ",
                                     mebibytes(total_), " this service decodes with (--decode-memory)"),
                              false);
  std::lock_guard lock(mutex_);
  if (reserved_ + bytes > total_)
    throw DecodeMemoryRefused(concat(name, ": decoding it needs ", mebibytes(bytes), " and ", mebibytes(reserved_),
                                     " of the ", mebibytes(total_), " (--decode-memory) are in use; try again"),
                              true);
  reserved_ += bytes;
}

void DecodeMemoryBudget::release(int64_t bytes) {
  std::lock_guard lock(mutex_);
  reserved_ -= bytes;
}

DecodeMemoryScope::DecodeMemoryScope(DecodeMemoryBudget& budget) : budget_(budget), outer_(active_scope) {
  active_scope = this;
}

DecodeMemoryScope::~DecodeMemoryScope() {
  budget_.release(reserved_);
  active_scope = outer_;
}

void reserve_decode_memory(int64_t bytes, const std::string& name) {
  DecodeMemoryScope* scope = active_scope;
  if (!scope || bytes <= 0) return;
  scope->budget_.reserve(bytes, name);
  scope->reserved_ += bytes;
}

}  // namespace vitpipe
