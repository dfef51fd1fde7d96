#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensor/tensor.h"
#include "util/error.h"

namespace vitpipe {
namespace {

TEST(Tensor, EmptyIsAlignedAndSized) {
  Tensor t = Tensor::empty({3, 5, 7});
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 420u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kTensorAlignment, 0u);
}

TEST(Tensor, SliceAndViewShareStorage) {
  Tensor t = Tensor::zeros({4, 3});
  Tensor rows = t.slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  rows.f32()[0] = 7.0f;
  EXPECT_EQ(t.f32()[3], 7.0f);
  Tensor flat = t.view({12});
  EXPECT_EQ(flat.f32()[3], 7.0f);
  EXPECT_THROW(t.view({5, 3}), Error);
  EXPECT_THROW(t.slice(3, 5), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway too: rounds up to the even neighbour.
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
}

TEST(DType, F16RoundTripAndEdges) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);        // halfway to the next power: overflows to inf
  EXPECT_EQ(float_to_f16(5.9604645e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16(2.9802322e-08f), 0x0000);  // half of it ties to even (zero)
  EXPECT_EQ(f16_to_float(0x0001), 5.9604645e-08f);
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    ASSERT_EQ(float_to_f16(f16_to_float(static_cast<uint16_t>(bits))), bits) << bits;
  }
}

TEST(Tensor, ConvertsBetweenDtypes) {
  Tensor t = Tensor::empty({4});
  float values[] = {0.5f, -3.25f, 1e-3f, 100.0f};
  for (int i = 0; i < 4; ++i) t.f32()[i] = values[i];
  Tensor back = t.to(DType::bf16).to(DType::f32);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(back.f32()[i], values[i], std::fabs(values[i]) * 1e-2);
  EXPECT_THROW(t.to(DType::i64), Error);
}

}  // namespace
}  // namespace vitpipe
