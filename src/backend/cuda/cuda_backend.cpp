#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "backend/cuda/calls/attention_sdpa_calls.h"
#include "backend/cuda/calls/linear_gemm_calls.h"
#include "backend/cuda/calls/lora_gemm_calls.h"
#include "backend/cuda/calls/padded_rows.h"
#include "backend/cuda/cudnn_sdpa_version.h"
#include "backend/cuda/gemm_executor.h"
#include "backend/cuda/kernels/backend_kernels.h"
#include "backend/cuda/kernels/flash_attention.h"
#include "backend/cuda/kernels/flash_attention_bf16.h"
#include "backend/cuda/kernels/flash_attention_bf16_math.h"
#include "backend/cuda/kernels/optimizer_kernels.h"
#include "backend/cuda/sdpa_executor.h"

namespace vitpipe::cuda {
namespace {

[[noreturn]] void refuse(const char* op, const std::string& why) {
  throw std::invalid_argument(std::string(op) + ": " + why);
}

void require(bool ok, const char* op, const std::string& why) {
  if (!ok) refuse(op, why);
}

bool is_bf16(const Tensor& t) { return t.dtype() == DType::bf16; }

void require_float(const Tensor& t, const char* op, const char* name) {
  require(t.dtype() == DType::f32 || t.dtype() == DType::bf16, op,
          std::string(name) + " must be f32 or bf16, not " + dtype_name(t.dtype()));
}

void require_f32(const Tensor& t, const char* op, const char* name) {
  require(t.dtype() == DType::f32, op, std::string(name) + " must be f32, not " + dtype_name(t.dtype()));
}

ElementType element_type(const Tensor& t, const char* op) {
  require_float(t, op, "a GEMM operand");
  return is_bf16(t) ? ElementType::bf16 : ElementType::f32;
}

int64_t last_dim(const Tensor& t) { return t.rank() > 0 ? t.dim(-1) : 1; }
int64_t leading_rows(const Tensor& t) { return t.numel() / std::max<int64_t>(last_dim(t), 1); }

float* f32(const Tensor& t) { return static_cast<float*>(t.raw()); }
float* f32(const Tensor* t) { return t != nullptr ? static_cast<float*>(t->raw()) : nullptr; }

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(what + ": CUDA error " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                             ")");
  }
}

}  // namespace

CudaBackend::CudaBackend(int device, bool allow_tf32, size_t arena_bytes) : device_(device), allow_tf32_(allow_tf32) {
  try {
    check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
    // cudaMallocAsync needs the device's memory pools (not every device, driver or virtualised GPU has them).
    int pools = 0;
    check_cuda(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device),
               "cudaDeviceGetAttribute(cudaDevAttrMemoryPoolsSupported)");
    stream_ordered_ = pools != 0;
    if (!stream_ordered_) {
      std::fprintf(stderr,
                   "vitpipe CUDA backend: GPU %d has no memory pools (cudaMallocAsync); the scratch arena and the "
                   "cuDNN workspace grow through cudaMalloc, waiting for the stream\n",
                   device);
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const cublasStatus_t lt = cublasLtCreate(&cublaslt_);
    if (lt != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error(std::string("cublasLtCreate: ") + cublasLtGetStatusName(lt) + " (" +
                               cublasLtGetStatusString(lt) + ")");
    }
    const cudnnStatus_t dnn = cudnnCreate(&cudnn_);
    if (dnn != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string("cudnnCreate: ") + cudnnGetErrorString(dnn));
    const cudnnStatus_t set = cudnnSetStream(cudnn_, stream_);
    if (set != CUDNN_STATUS_SUCCESS) {
      throw std::runtime_error(std::string("cudnnSetStream: ") + cudnnGetErrorString(set));
    }
    check_cuda(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes), "cudaMalloc(cuBLASLt workspace, 32 MiB)");
    // The two blocks that grow are stream-ordered (cudaMallocAsync / cudaFreeAsync on the backend's stream): their
    // growth inside a step then neither waits for the host nor synchronises the device, which a cudaFree would,
    // stalling on NCCL reductions in flight on the communication stream.
    check_cuda(allocate_block(&cudnn_workspace_, kCudnnWorkspaceBytes), "allocating the cuDNN workspace (64 MiB)");
    cudnn_workspace_bytes_ = kCudnnWorkspaceBytes;
    check_cuda(allocate_block(&arena_memory_, arena_bytes),
               "allocating the scratch arena (" + std::to_string(arena_bytes >> 20) + " MiB)");
    arena_ = DeviceArena(arena_memory_, arena_bytes);
    // Host -> device uploads through pinned buffers, each with the event of its last copy (copy_from_host).
    for (PinnedBuffer& buffer : uploads_) {
      check_cuda(cudaHostAlloc(&buffer.memory, kUploadChunkBytes, cudaHostAllocDefault),
                 "cudaHostAlloc(upload buffer, " + std::to_string(kUploadChunkBytes >> 20) + " MiB)");
      check_cuda(cudaEventCreateWithFlags(&buffer.copied, cudaEventDisableTiming), "cudaEventCreate (upload buffer)");
    }
    check_cuda(cudaHostAlloc(&readback_.memory, kReadbackSlots * kReadbackSlotBytes, cudaHostAllocDefault),
               "cudaHostAlloc(loss read-back)");
    check_cuda(cudaEventCreateWithFlags(&readback_.copied, cudaEventDisableTiming), "cudaEventCreate (read-back)");
    gemm_ = std::make_unique<GemmExecutor>(cublaslt_, cublas_workspace_, kCublasWorkspaceBytes);
    // VITPIPE_CUDA_SDPA=0: no cuDNN attention (the fallback's check, or a way around a cuDNN that misbehaves).
    if (const char* sdpa = std::getenv("VITPIPE_CUDA_SDPA"); sdpa != nullptr && std::string(sdpa) == "0") {
      sdpa_disabled_ = true;
      sdpa_refusal_ = "VITPIPE_CUDA_SDPA=0";
    }
    // The headers' version passed the build's guard; the library loaded now may be another (module_abi.h's
    // library_versions, vitpipe info, reports it too).
    if (const std::string why = cudnn_sdpa_version_refusal(cudnnGetVersion()); !sdpa_disabled_ && !why.empty()) {
      sdpa_disabled_ = true;
      sdpa_refusal_ = why;
      std::fprintf(stderr,
                   "vitpipe CUDA backend: %s; bf16 attention runs vitpipe's flash kernels (the backward pass on tensor "
                   "cores where the head dimension allows, else fp32 on converted copies)\n",
                   why.c_str());
    }
    sdpa_ = std::make_unique<SdpaExecutor>(cudnn_, [this](size_t bytes) { return cudnn_workspace(bytes); });
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void* CudaBackend::allocate_bytes(size_t bytes) {
  if (bytes == 0) return nullptr;
  make_current();
  void* memory = nullptr;
  check_cuda(cudaMalloc(&memory, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes of device memory)");
  std::lock_guard<std::mutex> lock(memory_mutex_);
  allocated_bytes_ += bytes;
  memory_sizes_[memory] = bytes;
  return memory;
}

void CudaBackend::free_bytes(void* memory) {
  if (memory == nullptr) return;
  make_current();
  cudaFree(memory);  // waits for the GPU: no kernel still reads it
  std::lock_guard<std::mutex> lock(memory_mutex_);
  auto it = memory_sizes_.find(memory);
  if (it != memory_sizes_.end()) {
    allocated_bytes_ -= it->second;
    memory_sizes_.erase(it);
  }
}

size_t CudaBackend::allocated_bytes() {
  std::lock_guard<std::mutex> lock(memory_mutex_);
  return allocated_bytes_;
}

Tensor CudaBackend::allocate(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* memory = allocate_bytes(bytes);
  auto owner = std::shared_ptr<void>(memory, [this](void* p) { free_bytes(p); });
  return Tensor::wrap_device(memory, shape, dtype, Device::cuda, std::move(owner));
}

cudaError_t CudaBackend::allocate_block(void** memory, size_t bytes) {
  return stream_ordered_ ? cudaMallocAsync(memory, bytes, stream_) : cudaMalloc(memory, bytes);
}

cudaError_t CudaBackend::free_block(void* memory) {
  if (stream_ordered_) return cudaFreeAsync(memory, stream_);
  // No pool: the stream's earlier work may still use the block.
  const cudaError_t drained = cudaStreamSynchronize(stream_);
  const cudaError_t freed = cudaFree(memory);
  return drained != cudaSuccess ? drained : freed;
}

void CudaBackend::release() {
  // The destroying thread (a pipeline stage's, the trainer's) may have another GPU current: the frees, the stream's
  // synchronisation and the handles' destruction belong to this backend's. Nothing to report from a destructor.
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device_) cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  gemm_.reset();
  sdpa_.reset();
  if (arena_memory_ != nullptr) free_block(arena_memory_);
  for (void* block : retired_scratch_) free_block(block);
  retired_scratch_.clear();
  if (cudnn_workspace_ != nullptr) free_block(cudnn_workspace_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (PinnedBuffer* buffer : {&uploads_[0], &uploads_[1], &readback_}) {
    if (buffer->copied != nullptr) cudaEventDestroy(buffer->copied);
    if (buffer->memory != nullptr) cudaFreeHost(buffer->memory);
    *buffer = PinnedBuffer{};
  }
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublaslt_ != nullptr) cublasLtDestroy(cublaslt_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  arena_memory_ = cudnn_workspace_ = cublas_workspace_ = nullptr;
  cudnn_ = nullptr;
  cublaslt_ = nullptr;
  stream_ = nullptr;
}

void CudaBackend::make_current() {
  // The current device is per host thread; set it only when it differs (cudaGetDevice costs no driver call).
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device_) return;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
}

namespace {

std::string describe_sdpa_key(bool backward, bool cls_only, int64_t batch, int64_t tokens, int64_t hidden,
                              int64_t heads) {
  return std::string(cls_only ? "classifier-token " : "") + (backward ? "backward" : "forward") + " at batch " +
         std::to_string(batch) + ", " + std::to_string(tokens) + " tokens, " + std::to_string(heads) + " heads of " +
         std::to_string(heads > 0 ? hidden / heads : 0);
}

}  // namespace

void CudaBackend::refuse_sdpa(const SdpaKey& key, const std::string& why) {
  sdpa_refused_[key] = why;
  if (sdpa_refusal_.empty()) sdpa_refusal_ = why;
  std::fprintf(stderr, "vitpipe CUDA backend: cuDNN's SDPA is not used for the %s (%s); that shape runs %s\n",
               describe_sdpa_key(key.backward, key.cls_only, key.batch, key.tokens, key.hidden, key.heads).c_str(),
               why.c_str(), fallback_kernels(key).c_str());
}

// Which of vitpipe's kernels a bf16 pass at `key` falls back to.
std::string CudaBackend::fallback_kernels(const SdpaKey& key) {
  if (key.backward && !key.cls_only && key.heads > 0 && flash_bf16_head_dim_supported(key.hidden / key.heads)) {
    return "the bf16 tensor-core flash kernels";
  }
  return "the fp32 flash kernels on converted copies";
}

std::string CudaBackend::attention_path() const {
  if (sdpa_disabled_) {
    return "fallback: " + sdpa_refusal_ +
           "; backward: the bf16 tensor-core flash kernels at head dimensions 16, 32 and 64, else the fp32 ones";
  }
  std::string path = "cudnn";
  if (!sdpa_refused_.empty()) {
    path = "fallback for " + std::to_string(sdpa_refused_.size()) + " shape(s), cudnn for the rest";
    for (const auto& [k, why] : sdpa_refused_) {
      path += "; " + describe_sdpa_key(k.backward, k.cls_only, k.batch, k.tokens, k.hidden, k.heads) + " (on " +
              fallback_kernels(k) + "): " + why;
    }
  }
  // Which cuDNN graph ran the backward passes cuDNN took, each distinct one once.
  std::vector<std::string> backward;
  for (const auto& [k, graph] : sdpa_backward_paths_) {
    if (std::find(backward.begin(), backward.end(), graph) == backward.end()) backward.push_back(graph);
  }
  for (size_t i = 0; i < backward.size(); ++i) path += (i == 0 ? "; backward: " : " / ") + backward[i];
  return path;
}

void CudaBackend::synchronize() { check(cudaStreamSynchronize(stream_), "synchronize"); }

void CudaBackend::check(cudaError_t status, const char* what) { check_cuda(status, what); }

float* CudaBackend::scratch_floats(int64_t count, const char* what) { return take_scratch_array<float>(count, what); }

void* CudaBackend::take_scratch(size_t bytes, const char* what) {
  if (!arena_.fits(bytes)) {
    // Mid-op: what this op took so far stays valid (the old block is retired, freed at the next op's start), and
    // the new block is sized for the whole op next time (twice the old, or what this op has asked for in all).
    constexpr size_t kStep = 64u << 20;
    const size_t wanted = std::max(2 * arena_.capacity(), arena_.used() + bytes + DeviceArena::kAlignment);
    const size_t size = (wanted + kStep - 1) / kStep * kStep;
    void* memory = nullptr;
    check_cuda(allocate_block(&memory, size),
               std::string("allocating the scratch arena for ") + what + " (" + std::to_string(size >> 20) + " MiB)");
    retired_scratch_.push_back(arena_memory_);
    arena_memory_ = memory;
    arena_ = DeviceArena(memory, size);
  }
  return arena_.take(bytes, what);
}

void CudaBackend::reset_scratch() {
  // Stream-ordered frees: the blocks return to the pool once the stream's earlier ops (which may still read them)
  // have run; no host wait.
  for (void* block : retired_scratch_) check(free_block(block), "freeing the outgrown scratch arena");
  retired_scratch_.clear();
  arena_.reset();
}

void CudaBackend::regrow(void*& memory, size_t& capacity, size_t bytes, const char* what) {
  constexpr size_t kStep = 64u << 20;
  const size_t size = (bytes + kStep - 1) / kStep * kStep;
  // In stream order: the old block is freed after the stream's earlier work, the new one is ready for its later work.
  check(free_block(memory), what);
  memory = nullptr;
  capacity = 0;
  check_cuda(allocate_block(&memory, size),
             std::string("allocating the ") + what + " (" + std::to_string(size >> 20) + " MiB)");
  capacity = size;
}

void* CudaBackend::cudnn_workspace(size_t bytes) {
  if (bytes > cudnn_workspace_bytes_) regrow(cudnn_workspace_, cudnn_workspace_bytes_, bytes, "cuDNN workspace");
  return cudnn_workspace_;
}

void CudaBackend::reserve_scratch(size_t bytes) {
  if (bytes <= arena_.capacity()) return;
  size_t capacity = arena_.capacity();
  arena_ = DeviceArena();
  regrow(arena_memory_, capacity, bytes, "scratch arena");
  arena_ = DeviceArena(arena_memory_, capacity);
}

RowMajorMatrix CudaBackend::matrix(const Tensor& t, int64_t rows, int64_t cols, bool read, bool write) {
  const ElementType type = element_type(t, "GEMM");
  require(
      t.numel() == rows * cols, "GEMM",
      "a " + shape_string(t.shape()) + " tensor is not [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  const RowMajorMatrix plain{t.raw(), rows, cols, type, cols};
  // A view (the DeiT heads' slices of one weight) may start off the library's 16-byte alignment: staged too.
  const bool aligned = reinterpret_cast<uintptr_t>(t.raw()) % kLibraryAlignmentBytes == 0;
  if (aligned && row_stride_fits_the_library(cols, type)) return plain;
  const int64_t stride = padded_row_stride(cols, type);
  const size_t elem = static_cast<size_t>(element_bytes(type));
  void* padded = take_scratch(static_cast<size_t>(rows * stride) * elem, "a padded GEMM operand");
  if (read && rows > 0) {
    check(cudaMemcpy2DAsync(padded, static_cast<size_t>(stride) * elem, t.raw(), static_cast<size_t>(cols) * elem,
                            static_cast<size_t>(cols) * elem, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                            stream_),
          "cudaMemcpy2DAsync (padding a GEMM operand)");
  }
  const RowMajorMatrix m{padded, rows, cols, type, stride};
  if (write) staged_.push_back({t.raw(), m});
  return m;
}

const void* CudaBackend::aligned_vector(const Tensor& v, const char* what) {
  if (reinterpret_cast<uintptr_t>(v.raw()) % kLibraryAlignmentBytes == 0) return v.raw();
  void* copy = take_scratch(v.nbytes(), what);
  check(cudaMemcpyAsync(copy, v.raw(), v.nbytes(), cudaMemcpyDeviceToDevice, stream_), what);
  return copy;
}

void CudaBackend::finish_staging() {
  for (const Staging& s : staged_) {
    const size_t elem = static_cast<size_t>(element_bytes(s.padded.type));
    if (s.padded.rows == 0) continue;
    check(cudaMemcpy2DAsync(s.original, static_cast<size_t>(s.padded.cols) * elem, s.padded.data,
                            static_cast<size_t>(s.padded.row_stride) * elem, static_cast<size_t>(s.padded.cols) * elem,
                            static_cast<size_t>(s.padded.rows), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpy2DAsync (a padded GEMM result back)");
  }
  staged_.clear();
}

// ---- linear layers ----

void CudaBackend::linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias, const Tensor* residual,
                                 const Tensor& out) {
  reset_scratch();
  const StagingScope staging(staged_);  // cleared however the op ends
  const int64_t k = last_dim(in), m = leading_rows(in), n = weight.dim(0);
  require(
      weight.rank() == 2 && weight.dim(1) == k && out.numel() == m * n, "linear_forward",
      "shapes " + shape_string(in.shape()) + " x " + shape_string(weight.shape()) + " -> " + shape_string(out.shape()));
  if (bias != nullptr) require_f32(*bias, "linear_forward", "bias");
  if (residual != nullptr) require_f32(*residual, "linear_forward", "residual");
  // cuBLASLt's C and D share a type, and f32 operands need an f32 result (calls/gemm_rules.h): a bf16 output with a
  // residual, or from f32 operands, is computed in f32 scratch, then rounded.
  const bool via_f32 = is_bf16(out) && (residual != nullptr || !is_bf16(in));
  Tensor target = out;
  if (via_f32) target = Tensor::wrap(scratch_floats(m * n, "linear_forward's f32 result"), {m, n}, DType::f32);
  const RowMajorMatrix a = matrix(in, m, k, true, false), w = matrix(weight, n, k, true, false);
  const bool target_bf16 = is_bf16(target);
  BiasVector b;
  if (bias != nullptr) {
    b.type = target_bf16 ? ElementType::bf16 : ElementType::f32;
    if (target_bf16) {  // cuBLASLt's bias is of D's type: a bf16 copy of the f32 bias
      void* copy = take_scratch(static_cast<size_t>(n) * 2, "linear_forward's bf16 bias");
      check(launch_convert(bias->raw(), false, copy, true, n, stream_), "linear_forward: bias to bf16");
      b.data = copy;
    } else {
      b.data = aligned_vector(*bias, "linear_forward's aligned bias");
    }
  }
  RowMajorMatrix r;
  if (residual != nullptr) r = matrix(*residual, m, n, true, false);
  const RowMajorMatrix o = matrix(target, m, n, residual != nullptr && residual->raw() == target.raw(), true);
  gemm_->run(linear_forward_gemm(a, w, b, residual != nullptr ? &r : nullptr, o, allow_tf32_), stream_);
  finish_staging();
  if (via_f32) check(launch_convert(target.raw(), false, out.raw(), true, m * n, stream_), "linear_forward: to bf16");
}

void CudaBackend::linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias,
                                      const Tensor* pre_activation, const Tensor& out) {
  if (pre_activation != nullptr) {
    // Training keeps x for the backward pass: the GEMM with its bias into it, then GELU of x as stored.
    require(pre_activation->numel() == out.numel() && pre_activation->raw() != out.raw(), "linear_gelu_forward",
            "the pre-activation must have the output's size and not be the output");
    require(!is_bf16(*pre_activation) || is_bf16(out), "linear_gelu_forward",
            "a bf16 pre-activation needs a bf16 output");
    linear_forward(in, weight, &bias, nullptr, *pre_activation);
    check(launch_gelu_forward_any(pre_activation->raw(), is_bf16(*pre_activation), out.raw(), is_bf16(out), out.numel(),
                                  stream_),
          "linear_gelu_forward");
    return;
  }
  const int64_t k = last_dim(in), m = leading_rows(in), n = weight.dim(0);
  require(weight.rank() == 2 && weight.dim(1) == k && out.numel() == m * n && bias.numel() == n, "linear_gelu_forward",
          "shapes " + shape_string(in.shape()) + " x " + shape_string(weight.shape()));
  require_f32(bias, "linear_gelu_forward", "bias");
  require_float(out, "linear_gelu_forward", "out");
  // No pre-activation to keep (eval, predict): the GEMM with its bias into out, then GELU in place. No rows x 4D f32
  // scratch (269 MB for DINOv2-S/518 at batch 32); a bf16 out rounds the pre-activation first, as training's bf16
  // pre-activation does.
  linear_forward(in, weight, &bias, nullptr, out);
  check(launch_gelu_in_place(out.raw(), is_bf16(out), m * n, stream_), "linear_gelu_forward");
}

void CudaBackend::linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) {
  reset_scratch();
  const StagingScope staging(staged_);  // cleared however the op ends
  const int64_t n = last_dim(grad_out), m = leading_rows(grad_out), k = last_dim(weight);
  require(weight.rank() == 2 && weight.dim(0) == n && grad_in.numel() == m * k, "linear_backward_input", "shapes");
  require_float(grad_in, "linear_backward_input", "grad_in");
  // f32 operands need an f32 result: a bf16 grad_in from them goes through f32 scratch.
  const bool via_f32 = is_bf16(grad_in) && !is_bf16(grad_out);
  const Tensor target =
      via_f32 ? Tensor::wrap(scratch_floats(m * k, "linear_backward_input's f32 result"), {m, k}, DType::f32) : grad_in;
  const RowMajorMatrix g = matrix(grad_out, m, n, true, false), w = matrix(weight, n, k, true, false);
  const RowMajorMatrix gi = matrix(target, m, k, false, true);
  gemm_->run(linear_backward_input_gemm(g, w, gi, allow_tf32_), stream_);
  finish_staging();
  if (via_f32) {
    check(launch_convert(target.raw(), false, grad_in.raw(), true, m * k, stream_), "linear_backward_input: to bf16");
  }
}

void CudaBackend::linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) {
  reset_scratch();
  const StagingScope staging(staged_);  // cleared however the op ends
  const int64_t n = last_dim(grad_out), m = leading_rows(grad_out), k = last_dim(in);
  require(leading_rows(in) == m && grad_weight.numel() == n * k, "linear_backward_weight", "shapes");
  require_f32(grad_weight, "linear_backward_weight", "grad_weight");
  const RowMajorMatrix g = matrix(grad_out, m, n, true, false), x = matrix(in, m, k, true, false);
  const RowMajorMatrix gw = matrix(grad_weight, n, k, true, true);  // beta = 1: it adds
  const LinearWeightGradientCalls calls = linear_backward_weight_gemm(g, x, gw, nullptr, nullptr, allow_tf32_);
  gemm_->run(calls.gemm, stream_);
  finish_staging();
}

void CudaBackend::bias_backward(const Tensor& grad, const Tensor& grad_bias) {
  reset_scratch();
  const int64_t n = last_dim(grad), m = leading_rows(grad);
  require(grad_bias.numel() == n, "bias_backward", "grad_bias must have " + std::to_string(n) + " entries");
  require_float(grad, "bias_backward", "grad");
  require_f32(grad_bias, "bias_backward", "grad_bias");
  check(launch_column_sums(plain_rows(grad.raw(), is_bf16(grad), m, n), f32(grad_bias),
                           scratch_floats(column_partials_floats(m, n), "bias_backward's partials"), stream_),
        "bias_backward");
}

// ---- layernorm ----

void CudaBackend::layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps,
                                    const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t d = last_dim(in), m = leading_rows(in);
  require(in.dtype() == DType::f32 && weight.numel() == d && bias.numel() == d && out.numel() == in.numel() &&
              mean.numel() == m && rstd.numel() == m,
          "layernorm_forward", "shapes or dtypes");
  require_float(out, "layernorm_forward", "out");
  check(launch_layernorm_forward_any(f32(in), f32(weight), f32(bias), static_cast<float>(eps), out.raw(), is_bf16(out),
                                     f32(mean), f32(rstd), m, d, stream_),
        "layernorm_forward");
}

void CudaBackend::layernorm_backward(const LayerNormBackwardArgs& args) {
  reset_scratch();
  const int64_t d = last_dim(args.in), m = leading_rows(args.in), n = args.in.numel();
  require(args.grad_out.numel() == n && args.grad_in.numel() == n && args.weight.numel() == d &&
              args.mean.numel() == m && args.rstd.numel() == m && args.grad_weight.numel() == d &&
              args.grad_bias.numel() == d,
          "layernorm_backward", "shapes");
  require(args.grad_residual.numel() == 0 || args.grad_residual.numel() == n, "layernorm_backward", "residual shape");
  require(args.grad_in_copy.numel() == 0 || args.grad_in_copy.numel() == n, "layernorm_backward", "copy shape");
  require(args.grad_in_colsum.numel() == 0 || args.grad_in_colsum.numel() == d, "layernorm_backward", "colsum shape");
  require_float(args.grad_out, "layernorm_backward", "grad_out");
  LayerNormBackwardLaunch a;
  a.grad_out = args.grad_out.raw();
  a.grad_out_bf16 = is_bf16(args.grad_out);
  a.in = f32(args.in);
  a.weight = f32(args.weight);
  a.mean = f32(args.mean);
  a.rstd = f32(args.rstd);
  a.grad_residual = args.grad_residual.numel() > 0 ? f32(args.grad_residual) : nullptr;
  a.grad_in = f32(args.grad_in);
  a.grad_weight = f32(args.grad_weight);
  a.grad_bias = f32(args.grad_bias);
  a.grad_in_copy = args.grad_in_copy.numel() > 0 ? args.grad_in_copy.raw() : nullptr;
  a.grad_in_copy_bf16 = args.grad_in_copy.numel() > 0 && is_bf16(args.grad_in_copy);
  a.grad_in_colsum = args.grad_in_colsum.numel() > 0 ? f32(args.grad_in_colsum) : nullptr;
  a.rows = m;
  a.d = d;
  check(launch_layernorm_backward_any(a, scratch_floats(column_partials_floats(m, d), "layernorm_backward's partials"),
                                      stream_),
        "layernorm_backward");
}

// ---- attention ----

void CudaBackend::attention_f32_forward(const float* qkv, float* out, float* lse, int64_t batch, int64_t tokens,
                                        int64_t heads, int64_t head_dim) {
  check(launch_flash_attention_forward_f32(qkv, out, lse, batch, tokens, heads, head_dim, stream_),
        "attention_forward (fp32 flash kernel)");
}

void CudaBackend::attention_f32_backward(const float* grad_out, const float* qkv, const float* out, const float* lse,
                                         float* grad_qkv, int64_t batch, int64_t tokens, int64_t heads,
                                         int64_t head_dim) {
  float* row_dot = scratch_floats(batch * heads * tokens, "attention_backward's row dots");
  check(launch_flash_attention_backward_f32(qkv, out, grad_out, lse, row_dot, grad_qkv, batch, tokens, heads, head_dim,
                                            stream_),
        "attention_backward (fp32 flash kernel)");
}

// Forward of the full attention (cls_only: only token 0's output and log-sum-exp, out [B, D], lse [B, H]).
void CudaBackend::attention_any(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out, bool cls_only) {
  reset_scratch();
  const char* op = cls_only ? "cls_attention_forward" : "attention_forward";
  require(qkv.rank() == 3 && qkv.dim(2) % 3 == 0 && heads > 0 && qkv.dim(2) / 3 % heads == 0, op, "qkv shape");
  const int64_t batch = qkv.dim(0), tokens = qkv.dim(1), hidden = qkv.dim(2) / 3, head_dim = hidden / heads;
  require(
      out.numel() == batch * (cls_only ? 1 : tokens) * hidden && lse.numel() == batch * heads * (cls_only ? 1 : tokens),
      op, "out or lse shape");
  require(qkv.dtype() == out.dtype(), op, "qkv and out must share a dtype");
  require_float(qkv, op, "qkv");
  const SdpaKey key{false, cls_only, batch, tokens, hidden, heads};
  if (is_bf16(qkv) && !sdpa_refused(key)) {
    const PackedQkv packed{qkv.raw(), batch, tokens, hidden, heads, ElementType::bf16};
    try {
      sdpa_->run(cls_only ? cls_attention_forward_sdpa(packed, f32(lse), out.raw())
                          : attention_forward_sdpa(packed, f32(lse), out.raw()),
                 stream_);
      return;
    } catch (const std::runtime_error& e) {
      refuse_sdpa(key, e.what());
    }
  }
  // fp32 flash kernels (bf16: on f32 copies, then rounded). At most: the qkv copy, the output, the classifier
  // token's full log-sum-exp and output, each rounded up to the arena's alignment.
  reserve_scratch(
      4 * static_cast<size_t>(qkv.numel() + batch * tokens * hidden + batch * heads * tokens + batch * hidden) +
      8 * DeviceArena::kAlignment);
  const float* q = f32(qkv);
  if (is_bf16(qkv)) {
    float* copy = scratch_floats(qkv.numel(), "attention's f32 copy of qkv");
    check(launch_convert(qkv.raw(), true, copy, false, qkv.numel(), stream_), op);
    q = copy;
  }
  const bool out_direct = !cls_only && !is_bf16(out);
  float* full_out = out_direct ? f32(out) : scratch_floats(batch * tokens * hidden, "attention's f32 output");
  float* full_lse = cls_only ? scratch_floats(batch * heads * tokens, "attention's full log-sum-exp") : f32(lse);
  attention_f32_forward(q, full_out, full_lse, batch, tokens, heads, head_dim);
  const float* result = full_out;
  if (cls_only) {
    float* token0 = is_bf16(out) ? scratch_floats(batch * hidden, "token 0's output") : f32(out);
    check(launch_gather_tokens(full_out, batch, tokens, hidden, 1, token0, stream_), op);
    check(launch_strided_copy(full_lse, tokens, f32(lse), batch * heads, stream_), op);
    result = token0;
    if (!is_bf16(out)) return;
  }
  if (is_bf16(out)) check(launch_convert(result, false, out.raw(), true, out.numel(), stream_), op);
}

void CudaBackend::attention_backward_any(const Tensor& grad_out, const Tensor& qkv, const Tensor& out,
                                         const Tensor& lse, int64_t heads, const Tensor& grad_qkv,
                                         const Tensor* grad_qkv_bias, bool cls_only) {
  reset_scratch();
  const char* op = cls_only ? "cls_attention_backward" : "attention_backward";
  require(qkv.rank() == 3 && qkv.dim(2) % 3 == 0 && heads > 0 && qkv.dim(2) / 3 % heads == 0, op, "qkv shape");
  const int64_t batch = qkv.dim(0), tokens = qkv.dim(1), hidden = qkv.dim(2) / 3, head_dim = hidden / heads;
  const int64_t rows_out = batch * (cls_only ? 1 : tokens);
  require(grad_out.numel() == rows_out * hidden && out.numel() == rows_out * hidden &&
              lse.numel() == batch * heads * (cls_only ? 1 : tokens) && grad_qkv.numel() == qkv.numel(),
          op, "shapes");
  require(grad_out.dtype() == qkv.dtype() && out.dtype() == qkv.dtype(), op, "grad_out, qkv and out share a dtype");
  require_float(qkv, op, "qkv");
  require_float(grad_qkv, op, "grad_qkv");
  if (grad_qkv_bias != nullptr) require(grad_qkv_bias->numel() == 3 * hidden, op, "grad_qkv_bias shape");
  bool done = false;
  const SdpaKey key{true, cls_only, batch, tokens, hidden, heads};
  if (is_bf16(qkv) && is_bf16(grad_qkv) && !sdpa_refused(key)) {
    const PackedQkv packed{qkv.raw(), batch, tokens, hidden, heads, ElementType::bf16};
    SdpaBackwardCall call;
    if (cls_only) {
      const ClsAttentionBackwardCalls calls =
          cls_attention_backward_sdpa(packed, grad_out.raw(), out.raw(), f32(lse), grad_qkv.raw());
      // Outside the try: a CUDA error here is not cuDNN refusing the call. The fallback overwrites every row.
      check(cudaMemsetAsync(calls.zero_grad_qkv.data, 0, calls.zero_grad_qkv.bytes, stream_), op);
      call = calls.sdpa;
    } else {
      call = attention_backward_sdpa(packed, grad_out.raw(), out.raw(), f32(lse), grad_qkv.raw());
    }
    try {
      sdpa_->run(call, stream_);
      sdpa_backward_paths_[key] = sdpa_->backward_path(call.shape);
      done = true;
    } catch (const std::runtime_error& e) {
      refuse_sdpa(key, e.what());
    }
  }
  if (!done && !cls_only && is_bf16(qkv) && is_bf16(grad_qkv) && is_bf16(out) &&
      flash_bf16_head_dim_supported(head_dim) &&
      flash_bf16_pointers_aligned(qkv.raw(), out.raw(), grad_out.raw(), grad_qkv.raw())) {
    // The bf16 tensor-core flash kernels on the tensors as they are (no f32 copies). At most: the row dots, then the
    // bias gradient's partials.
    reserve_scratch(4 * static_cast<size_t>(batch * heads * tokens + column_partials_floats(batch * tokens, hidden)) +
                    4 * DeviceArena::kAlignment);
    float* row_dot = scratch_floats(batch * heads * tokens, "attention_backward's row dots");
    check(launch_flash_attention_backward_bf16(qkv.raw(), out.raw(), grad_out.raw(), f32(lse), row_dot, grad_qkv.raw(),
                                               batch, tokens, heads, head_dim, stream_),
          "attention_backward (bf16 tensor-core flash kernels)");
    done = true;
  }
  if (!done) {
    // fp32 flash kernels on f32 views (copies where a tensor is bf16 or the op is the classifier token's). At most:
    // copies of qkv, grad_out and out, the classifier token's full grad_out, out and log-sum-exp, an f32 grad_qkv,
    // then the bias gradient's partials.
    reserve_scratch(4 * static_cast<size_t>(qkv.numel() + grad_out.numel() + out.numel() + 2 * batch * tokens * hidden +
                                            batch * heads * tokens + grad_qkv.numel() +
                                            column_partials_floats(batch * tokens, hidden)) +
                    16 * DeviceArena::kAlignment);
    auto as_f32 = [&](const Tensor& t, const char* what) -> const float* {
      if (!is_bf16(t)) return f32(t);
      float* copy = scratch_floats(t.numel(), what);
      check(launch_convert(t.raw(), true, copy, false, t.numel(), stream_), op);
      return copy;
    };
    const float* q = as_f32(qkv, "attention_backward's f32 qkv");
    const float* g = as_f32(grad_out, "attention_backward's f32 grad_out");
    const float* o = as_f32(out, "attention_backward's f32 out");
    const float* l = f32(lse);
    if (cls_only) {
      float* g_full = scratch_floats(batch * tokens * hidden, "cls attention's full grad_out");
      float* o_full = scratch_floats(batch * tokens * hidden, "cls attention's full out");
      float* l_full = scratch_floats(batch * heads * tokens, "cls attention's full log-sum-exp");
      check(launch_cls_attention_expand(g, o, l, batch, tokens, hidden, heads, g_full, o_full, l_full, stream_), op);
      g = g_full;
      o = o_full;
      l = l_full;
    }
    float* gq =
        is_bf16(grad_qkv) ? scratch_floats(grad_qkv.numel(), "attention_backward's f32 grad_qkv") : f32(grad_qkv);
    attention_f32_backward(g, q, o, l, gq, batch, tokens, heads, head_dim);
    if (is_bf16(grad_qkv)) check(launch_convert(gq, false, grad_qkv.raw(), true, grad_qkv.numel(), stream_), op);
  }
  if (grad_qkv_bias != nullptr) {
    // The query and value parts' column sums (the key bias gradient is zero and left alone).
    float* partials = scratch_floats(column_partials_floats(batch * tokens, hidden), "attention's bias partials");
    for (int64_t part : {int64_t{0}, int64_t{2}}) {
      StridedRows m = plain_rows(
          static_cast<const char*>(grad_qkv.raw()) + part * hidden * static_cast<int64_t>(dtype_size(grad_qkv.dtype())),
          is_bf16(grad_qkv), batch * tokens, hidden);
      m.row_stride = 3 * hidden;
      check(launch_column_sums(m, f32(grad_qkv_bias) + part * hidden, partials, stream_), op);
    }
  }
}

void CudaBackend::attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) {
  attention_any(qkv, heads, lse, out, false);
}

void CudaBackend::attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                     int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) {
  attention_backward_any(grad_out, qkv, out, lse, heads, grad_qkv, grad_qkv_bias, false);
}

void CudaBackend::cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) {
  attention_any(qkv, heads, lse, out, true);
}

void CudaBackend::cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out,
                                         const Tensor& lse, int64_t heads, const Tensor& grad_qkv,
                                         const Tensor* grad_qkv_bias) {
  attention_backward_any(grad_out, qkv, out, lse, heads, grad_qkv, grad_qkv_bias, true);
}

// ---- GELU ----

void CudaBackend::gelu_forward(const Tensor& in, const Tensor& out) {
  require(in.numel() == out.numel(), "gelu_forward", "in and out differ in size");
  require_float(in, "gelu_forward", "in");
  require_float(out, "gelu_forward", "out");
  check(launch_gelu_forward_any(in.raw(), is_bf16(in), out.raw(), is_bf16(out), in.numel(), stream_), "gelu_forward");
}

void CudaBackend::gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                                const Tensor* grad_bias) {
  reset_scratch();
  require(grad_out.numel() == in.numel() && grad_in.numel() == in.numel(), "gelu_backward", "sizes differ");
  require(grad_out.dtype() == in.dtype() && grad_in.dtype() == in.dtype(), "gelu_backward", "all f32 or all bf16");
  require_float(in, "gelu_backward", "in");
  const int64_t cols = last_dim(in), rows = leading_rows(in);
  if (grad_bias != nullptr) require(grad_bias->numel() == cols, "gelu_backward", "grad_bias shape");
  float* partials =
      grad_bias != nullptr ? scratch_floats(column_partials_floats(rows, cols), "gelu_backward's partials") : nullptr;
  check(launch_gelu_backward_any(grad_out.raw(), in.raw(), grad_in.raw(), is_bf16(in), rows, cols, f32(grad_bias),
                                 partials, stream_),
        "gelu_backward");
}

// ---- embeddings and tokens ----

void CudaBackend::patchify(const Tensor& images, int64_t patch, const Tensor& patches) {
  require(images.rank() == 4 && images.dtype() == DType::f32 && patch > 0, "patchify", "images [B, C, H, W] f32");
  const int64_t b = images.dim(0), c = images.dim(1), h = images.dim(2), w = images.dim(3);
  require(h % patch == 0 && w % patch == 0 && patches.numel() == b * (h / patch) * (w / patch) * c * patch * patch,
          "patchify", "patch grid");
  require_float(patches, "patchify", "patches");
  check(launch_patchify(f32(images), b, c, h, w, patch, patches.raw(), is_bf16(patches), stream_), "patchify");
}

void CudaBackend::embeddings_forward(const Tensor& patch_proj, const Tensor& cls, const Tensor& pos, const Tensor& x) {
  require(x.rank() == 3, "embeddings_forward", "x [B, T, D]");
  const int64_t b = x.dim(0), t = x.dim(1), d = x.dim(2);
  require(patch_proj.numel() == b * (t - 1) * d && cls.numel() == d && pos.numel() == t * d, "embeddings_forward",
          "shapes");
  require_float(patch_proj, "embeddings_forward", "patch_proj");
  check(launch_token_embeddings_forward(patch_proj.raw(), is_bf16(patch_proj), f32(cls), 1, 1, f32(pos), f32(x), b,
                                        t - 1, d, stream_),
        "embeddings_forward");
}

void CudaBackend::embeddings_backward(const Tensor& grad_x, const Tensor& grad_cls, const Tensor& grad_pos,
                                      const Tensor& grad_patch_proj, const Tensor* grad_patch_bias) {
  token_embeddings_backward(grad_x, &grad_cls, 1, &grad_pos, grad_patch_proj, grad_patch_bias);
}

void CudaBackend::token_embeddings_forward(const Tensor& patch_proj, const Tensor& prefix, int64_t positioned,
                                           const Tensor& pos, const Tensor& x) {
  require(x.rank() == 3, "token_embeddings_forward", "x [B, T, D]");
  const int64_t b = x.dim(0), t = x.dim(1), d = x.dim(2), p = prefix.numel() / std::max<int64_t>(d, 1);
  const int64_t np = t - p;
  require(np >= 0 && positioned <= p && patch_proj.numel() == b * np * d && pos.numel() == (positioned + np) * d,
          "token_embeddings_forward", "shapes");
  require_float(patch_proj, "token_embeddings_forward", "patch_proj");
  check(launch_token_embeddings_forward(patch_proj.raw(), is_bf16(patch_proj), f32(prefix), p, positioned, f32(pos),
                                        f32(x), b, np, d, stream_),
        "token_embeddings_forward");
}

void CudaBackend::token_embeddings_backward(const Tensor& grad_x, const Tensor* grad_prefix, int64_t positioned,
                                            const Tensor* grad_pos, const Tensor& grad_patch_proj,
                                            const Tensor* grad_patch_bias) {
  reset_scratch();
  const char* op = "token_embeddings_backward";
  require(grad_x.rank() == 3, op, "grad_x [B, T, D]");
  const int64_t b = grad_x.dim(0), t = grad_x.dim(1), d = grad_x.dim(2);
  const int64_t np = grad_patch_proj.numel() / std::max<int64_t>(b * d, 1), p = t - np;
  require(p >= 0 && positioned <= p && grad_patch_proj.numel() == b * np * d, op, "shapes");
  require_float(grad_patch_proj, op, "grad_patch_proj");
  // One partials buffer for the batch sums ([B] rows of up to T * D columns) and the bias sums ([B Np] rows of D).
  float* partials = scratch_floats(std::max(column_partials_floats(b, t * d), column_partials_floats(b * np, d)),
                                   "token embeddings' partials");
  check(launch_copy_patch_tokens(f32(grad_x), b, t, p, d, grad_patch_proj.raw(), is_bf16(grad_patch_proj), stream_),
        op);
  // Batch sums of token rows: rows b, each token block of the [B, T * D] view a column range.
  auto batch_sum = [&](int64_t first_token, int64_t token_count, float* into) {
    if (token_count <= 0) return;
    StridedRows m = plain_rows(f32(grad_x) + first_token * d, false, b, token_count * d);
    m.row_stride = t * d;
    check(launch_column_sums(m, into, partials, stream_), op);
  };
  if (grad_prefix != nullptr) batch_sum(0, p, f32(*grad_prefix));
  if (grad_pos != nullptr) {
    batch_sum(0, positioned, f32(*grad_pos));
    batch_sum(p, np, f32(*grad_pos) + positioned * d);
  }
  if (grad_patch_bias != nullptr) {
    // Column sums over the B * Np patch rows: row r = (b, p) at b * T * D + (P + p) * D.
    StridedRows m;
    m.data = f32(grad_x) + p * d;
    m.rows = b * np;
    m.cols = d;
    m.row_stride = d;
    m.group = std::max<int64_t>(np, 1);
    m.group_stride = t * d;
    check(launch_column_sums(m, f32(*grad_patch_bias), partials, stream_), op);
  }
}

void CudaBackend::gather_cls(const Tensor& x, const Tensor& out) {
  require(x.rank() == 3 && out.numel() == x.dim(0) * x.dim(2), "gather_cls", "shapes");
  check(launch_gather_tokens(f32(x), x.dim(0), x.dim(1), x.dim(2), 1, f32(out), stream_), "gather_cls");
}

void CudaBackend::scatter_cls(const Tensor& grad, const Tensor& grad_x) {
  require(grad_x.rank() == 3 && grad.numel() == grad_x.dim(0) * grad_x.dim(2), "scatter_cls", "shapes");
  check(launch_scatter_tokens(f32(grad), grad_x.dim(0), grad_x.dim(1), grad_x.dim(2), 1, f32(grad_x), stream_),
        "scatter_cls");
}

void CudaBackend::gather_tokens(const Tensor& x, int64_t count, const Tensor& out) {
  require(x.rank() == 3 && count <= x.dim(1) && out.numel() == count * x.dim(0) * x.dim(2), "gather_tokens", "shapes");
  check(launch_gather_tokens(f32(x), x.dim(0), x.dim(1), x.dim(2), count, f32(out), stream_), "gather_tokens");
}

void CudaBackend::scatter_tokens(const Tensor& grad, const Tensor& grad_x) {
  require(grad_x.rank() == 3, "scatter_tokens", "grad_x [B, T, D]");
  const int64_t b = grad_x.dim(0), t = grad_x.dim(1), d = grad_x.dim(2);
  const int64_t count = grad.numel() / std::max<int64_t>(b * d, 1);
  require(count <= t && grad.numel() == count * b * d, "scatter_tokens", "shapes");
  check(launch_scatter_tokens(f32(grad), b, t, d, count, f32(grad_x), stream_), "scatter_tokens");
}

void CudaBackend::cls_and_mean_forward(const Tensor& x, int64_t skip, const Tensor& out) {
  require(x.rank() == 3 && skip < x.dim(1) && out.numel() == 2 * x.dim(0) * x.dim(2), "cls_and_mean_forward", "shapes");
  check(launch_cls_and_mean_forward(f32(x), x.dim(0), x.dim(1), x.dim(2), skip, f32(out), stream_),
        "cls_and_mean_forward");
}

void CudaBackend::cls_and_mean_backward(const Tensor& grad, int64_t skip, const Tensor& grad_x) {
  require(grad_x.rank() == 3 && skip < grad_x.dim(1) && grad.numel() == 2 * grad_x.dim(0) * grad_x.dim(2),
          "cls_and_mean_backward", "shapes");
  check(
      launch_cls_and_mean_backward(f32(grad), grad_x.dim(0), grad_x.dim(1), grad_x.dim(2), skip, f32(grad_x), stream_),
      "cls_and_mean_backward");
}

// ---- losses ----

double CudaBackend::bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor* pos_weight,
                                    const Tensor* weight, double grad_scale, const Tensor& grad_logits) {
  reset_scratch();
  const char* op = "bce_with_logits";
  require(logits.rank() == 2 && targets.numel() == logits.numel() && grad_logits.numel() == logits.numel() &&
              targets.dtype() == DType::f32 && logits.dtype() == DType::f32,
          op, "logits and targets must match, f32");
  const int64_t rows = logits.dim(0), labels = logits.dim(1);
  if (pos_weight != nullptr) require(pos_weight->numel() == labels, op, "pos_weight shape");
  if (weight != nullptr) require(weight->numel() == logits.numel(), op, "weight shape");
  double* losses = take_scratch_array<double>(rows * labels, "bce_with_logits' element losses");
  double* sum = take_scratch_array<double>(1, "bce_with_logits' sum");
  check(launch_bce_with_logits(f32(logits), f32(targets), f32(pos_weight), f32(weight), grad_scale, f32(grad_logits),
                               rows, labels, losses, sum, stream_),
        op);
  return read_back(sum, nullptr, -1, op).sum;
}

double CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                                  const Tensor& grad_logits) {
  reset_scratch();
  const char* op = "cross_entropy";
  require(logits.rank() == 2 && targets.numel() == logits.dim(0) && targets.dtype() == DType::i64 &&
              grad_logits.numel() == logits.numel() && logits.dtype() == DType::f32,
          op, "logits [B, L] f32 and targets [B] int64");
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  double* losses = take_scratch_array<double>(rows, "cross_entropy's row losses");
  double* sum = take_scratch_array<double>(1, "cross_entropy's sum");
  int64_t* invalid = take_scratch_array<int64_t>(1, "cross_entropy's target check");
  check(launch_cross_entropy(f32(logits), static_cast<const int64_t*>(targets.raw()), grad_scale, f32(grad_logits),
                             rows, classes, losses, sum, invalid, stream_),
        op);
  const LossReadback back = read_back(sum, invalid, classes, op);
  const double host = back.sum;
  const int64_t bad = back.invalid;
  if (bad >= 0) {
    int64_t target = 0;
    check(cudaMemcpy(&target, static_cast<const int64_t*>(targets.raw()) + bad, sizeof target, cudaMemcpyDeviceToHost),
          op);
    refuse(op, "target " + std::to_string(target) + " (row " + std::to_string(bad) + ") outside [0, " +
                   std::to_string(classes) + ")");
  }
  return host;
}

// ---- element-wise ----

void CudaBackend::convert(const Tensor& src, const Tensor& dst) {
  require(src.numel() == dst.numel(), "convert", "element counts differ");
  require_float(src, "convert", "src");
  require_float(dst, "convert", "dst");
  check(launch_convert(src.raw(), is_bf16(src), dst.raw(), is_bf16(dst), src.numel(), stream_), "convert");
}

void CudaBackend::scale(const Tensor& in, double factor, const Tensor& out) {
  require(in.numel() == out.numel() && in.dtype() == out.dtype(), "scale", "in and out must match");
  require_float(in, "scale", "in");
  check(launch_scale(in.raw(), out.raw(), is_bf16(in), static_cast<float>(factor), in.numel(), stream_), "scale");
}

void CudaBackend::resample_positions_forward(const Tensor& pos, int64_t kept, const Tensor& wy, const Tensor& wx,
                                             const Tensor& out) {
  require(pos.rank() == 2 && wy.rank() == 2 && wx.rank() == 2 && out.rank() == 2, "resample_positions_forward",
          "2-D positions and weights");
  const int64_t d = pos.dim(1), hd = wy.dim(0), hs = wy.dim(1), wd = wx.dim(0), ws = wx.dim(1);
  require(pos.dim(0) == kept + hs * ws && out.dim(0) == kept + hd * wd && out.dim(1) == d, "resample_positions_forward",
          "grids");
  check(launch_resample_positions_forward(f32(pos), kept, f32(wy), f32(wx), hd, hs, wd, ws, d, f32(out), stream_),
        "resample_positions_forward");
}

void CudaBackend::resample_positions_backward(const Tensor& grad_out, int64_t kept, const Tensor& wy, const Tensor& wx,
                                              const Tensor& grad_pos) {
  require(grad_pos.rank() == 2 && wy.rank() == 2 && wx.rank() == 2 && grad_out.rank() == 2,
          "resample_positions_backward", "2-D positions and weights");
  const int64_t d = grad_pos.dim(1), hd = wy.dim(0), hs = wy.dim(1), wd = wx.dim(0), ws = wx.dim(1);
  require(grad_pos.dim(0) == kept + hs * ws && grad_out.dim(0) == kept + hd * wd && grad_out.dim(1) == d,
          "resample_positions_backward", "grids");
  check(launch_resample_positions_backward(f32(grad_out), kept, f32(wy), f32(wx), hd, hs, wd, ws, d, f32(grad_pos),
                                           stream_),
        "resample_positions_backward");
}

void CudaBackend::layer_scale_forward(const Tensor& branch, const Tensor& scale, const Tensor& residual,
                                      const Tensor& out) {
  const int64_t d = scale.numel(), rows = residual.numel() / std::max<int64_t>(d, 1);
  require(branch.numel() == residual.numel() && out.numel() == residual.numel() && rows * d == residual.numel(),
          "layer_scale_forward", "shapes");
  require_float(branch, "layer_scale_forward", "branch");
  check(
      launch_layer_scale_forward(branch.raw(), is_bf16(branch), f32(scale), f32(residual), f32(out), rows, d, stream_),
      "layer_scale_forward");
}

void CudaBackend::layer_scale_backward(const Tensor& grad, const Tensor& branch, const Tensor& scale,
                                       const Tensor& branch_grad, const Tensor* grad_scale, const Tensor* grad_bias) {
  reset_scratch();
  const int64_t d = scale.numel(), rows = grad.numel() / std::max<int64_t>(d, 1);
  require(branch.numel() == grad.numel() && branch_grad.numel() == grad.numel() && rows * d == grad.numel(),
          "layer_scale_backward", "shapes");
  require_float(branch, "layer_scale_backward", "branch");
  require_float(branch_grad, "layer_scale_backward", "branch_grad");
  float* partials = scratch_floats(column_partials_floats(rows, d), "layer_scale_backward's partials");
  check(launch_layer_scale_backward(f32(grad), branch.raw(), is_bf16(branch), f32(scale), branch_grad.raw(),
                                    is_bf16(branch_grad), f32(grad_scale), f32(grad_bias), rows, d, partials, stream_),
        "layer_scale_backward");
}

void CudaBackend::swiglu_forward(const Tensor& in, const Tensor& out) {
  const int64_t h2 = last_dim(in), h = h2 / 2, rows = leading_rows(in);
  require(h2 % 2 == 0 && out.numel() == rows * h, "swiglu_forward", "shapes");
  require_float(in, "swiglu_forward", "in");
  require_float(out, "swiglu_forward", "out");
  check(launch_swiglu_forward(in.raw(), is_bf16(in), out.raw(), is_bf16(out), rows, h, stream_), "swiglu_forward");
}

void CudaBackend::swiglu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                                  const Tensor* grad_bias) {
  reset_scratch();
  const int64_t h2 = last_dim(in), h = h2 / 2, rows = leading_rows(in);
  require(h2 % 2 == 0 && grad_out.numel() == rows * h && grad_in.numel() == in.numel(), "swiglu_backward", "shapes");
  require(grad_out.dtype() == in.dtype() && grad_in.dtype() == in.dtype(), "swiglu_backward", "all f32 or all bf16");
  require_float(in, "swiglu_backward", "in");
  if (grad_bias != nullptr) require(grad_bias->numel() == h2, "swiglu_backward", "grad_bias shape");
  float* partials =
      grad_bias != nullptr ? scratch_floats(column_partials_floats(rows, h2), "swiglu_backward's partials") : nullptr;
  check(launch_swiglu_backward(grad_out.raw(), in.raw(), grad_in.raw(), is_bf16(in), rows, h, f32(grad_bias), partials,
                               stream_),
        "swiglu_backward");
}

// ---- LoRA ----

void CudaBackend::lora_forward(const Tensor& in, const Tensor& a, const Tensor& b, double scale, const Tensor& low,
                               const Tensor& out, int64_t column) {
  reset_scratch();
  const StagingScope staging(staged_);  // cleared however the op ends
  const int64_t k = last_dim(in), m = leading_rows(in), r = a.dim(0), n = b.dim(0), ld = last_dim(out);
  require(a.rank() == 2 && a.dim(1) == k && b.rank() == 2 && b.dim(1) == r && low.numel() == m * r &&
              leading_rows(out) == m && column + n <= ld,
          "lora_forward", "shapes");
  const RowMajorMatrix x = matrix(in, m, k, true, false), am = matrix(a, r, k, true, false),
                       bm = matrix(b, n, r, true, false), lo = matrix(low, m, r, false, true),
                       o = matrix(out, m, ld, true, true);
  for (const GemmCall& call : lora_forward_gemms(x, am, bm, static_cast<float>(scale), lo, o, column)) {
    gemm_->run(call, stream_);
  }
  finish_staging();
}

void CudaBackend::lora_backward(const Tensor& grad_out, int64_t column, const Tensor& in, const Tensor& a,
                                const Tensor& b, double scale, const Tensor& low, const Tensor* grad_in,
                                const Tensor* grad_a, const Tensor* grad_b) {
  reset_scratch();
  const StagingScope staging(staged_);  // cleared however the op ends
  const int64_t k = last_dim(in), m = leading_rows(in), r = a.dim(0), n = b.dim(0), ld = last_dim(grad_out);
  require(a.rank() == 2 && a.dim(1) == k && b.rank() == 2 && b.dim(1) == r && low.numel() == m * r &&
              leading_rows(grad_out) == m && column + n <= ld,
          "lora_backward", "shapes");
  const RowMajorMatrix g = matrix(grad_out, m, ld, true, false), x = matrix(in, m, k, true, false),
                       am = matrix(a, r, k, true, false), bm = matrix(b, n, r, true, false),
                       lo = matrix(low, m, r, true, false);
  const ElementType type = element_type(in, "lora_backward");
  const int64_t t_stride = padded_row_stride(r, type);
  const RowMajorMatrix t{take_scratch(static_cast<size_t>(m * t_stride * element_bytes(type)), "lora_backward's t"), m,
                         r, type, t_stride};
  RowMajorMatrix gi, ga, gb;
  if (grad_in != nullptr) gi = matrix(*grad_in, m, k, true, true);
  if (grad_a != nullptr) ga = matrix(*grad_a, r, k, true, true);
  if (grad_b != nullptr) gb = matrix(*grad_b, n, r, true, true);
  for (const GemmCall& call :
       lora_backward_gemms(g, column, x, am, bm, static_cast<float>(scale), lo, t, grad_in != nullptr ? &gi : nullptr,
                           grad_a != nullptr ? &ga : nullptr, grad_b != nullptr ? &gb : nullptr)) {
    gemm_->run(call, stream_);
  }
  finish_staging();
}

}  // namespace vitpipe::cuda

// ---- optimizer steps, sums of squares, zeroing, host copies ----

namespace vitpipe::cuda {
namespace {

// backend.h's checks, as the CPU backend makes them: f32 tensors of one length, runs in order inside it, work items
// over the runs.
void check_step(const OptimizerStep& step, const char* op, bool needs_m, bool needs_v) {
  const int64_t n = step.params.numel();
  auto check_tensor = [&](const Tensor& t, const char* name) {
    require(t.defined() && t.dtype() == DType::f32 && t.numel() == n, op,
            std::string(name) + " must be f32 [" + std::to_string(n) + "]");
  };
  check_tensor(step.params, "params");
  check_tensor(step.grads, "grads");
  if (needs_m) check_tensor(step.exp_avg, "exp_avg");
  if (needs_v) check_tensor(step.exp_avg_sq, "exp_avg_sq");
  int64_t at = 0;
  for (const OptimizerRun& r : step.runs) {
    require(at <= r.begin && r.begin <= r.end && r.end <= n, op,
            "run [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ") is out of order or outside [0, " +
                std::to_string(n) + ")");
    at = r.end;
  }
  if (!step.work_items.empty()) {
    require(step.work_items.front() == 0 && step.work_items.back() == static_cast<int64_t>(step.runs.size()), op,
            "work items must start at run 0 and end at the run count");
  }
}

OptimizerStepScalars step_scalars(const OptimizerScalars& s) {
  OptimizerStepScalars k{};
  k.beta1 = s.beta1;
  k.one_minus_beta1 = s.one_minus_beta1;
  k.beta2 = s.beta2;
  k.one_minus_beta2 = s.one_minus_beta2;
  k.bias_correction1 = s.bias_correction1;
  k.bias_correction2 = s.bias_correction2;
  k.bias_correction2_sqrt = s.bias_correction2_sqrt;
  k.eps = s.eps;
  k.momentum = s.momentum;
  k.one_minus_dampening = s.one_minus_dampening;
  k.first_step = s.first_step;
  k.nesterov = s.nesterov;
  return k;
}

}  // namespace

OptimizerRunTable CudaBackend::upload_runs(std::span<const OptimizerRun> runs, bool tiles, const char* op) {
  OptimizerRunTable table;
  table.run_count = static_cast<int64_t>(runs.size());
  if (runs.empty()) return table;
  const size_t run_bytes = runs.size() * sizeof(OptimizerRunView);  // a multiple of 8: the tile table follows
  const size_t tile_bytes = tiles ? (runs.size() + 1) * sizeof(int64_t) : 0;
  host_table_.resize(run_bytes + tile_bytes);
  auto* host_runs = reinterpret_cast<OptimizerRunView*>(host_table_.data());
  auto* host_tiles = reinterpret_cast<int64_t*>(host_table_.data() + run_bytes);
  int64_t tile = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    host_runs[r] = OptimizerRunView{runs[r].begin, runs[r].end, runs[r].decay, runs[r].step};
    if (tiles) {
      host_tiles[r] = tile;
      tile += optimizer_tiles(runs[r].end - runs[r].begin);
    }
  }
  if (tiles) host_tiles[runs.size()] = tile;
  table.tiles = tile;
  char* device = static_cast<char*>(take_scratch(run_bytes + tile_bytes, op));
  // From pageable host memory: the runtime has taken the bytes when the call returns, so host_table_ may be refilled
  // by the next op while this copy is still queued on the stream.
  check(cudaMemcpyAsync(device, host_table_.data(), run_bytes + tile_bytes, cudaMemcpyHostToDevice, stream_), op);
  table.runs = reinterpret_cast<const OptimizerRunView*>(device);
  table.tile_starts = tiles ? reinterpret_cast<const int64_t*>(device + run_bytes) : nullptr;
  return table;
}

void CudaBackend::adamw_update(const OptimizerStep& step, const OptimizerScalars& s) {
  const char* op = "adamw_update";
  reset_scratch();
  check_step(step, op, true, true);
  const OptimizerRunTable table = upload_runs(step.runs, true, op);
  check(launch_adamw_update(f32(step.params), f32(step.grads), f32(step.exp_avg), f32(step.exp_avg_sq), table,
                            step_scalars(s), stream_),
        op);
}

void CudaBackend::lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) {
  const char* op = "lamb_moments";
  reset_scratch();
  check_step(step, op, true, true);
  require(squares.size() == 2 * step.runs.size(), op,
          std::to_string(squares.size()) + " squares for " + std::to_string(step.runs.size()) + " runs (2 per run)");
  if (step.runs.empty()) return;
  const OptimizerRunTable table = upload_runs(step.runs, false, op);
  double* sums = take_scratch_array<double>(2 * table.run_count, "lamb_moments' sums of squares");
  check(launch_lamb_moments(f32(step.params), f32(step.grads), f32(step.exp_avg), f32(step.exp_avg_sq), table.runs,
                            table.run_count, step_scalars(s), sums, stream_),
        op);
  check(cudaMemcpyAsync(squares.data(), sums, squares.size() * sizeof(double), cudaMemcpyDeviceToHost, stream_), op);
  check(cudaStreamSynchronize(stream_), op);
}

void CudaBackend::lamb_update(const OptimizerStep& step, const OptimizerScalars& s) {
  const char* op = "lamb_update";
  reset_scratch();
  check_step(step, op, true, true);
  const OptimizerRunTable table = upload_runs(step.runs, true, op);
  check(launch_lamb_update(f32(step.params), f32(step.exp_avg), f32(step.exp_avg_sq), table, step_scalars(s), stream_),
        op);
}

void CudaBackend::sgd_update(const OptimizerStep& step, const OptimizerScalars& s) {
  const char* op = "sgd_update";
  reset_scratch();
  const bool momentum = step.exp_avg.raw() != nullptr;
  check_step(step, op, momentum, false);
  const OptimizerRunTable table = upload_runs(step.runs, true, op);
  check(launch_sgd_update(f32(step.params), f32(step.grads), momentum ? f32(step.exp_avg) : nullptr, table,
                          step_scalars(s), stream_),
        op);
}

double CudaBackend::sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) {
  const char* op = "sum_of_squares";
  reset_scratch();
  require_f32(x, op, "x");
  const int64_t n = x.numel();
  if (bounds.empty()) {
    require(n == 0, op, "no bounds for " + std::to_string(n) + " elements");
    return 0.0;
  }
  require(bounds.front() == 0 && bounds.back() == n, op, "bounds must run from 0 to " + std::to_string(n));
  for (size_t k = 1; k < bounds.size(); ++k) require(bounds[k - 1] <= bounds[k], op, "bounds must ascend");
  const auto parts = static_cast<int64_t>(bounds.size()) - 1;
  if (parts == 0) return 0.0;
  auto* device_bounds = take_scratch_array<int64_t>(parts + 1, "sum_of_squares' bounds");
  double* sums = take_scratch_array<double>(parts, "sum_of_squares' parts");
  check(cudaMemcpyAsync(device_bounds, bounds.data(), bounds.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream_),
        op);
  check(launch_sum_of_squares_parts(f32(x), device_bounds, parts, sums, stream_), op);
  host_sums_.resize(static_cast<size_t>(parts));
  check(cudaMemcpyAsync(host_sums_.data(), sums, host_sums_.size() * sizeof(double), cudaMemcpyDeviceToHost, stream_),
        op);
  check(cudaStreamSynchronize(stream_), op);
  double total = 0.0;  // the parts in order from 0.0, as backend.h says
  for (double part : host_sums_) total += part;
  return total;
}

void CudaBackend::zero(const Tensor& t) {
  if (t.nbytes() > 0) check(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_), "zero");
}

namespace {

void require_same_layout(const Tensor& from, const Tensor& to, const char* op) {
  require(from.dtype() == to.dtype() && from.numel() == to.numel(), op,
          std::string(dtype_name(from.dtype())) + " " + shape_string(from.shape()) + " to " + dtype_name(to.dtype()) +
              " " + shape_string(to.shape()) + " (the dtype and element count must match)");
}

}  // namespace

void CudaBackend::copy_to_host(const Tensor& device, const Tensor& host) {
  const char* op = "copy_to_host";
  require_same_layout(device, host, op);
  if (device.nbytes() == 0) return;
  check(cudaMemcpyAsync(host.raw(), device.raw(), device.nbytes(), cudaMemcpyDeviceToHost, stream_), op);
  check(cudaStreamSynchronize(stream_), op);
}

void CudaBackend::copy_from_host(const Tensor& host, const Tensor& device) {
  const char* op = "copy_from_host";
  require_same_layout(host, device, op);
  if (host.nbytes() == 0) return;
  // Chunks through the two pinned buffers in turn: the host copies chunk n + 1 into one while the DMA engine moves
  // chunk n from the other. A buffer is refilled only after its previous copy (its event); the stream is never
  // drained, and the caller may reuse `host` on return. Later ops on the stream see the device data.
  const auto* from = static_cast<const char*>(host.raw());
  auto* to = static_cast<char*>(device.raw());
  for (size_t done = 0; done < host.nbytes();) {
    const size_t bytes = std::min(kUploadChunkBytes, host.nbytes() - done);
    PinnedBuffer& buffer = uploads_[next_upload_];
    next_upload_ ^= 1;
    if (buffer.pending) check(cudaEventSynchronize(buffer.copied), op);
    std::memcpy(buffer.memory, from + done, bytes);
    check(cudaMemcpyAsync(to + done, buffer.memory, bytes, cudaMemcpyHostToDevice, stream_), op);
    check(cudaEventRecord(buffer.copied, stream_), op);
    buffer.pending = true;
    done += bytes;
  }
}

CudaBackend::LossReadback CudaBackend::read_back(const double* sum, const int64_t* invalid, int64_t classes,
                                                 const char* op) {
  // Into pinned memory (an asynchronous copy the DMA engine does): at once, waiting for that copy's event alone, or
  // deferred into the next slot, read by take_losses once the step's backward passes are enqueued.
  if (deferring_losses_ && deferred_slots_ == kReadbackSlots) fold_deferred_losses();
  const size_t slot = deferring_losses_ ? deferred_slots_ : 0;
  char* at = static_cast<char*>(readback_.memory) + slot * kReadbackSlotBytes;
  const int64_t no_target_check = -1;
  std::memcpy(at + sizeof(double), &no_target_check, sizeof(int64_t));  // a fresh slot: no copy into it is pending
  check(cudaMemcpyAsync(at, sum, sizeof(double), cudaMemcpyDeviceToHost, stream_), op);
  if (invalid != nullptr) {
    check(cudaMemcpyAsync(at + sizeof(double), invalid, sizeof(int64_t), cudaMemcpyDeviceToHost, stream_), op);
  }
  check(cudaEventRecord(readback_.copied, stream_), op);
  LossReadback back;
  if (deferring_losses_) {
    deferred_classes_.push_back(classes);
    ++deferred_slots_;
    return back;  // 0: the sum comes with take_losses
  }
  check(cudaEventSynchronize(readback_.copied), op);
  std::memcpy(&back.sum, at, sizeof(double));
  std::memcpy(&back.invalid, at + sizeof(double), sizeof(int64_t));
  return back;
}

void CudaBackend::defer_losses() {
  deferring_losses_ = true;
  deferred_slots_ = 0;  // an earlier step that ended by a throw leaves nothing behind
  deferred_classes_.clear();
  deferred_partial_ = 0.0;
}

void CudaBackend::fold_deferred_losses() {
  const char* op = "take_losses";
  if (deferred_slots_ > 0) check(cudaEventSynchronize(readback_.copied), op);  // recorded after the last slot's copy
  const auto* slots = static_cast<const char*>(readback_.memory);
  for (size_t i = 0; i < deferred_slots_; ++i) {
    double sum = 0.0;
    int64_t bad = -1;
    std::memcpy(&sum, slots + i * kReadbackSlotBytes, sizeof(double));
    std::memcpy(&bad, slots + i * kReadbackSlotBytes + sizeof(double), sizeof(int64_t));
    if (bad >= 0 && deferred_classes_[i] >= 0) {
      const int64_t classes = deferred_classes_[i];
      deferring_losses_ = false;
      deferred_slots_ = 0;
      deferred_classes_.clear();
      deferred_partial_ = 0.0;
      refuse("cross_entropy", "a target of row " + std::to_string(bad) + " is outside [0, " + std::to_string(classes) +
                                  ") (found when the step's deferred losses were read)");
    }
    deferred_partial_ += sum;
  }
  deferred_slots_ = 0;
  deferred_classes_.clear();
}

double CudaBackend::take_losses() {
  if (!deferring_losses_) return 0.0;
  fold_deferred_losses();
  deferring_losses_ = false;
  return std::exchange(deferred_partial_, 0.0);
}

}  // namespace vitpipe::cuda
