// Proof 2 for NCCL (issue 24): the pipeline's activation exchange and the replicas' gradient reduction, as call
// descriptions (backend/cuda/calls/nccl_calls.h) run by the CPU interpreter over simulated ranks, move and sum what
// vitpipe's CPU communicators do, on vitpipe's own (unequal) optimizer shards; mismatched or misordered calls, which
// would hang or corrupt a real run, are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/cuda/calls/nccl_calls.h"
#include "backend/cuda/calls/nccl_interpreter.h"
#include "call_test_support.h"
#include "parallel/optimizer_shards.h"

using namespace vitpipe;
using call_tests::matrix;
using call_tests::random_tensor;

namespace {

using Programs = std::vector<std::vector<cuda::NcclGroup>>;

TEST(NcclCalls, PipelineStagesExchangeActivationsAndTheirGradientsBitForBit) {
  // Stage 0 sends a ViT-Tiny micro-batch's residual stream forward; stage 1 sends its gradient back.
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor act0 = random_tensor({394, 192}, dtype, 1), act1 = Tensor::zeros({394, 192}, dtype);
    const Tensor grad1 = random_tensor({394, 192}, dtype, 2), grad0 = Tensor::zeros({394, 192}, dtype);
    const Programs programs = {
        {cuda::send_activations(matrix(act0), 1), cuda::recv_activations(matrix(grad0), 1)},
        {cuda::recv_activations(matrix(act1), 0), cuda::send_activations(matrix(grad1), 0)},
    };
    cuda::interpret_nccl(programs);
    EXPECT_EQ(std::memcmp(act0.raw(), act1.raw(), act0.nbytes()), 0) << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(grad1.raw(), grad0.raw(), grad1.nbytes()), 0) << dtype_name(dtype);
  }
}

TEST(NcclCalls, AReceiveShapedForAnotherMicroBatchIsRefused) {
  const Tensor sent = random_tensor({394, 192}, DType::bf16, 3), received = Tensor::zeros({197, 192}, DType::bf16);
  EXPECT_THROW(
      cuda::interpret_nccl({{cuda::send_activations(matrix(sent), 1)}, {cuda::recv_activations(matrix(received), 0)}}),
      std::invalid_argument);
}

TEST(NcclCalls, TwoStagesSendingBeforeReceivingAreRefused) {
  // Each stage sends first and receives in its next group: outside one group, both block in ncclSend.
  const Tensor a = random_tensor({8, 192}, DType::f32, 4), b = random_tensor({8, 192}, DType::f32, 5);
  const Tensor ra = Tensor::zeros({8, 192}), rb = Tensor::zeros({8, 192});
  EXPECT_THROW(cuda::interpret_nccl({{cuda::send_activations(matrix(a), 1), cuda::recv_activations(matrix(ra), 1)},
                                     {cuda::send_activations(matrix(b), 0), cuda::recv_activations(matrix(rb), 0)}}),
               std::invalid_argument);
}

std::vector<Tensor> replica_gradients(int replicas, int64_t count) {
  std::vector<Tensor> g;
  for (int r = 0; r < replicas; ++r) g.push_back(random_tensor({count}, DType::f32, 10 + static_cast<uint64_t>(r)));
  return g;
}

std::vector<double> sums(const std::vector<Tensor>& g) {
  std::vector<double> s(static_cast<size_t>(g[0].numel()), 0.0);
  for (const Tensor& t : g) {
    for (int64_t i = 0; i < t.numel(); ++i) s[i] += t.f32()[i];
  }
  return s;
}

TEST(NcclCalls, AllReduceLeavesEveryReplicaWithTheSum) {
  std::vector<Tensor> g = replica_gradients(4, 1000);
  const std::vector<double> expected = sums(g);
  Programs programs;
  for (Tensor& t : g) programs.push_back({cuda::all_reduce_gradients(t.f32(), 1000)});
  cuda::interpret_nccl(programs);
  for (const Tensor& t : g) {
    for (int64_t i = 0; i < 1000; ++i) ASSERT_FLOAT_EQ(t.f32()[i], static_cast<float>(expected[i])) << i;
  }
}

TEST(NcclCalls, ShardedReplicasReduceTheirOwnUnequalShardsAndBroadcastThemBack) {
  // vitpipe's shards of a range whose length no aligned equal split fits: reduce-scatter's equal counts would not.
  const int replicas = 3;
  const int64_t begin = 1000, end = 1000 + 10'007;
  const std::vector<ElementRange> ranges = shard_ranges(begin, end, replicas, 64);
  ASSERT_NE(ranges[0].numel(), ranges[2].numel());
  std::vector<cuda::Shard> shards;
  for (const ElementRange& r : ranges) shards.push_back({r.begin, r.end});
  std::vector<Tensor> g = replica_gradients(replicas, end - begin);
  const std::vector<double> expected = sums(g);

  Programs reduce, broadcast;
  for (Tensor& t : g) {
    reduce.push_back({cuda::reduce_gradient_shards(t.f32(), begin, shards)});
    broadcast.push_back({cuda::broadcast_parameter_shards(t.f32(), begin, shards)});
  }
  cuda::interpret_nccl(reduce);
  for (int r = 0; r < replicas; ++r) {  // each owner holds the sum of its shard
    for (int64_t i = ranges[r].begin - begin; i < ranges[r].end - begin; ++i) {
      ASSERT_FLOAT_EQ(g[r].f32()[i], static_cast<float>(expected[i])) << r << " " << i;
    }
  }
  cuda::interpret_nccl(broadcast);  // and then every replica holds every shard's sum
  for (const Tensor& t : g) {
    for (int64_t i = 0; i < end - begin; ++i) ASSERT_FLOAT_EQ(t.f32()[i], static_cast<float>(expected[i])) << i;
  }
}

TEST(NcclCalls, ReduceScatterSumsEqualShardsAndIsRefusedForVitpipesUnequalOnes) {
  const int replicas = 4;
  const std::vector<cuda::Shard> equal = {{0, 256}, {256, 512}, {512, 768}, {768, 1024}};
  std::vector<Tensor> g = replica_gradients(replicas, 1024);
  const std::vector<double> expected = sums(g);
  Programs programs;
  for (int r = 0; r < replicas; ++r) programs.push_back({cuda::reduce_scatter_gradients(g[r].f32(), 0, equal, r)});
  cuda::interpret_nccl(programs);
  for (int r = 0; r < replicas; ++r) {  // in place: replica r's block of its own buffer holds the sum
    for (int64_t i = equal[r].begin; i < equal[r].end; ++i)
      ASSERT_FLOAT_EQ(g[r].f32()[i], static_cast<float>(expected[i]));
  }
  std::vector<cuda::Shard> unequal;
  for (const ElementRange& r : shard_ranges(0, 10'007, 3, 64)) unequal.push_back({r.begin, r.end});
  EXPECT_THROW(cuda::reduce_scatter_gradients(g[0].f32(), 0, unequal, 0), std::invalid_argument);
}

TEST(NcclCalls, CollectivesOfDifferentSizesOrOrderAcrossRanksAreRefused) {
  std::vector<Tensor> g = replica_gradients(2, 512);
  EXPECT_THROW(cuda::interpret_nccl(
                   {{cuda::all_reduce_gradients(g[0].f32(), 512)}, {cuda::all_reduce_gradients(g[1].f32(), 256)}}),
               std::invalid_argument);
  const std::vector<cuda::Shard> shards = {{0, 256}, {256, 512}};
  cuda::NcclGroup swapped = cuda::reduce_gradient_shards(g[1].f32(), 0, shards);
  std::swap(swapped.calls[0], swapped.calls[1]);
  EXPECT_THROW(cuda::interpret_nccl({{cuda::reduce_gradient_shards(g[0].f32(), 0, shards)}, {swapped}}),
               std::invalid_argument);
}

}  // namespace
