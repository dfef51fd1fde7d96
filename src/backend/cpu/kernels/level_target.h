// Included LAST by every kernel file: from here to the end of the translation unit each function is compiled for
// the level this copy of the file is built for (VITPIPE_CPU_LEVEL_ID, set by CMakeLists.txt). A target pragma
// rather than a -m flag on the whole file, so that inline functions of the headers included above (the standard
// library's, Tensor's) stay baseline code: the linker keeps one copy of each, and it must run on every CPU.
#pragma once

#include <immintrin.h>

#include <cstdint>

#ifndef VITPIPE_CPU_LEVEL_ID
#error "kernel files are compiled once per CPU level with VITPIPE_CPU_LEVEL_ID and VITPIPE_CPU_LEVEL_NS set"
#endif

#define VITPIPE_LEVEL_AVX512 (VITPIPE_CPU_LEVEL_ID >= 1)
#define VITPIPE_LEVEL_AVX512_BF16 (VITPIPE_CPU_LEVEL_ID >= 2)
#define VITPIPE_LEVEL_AMX (VITPIPE_CPU_LEVEL_ID >= 3)

#if VITPIPE_CPU_LEVEL_ID == 1
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512cd")
#elif VITPIPE_CPU_LEVEL_ID == 2
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx512bf16")
#elif VITPIPE_CPU_LEVEL_ID == 3
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512cd,avx512bf16,amx-tile,amx-bf16")
#endif

#include "backend/cpu/kernels/simd_avx512.h"
