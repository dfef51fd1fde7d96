// Which path bf16 attention took, as `vitpipe bench --json` reads it: the adapter (cuda_module_backend.h) -> the
// module's table (module_entry.cpp: backend_attention_path, ABI version 7) -> CudaBackend::attention_path, on the
// fakes of the CUDA runtime and cuDNN (the fake cuDNN refusing the classifier token's one query row, or the native
// SDPA_BWD).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "../executors/fake_cudnn.h"
#include "backend/backend.h"
#include "backend/cuda/module_abi.h"
#include "backend/cuda_module_backend.h"

extern "C" const VitpipeCudaModule* vitpipe_cuda_module(void);

using namespace vitpipe;

TEST(ModuleAttentionPathOnFakes, SaysCudnnThenTheRefusedShapeAndWhy) {
  const VitpipeCudaModule& module = *vitpipe_cuda_module();
  ASSERT_EQ(module.abi_version, VITPIPE_CUDA_MODULE_ABI_VERSION);
  std::unique_ptr<Backend> backend = make_cuda_module_backend(module, 0, false);
  EXPECT_EQ(cuda_attention_path(*backend), "cudnn");

  const int64_t tokens = 17, hidden = 64, heads = 4;
  const Tensor qkv = backend->allocate({1, tokens, 3 * hidden}, DType::bf16);
  const Tensor lse = backend->allocate({1, heads}, DType::f32), out = backend->allocate({1, hidden}, DType::bf16);
  backend->zero(qkv);
  struct Unrefuse {
    ~Unrefuse() { fake_cudnn::set_refused_query_rows(0); }
  } unrefuse;
  fake_cudnn::set_refused_query_rows(1);
  backend->cls_attention_forward(qkv, heads, lse, out);
  const std::string path = cuda_attention_path(*backend);
  EXPECT_EQ(
      path.rfind("fallback for 1 shape(s), cudnn for the rest; classifier-token forward at batch 1, 17 tokens", 0), 0u)
      << path;
  EXPECT_NE(path.find("no engine for this many query rows"), std::string::npos) << path;
  EXPECT_EQ(path.find('\n'), std::string::npos) << "one line, for the GPU check's summary";

  EXPECT_EQ(cuda_attention_path(*make_cpu_backend()), "") << "not a module backend";
}

// After a bf16 backward pass on cuDNN the path says which graph ran it and why: here the fake refuses the native
// SDPA_BWD (as cuDNN up to 9.20 is reported to), so cudnn-frontend's composite graph, its deterministic variant.
TEST(ModuleAttentionPathOnFakes, SaysWhichGraphRanTheBackwardPass) {
  const VitpipeCudaModule& module = *vitpipe_cuda_module();
  std::unique_ptr<Backend> backend = make_cuda_module_backend(module, 0, false);
  const int64_t tokens = 17, hidden = 64, heads = 4;
  const Tensor qkv = backend->allocate({1, tokens, 3 * hidden}, DType::bf16);
  const Tensor lse = backend->allocate({1, heads, tokens}, DType::f32);
  const Tensor out = backend->allocate({1, tokens, hidden}, DType::bf16);
  const Tensor grad_out = backend->allocate({1, tokens, hidden}, DType::bf16);
  const Tensor grad_qkv = backend->allocate({1, tokens, 3 * hidden}, DType::bf16);
  backend->zero(qkv);
  backend->zero(grad_out);
  backend->attention_forward(qkv, heads, lse, out);
  EXPECT_EQ(cuda_attention_path(*backend), "cudnn");
  backend->attention_backward(grad_out, qkv, out, lse, heads, grad_qkv, nullptr);
  const std::string path = cuda_attention_path(*backend);
  EXPECT_EQ(path.rfind("cudnn; backward: cudnn composite graph (cudnn-frontend's sdpa_backward, dP workspace: "
                       "deterministic) (the native SDPA_BWD refused: cudnnBackendFinalize failed: SDPA_BWD: "
                       "CUDNN_STATUS_BAD_PARAM",
                       0),
            0u)
      << path;
  EXPECT_EQ(path.find('\n'), std::string::npos) << "one line, for the GPU check's summary";
}
