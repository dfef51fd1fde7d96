// A deliberate data race: tsan.canary expects ThreadSanitizer to report it, which shows that the build really is
// instrumented and that tsan.threads passing means something.
#include <cstdio>
#include <thread>

namespace {
int shared_counter = 0;  // written by two threads without synchronisation, on purpose
}

int main() {
  std::thread first([] { ++shared_counter; });
  std::thread second([] { ++shared_counter; });
  first.join();
  second.join();
  std::printf("counter %d\n", shared_counter);
  return 0;
}
