// CudaBackend (backend/cuda/cuda_backend.h) on a real GPU against the CPU backend, op by op: the same random inputs
// on both, every tensor compared after the op (outputs and in-place gradients; inputs must be unchanged), losses'
// sums compared. f32 within 1e-5 relative to the largest magnitude (TF32 off), bf16 within 2e-2; the optimizer updates
// within 1e-6 (the kernels round every operation once, the CPU backend's compiled loops fuse some multiply-adds:
// optimizer_math.h) and their 16-lane sums of squares bit for bit. Skips where the
// CUDA runtime sees no GPU (every machine this was written on): NEVER RUN YET. Part of the GPU check.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../optimizer_cases.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/sdpa_executor.h"
#if VITPIPE_ON_FAKES
#include "../executors/fake_cudnn.h"
#include "../fakes/fake_cuda_runtime.h"
#endif
#include "util/random.h"

using namespace vitpipe;

namespace {

bool gpu_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

Tensor random_tensor(const Shape& shape, Rng& rng, DType dtype = DType::f32, double scale = 1.0) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(scale * rng.normal());
  return dtype == DType::f32 ? t : t.to(dtype);
}

// Device copies of host tensors, freed at the end.
class DeviceCopies {
 public:
  ~DeviceCopies() {
    for (void* p : owned_) cudaFree(p);
  }
  Tensor upload(const Tensor& host) {
    if (host.rank() == 0 && host.numel() == 0) return Tensor();
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(host.nbytes(), 1)), cudaSuccess);
    owned_.push_back(p);
    EXPECT_EQ(cudaMemcpy(p, host.raw(), host.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    return Tensor::wrap(p, host.shape(), host.dtype());
  }
  static Tensor download(const Tensor& device) {
    if (device.rank() == 0 && device.numel() == 0) return Tensor();
    Tensor host = Tensor::empty(device.shape(), device.dtype());
    EXPECT_EQ(cudaMemcpy(host.raw(), device.raw(), device.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  std::vector<void*> owned_;
};

double relative_difference(const Tensor& actual, const Tensor& expected) {
  if (expected.dtype() == DType::i64) {
    return std::equal(actual.data<int64_t>(), actual.data<int64_t>() + actual.numel(), expected.data<int64_t>()) ? 0
                                                                                                                 : 1;
  }
  const Tensor a = actual.to(DType::f32), e = expected.to(DType::f32);
  double diff = 0.0, scale = 1e-3;
  for (int64_t i = 0; i < e.numel(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a.f32()[i]) - e.f32()[i]));
    if (std::isnan(a.f32()[i]) != std::isnan(e.f32()[i])) return INFINITY;
    scale = std::max(scale, std::abs(static_cast<double>(e.f32()[i])));
  }
  return diff / scale;
}

double tolerance_for(DType dtype) { return dtype == DType::f32 ? 1e-5 : 2e-2; }

using Op = std::function<double(Backend&, std::vector<Tensor>&)>;

class CudaBackendOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_present()) GTEST_SKIP() << "no GPU: the CUDA runtime sees none";
    gpu_ = std::make_unique<cuda::CudaBackend>(0, false);
  }

  // Runs `op` on the CPU backend and on the GPU with copies of `tensors`; compares every tensor and the result.
  void compare(const std::string& name, const std::vector<Tensor>& tensors, const Op& op, double tolerance) {
    SCOPED_TRACE(name);
    std::vector<Tensor> on_cpu, on_gpu;
    for (const Tensor& t : tensors) on_cpu.push_back(t.rank() == 0 && t.numel() == 0 ? Tensor() : t.clone());
    DeviceCopies device;
    for (const Tensor& t : tensors) on_gpu.push_back(device.upload(t));
    const double expected = op(*cpu_, on_cpu);
    double actual = 0.0;
    try {
      actual = op(*gpu_, on_gpu);
      gpu_->synchronize();
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
    EXPECT_NEAR(actual, expected, 1e-6 * std::max(1.0, std::abs(expected)));
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (on_cpu[i].numel() == 0) continue;
      EXPECT_LE(relative_difference(DeviceCopies::download(on_gpu[i]), on_cpu[i]), tolerance) << "tensor " << i;
    }
  }

  // attention_forward on both backends, then the CPU's output and log-sum-exp kept in `lse` and `out` for the backward.
  void compare_attention_forward(const std::string& name, const Tensor& qkv, int64_t heads, Tensor& lse, Tensor& out,
                                 double tolerance) {
    compare(
        name, {qkv, lse, out},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.attention_forward(t[0], heads, t[1], t[2]);
          return 0.0;
        },
        tolerance);
    cpu_->attention_forward(qkv, heads, lse, out);
  }
  // attention_backward of a random grad_out, with the bias gradient, on both backends.
  void compare_attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, int64_t heads,
                                  double tolerance) {
    const DType dt = qkv.dtype();
    compare(
        "attention_backward",
        {random_tensor(out.shape(), rng_, dt), qkv, out, lse, Tensor::zeros(qkv.shape(), dt),
         random_tensor({qkv.dim(2)}, rng_)},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.attention_backward(t[0], t[1], t[2], t[3], heads, t[4], &t[5]);
          return 0.0;
        },
        tolerance);
  }

  // Full and classifier-token attention, forward and backward, fp32 and bf16, at one shape against the CPU backend;
  // the bf16 calls on cuDNN (no refusal), fp32 on the flash kernels.
  void check_attention_at(int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim) {
    const int64_t hidden = heads * head_dim;
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " T=" + std::to_string(tokens) + " heads=" + std::to_string(heads));
      const double tol = tolerance_for(dt) * (dt == DType::f32 ? 10 : 1);
      const Tensor qkv = random_tensor({batch, tokens, 3 * hidden}, rng_, dt);
      Tensor lse = Tensor::empty({batch, heads, tokens}), out = Tensor::empty({batch, tokens, hidden}, dt);
      compare_attention_forward("attention_forward", qkv, heads, lse, out, tol);
      compare_attention_backward(qkv, out, lse, heads, tol);
      Tensor cls_lse = Tensor::empty({batch, heads}), cls_out = Tensor::empty({batch, hidden}, dt);
      compare(
          "cls_attention_forward", {qkv, cls_lse, cls_out},
          [&](Backend& b, std::vector<Tensor>& t) {
            b.cls_attention_forward(t[0], heads, t[1], t[2]);
            return 0.0;
          },
          tol);
      cpu_->cls_attention_forward(qkv, heads, cls_lse, cls_out);
      compare(
          "cls_attention_backward",
          {random_tensor({batch, hidden}, rng_, dt), qkv, cls_out, cls_lse,
           random_tensor({batch, tokens, 3 * hidden}, rng_, dt), random_tensor({3 * hidden}, rng_)},
          [&](Backend& b, std::vector<Tensor>& t) {
            b.cls_attention_backward(t[0], t[1], t[2], t[3], heads, t[4], &t[5]);
            return 0.0;
          },
          tol);
    }
    std::printf("attention path at T=%lld, %lld heads of %lld: %s\n", static_cast<long long>(tokens),
                static_cast<long long>(heads), static_cast<long long>(head_dim), gpu_->attention_path().c_str());
    // "cudnn", then which graph ran the backward passes.
    EXPECT_EQ(gpu_->attention_path().rfind("cudnn; backward: cudnn ", 0), 0u) << gpu_->attention_path();
    EXPECT_EQ(gpu_->attention_path().find("fallback"), std::string::npos) << "bf16 attention took the fallback";
  }

  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
  std::unique_ptr<cuda::CudaBackend> gpu_;
  Rng rng_{2024};
};

}  // namespace

TEST_F(CudaBackendOnGpu, LinearLayers) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const double tol = tolerance_for(dt);
    const int64_t m = 37, k = 64, n = 48;
    const Tensor in = random_tensor({m, k}, rng_, dt), w = random_tensor({n, k}, rng_, dt);
    const Tensor bias = random_tensor({n}, rng_), residual = random_tensor({m, n}, rng_);
    compare(
        "linear_forward", {in, w, bias, residual, Tensor::zeros({m, n})},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_forward(t[0], t[1], &t[2], &t[3], t[4]);
          return 0.0;
        },
        tol);
    compare(
        "linear_forward bias only, out of the GEMM dtype", {in, w, bias, Tensor::zeros({m, n}, dt)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_forward(t[0], t[1], &t[2], nullptr, t[3]);
          return 0.0;
        },
        tol);
    compare(
        "linear_gelu_forward", {in, w, bias, Tensor::zeros({m, n}, dt)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_gelu_forward(t[0], t[1], t[2], nullptr, t[3]);
          return 0.0;
        },
        tol);
    compare(
        "linear_gelu_forward keeping the pre-activation",
        {in, w, bias, Tensor::zeros({m, n}, dt), Tensor::zeros({m, n}, dt)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_gelu_forward(t[0], t[1], t[2], &t[3], t[4]);
          return 0.0;
        },
        tol);
    const Tensor g = random_tensor({m, n}, rng_, dt);
    compare(
        "linear_backward_input", {g, w, Tensor::zeros({m, k}, dt)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_backward_input(t[0], t[1], t[2]);
          return 0.0;
        },
        tol);
    compare(
        "linear_backward_weight adds", {g, in, random_tensor({n, k}, rng_)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_backward_weight(t[0], t[1], t[2]);
          return 0.0;
        },
        tol);
    compare(
        "bias_backward adds", {g, random_tensor({n}, rng_)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.bias_backward(t[0], t[1]);
          return 0.0;
        },
        tol);
    // 14 logits: rows of 56 bytes, staged through padded copies.
    const Tensor head = random_tensor({14, k}, rng_, dt);
    compare(
        "linear_forward to 14 logits", {in, head, random_tensor({14}, rng_), Tensor::zeros({m, 14})},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_forward(t[0], t[1], &t[2], nullptr, t[3]);
          return 0.0;
        },
        tol);
  }
}

TEST_F(CudaBackendOnGpu, LayerNorm) {
  const int64_t m = 300, d = 64;
  const Tensor x = random_tensor({m, d}, rng_, DType::f32, 2.0), w = random_tensor({d}, rng_),
               bias = random_tensor({d}, rng_);
  for (DType out_type : {DType::f32, DType::bf16}) {
    compare(
        "layernorm_forward", {x, w, bias, Tensor::zeros({m, d}, out_type), Tensor::zeros({m}), Tensor::zeros({m})},
        [](Backend& b, std::vector<Tensor>& t) {
          b.layernorm_forward(t[0], t[1], t[2], 1e-6, t[3], t[4], t[5]);
          return 0.0;
        },
        tolerance_for(out_type));
  }
  Tensor mean = Tensor::empty({m}), rstd = Tensor::empty({m}), out = Tensor::empty({m, d});
  cpu_->layernorm_forward(x, w, bias, 1e-6, out, mean, rstd);
  compare(
      "layernorm_backward, every option",
      {random_tensor({m, d}, rng_), x, w, mean, rstd, random_tensor({m, d}, rng_), random_tensor({d}, rng_),
       random_tensor({d}, rng_), Tensor::zeros({m, d}, DType::bf16), random_tensor({d}, rng_)},
      [](Backend& b, std::vector<Tensor>& t) {
        LayerNormBackwardArgs a;
        a.grad_out = t[0];
        a.in = t[1];
        a.weight = t[2];
        a.mean = t[3];
        a.rstd = t[4];
        a.grad_in = t[5];
        a.grad_residual = t[5];  // in place
        a.grad_weight = t[6];
        a.grad_bias = t[7];
        a.grad_in_copy = t[8];
        a.grad_in_colsum = t[9];
        b.layernorm_backward(a);
        return 0.0;
      },
      2e-2);  // the bf16 copy
}

TEST_F(CudaBackendOnGpu, Attention) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t batch = 2, tokens = 17, hidden = 64, heads = 4;
    const double tol = tolerance_for(dt) * (dt == DType::f32 ? 10 : 1);
    const Tensor qkv = random_tensor({batch, tokens, 3 * hidden}, rng_, dt);
    Tensor lse = Tensor::empty({batch, heads, tokens}), out = Tensor::empty({batch, tokens, hidden}, dt);
    compare_attention_forward("attention_forward", qkv, heads, lse, out, tol);
    compare_attention_backward(qkv, out, lse, heads, tol);
    Tensor cls_lse = Tensor::empty({batch, heads}), cls_out = Tensor::empty({batch, hidden}, dt);
    compare(
        "cls_attention_forward", {qkv, cls_lse, cls_out},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.cls_attention_forward(t[0], heads, t[1], t[2]);
          return 0.0;
        },
        tol);
    cpu_->cls_attention_forward(qkv, heads, cls_lse, cls_out);
    compare(
        "cls_attention_backward",
        {random_tensor({batch, hidden}, rng_, dt), qkv, cls_out, cls_lse,
         random_tensor({batch, tokens, 3 * hidden}, rng_, dt), random_tensor({3 * hidden}, rng_)},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.cls_attention_backward(t[0], t[1], t[2], t[3], heads, t[4], &t[5]);
          return 0.0;
        },
        tol);
  }
  // The bf16 cases above ran on cuDNN's SDPA, not on the fallback (which would pass them just as well).
  EXPECT_EQ(gpu_->sdpa_refusal(), "") << "bf16 attention took the fp32 fallback";
}

// Attention at the models' own shapes (the test above uses batch 2, T = 17, head dim 16 only): full attention forward
// and backward and the classifier token's one-query-row call, fp32 and bf16; the bf16 calls must run on cuDNN's SDPA
// (on a GPU: the real cuDNN accepts these shapes). On the fakes the batch is 1 and the heads fewer where noted, to keep
// each test to a few seconds; on a GPU the shapes are the models' at batch 4.
#if VITPIPE_ON_FAKES
constexpr int64_t kRealShapeBatch = 1;
constexpr bool kOnFakes = true;
#else
constexpr int64_t kRealShapeBatch = 4;
constexpr bool kOnFakes = false;
#endif

TEST_F(CudaBackendOnGpu, AttentionAtRealShapeVitB16) {  // ViT-B/16 at 224 px: 1 + 14 x 14 tokens, 12 heads of 64
  check_attention_at(kRealShapeBatch, 197, 12, 64);
}

TEST_F(CudaBackendOnGpu, AttentionAtRealShapeDinov2At518) {  // DINOv2 at 518 px: 1 + 37 x 37 tokens, heads of 64
  check_attention_at(kRealShapeBatch, 1370, kOnFakes ? 1 : 6, 64);
}

TEST_F(CudaBackendOnGpu, AttentionAtRealShapeDinov2Registers) {  // DINOv2-S with 4 registers: 1 + 4 + 16 x 16 tokens
  check_attention_at(kRealShapeBatch, 261, kOnFakes ? 2 : 6, 64);
}

// bf16 attention's backward without cuDNN (VITPIPE_CUDA_SDPA=0, as after a refusal): the bf16 tensor-core flash
// kernels (kernels/flash_attention_backward_bf16.cu; on the fakes their host model) at ViT-B/16's shape, with partial
// tiles (197 = 3 x 64 + 5), against the CPU backend; the forward stays on the fp32 kernels. On a GPU this is the
// kernels' first run.
TEST_F(CudaBackendOnGpu, Bf16BackwardFallbackRunsOnTensorCoresAtVitB16) {
  setenv("VITPIPE_CUDA_SDPA", "0", 1);
  gpu_ = std::make_unique<cuda::CudaBackend>(0, false);
  unsetenv("VITPIPE_CUDA_SDPA");
  const int64_t batch = kRealShapeBatch, tokens = 197, heads = 12, hidden = heads * 64;
  const Tensor qkv = random_tensor({batch, tokens, 3 * hidden}, rng_, DType::bf16);
  Tensor lse = Tensor::empty({batch, heads, tokens}), out = Tensor::empty({batch, tokens, hidden}, DType::bf16);
  compare_attention_forward("attention_forward", qkv, heads, lse, out, tolerance_for(DType::bf16));
  compare_attention_backward(qkv, out, lse, heads, tolerance_for(DType::bf16));
  EXPECT_NE(
      gpu_->attention_path().find("backward: the bf16 tensor-core flash kernels at head dimensions 16, 32 and 64"),
      std::string::npos)
      << gpu_->attention_path();
}

#if VITPIPE_ON_FAKES
// cuDNN refusing the backward pass alone (here: a plan asking for more workspace than any is given) sends only the
// backward to the fallback (the bf16 tensor-core kernels at head dimension 16); the forward keeps cuDNN, and the
// fallback's backward reads the log-sum-exp cuDNN saved.
TEST_F(CudaBackendOnGpu, RefusedBackwardLeavesTheForwardOnCudnn) {
  const int64_t batch = 2, tokens = 17, hidden = 64, heads = 4;
  const Tensor qkv = random_tensor({batch, tokens, 3 * hidden}, rng_, DType::bf16);
  Tensor lse = Tensor::empty({batch, heads, tokens}), out = Tensor::empty({batch, tokens, hidden}, DType::bf16);
  const double tol = tolerance_for(DType::bf16);
  compare_attention_forward("attention_forward", qkv, heads, lse, out, tol);  // builds and caches the forward plan
  fake_cudnn::set_plan_workspace_bytes(static_cast<int64_t>(cuda::SdpaExecutor::kMaxWorkspaceBytes) + 1);
  compare_attention_backward(qkv, out, lse, heads, tol);
  fake_cudnn::set_plan_workspace_bytes(0);
  EXPECT_NE(gpu_->sdpa_refusal().find("within the workspace"), std::string::npos) << gpu_->sdpa_refusal();
  EXPECT_NE(gpu_->attention_path().find("backward at batch 2, 17 tokens, 4 heads of 16 (on the bf16 tensor-core flash "
                                        "kernels): attention_backward: cuDNN SDPA: the native SDPA_BWD: "),
            std::string::npos)
      << gpu_->attention_path();
  const int executions = fake_cudnn::counters().executions;
  compare_attention_forward("attention_forward again", qkv, heads, lse, out, tol);
  EXPECT_EQ(fake_cudnn::counters().executions, executions + 1) << "the forward pass left cuDNN";
}

// cuDNN refusing the classifier token's one-query-row call (the fake refuses s_q = 1; it runs last in the forward pass
// and first in the backward) sends that call alone to the fallback: the full attention of every layer stays on cuDNN.
TEST_F(CudaBackendOnGpu, RefusedClassifierTokenLeavesTheFullAttentionOnCudnn) {
  struct Unrefuse {
    ~Unrefuse() { fake_cudnn::set_refused_query_rows(0); }
  } unrefuse;
  fake_cudnn::set_refused_query_rows(1);
  const int64_t batch = 2, tokens = 17, hidden = 64, heads = 4;
  const double tol = tolerance_for(DType::bf16);
  const Tensor qkv = random_tensor({batch, tokens, 3 * hidden}, rng_, DType::bf16);
  Tensor lse = Tensor::empty({batch, heads, tokens}), out = Tensor::empty({batch, tokens, hidden}, DType::bf16);
  compare_attention_forward("attention_forward", qkv, heads, lse, out, tol);
  Tensor cls_lse = Tensor::empty({batch, heads}), cls_out = Tensor::empty({batch, hidden}, DType::bf16);
  compare(
      "cls_attention_forward (refused, on the fallback)", {qkv, cls_lse, cls_out},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.cls_attention_forward(t[0], heads, t[1], t[2]);
        return 0.0;
      },
      tol);
  cpu_->cls_attention_forward(qkv, heads, cls_lse, cls_out);
  compare(
      "cls_attention_backward (refused, on the fallback)",
      {random_tensor({batch, hidden}, rng_, DType::bf16), qkv, cls_out, cls_lse,
       random_tensor({batch, tokens, 3 * hidden}, rng_, DType::bf16), random_tensor({3 * hidden}, rng_)},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.cls_attention_backward(t[0], t[1], t[2], t[3], heads, t[4], &t[5]);
        return 0.0;
      },
      tol);
  EXPECT_NE(gpu_->sdpa_refusal().find("query rows"), std::string::npos) << gpu_->sdpa_refusal();
  // The next layer's (or step's) full attention, both passes: still cuDNN's.
  const int executions = fake_cudnn::counters().executions;
  compare_attention_forward("attention_forward after the refusal", qkv, heads, lse, out, tol);
  compare_attention_backward(qkv, out, lse, heads, tol);
  EXPECT_EQ(fake_cudnn::counters().executions, executions + 2) << "the full attention left cuDNN";
  const std::string path = gpu_->attention_path();
  EXPECT_EQ(path.rfind("fallback for 2 shape(s)", 0), 0u) << path;
  EXPECT_NE(path.find("classifier-token forward at batch 2, 17 tokens, 4 heads of 16"), std::string::npos) << path;
  EXPECT_NE(path.find("classifier-token backward"), std::string::npos) << path;
}

// A cuDNN loaded at run time outside the versions the native SDPA graphs are written for (9.13.1 up to 9.20; the
// headers passed the build's guard): bf16 attention takes the fallback from the start, and says why.
TEST_F(CudaBackendOnGpu, CudnnOutsideTheSdpaVersionsTakesTheFallback) {
  for (size_t version : {size_t{91200}, size_t{91300}, size_t{92100}}) {
    SCOPED_TRACE(version);
    struct Restore {
      ~Restore() { fake_cuda_runtime::cudnn_version = 91900; }
    } restore;
    fake_cuda_runtime::cudnn_version = version;
    gpu_ = std::make_unique<cuda::CudaBackend>(0, false);
    const int64_t batch = 2, tokens = 17, hidden = 64, heads = 4;
    const Tensor qkv = random_tensor({batch, tokens, 3 * hidden}, rng_, DType::bf16);
    Tensor lse = Tensor::empty({batch, heads, tokens}), out = Tensor::empty({batch, tokens, hidden}, DType::bf16);
    const int executions = fake_cudnn::counters().executions;
    compare_attention_forward("attention_forward", qkv, heads, lse, out, tolerance_for(DType::bf16));
    compare_attention_backward(qkv, out, lse, heads, tolerance_for(DType::bf16));
    EXPECT_EQ(fake_cudnn::counters().executions, executions) << "cuDNN ran";
    EXPECT_EQ(gpu_->attention_path().rfind("fallback: cuDNN 9.", 0), 0u) << gpu_->attention_path();
    EXPECT_NE(gpu_->attention_path().find("9.13.1 up to 9.20 only"), std::string::npos) << gpu_->attention_path();
  }
  gpu_ = std::make_unique<cuda::CudaBackend>(0, false);  // 9.19.0 again: cuDNN's
  EXPECT_EQ(gpu_->attention_path(), "cudnn");
}
#endif

// Scratch past the fixed 256 MiB arena outside attention. Inference's MLP keeps no pre-activation: rows x 4D f32 of it
// would not fit (ViT-B/16 at eval batch 111 is 21,867 x 3,072 = 268.7 MB); here 66,560 x 1,024 in bf16, k = 8 to keep
// the fakes' GEMM short. And a GEMM operand staged through a padded copy larger than the arena: rows of 14 f32
// (56 bytes) padded to 16, 4.3 M of them (275 MB).
TEST_F(CudaBackendOnGpu, InferenceMlpBeyondTheFixedArena) {
  const auto arena = static_cast<int64_t>(cuda::CudaBackend::kArenaBytes);
  {
    const int64_t m = 66560, k = 8, n = 1024;
    ASSERT_GT(4 * m * n, arena);
    compare(
        "linear_gelu_forward without a pre-activation",
        {random_tensor({m, k}, rng_, DType::bf16), random_tensor({n, k}, rng_, DType::bf16), random_tensor({n}, rng_),
         Tensor::zeros({m, n}, DType::bf16)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_gelu_forward(t[0], t[1], t[2], nullptr, t[3]);
          return 0.0;
        },
        tolerance_for(DType::bf16));
  }
}

TEST_F(CudaBackendOnGpu, PaddedStagingBeyondTheFixedArena) {
  const auto arena = static_cast<int64_t>(cuda::CudaBackend::kArenaBytes);
  {
    const int64_t m = 4'300'000, k = 14, n = 4;
    ASSERT_GT(4 * m * 16, arena);
    compare(
        "linear_forward of a padded input",
        {random_tensor({m, k}, rng_), random_tensor({n, k}, rng_), random_tensor({n}, rng_), Tensor::zeros({m, n})},
        [](Backend& b, std::vector<Tensor>& t) {
          b.linear_forward(t[0], t[1], &t[2], nullptr, t[3]);
          return 0.0;
        },
        tolerance_for(DType::f32));
  }
}

// bf16 attention on the fallback (cuDNN's SDPA off) with f32 copies larger than the fixed 256 MiB scratch arena:
// the backward's copies of qkv, grad_out, out and grad_qkv come to 272 MB here (ViT-B at batch 128: about 620 MB).
TEST_F(CudaBackendOnGpu, AttentionFallbackBeyondTheFixedArena) {
  setenv("VITPIPE_CUDA_SDPA", "0", 1);
  gpu_ = std::make_unique<cuda::CudaBackend>(0, false);
  unsetenv("VITPIPE_CUDA_SDPA");
  const int64_t batch = 520, tokens = 16, hidden = 1024, heads = 8;
  ASSERT_GT(32 * batch * tokens * hidden, static_cast<int64_t>(cuda::CudaBackend::kArenaBytes));
  const Tensor qkv = random_tensor({batch, tokens, 3 * hidden}, rng_, DType::bf16);
  Tensor lse = Tensor::empty({batch, heads, tokens}), out = Tensor::empty({batch, tokens, hidden}, DType::bf16);
  compare_attention_forward("attention_forward", qkv, heads, lse, out, tolerance_for(DType::bf16));
  compare_attention_backward(qkv, out, lse, heads, tolerance_for(DType::bf16));
}

TEST_F(CudaBackendOnGpu, ElementwiseAndActivations) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const double tol = tolerance_for(dt);
    const int64_t m = 200, n = 40;
    const Tensor x = random_tensor({m, n}, rng_, dt, 2.0), g = random_tensor({m, n}, rng_, dt);
    compare(
        "gelu_forward", {x, Tensor::zeros({m, n}, dt)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.gelu_forward(t[0], t[1]);
          return 0.0;
        },
        tol);
    compare(
        "gelu_backward", {g, x, Tensor::zeros({m, n}, dt), random_tensor({n}, rng_)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.gelu_backward(t[0], t[1], t[2], &t[3]);
          return 0.0;
        },
        tol);
    compare(
        "gelu_backward in place", {g, x, random_tensor({n}, rng_)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.gelu_backward(t[0], t[1], t[0], &t[2]);
          return 0.0;
        },
        tol);
    compare(
        "scale in place", {x},
        [](Backend& b, std::vector<Tensor>& t) {
          b.scale(t[0], 0.37, t[0]);
          return 0.0;
        },
        tol);
    const Tensor in2 = random_tensor({m, 2 * n}, rng_, dt, 2.0);
    compare(
        "swiglu_forward", {in2, Tensor::zeros({m, n}, dt)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.swiglu_forward(t[0], t[1]);
          return 0.0;
        },
        tol);
    compare(
        "swiglu_backward", {g, in2, Tensor::zeros({m, 2 * n}, dt), random_tensor({2 * n}, rng_)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.swiglu_backward(t[0], t[1], t[2], &t[3]);
          return 0.0;
        },
        tol);
    compare(
        "layer_scale_forward in place", {x, random_tensor({n}, rng_), random_tensor({m, n}, rng_)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.layer_scale_forward(t[0], t[1], t[2], t[2]);
          return 0.0;
        },
        tol);
    compare(
        "layer_scale_backward",
        {random_tensor({m, n}, rng_), x, random_tensor({n}, rng_), Tensor::zeros({m, n}, dt), random_tensor({n}, rng_),
         random_tensor({n}, rng_)},
        [](Backend& b, std::vector<Tensor>& t) {
          b.layer_scale_backward(t[0], t[1], t[2], t[3], &t[4], &t[5]);
          return 0.0;
        },
        tol);
  }
  const Tensor x = random_tensor({300, 7}, rng_);
  compare(
      "convert to bf16", {x, Tensor::zeros({300, 7}, DType::bf16)},
      [](Backend& b, std::vector<Tensor>& t) {
        b.convert(t[0], t[1]);
        return 0.0;
      },
      0.0);
  compare(
      "convert to f32", {x.to(DType::bf16), Tensor::zeros({300, 7})},
      [](Backend& b, std::vector<Tensor>& t) {
        b.convert(t[0], t[1]);
        return 0.0;
      },
      0.0);
}

TEST_F(CudaBackendOnGpu, EmbeddingsTokensAndLosses) {
  const int64_t batch = 3, channels = 3, image = 16, patch = 4, np = 16, d = 32;
  const Tensor images = random_tensor({batch, channels, image, image}, rng_);
  for (DType dt : {DType::f32, DType::bf16}) {
    compare(
        "patchify", {images, Tensor::zeros({batch * np, channels * patch * patch}, dt)},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.patchify(t[0], patch, t[1]);
          return 0.0;
        },
        0.0);
  }
  const int64_t tokens = np + 1;
  compare(
      "embeddings_forward",
      {random_tensor({batch * np, d}, rng_), random_tensor({d}, rng_), random_tensor({tokens, d}, rng_),
       Tensor::zeros({batch, tokens, d})},
      [](Backend& b, std::vector<Tensor>& t) {
        b.embeddings_forward(t[0], t[1], t[2], t[3]);
        return 0.0;
      },
      1e-6);
  compare(
      "embeddings_backward",
      {random_tensor({batch, tokens, d}, rng_), random_tensor({d}, rng_), random_tensor({tokens, d}, rng_),
       Tensor::zeros({batch * np, d}), random_tensor({d}, rng_)},
      [](Backend& b, std::vector<Tensor>& t) {
        b.embeddings_backward(t[0], t[1], t[2], t[3], &t[4]);
        return 0.0;
      },
      1e-5);
  const int64_t prefix = 3, positioned = 1, tokens3 = prefix + np;
  compare(
      "token_embeddings_forward",
      {random_tensor({batch * np, d}, rng_), random_tensor({prefix, d}, rng_),
       random_tensor({positioned + np, d}, rng_), Tensor::zeros({batch, tokens3, d})},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.token_embeddings_forward(t[0], t[1], positioned, t[2], t[3]);
        return 0.0;
      },
      1e-6);
  compare(
      "token_embeddings_backward",
      {random_tensor({batch, tokens3, d}, rng_), random_tensor({prefix, d}, rng_),
       random_tensor({positioned + np, d}, rng_), Tensor::zeros({batch * np, d}, DType::bf16),
       random_tensor({d}, rng_)},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.token_embeddings_backward(t[0], &t[1], positioned, &t[2], t[3], &t[4]);
        return 0.0;
      },
      1e-2);
  const Tensor x = random_tensor({batch, tokens3, d}, rng_);
  compare(
      "gather_cls / scatter_cls", {x, Tensor::zeros({batch, d}), random_tensor({batch, d}, rng_), x.clone()},
      [](Backend& b, std::vector<Tensor>& t) {
        b.gather_cls(t[0], t[1]);
        b.scatter_cls(t[2], t[3]);
        return 0.0;
      },
      0.0);
  compare(
      "gather_tokens / scatter_tokens",
      {x, Tensor::zeros({2, batch, d}), random_tensor({2, batch, d}, rng_), x.clone()},
      [](Backend& b, std::vector<Tensor>& t) {
        b.gather_tokens(t[0], 2, t[1]);
        b.scatter_tokens(t[2], t[3]);
        return 0.0;
      },
      0.0);
  compare(
      "cls_and_mean", {x, Tensor::zeros({batch, 2 * d}), random_tensor({batch, 2 * d}, rng_), x.clone()},
      [&](Backend& b, std::vector<Tensor>& t) {
        b.cls_and_mean_forward(t[0], prefix, t[1]);
        b.cls_and_mean_backward(t[2], prefix, t[3]);
        return 0.0;
      },
      1e-5);
  compare(
      "resample_positions",
      {random_tensor({1 + 16, d}, rng_), random_tensor({6, 4}, rng_), random_tensor({5, 4}, rng_),
       Tensor::zeros({1 + 30, d}), random_tensor({1 + 30, d}, rng_), random_tensor({1 + 16, d}, rng_)},
      [](Backend& b, std::vector<Tensor>& t) {
        b.resample_positions_forward(t[0], 1, t[1], t[2], t[3]);
        b.resample_positions_backward(t[4], 1, t[1], t[2], t[5]);
        return 0.0;
      },
      1e-5);
  // Losses: the sums compared by compare() itself.
  const int64_t labels = 14;
  Tensor targets = Tensor::empty({batch, labels});
  for (int64_t i = 0; i < targets.numel(); ++i) targets.f32()[i] = rng_.uniform() < 0.3 ? 1.0f : 0.0f;
  compare(
      "bce_with_logits",
      {random_tensor({batch, labels}, rng_, DType::f32, 3.0), targets, random_tensor({labels}, rng_),
       random_tensor({batch, labels}, rng_), Tensor::zeros({batch, labels})},
      [](Backend& b, std::vector<Tensor>& t) { return b.bce_with_logits(t[0], t[1], &t[2], &t[3], 0.5, t[4]); }, 1e-5);
  Tensor classes = Tensor::empty({batch}, DType::i64);
  for (int64_t i = 0; i < batch; ++i) classes.data<int64_t>()[i] = static_cast<int64_t>(rng_.below(labels));
  compare(
      "cross_entropy", {random_tensor({batch, labels}, rng_), classes, Tensor::zeros({batch, labels})},
      [](Backend& b, std::vector<Tensor>& t) { return b.cross_entropy(t[0], t[1], 0.25, t[2]); }, 1e-5);
}

TEST_F(CudaBackendOnGpu, Lora) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t m = 40, k = 64, r = 4, n = 32, ld = 96, column = 32;
    const Tensor in = random_tensor({m, k}, rng_, dt), a = random_tensor({r, k}, rng_, dt),
                 bm = random_tensor({n, r}, rng_, dt);
    compare(
        "lora_forward", {in, a, bm, Tensor::zeros({m, r}, dt), random_tensor({m, ld}, rng_, dt)},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.lora_forward(t[0], t[1], t[2], 0.5, t[3], t[4], column);
          return 0.0;
        },
        tolerance_for(dt));
    compare(
        "lora_backward",
        {random_tensor({m, ld}, rng_, dt), in, a, bm, random_tensor({m, r}, rng_, dt), random_tensor({m, k}, rng_),
         random_tensor({r, k}, rng_), random_tensor({n, r}, rng_)},
        [&](Backend& b, std::vector<Tensor>& t) {
          b.lora_backward(t[0], column, t[1], t[2], t[3], 0.5, t[4], &t[5], &t[6], &t[7]);
          return 0.0;
        },
        tolerance_for(dt));
  }
}

TEST_F(CudaBackendOnGpu, CrossEntropyRefusesAClassOutsideTheLogits) {
  const int64_t batch = 3, classes = 4;
  Tensor targets = Tensor::empty({batch}, DType::i64);
  for (int64_t i = 0; i < batch; ++i) targets.data<int64_t>()[i] = i == 1 ? classes : 0;
  DeviceCopies device;
  const Tensor logits = device.upload(random_tensor({batch, classes}, rng_)), t = device.upload(targets),
               grad = device.upload(Tensor::zeros({batch, classes}));
  try {
    gpu_->cross_entropy(logits, t, 1.0, grad);
    FAIL() << "no refusal";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("target 4 (row 1) outside [0, 4)"), std::string::npos) << e.what();
  }
}

// The optimizer ops (kernels/optimizer_kernels.h) against the CPU backend: updates and moments within 1e-6 (a fused
// multiply-add on the CPU's side moves a last bit), the 16-lane sums of squares of p and x bit for bit (those of u
// follow u: 1e-6), zeroing and host copies of slices exact.
TEST_F(CudaBackendOnGpu, OptimizerStepsAgreeWithTheCpuBackend) {
  constexpr double kUpdates = 1e-6;
  namespace oc = optimizer_cases;
  const std::vector<Tensor> st = oc::state(7);
  const std::vector<OptimizerRun> adamw_runs = oc::adamw_runs(), runs = oc::runs(true), plain = oc::runs(false);
  const std::vector<int64_t> items = oc::work_items(runs.size());
  for (int64_t t : {1, 10}) {
    const OptimizerScalars s = oc::scalars(t);
    compare(
        "adamw_update t=" + std::to_string(t), st,
        [&](Backend& b, std::vector<Tensor>& x) {
          b.adamw_update(oc::step(x[0], x[1], x[2], x[3], adamw_runs, items), s);
          return 0.0;
        },
        kUpdates);
    std::vector<std::vector<double>> squares;
    compare(
        "lamb_moments then lamb_update t=" + std::to_string(t), st,
        [&](Backend& b, std::vector<Tensor>& x) {
          std::vector<OptimizerRun> update = runs;
          squares.emplace_back(2 * runs.size(), -1.0);
          b.lamb_moments(oc::step(x[0], x[1], x[2], x[3], runs, items), s, squares.back());
          for (size_t r = 0; r < update.size(); ++r) update[r].step = 1e-3f * static_cast<float>(r + 1);
          b.lamb_update(oc::step(x[0], x[1], x[2], x[3], update, {}), s);
          return 0.0;
        },
        kUpdates);
    ASSERT_EQ(squares.size(), 2u);
    for (size_t i = 0; i < squares[0].size(); i += 2) EXPECT_EQ(squares[1][i], squares[0][i]) << "p square " << i;
    for (size_t i = 1; i < squares[0].size(); i += 2) {
      EXPECT_NEAR(squares[1][i], squares[0][i], 1e-6 * squares[0][i]) << "u square " << i;
    }
  }
  for (bool first : {true, false}) {
    for (bool nesterov : {false, true}) {
      const OptimizerScalars s = oc::scalars(3, first, nesterov);
      compare(
          "sgd_update momentum first=" + std::to_string(first) + " nesterov=" + std::to_string(nesterov),
          {st[0], st[1], st[2], Tensor()},
          [&](Backend& b, std::vector<Tensor>& x) {
            b.sgd_update(oc::step(x[0], x[1], x[2], Tensor(), runs, items), s);
            return 0.0;
          },
          kUpdates);
    }
  }
  for (const auto* r : {&runs, &plain}) {
    compare(
        "sgd_update without momentum", {st[0], st[1]},
        [&](Backend& b, std::vector<Tensor>& x) {
          b.sgd_update(oc::step(x[0], x[1], Tensor(), Tensor(), *r, {}), oc::scalars(1));
          return 0.0;
        },
        kUpdates);
  }
  // Many runs and parts: several blocks of (run, lane) threads.
  const std::vector<OptimizerRun> many = oc::many_runs();
  std::vector<std::vector<double>> many_squares;
  compare(
      "lamb_moments, " + std::to_string(many.size()) + " runs", st,
      [&](Backend& b, std::vector<Tensor>& x) {
        many_squares.emplace_back(2 * many.size(), -1.0);
        b.lamb_moments(oc::step(x[0], x[1], x[2], x[3], many, {}), oc::scalars(2), many_squares.back());
        b.adamw_update(oc::step(x[0], x[1], x[2], x[3], many, {}), oc::scalars(2));
        return b.sum_of_squares(x[1], [] {
          std::vector<int64_t> bounds;
          for (int64_t at = 0; at < oc::kElements; at += 97) bounds.push_back(at);
          bounds.push_back(oc::kElements);
          return bounds;
        }());
      },
      kUpdates);
  ASSERT_EQ(many_squares.size(), 2u);
  for (size_t i = 0; i < many_squares[0].size(); i += 2) {
    EXPECT_EQ(many_squares[1][i], many_squares[0][i]) << "p square " << i;
  }
  // Sums of squares: exact, on the whole tensor and on a slice that starts off the 16-element grid.
  for (int64_t offset : {0, 5}) {
    const int64_t n = oc::kElements - offset;
    const std::vector<int64_t> bounds = oc::bounds(n);
    std::vector<double> sums;
    compare(
        "sum_of_squares offset " + std::to_string(offset), {st[0]},
        [&](Backend& b, std::vector<Tensor>& x) {
          sums.push_back(b.sum_of_squares(x[0].slice(offset, oc::kElements), bounds));
          return 0.0;
        },
        0.0);
    ASSERT_EQ(sums.size(), 2u);
    EXPECT_EQ(sums[1], sums[0]) << "offset " << offset;
  }
  compare(
      "zero a slice", {st[0], Tensor::zeros({6, 7}, DType::bf16)},
      [](Backend& b, std::vector<Tensor>& x) {
        b.zero(x[0].slice(3, 1003));
        b.zero(x[1]);
        return 0.0;
      },
      0.0);
}

TEST_F(CudaBackendOnGpu, HostCopiesOfSlices) {
  const Tensor x = random_tensor({40, 3}, rng_);
  DeviceCopies device;
  const Tensor on_device = device.upload(x);
  Tensor host = Tensor::zeros({10, 3});
  gpu_->copy_to_host(on_device.slice(7, 17), host);
  EXPECT_EQ(std::memcmp(host.raw(), x.slice(7, 17).raw(), host.nbytes()), 0);
  const Tensor source = random_tensor({5, 3}, rng_);
  gpu_->copy_from_host(source, on_device.slice(30, 35));
  const Tensor back = DeviceCopies::download(on_device);
  EXPECT_EQ(std::memcmp(back.slice(30, 35).raw(), source.raw(), source.nbytes()), 0);
  EXPECT_EQ(std::memcmp(back.raw(), x.raw(), 30 * 3 * sizeof(float)), 0);  // the rest untouched
  EXPECT_EQ(std::memcmp(back.slice(35, 40).raw(), x.slice(35, 40).raw(), 5 * 3 * sizeof(float)), 0);
  EXPECT_THROW(gpu_->copy_to_host(on_device.slice(0, 2), Tensor::zeros({3, 3})), std::exception);
  EXPECT_THROW(gpu_->copy_from_host(Tensor::zeros({2, 3}, DType::bf16), on_device.slice(0, 2)), std::exception);
}

TEST_F(CudaBackendOnGpu, OptimizerStepsRefuseWhatTheContractsRefuse) {
  namespace oc = optimizer_cases;
  DeviceCopies device;
  std::vector<Tensor> x;
  for (const Tensor& t : oc::state(3)) x.push_back(device.upload(t));
  std::vector<OptimizerRun> backwards = {{10, 20, 0.0f, 0.0f}, {0, 5, 0.0f, 0.0f}};
  EXPECT_THROW(gpu_->adamw_update(oc::step(x[0], x[1], x[2], x[3], backwards, {}), oc::scalars(1)), std::exception);
  const std::vector<OptimizerRun> runs = oc::runs(true);
  std::vector<double> too_few(runs.size());
  EXPECT_THROW(gpu_->lamb_moments(oc::step(x[0], x[1], x[2], x[3], runs, {}), oc::scalars(1), too_few), std::exception);
  const std::vector<int64_t> bad_bounds = {0, 10};
  EXPECT_THROW(gpu_->sum_of_squares(x[0], bad_bounds), std::exception);
}
