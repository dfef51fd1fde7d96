// A memory budget for decoding images, for a service that decodes what strangers send: a 2 MB PNG can claim
// 16000 x 16000 RGBA at 16 bits (2 GB decoded). Each decoder computes, from the header alone, what it is about to
// allocate and calls reserve_decode_memory() first; where a DecodeMemoryScope is open on the thread, that amount is
// taken from its budget (shared by every request decoding at once) or refused, before any allocation. Elsewhere
// (train, predict) the call does nothing.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "util/error.h"

namespace vitpipe {

// Thrown by reserve_decode_memory: `transient` when the budget is taken by other decodes now (retry later), not
// when this one image alone needs more than the whole budget.
struct DecodeMemoryRefused : Error {
  DecodeMemoryRefused(const std::string& message, bool transient_) : Error(message), transient(transient_) {}
  bool transient;
};

class DecodeMemoryBudget {
 public:
  explicit DecodeMemoryBudget(int64_t bytes);
  int64_t total() const { return total_; }
  int64_t reserved() const;
  // Takes `bytes` or throws DecodeMemoryRefused naming `name`.
  void reserve(int64_t bytes, const std::string& name);
  void release(int64_t bytes);

 private:
  int64_t total_;
  mutable std::mutex mutex_;
  int64_t reserved_ = 0;
};

// While alive, this thread's decodes reserve from `budget`; what they reserved is given back when it ends.
class DecodeMemoryScope {
 public:
  explicit DecodeMemoryScope(DecodeMemoryBudget& budget);
  ~DecodeMemoryScope();
  DecodeMemoryScope(const DecodeMemoryScope&) = delete;
  DecodeMemoryScope& operator=(const DecodeMemoryScope&) = delete;
  int64_t reserved() const { return reserved_; }

 private:
  friend void reserve_decode_memory(int64_t bytes, const std::string& name);
  DecodeMemoryBudget& budget_;
  int64_t reserved_ = 0;
  DecodeMemoryScope* outer_;
};

// Called by decoders with the bytes they will hold at most for one image, before allocating them.
void reserve_decode_memory(int64_t bytes, const std::string& name);

}  // namespace vitpipe
