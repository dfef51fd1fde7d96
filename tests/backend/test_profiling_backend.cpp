// The profiling backend's bookkeeping, which `vitpipe bench` holds each operation against its bound with: the FLOPs
// and bytes it counts per call, the calls, and per-operation times that add up to the per-kind times.
#include <gtest/gtest.h>

#include "backend/cpu/memory_bandwidth.h"
#include "backend/profiling_backend.h"

using namespace vitpipe;

TEST(ProfilingBackend, CountsFlopsAndBytesPerOperation) {
  auto cpu = make_cpu_backend();
  ProfilingBackend profiled(*cpu);
  const int64_t m = 6, k = 4, n = 3;
  const Tensor in = Tensor::zeros({m, k}), weight = Tensor::zeros({n, k}), bias = Tensor::zeros({n});
  const Tensor out = Tensor::zeros({m, n});
  profiled.linear_forward(in, weight, &bias, nullptr, out);
  profiled.linear_forward(in, weight, &bias, nullptr, out);
  const Tensor grad_weight = Tensor::zeros({n, k});
  profiled.linear_backward_weight(out, in, grad_weight);

  // attention over B = 2, T = 5, D = 4 (2 heads): forward 4 B T^2 D, backward 10 B T^2 D multiply-add FLOPs.
  const Tensor qkv = Tensor::zeros({2, 5, 12}), lse = Tensor::zeros({2, 2, 5}), att = Tensor::zeros({2, 5, 4});
  profiled.attention_forward(qkv, 2, lse, att);
  const Tensor grad_qkv = Tensor::zeros({2, 5, 12});
  profiled.attention_backward(att, qkv, att, lse, 2, grad_qkv, nullptr);

  const auto& ops = profiled.operations();
  ASSERT_EQ(ops.size(), 4u);
  const OperationRecord& forward = ops.at("linear forward");
  EXPECT_EQ(forward.calls, 2);
  EXPECT_EQ(forward.kind, OpKind::gemm);
  EXPECT_DOUBLE_EQ(forward.flops, 2 * (2.0 * m * n * k));
  EXPECT_DOUBLE_EQ(forward.bytes, 2 * 4.0 * (m * k + n * k + n + m * n));
  const OperationRecord& weight_grad = ops.at("linear backward (weight)");
  EXPECT_DOUBLE_EQ(weight_grad.flops, 2.0 * m * n * k);
  EXPECT_DOUBLE_EQ(weight_grad.bytes, 4.0 * (m * n + m * k + 2 * n * k));  // the gradient is read and written
  EXPECT_DOUBLE_EQ(ops.at("attention forward").flops, 4.0 * 2 * 5 * 5 * 4);
  EXPECT_DOUBLE_EQ(ops.at("attention backward").flops, 10.0 * 2 * 5 * 5 * 4);
  EXPECT_EQ(ops.at("attention forward").kind, OpKind::attention);

  double gemm = 0.0, attention = 0.0;
  for (const auto& [name, r] : ops) (r.kind == OpKind::gemm ? gemm : attention) += r.seconds;
  EXPECT_DOUBLE_EQ(gemm, profiled.seconds(OpKind::gemm));
  EXPECT_DOUBLE_EQ(attention, profiled.seconds(OpKind::attention));
  profiled.reset();
  EXPECT_TRUE(profiled.operations().empty());
  EXPECT_EQ(profiled.seconds(OpKind::gemm), 0.0);
}

TEST(ProfilingBackend, MemoryBandwidthIsAPlausibleRate) {
  const double bytes_per_s = cpu::measure_memory_bandwidth_bytes_per_s(1);
  EXPECT_GT(bytes_per_s, 1e8);   // slower than 100 MB/s is no memory system
  EXPECT_LT(bytes_per_s, 1e13);  // faster than 10 TB/s from one thread means the loop was optimised away
}
