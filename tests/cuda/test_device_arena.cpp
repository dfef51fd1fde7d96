// The CUDA backend's scratch arena (backend/cuda/device_arena.h): offsets, alignment, reuse after reset and the
// refusal past its capacity, on plain host addresses (the arithmetic is the same for a device pointer).
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "backend/cuda/device_arena.h"

using vitpipe::cuda::DeviceArena;

TEST(CudaDeviceArena, SlicesAreAlignedConsecutiveAndReusedAfterReset) {
  alignas(256) static char memory[4096];
  DeviceArena arena(memory, sizeof memory);
  char* a = static_cast<char*>(arena.take(1, "a"));
  char* b = static_cast<char*>(arena.take(300, "b"));
  float* c = arena.take_array<float>(10, "c");
  EXPECT_EQ(a, memory);
  EXPECT_EQ(b, memory + 256);
  EXPECT_EQ(reinterpret_cast<char*>(c), memory + 256 + 512);
  EXPECT_EQ(arena.used(), 256u + 512u + 256u);
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c)}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % DeviceArena::kAlignment, 0u);
  }
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.take(16, "again"), memory);
  EXPECT_EQ(arena.high_water(), 1024u);
  EXPECT_EQ(arena.take(0, "nothing"), memory + 256);  // a zero-byte slice takes no room
  EXPECT_EQ(arena.used(), 256u);
}

TEST(CudaDeviceArena, RefusesPastItsCapacityNamingTheRequest) {
  alignas(256) static char memory[1024];
  DeviceArena arena(memory, sizeof memory);
  arena.take(768, "first");
  EXPECT_EQ(arena.take(256, "exactly the rest"), memory + 768);
  try {
    arena.take(1, "one byte too many");
    FAIL() << "no refusal";
  } catch (const std::length_error& e) {
    EXPECT_NE(std::string(e.what()).find("one byte too many needs 1 bytes, 0 of 1024 are left"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(arena.take(SIZE_MAX, "overflow"), std::length_error);
}

// fits() says beforehand what take() would refuse (CudaBackend moves to a larger block instead).
TEST(CudaDeviceArena, FitsAgreesWithTake) {
  alignas(256) static char memory[1024];
  DeviceArena arena(memory, sizeof memory);
  arena.take(700, "first");  // 768 with alignment
  EXPECT_TRUE(arena.fits(256));
  EXPECT_FALSE(arena.fits(257));
  EXPECT_FALSE(arena.fits(SIZE_MAX));
  arena.take(256, "the rest");
  EXPECT_TRUE(arena.fits(0));
  EXPECT_FALSE(arena.fits(1));
}
