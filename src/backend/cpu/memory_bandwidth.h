// The memory bandwidth this machine reaches right now (best of a few streaming passes over buffers well beyond the
// caches, read + write counted): the yardstick `vitpipe bench` holds the memory-bound operations against.
#pragma once

namespace vitpipe::cpu {

// Bytes per second read and written by `threads` threads scaling one 64 MiB float buffer into another.
double measure_memory_bandwidth_bytes_per_s(int threads);

}  // namespace vitpipe::cpu
