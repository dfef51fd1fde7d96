#include "util/mapping_guard.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace vitpipe {
namespace {

constexpr size_t kSlots = 1024;
constexpr size_t kPathBytes = 480;

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free; set last, after size and path
  std::atomic<size_t> size{0};
  char path[kPathBytes] = {};
};

Slot slots[kSlots];
std::mutex registration;  // writers only; the handler reads the atomics
struct sigaction previous_action;

void write_all(const char* text, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(2, text, size);
    if (n <= 0) return;
    text += n;
    size -= static_cast<size_t>(n);
  }
}

void on_sigbus(int signal_number, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const Slot& slot : slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= begin + slot.size.load(std::memory_order_relaxed)) continue;
    // Only async-signal-safe calls from here on.
    const char* head = "error: ";
    const char* tail =
        " changed while it was being read (truncated or rewritten by another process?); it must stay as it was "
        "for as long as vitpipe uses it\n";
    write_all(head, std::strlen(head));
    write_all(slot.path, strnlen(slot.path, kPathBytes));
    write_all(tail, std::strlen(tail));
    ::_exit(1);
  }
  // Not ours: whoever handled SIGBUS before (a sanitizer, a debugger's hook) or the default action.
  if (previous_action.sa_flags & SA_SIGINFO) {
    if (previous_action.sa_sigaction != nullptr) {
      previous_action.sa_sigaction(signal_number, info, context);
      return;
    }
  } else if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN) {
    previous_action.sa_handler(signal_number);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

void install_handler_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &previous_action);
  });
}

}  // namespace

void watch_mapping(const void* begin, size_t size, const std::string& path) {
  if (begin == nullptr || size == 0) return;
  install_handler_once();
  std::lock_guard lock(registration);
  for (Slot& slot : slots) {
    if (slot.begin.load(std::memory_order_relaxed) != 0) continue;
    slot.size.store(size, std::memory_order_relaxed);
    const size_t n = std::min(path.size(), kPathBytes - 1);
    std::memcpy(slot.path, path.data(), n);
    slot.path[n] = '\0';
    slot.begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_release);
    return;
  }
}

void unwatch_mapping(const void* begin) {
  if (begin == nullptr) return;
  std::lock_guard lock(registration);
  for (Slot& slot : slots)
    if (slot.begin.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(begin))
      slot.begin.store(0, std::memory_order_release);
}

}  // namespace vitpipe
