#include "util/threads.h"

#include <omp.h>
#include <sched.h>

#include <thread>

#include "util/error.h"

namespace vitpipe {
namespace {
int g_threads = 0;
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

int configure_threads(int requested) {
  VP_REQUIRE(requested >= 0 && requested <= 4096, "--threads: expected 0 (all cores) to 4096, got ", requested);
  g_threads = requested == 0 ? available_cores() : requested;
  omp_set_num_threads(g_threads);
  omp_set_max_active_levels(1);
  return g_threads;
}

int configured_threads() { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

}  // namespace vitpipe
