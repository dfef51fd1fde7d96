// The C interface between vitpipe and its CUDA module, libvitpipe_cuda.so, which vitpipe opens at run time
// (backend/cuda_module.h) so that the binary itself links no CUDA library. The module exports one function,
// VITPIPE_CUDA_MODULE_ENTRY, returning a table of plain C function pointers: only C types cross, and any change to
// the table bumps VITPIPE_CUDA_MODULE_ABI_VERSION (the loader refuses a module of another version).
#pragma once

#include <stddef.h>
#include <stdint.h>

#define VITPIPE_CUDA_MODULE_ABI_VERSION 9u
#define VITPIPE_CUDA_MODULE_ENTRY "vitpipe_cuda_module"

#ifdef __cplusplus
extern "C" {
#endif

// The versions of the CUDA libraries the module loaded, as each library reports its own.
typedef struct VitpipeCudaLibraryVersions {
  int cuda_runtime;  // cudaRuntimeGetVersion: 13000 = 13.0
  size_t cublaslt;   // cublasLtGetVersion: 130100 = 13.1.0
  size_t cudnn;      // cudnnGetVersion: 91900 = 9.19.0
  int nccl;          // ncclGetVersion: 22809 = 2.28.9
} VitpipeCudaLibraryVersions;

// ---- The Backend (backend/backend.h) across the boundary ----
// One generic entry, backend_call(instance, call), rather than one function pointer per Backend op: the 44 ops
// become an op code and a list of tensor descriptors in the order of the op's C++ parameters, so the host adapter
// (backend/cuda_module_backend.h) and the module unpack them with ONE shared routine (backend/backend_call.h)
// instead of two hand-written copies of 36 signatures that could disagree; adding an op appends a code and leaves
// the table's layout alone. The loopback test (tests/cuda) runs that same routine over the CPU backend.

// Element types: the numeric values of vitpipe::DType (tensor/dtype.h), checked by static_assert in backend_call.cpp.
enum {
  VITPIPE_DTYPE_F32 = 0,
  VITPIPE_DTYPE_BF16 = 1,
  VITPIPE_DTYPE_F16 = 2,
  VITPIPE_DTYPE_F64 = 3,
  VITPIPE_DTYPE_I64 = 4,
  VITPIPE_DTYPE_I32 = 5,
  VITPIPE_DTYPE_U8 = 6,
  VITPIPE_DTYPE_BOOL = 7,
  VITPIPE_DTYPE_I16 = 8,
  VITPIPE_DTYPE_I8 = 9,
};

#define VITPIPE_TENSOR_MAX_RANK 8
// `rank` of a descriptor that stands for no tensor: a null optional pointer (const Tensor* == nullptr), or an empty
// Tensor() member (LayerNormBackwardArgs' optional members).
#define VITPIPE_TENSOR_ABSENT (-1)
#define VITPIPE_TENSOR_EMPTY (-2)

// Where a descriptor's `data` lives. Every tensor of every op is DEVICE memory (the module hands it to kernels and
// libraries as a device pointer) except exactly one: the host side of copy_to_host (its second tensor) and of
// copy_from_host (its first), which is HOST memory, says so here, and is only ever the host end of a host<->device
// copy. The unpacking (backend_call.cpp) refuses a call whose tensors say otherwise, so the module never treats host
// memory as device memory or the reverse. (In the loopback test both are host memory; the flags are checked all the
// same.) Since ABI version 3.
enum {
  VITPIPE_MEMORY_DEVICE = 0,
  VITPIPE_MEMORY_HOST = 1,
};

typedef struct VitpipeTensorDesc {
  void* data;  // device memory for the CUDA module (host memory for the loopback test), unless `memory` says host
  int32_t dtype;
  int32_t rank;  // 0..VITPIPE_TENSOR_MAX_RANK, or VITPIPE_TENSOR_ABSENT / VITPIPE_TENSOR_EMPTY
  int64_t dims[VITPIPE_TENSOR_MAX_RANK];
  int32_t memory;  // VITPIPE_MEMORY_DEVICE (0, what a zeroed descriptor says) or VITPIPE_MEMORY_HOST
  int32_t reserved;
} VitpipeTensorDesc;

// Op codes: one per virtual of vitpipe::Backend (append only; never renumber).
enum {
  VITPIPE_OP_LINEAR_FORWARD = 1,
  VITPIPE_OP_LINEAR_GELU_FORWARD,
  VITPIPE_OP_LINEAR_BACKWARD_INPUT,
  VITPIPE_OP_LINEAR_BACKWARD_WEIGHT,
  VITPIPE_OP_BIAS_BACKWARD,
  VITPIPE_OP_LAYERNORM_FORWARD,
  VITPIPE_OP_LAYERNORM_BACKWARD,
  VITPIPE_OP_ATTENTION_FORWARD,
  VITPIPE_OP_ATTENTION_BACKWARD,
  VITPIPE_OP_CLS_ATTENTION_FORWARD,
  VITPIPE_OP_CLS_ATTENTION_BACKWARD,
  VITPIPE_OP_GELU_FORWARD,
  VITPIPE_OP_GELU_BACKWARD,
  VITPIPE_OP_PATCHIFY,
  VITPIPE_OP_EMBEDDINGS_FORWARD,
  VITPIPE_OP_EMBEDDINGS_BACKWARD,
  VITPIPE_OP_GATHER_CLS,
  VITPIPE_OP_SCATTER_CLS,
  VITPIPE_OP_BCE_WITH_LOGITS,
  VITPIPE_OP_CROSS_ENTROPY,
  VITPIPE_OP_CONVERT,
  VITPIPE_OP_SCALE,
  VITPIPE_OP_TOKEN_EMBEDDINGS_FORWARD,
  VITPIPE_OP_TOKEN_EMBEDDINGS_BACKWARD,
  VITPIPE_OP_RESAMPLE_POSITIONS_FORWARD,
  VITPIPE_OP_RESAMPLE_POSITIONS_BACKWARD,
  VITPIPE_OP_LAYER_SCALE_FORWARD,
  VITPIPE_OP_LAYER_SCALE_BACKWARD,
  VITPIPE_OP_SWIGLU_FORWARD,
  VITPIPE_OP_SWIGLU_BACKWARD,
  VITPIPE_OP_GATHER_TOKENS,
  VITPIPE_OP_SCATTER_TOKENS,
  VITPIPE_OP_CLS_AND_MEAN_FORWARD,
  VITPIPE_OP_CLS_AND_MEAN_BACKWARD,
  VITPIPE_OP_LORA_FORWARD,
  VITPIPE_OP_LORA_BACKWARD,
  // ABI version 3: the optimizer steps, gradient norms, zeroing and host copies (appended after LoRA although
  // backend.h declares them before the model families).
  VITPIPE_OP_ADAMW_UPDATE,
  VITPIPE_OP_LAMB_MOMENTS,
  VITPIPE_OP_LAMB_UPDATE,
  VITPIPE_OP_SGD_UPDATE,
  VITPIPE_OP_SUM_OF_SQUARES,
  VITPIPE_OP_ZERO,
  VITPIPE_OP_COPY_TO_HOST,
  VITPIPE_OP_COPY_FROM_HOST,
  VITPIPE_OP_COUNT_PLUS_ONE
};

#define VITPIPE_CALL_MAX_TENSORS 12

// backend.h's OptimizerRun and OptimizerScalars as C data (the same fields in the same order; booleans as 0 / 1).
typedef struct VitpipeOptimizerRun {
  int64_t begin, end;
  float decay, step;
} VitpipeOptimizerRun;

typedef struct VitpipeOptimizerScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction1, bias_correction2, bias_correction2_sqrt;
  float eps;
  float momentum, one_minus_dampening;
  int32_t first_step, nesterov;
} VitpipeOptimizerScalars;

// One Backend call: the tensors in the order of the C++ parameters (backend_call.cpp lists each op's order), the
// double arguments (eps, grad_scale, factor, scale) and the int64 ones (heads, patch, positioned, kept, count, skip,
// column) in order; `result` receives the losses' sums and sum_of_squares' sum.
// The optimizer ops (ABI version 3): tensors params, grads, exp_avg, exp_avg_sq (VITPIPE_TENSOR_EMPTY for an
// undefined one: SGD's exp_avg_sq, SGD without momentum's exp_avg), and the arrays below, which are all HOST memory
// owned by the caller for the duration of the call (the module copies what the device needs): `runs` and
// `work_items` (adamw_update, lamb_moments, lamb_update, sgd_update), `squares` (lamb_moments' output, written
// before the call returns), `bounds` (sum_of_squares; its one tensor is x). A count of 0 goes with a null pointer.
typedef struct VitpipeBackendCall {
  int32_t op;
  int32_t tensor_count;
  VitpipeTensorDesc tensors[VITPIPE_CALL_MAX_TENSORS];
  double scalars[2];
  int64_t ints[2];
  double result;
  const VitpipeOptimizerRun* runs;  // host
  int64_t run_count;
  const int64_t* work_items;  // host
  int64_t work_item_count;
  double* squares;  // host, written
  int64_t square_count;
  const int64_t* bounds;  // host
  int64_t bound_count;
  VitpipeOptimizerScalars optimizer;
} VitpipeBackendCall;

// ---- NCCL (ABI version 5): one communicator per rank, on its backend's GPU ----
// A communicator is made from a unique id (nccl_unique_id on one rank, handed to the others by the caller, e.g. over
// MPI) and runs groups of calls: the `count` calls of one nccl_run are issued between ncclGroupStart and
// ncclGroupEnd. Buffers are DEVICE memory of the communicator's backend (backend_allocate; host memory for the
// loopback table), counts are elements, and only f32 and bf16 move (VITPIPE_DTYPE_F32 / VITPIPE_DTYPE_BF16); every
// reduction is a sum.
#define VITPIPE_NCCL_UNIQUE_ID_BYTES 128

enum {
  VITPIPE_NCCL_SEND = 0,            // ncclSend(send, count, dtype, peer)
  VITPIPE_NCCL_RECV = 1,            // ncclRecv(recv, count, dtype, peer)
  VITPIPE_NCCL_ALL_REDUCE = 2,      // ncclAllReduce(send, recv, count, dtype, ncclSum); send == recv: in place
  VITPIPE_NCCL_REDUCE = 3,          // ncclReduce(send, recv, count, dtype, ncclSum, root = peer)
  VITPIPE_NCCL_BROADCAST = 4,       // ncclBroadcast(send, recv, count, dtype, root = peer)
  VITPIPE_NCCL_REDUCE_SCATTER = 5,  // ncclReduceScatter(send, recv, count = per rank, dtype, ncclSum)
};

// The stream a call is issued on.
enum {
  // The communicator's own stream, which first waits for everything enqueued on the backend's stream before
  // nccl_run (an event), so the call overlaps whatever the backend enqueues afterwards: gradient reduction beside
  // the backward pass.
  VITPIPE_NCCL_STREAM_COMMUNICATION = 0,
  // The backend's stream itself, ordered with its kernels: the pipeline's activations and their gradients.
  VITPIPE_NCCL_STREAM_BACKEND = 1,
};

typedef struct VitpipeNcclCall {
  int32_t op;        // VITPIPE_NCCL_*
  int32_t dtype;     // VITPIPE_DTYPE_F32 or VITPIPE_DTYPE_BF16
  const void* send;  // device memory; null for a recv
  void* recv;        // device memory; null for a send
  size_t count;      // elements (reduce-scatter: per rank; send holds nranks x count)
  int32_t peer;      // send / recv: the other rank; reduce / broadcast: the root; -1 otherwise
  int32_t stream;    // VITPIPE_NCCL_STREAM_COMMUNICATION (0, what a zeroed call says) or VITPIPE_NCCL_STREAM_BACKEND
} VitpipeNcclCall;

typedef struct VitpipeCudaModule {
  uint32_t abi_version;    // first, at a fixed offset: the loader reads nothing else before checking it
  uint32_t struct_size;    // sizeof(VitpipeCudaModule) as the module was compiled
  const char* built_with;  // the toolkit, library headers and GPU architectures it was compiled for
  int has_backend;         // 1: the backend_* entries below are set
  // Fills `out`; 0 on success. Needs no GPU and no driver.
  int (*library_versions)(VitpipeCudaLibraryVersions* out);
  // The number of GPUs the CUDA runtime sees; 0 on success, else writes the runtime's message into `error`. Call it
  // only after the driver answered (backend/cuda_driver.h): without one, the runtime says "CUDA driver version is
  // insufficient for CUDA runtime version", which misleads.
  int (*device_count)(int* count, char* error, size_t error_size);
  // A Backend on GPU `device` (its own stream, cuBLASLt workspace and scratch arena, taken here once): 0 and
  // *backend set on success, else a message in `error`. TF32 GEMMs only with allow_tf32 != 0.
  int (*backend_create)(int device, int allow_tf32, void** backend, char* error, size_t error_size);
  void (*backend_destroy)(void* backend);
  // Runs one op (enqueued on the backend's stream; losses synchronise to return their sum, unless deferred: below): 0
  // on success, else a message in `error` that names the op and the failing CUDA / cuBLASLt / cuDNN status.
  int (*backend_call)(void* backend, VitpipeBackendCall* call, char* error, size_t error_size);
  // Waits for the backend's stream: 0, or the error of an earlier asynchronous failure in `error`.
  int (*backend_synchronize)(void* backend, char* error, size_t error_size);
  // Since ABI version 4: `bytes` of the backend's device memory (cudaMalloc on its GPU; 256-byte aligned), for
  // Backend::allocate: 0 and *memory set (null for 0 bytes), else a message in `error`. Taken when stages and
  // optimizers are built, never inside a step. backend_free returns it (null is ignored).
  int (*backend_allocate)(void* backend, size_t bytes, void** memory, char* error, size_t error_size);
  void (*backend_free)(void* backend, void* memory);
  // Since ABI version 5 (NCCL). Every int-returning entry gives 0 on success, else a message in `error` naming the
  // NCCL or CUDA status (ncclGetErrorString / cudaGetErrorString).
  // A fresh ncclUniqueId (ncclGetUniqueId), VITPIPE_NCCL_UNIQUE_ID_BYTES bytes, on one rank only.
  int (*nccl_unique_id)(char out[VITPIPE_NCCL_UNIQUE_ID_BYTES], char* error, size_t error_size);
  // Rank `rank` of `nranks` joins the communicator of `id` on `backend`'s GPU (ncclCommInitRank; blocks until every
  // rank has joined), with a communication stream and events of its own: *comm set on success.
  int (*nccl_comm_create)(void* backend, const char id[VITPIPE_NCCL_UNIQUE_ID_BYTES], int nranks, int rank, void** comm,
                          char* error, size_t error_size);
  // Waits for the communicator's outstanding work, then destroys it (null is ignored). Before backend_destroy.
  void (*nccl_comm_destroy)(void* comm);
  // Issues `count` calls as one group (ncclGroupStart ... ncclGroupEnd), each on the stream its `stream` field names.
  // wait == 0: returns once enqueued; the buffers must stay untouched (and alive) until nccl_wait returns. wait != 0:
  // returns when the group has finished (nccl_run then nccl_wait). Every rank issues the same collectives in the same
  // order; a send meets its peer's recv in a group issued at the same point.
  int (*nccl_run)(void* comm, const VitpipeNcclCall* calls, int count, int wait, char* error, size_t error_size);
  // Blocks until every group nccl_run enqueued on `comm` has finished; after it, their results are visible to
  // everything later enqueued on the backend's stream and to host copies. Reports an asynchronous NCCL failure
  // (ncclCommGetAsyncError) rather than hanging on it.
  int (*nccl_wait)(void* comm, char* error, size_t error_size);
  // *done = 1 when every enqueued group has finished, 0 while some is still running; never blocks.
  int (*nccl_query)(void* comm, int* done, char* error, size_t error_size);
  // Since ABI version 7: which path the backend's bf16 attention has taken so far, as one line into `out`: "cudnn"
  // (cuDNN's SDPA for every call), or "fallback..." with each refused pass and shape and cuDNN's reason; then, once
  // cuDNN ran a backward pass, "; backward: " and which cuDNN graph ran it. 0 on success.
  int (*backend_attention_path)(void* backend, char* out, size_t out_size);
  // Since ABI version 8: the losses' sums read once a step's backward passes are enqueued, not per micro-batch
  // (reading one waits for the device before the host can enqueue the backward). After backend_defer_losses, the
  // loss ops (VITPIPE_OP_BCE_WITH_LOGITS, VITPIPE_OP_CROSS_ENTROPY) enqueue their sum's copy into pinned host memory
  // and give 0 as `result`; backend_take_losses waits for those copies, writes their sum (added in call order from
  // 0.0) into *sum and ends the deferral; a deferred cross-entropy's target out of range is its error. 0 on success.
  int (*backend_defer_losses)(void* backend, char* error, size_t error_size);
  int (*backend_take_losses)(void* backend, double* sum, char* error, size_t error_size);
  // Since ABI version 9: the backend's stream waits, on the device (an event; the host waits for nothing), for every
  // group nccl_run has put on the communication stream so far. Point-to-point calls issued there are joined before
  // the backend's next op reads or writes their buffers. 0 on success.
  int (*nccl_join)(void* comm, char* error, size_t error_size);
} VitpipeCudaModule;

typedef const VitpipeCudaModule* (*VitpipeCudaModuleEntry)(void);

#ifdef __cplusplus
}
#endif
