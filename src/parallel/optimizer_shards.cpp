#include "parallel/optimizer_shards.h"

#include <algorithm>

#include "util/error.h"

namespace vitpipe {

std::vector<ElementRange> shard_ranges(int64_t begin, int64_t end, int parts, int64_t align) {
  VP_REQUIRE(parts >= 1 && align >= 1 && begin <= end, "shard_ranges: bad arguments");
  std::vector<ElementRange> shards;
  int64_t at = begin;
  for (int r = 0; r < parts; ++r) {
    int64_t next = end;
    if (r + 1 < parts) {
      const int64_t ideal = begin + (end - begin) * (r + 1) / parts;
      next = std::clamp((ideal + align / 2) / align * align, at, end);  // nearest aligned offset, never backwards
    }
    shards.push_back({at, next});
    at = next;
  }
  return shards;
}

}  // namespace vitpipe
