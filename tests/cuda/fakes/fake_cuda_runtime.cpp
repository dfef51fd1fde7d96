// The CUDA runtime calls CudaBackend and test_cuda_gpu make, on the host: one "GPU", device memory that is host
// memory, streams that run everything at once (the host launchers of host_kernels.cpp are synchronous), and the
// cuBLASLt and cuDNN handles the executors' fakes (tests/cuda/executors) do not create. With them CudaBackend runs
// on the CPU: its shapes, pointers, scratch, staging and fallbacks are exercised, not the GPU's kernels.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  static int token;
  *stream = reinterpret_cast<cudaStream_t>(&token);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  for (size_t r = 0; r < height; ++r) {
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  }
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorFake"; }
const char* cudaGetErrorString(cudaError_t) { return "an error of the fake CUDA runtime"; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  static int token;
  *handle = reinterpret_cast<cublasLtHandle_t>(&token);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasLtGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_FAKE"; }
const char* cublasLtGetStatusString(cublasStatus_t) { return "a status of the fake cuBLASLt"; }

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  static int token;
  *handle = reinterpret_cast<cudnnHandle_t>(&token);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t) { return CUDNN_STATUS_SUCCESS; }

}  // extern "C"

// What module_entry.cpp's library_versions asks (the probe on fakes goes through the module's own table).
extern "C" {
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}
size_t cublasLtGetVersion(void) { return 130100; }
size_t cudnnGetVersion(void) { return 91900; }
}

extern "C" ncclResult_t ncclGetVersion(int* version) {
  *version = 22809;
  return ncclSuccess;
}
