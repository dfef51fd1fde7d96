// The module's table (src/backend/cuda/module_entry.cpp) for test_cuda_backend_fakes, whose other files are compiled
// without the architectures the module's build names.
#define VITPIPE_CUDA_ARCHITECTURES "fakes"
#include "backend/cuda/module_entry.cpp"
