# The CUDA module without a GPU: loading (the module built here, fakes of another interface version or without the
# entry point, no module, no driver, the toolkit's stub driver), --device on the command line, the binary's
# independence from the CUDA libraries, and the kernels' shared arithmetic against the float64 references.
foreach(fake IN ITEMS one_gpu wrong_version no_entry)
  add_library(fake_cuda_module_${fake} MODULE ${CMAKE_CURRENT_LIST_DIR}/fake_module/fake_module.cpp)
  target_include_directories(fake_cuda_module_${fake} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  set_target_properties(fake_cuda_module_${fake} PROPERTIES CXX_VISIBILITY_PRESET hidden)
  add_dependencies(test_cuda fake_cuda_module_${fake})
endforeach()
target_compile_definitions(fake_cuda_module_one_gpu PRIVATE FAKE_ABI_VERSION=VITPIPE_CUDA_MODULE_ABI_VERSION)
target_compile_definitions(fake_cuda_module_wrong_version PRIVATE FAKE_ABI_VERSION=999u)
# The fake driver is named libcuda.so.1 in a folder of its own, for LD_LIBRARY_PATH.
add_library(fake_cuda_driver MODULE ${CMAKE_CURRENT_LIST_DIR}/fake_driver/fake_libcuda.cpp)
set_target_properties(fake_cuda_driver PROPERTIES OUTPUT_NAME cuda PREFIX lib SUFFIX .so.1 CXX_VISIBILITY_PRESET hidden
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake_driver)
add_dependencies(test_cuda fake_cuda_driver)
target_compile_definitions(fake_cuda_module_no_entry PRIVATE FAKE_NO_ENTRY)

set(cuda_stub_driver "")
if(CUDAToolkit_LIBRARY_DIR AND EXISTS ${CUDAToolkit_LIBRARY_DIR}/stubs/libcuda.so)
  set(cuda_stub_driver ${CUDAToolkit_LIBRARY_DIR}/stubs/libcuda.so)
elseif(EXISTS /usr/local/cuda/lib64/stubs/libcuda.so)
  set(cuda_stub_driver /usr/local/cuda/lib64/stubs/libcuda.so)
endif()
set(cuda_module_path "")
if(VITPIPE_CUDA_MODULE_BUILT)
  set(cuda_module_path $<TARGET_FILE:vitpipe_cuda>)
  add_dependencies(test_cuda vitpipe_cuda)
endif()
target_compile_definitions(test_cuda PRIVATE
  CUDA_MODULE_PATH="${cuda_module_path}"
  CUDA_STUB_DRIVER="${cuda_stub_driver}"
  FAKE_DRIVER="$<TARGET_FILE:fake_cuda_driver>"
  FAKE_MODULE_ONE_GPU="$<TARGET_FILE:fake_cuda_module_one_gpu>"
  FAKE_MODULE_WRONG_VERSION="$<TARGET_FILE:fake_cuda_module_wrong_version>"
  FAKE_MODULE_NO_ENTRY="$<TARGET_FILE:fake_cuda_module_no_entry>")

# The command line: info and --device with the module absent, present, without a driver and with the stub driver.
add_test(NAME cuda.cli
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_cuda_cli.py
                 --module "${cuda_module_path}" --stub-driver "${cuda_stub_driver}"
                 --library $<TARGET_FILE:vitpipe_library> --fake-driver $<TARGET_FILE:fake_cuda_driver>
                 --fake-module $<TARGET_FILE:fake_cuda_module_one_gpu>)
set_tests_properties(cuda.cli PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda)

# The libraries' calls as data and their CPU interpreter (src/backend/cuda/calls), in every configuration.
target_link_libraries(test_cuda PRIVATE vitpipe_cuda_calls)

# The module's cuBLASLt, cuDNN and NCCL executors against fakes of the three libraries that run each call with the
# documented semantics (the translation of descriptions into API calls, on the CPU; NCCL's ranks are threads, its
# streams and events the fake runtime's). Needs only CUDA's, cuDNN's and NCCL's headers; links no CUDA library.
if(VITPIPE_CUDA_MODULE_BUILT)
  file(GLOB executor_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/executors/*.cpp)
  add_executable(test_cuda_executors ${executor_tests} ${PROJECT_SOURCE_DIR}/src/backend/cuda/gemm_executor.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/sdpa_executor.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/nccl_executor.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/fake_cuda_runtime.cpp)
  target_include_directories(test_cuda_executors PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${VITPIPE_CUDNN_INCLUDE_DIR}
                             ${VITPIPE_NCCL_INCLUDE_DIR})
  target_link_libraries(test_cuda_executors PRIVATE vitpipe_cuda_calls vitpipe_library GTest::gtest_main)
  gtest_discover_tests(test_cuda_executors DISCOVERY_TIMEOUT 60 PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda)
endif()

# The bf16 tensor-core flash-attention backward's host model against PyTorch's SDPA backward (bf16, ViT-B/16's shape):
# the probe runs the model on the case the script writes. Skips (77) without torch.
add_executable(flash_bf16_probe ${CMAKE_CURRENT_LIST_DIR}/probes/flash_bf16_probe.cpp)
target_include_directories(flash_bf16_probe PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME cuda.flash_bf16_torch
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_flash_bf16_torch.py --probe $<TARGET_FILE:flash_bf16_probe>)
set_tests_properties(cuda.flash_bf16_torch PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda SKIP_RETURN_CODE 77
                     TIMEOUT 120)

# scripts/gpu_check.sh --pack into a temporary folder: within 48 MiB, and the packed vitpipe runs with the pack's
# libraries alone. Reuses this build (no second build); about half a minute, most of it xz.
add_test(NAME cuda.gpu_pack
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_gpu_pack.py ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(cuda.gpu_pack PROPERTIES LABELS cuda SKIP_RETURN_CODE 77 TIMEOUT 600)

# scripts/gpu_check.sh's summary writer (scripts/gpu_check_summary.py) on made-up part results, and the script's
# plumbing from a made-up pack of fakes (a vitpipe, a test binary and a PyTorch peer that only pretend): no GPU, no
# build needed. About 55 s, most of it a fake peer held past a deadline shortened to 30 s.
add_test(NAME cuda.gpu_check_summary
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_gpu_check_summary.py ${PROJECT_SOURCE_DIR})
set_tests_properties(cuda.gpu_check_summary PROPERTIES LABELS cuda TIMEOUT 120)

# Proof 3 (the host/device seam), as far as it goes: a 2-stage step through tools/seam_backend.h, whose tensors are
# closed to the host between backend calls; equal to the plain run, and touched only by the probe's stage copies.
add_test(NAME cuda.seam COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_seam.py $<TARGET_FILE:vit_gradient_probe>)
set_tests_properties(cuda.seam PROPERTIES LABELS cuda)

# The module's C boundary (backend/cuda_module_backend.h -> module_abi.h -> backend/backend_call.h) on the CPU: golden
# cases run through the loopback table must equal the CPU backend bit for bit. Between them the cases call every op.
foreach(case fp32-basic fp32-no-qkv-bias-single-label fp32-stages-and-accumulation bf16-stages-recompute-single
        fp32-split-backward-stages dinov2-registers-interpolated dinov2-swiglu-recompute deit-distilled-teacher
        lora-dinov2-all-recompute bf16-deit-teacher-lora bf16-dinov2-swiglu trajectory-lora-vit)
  add_test(NAME cuda.module_adapter.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_module_adapter.py
                   --probe $<TARGET_FILE:vit_gradient_probe> --case ${case})
  set_tests_properties(cuda.module_adapter.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda)
endforeach()

# The golden cases on a real GPU (every stage on the CUDA module; 2 and 3 stages share the one GPU) against their
# float64 PyTorch references; skipped (77) where no CUDA backend can run, as on CI.
foreach(case fp32-basic fp32-stages-and-accumulation bf16-basic bf16-stages-recompute-single fp32-split-backward-stages)
  add_test(NAME cuda.gpu.golden_vit.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/gpu/golden_on_gpu.py
                   --reference-dir ${PROJECT_SOURCE_DIR}/tests/model
                   --probe $<TARGET_FILE:vit_gradient_probe> --case vit:${case})
  set_tests_properties(cuda.gpu.golden_vit.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda
                       SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
foreach(case dinov2-registers-interpolated deit-distilled-teacher lora-dinov2-all-recompute bf16-dinov2-swiglu
        trajectory-lora-vit)
  add_test(NAME cuda.gpu.golden_families.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/gpu/golden_on_gpu.py
                   --reference-dir ${PROJECT_SOURCE_DIR}/tests/model
                   --probe $<TARGET_FILE:vit_gradient_probe> --case families:${case})
  set_tests_properties(cuda.gpu.golden_families.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda
                       SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()

# CudaBackend on a real GPU against the CPU backend, op by op, and NcclExecutor on real NCCL (one rank per GPU)
# (tests/cuda/gpu): built with the module's objects and linked with the CUDA libraries and NCCL; every test skips
# where the runtime sees no GPU.
if(VITPIPE_CUDA_MODULE_BUILT)
  add_executable(test_cuda_gpu ${CMAKE_CURRENT_LIST_DIR}/gpu/test_cuda_backend_gpu.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/gpu/test_nccl_gpu.cpp $<TARGET_OBJECTS:vitpipe_cuda_objects>)
  target_include_directories(test_cuda_gpu PRIVATE ${VITPIPE_CUDNN_INCLUDE_DIR} ${VITPIPE_NCCL_INCLUDE_DIR})
  target_link_libraries(test_cuda_gpu PRIVATE vitpipe_cuda_calls vitpipe_library CUDA::cudart_static CUDA::cublasLt
                        ${VITPIPE_CUDNN_LIBRARY} ${VITPIPE_NCCL_LIBRARY} GTest::gtest_main)
  gtest_discover_tests(test_cuda_gpu DISCOVERY_TIMEOUT 60 PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda)
endif()

# The optimizer kernels' host launchers round every operation once, as the kernels' _rn intrinsics do on the device.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/fakes/host_optimizer_kernels.cpp PROPERTIES COMPILE_OPTIONS
                            -ffp-contract=off)

# The same op-by-op comparison without a GPU: CudaBackend (its C++ only) on fakes of the CUDA runtime, cuBLASLt and
# cuDNN that work in host memory, with the kernels' launchers as host loops over the kernels' own arithmetic
# (tests/cuda/fakes). Proves CudaBackend's plumbing (shapes, pointers, scratch, padded staging, the library calls as
# the executors issue them) and test_cuda_gpu itself; the kernels' indexing on the device is left to the GPU. With the
# module's table (module_entry.cpp) and the fake NCCL: backend/nccl_group.h through the table's nccl_* entries and
# NcclExecutor, ranks as threads (fakes/test_module_nccl_on_fakes.cpp); pipeline stages exchanging activations over
# it, every schedule against one stage (fakes/test_pipeline_nccl_on_fakes.cpp); backends on two GPUs from several
# threads, every call on its backend's current device (fakes/test_backend_devices_on_fakes.cpp).
if(VITPIPE_CUDA_MODULE_BUILT)
  add_executable(test_cuda_backend_fakes ${CMAKE_CURRENT_LIST_DIR}/gpu/test_cuda_backend_gpu.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/test_module_nccl_on_fakes.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/test_pipeline_nccl_on_fakes.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/test_module_attention_path_on_fakes.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/test_backend_host_waits_on_fakes.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/test_backend_devices_on_fakes.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/module_entry_on_fakes.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_nccl.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_nccl_processes.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/nccl_executor.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/fake_cuda_runtime.cpp ${CMAKE_CURRENT_LIST_DIR}/fakes/host_kernels.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/host_optimizer_kernels.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_cublaslt.cpp ${CMAKE_CURRENT_LIST_DIR}/executors/fake_cudnn.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/cuda_backend.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/gemm_executor.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/sdpa_executor.cpp)
  target_include_directories(test_cuda_backend_fakes PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${VITPIPE_CUDNN_INCLUDE_DIR}
                             ${VITPIPE_NCCL_INCLUDE_DIR})
  target_compile_definitions(test_cuda_backend_fakes PRIVATE VITPIPE_ON_FAKES=1)
  target_link_libraries(test_cuda_backend_fakes PRIVATE vitpipe_cuda_calls vitpipe_library GTest::gtest_main)
  gtest_discover_tests(test_cuda_backend_fakes DISCOVERY_TIMEOUT 60 PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}"
                       LABELS cuda)
endif()

# Whole models through the module's table (module_entry.cpp), the host adapter and CudaBackend on the same fakes:
# the probe built with them, held by the golden references to float64 PyTorch like the CPU backend (forward, loss,
# every gradient; fp32 and bf16; ViT and the families).
if(VITPIPE_CUDA_MODULE_BUILT)
  add_executable(vit_gradient_probe_cuda_fakes ${PROJECT_SOURCE_DIR}/tools/vit_gradient_probe.cpp
                 ${PROJECT_SOURCE_DIR}/tools/seam_backend.cpp ${CMAKE_CURRENT_LIST_DIR}/fakes/fake_cuda_runtime.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/host_kernels.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/host_optimizer_kernels.cpp ${CMAKE_CURRENT_LIST_DIR}/executors/fake_cublaslt.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_cudnn.cpp ${PROJECT_SOURCE_DIR}/src/backend/cuda/cuda_backend.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/gemm_executor.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/sdpa_executor.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/nccl_executor.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_nccl.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_nccl_processes.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/module_entry.cpp)
  target_include_directories(vit_gradient_probe_cuda_fakes PRIVATE ${CUDAToolkit_INCLUDE_DIRS}
                             ${VITPIPE_CUDNN_INCLUDE_DIR} ${VITPIPE_NCCL_INCLUDE_DIR} ${CMAKE_CURRENT_LIST_DIR}/executors)
  target_compile_definitions(vit_gradient_probe_cuda_fakes PRIVATE VITPIPE_PROBE_CUDA_FAKES=1
                             VITPIPE_CUDA_ARCHITECTURES="fakes")
  target_link_libraries(vit_gradient_probe_cuda_fakes PRIVATE vitpipe_cuda_calls vitpipe_library CLI11::CLI11)
  set_target_properties(vit_gradient_probe_cuda_fakes PROPERTIES ENABLE_EXPORTS ON)
  foreach(case fp32-basic fp32-no-qkv-bias-single-label fp32-stages-and-accumulation fp32-split-backward-stages
          bf16-basic bf16-stages-recompute-single bf16-split-backward-single)
    add_test(NAME cuda.fakes.golden_vit.${case}
             COMMAND ${VITPIPE_PYTHON} ${PROJECT_SOURCE_DIR}/tests/model/reference_vit.py
                     --probe $<TARGET_FILE:vit_gradient_probe_cuda_fakes> --case ${case})
    set_tests_properties(cuda.fakes.golden_vit.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda)
  endforeach()
  # bf16 attention by the fallback (cuDNN's SDPA switched off): the fp32 flash kernels on converted copies.
  foreach(case bf16-basic bf16-stages-recompute-single)
    add_test(NAME cuda.fakes.golden_vit.${case}.no-sdpa
             COMMAND ${VITPIPE_PYTHON} ${PROJECT_SOURCE_DIR}/tests/model/reference_vit.py
                     --probe $<TARGET_FILE:vit_gradient_probe_cuda_fakes> --case ${case})
    set_tests_properties(cuda.fakes.golden_vit.${case}.no-sdpa PROPERTIES
                         ENVIRONMENT "${VITPIPE_TEST_ENV};VITPIPE_CUDA_SDPA=0" LABELS cuda)
  endforeach()
  foreach(case dinov2-registers-interpolated dinov2-swiglu-recompute deit-distilled-teacher lora-dinov2-all-recompute
          bf16-deit-teacher-lora bf16-dinov2-swiglu)
    add_test(NAME cuda.fakes.golden_families.${case}
             COMMAND ${VITPIPE_PYTHON} ${PROJECT_SOURCE_DIR}/tests/model/reference_families.py
                     --probe $<TARGET_FILE:vit_gradient_probe_cuda_fakes> --case ${case})
    set_tests_properties(cuda.fakes.golden_families.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda)
  endforeach()
endif()

# Proof 3 for the trainer: `vitpipe train` (1 stage with LAMB; 2 pipeline stages as threads with AdamW and clipping;
# an SGD-momentum checkpoint resumed as 2 stages; LoRA with its adapter export; and predict and explain of a model)
# in tools/train_seam_probe, its stage backends wrapped in the seam with the training state (parameters, gradients,
# optimizer moments) closed between backend calls: checkpoints and exported weights equal the plain run's bit for bit,
# and nothing above the backend (trainer, executor, evaluation, checkpointing, export) touched the closed pages.
foreach(case one-stage two-stages resume lora replicas-mpi stages-mpi predict-explain)
  add_test(NAME cuda.seam.train-${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_seam_train.py $<TARGET_FILE:train_seam_probe> ${case})
  set_tests_properties(cuda.seam.train-${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda TIMEOUT 600)
endforeach()

# Training end to end through the CUDA module on the fakes: tools/train_seam_probe built with the module's table
# (module_entry.cpp), CudaBackend and the host-memory fakes; with VITPIPE_PROBE_CUDA=1 every stage backend is the
# module's. A short `vitpipe train` (the optimizers' steps, gradient norms, zeroing and host copies through
# backend_call) must end where the plain CPU run ends, within the forward and backward passes' rounding.
if(VITPIPE_CUDA_MODULE_BUILT)
  add_executable(train_probe_cuda_fakes ${PROJECT_SOURCE_DIR}/tools/train_seam_probe.cpp
                 ${PROJECT_SOURCE_DIR}/tools/seam_backend.cpp ${PROJECT_SOURCE_DIR}/src/cli/cmd_predict.cpp
                 ${PROJECT_SOURCE_DIR}/src/cli/cmd_explain.cpp ${CMAKE_CURRENT_LIST_DIR}/fakes/fake_cuda_runtime.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/host_kernels.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/fakes/host_optimizer_kernels.cpp ${CMAKE_CURRENT_LIST_DIR}/executors/fake_cublaslt.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_cudnn.cpp ${PROJECT_SOURCE_DIR}/src/backend/cuda/cuda_backend.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/gemm_executor.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/sdpa_executor.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/nccl_executor.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_nccl.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/executors/fake_nccl_processes.cpp
                 ${PROJECT_SOURCE_DIR}/src/backend/cuda/module_entry.cpp)
  target_include_directories(train_probe_cuda_fakes PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${VITPIPE_CUDNN_INCLUDE_DIR}
                             ${VITPIPE_NCCL_INCLUDE_DIR} ${CMAKE_CURRENT_LIST_DIR}/executors)
  target_compile_definitions(train_probe_cuda_fakes PRIVATE VITPIPE_PROBE_CUDA_FAKES=1
                             VITPIPE_CUDA_ARCHITECTURES="fakes")
  target_link_libraries(train_probe_cuda_fakes PRIVATE vitpipe_cuda_calls vitpipe_library CLI11::CLI11)
  set_target_properties(train_probe_cuda_fakes PROPERTIES ENABLE_EXPORTS ON)
  foreach(case lamb adamw-two-stages-clip sgd-momentum)
    add_test(NAME cuda.fakes.train.${case}
             COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_train_fakes.py
                     $<TARGET_FILE:train_probe_cuda_fakes> ${case})
    set_tests_properties(cuda.fakes.train.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS cuda TIMEOUT 900)
  endforeach()
endif()

# `vitpipe plan --device cuda` (and train --layout auto) through the real binary, on a module built from the module's
# table and CudaBackend over the host-memory fakes (libvitpipe_cuda_on_fakes.so, opened by VITPIPE_CUDA_MODULE) with
# the fake driver as libcuda.so.1: the profile is measured through the module and keyed by the (fake) GPU, the budget
# is the fake GPU's free memory less the margin, the workspaces are counted, ranks per node never exceed the GPUs,
# and cpu and cuda profiles share a cache without colliding. Timings on fakes mean nothing and are not asserted.
if(VITPIPE_CUDA_MODULE_BUILT)
  add_library(vitpipe_cuda_on_fakes MODULE ${PROJECT_SOURCE_DIR}/src/backend/cuda/module_entry.cpp
              ${PROJECT_SOURCE_DIR}/src/backend/cuda/cuda_backend.cpp
              ${PROJECT_SOURCE_DIR}/src/backend/cuda/gemm_executor.cpp
              ${PROJECT_SOURCE_DIR}/src/backend/cuda/sdpa_executor.cpp
              ${PROJECT_SOURCE_DIR}/src/backend/cuda/nccl_executor.cpp
              ${PROJECT_SOURCE_DIR}/src/backend/backend_call.cpp ${PROJECT_SOURCE_DIR}/src/tensor/tensor.cpp
              ${PROJECT_SOURCE_DIR}/src/tensor/dtype.cpp ${CMAKE_CURRENT_LIST_DIR}/fakes/fake_cuda_runtime.cpp
              ${CMAKE_CURRENT_LIST_DIR}/fakes/host_kernels.cpp ${CMAKE_CURRENT_LIST_DIR}/fakes/host_optimizer_kernels.cpp
              ${CMAKE_CURRENT_LIST_DIR}/executors/fake_cublaslt.cpp ${CMAKE_CURRENT_LIST_DIR}/executors/fake_cudnn.cpp
              ${CMAKE_CURRENT_LIST_DIR}/executors/fake_nccl.cpp
              ${CMAKE_CURRENT_LIST_DIR}/executors/fake_nccl_processes.cpp)
  target_include_directories(vitpipe_cuda_on_fakes PRIVATE ${PROJECT_SOURCE_DIR}/src ${CUDAToolkit_INCLUDE_DIRS}
                             ${VITPIPE_CUDNN_INCLUDE_DIR} ${VITPIPE_NCCL_INCLUDE_DIR} ${CMAKE_CURRENT_LIST_DIR}/executors)
  target_compile_definitions(vitpipe_cuda_on_fakes PRIVATE VITPIPE_CUDA_ARCHITECTURES="fakes")
  target_link_libraries(vitpipe_cuda_on_fakes PRIVATE vitpipe_cuda_calls)
  set_target_properties(vitpipe_cuda_on_fakes PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(vitpipe_cuda_on_fakes PRIVATE -fopenmp-simd)
  target_link_options(vitpipe_cuda_on_fakes PRIVATE -Wl,--no-undefined)
  add_test(NAME cuda.fakes.plan
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_plan_cuda_fakes.py
                   --module $<TARGET_FILE:vitpipe_cuda_on_fakes> --fake-driver $<TARGET_FILE:fake_cuda_driver>)
  set_tests_properties(cuda.fakes.plan PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS "cuda;plan" TIMEOUT 300)
  # `vitpipe train --device cuda` itself with 2 stages as threads exchanging activations over the fake NCCL (the
  # trainer's one backend per rank, the executor's NcclStageExchange): every send counted, and the losses and exported
  # weights equal the one-stage run's. About 3 s per schedule.
  foreach(schedule 1f1b interleaved zb-h1 gpipe)
    add_test(NAME cuda.fakes.train_nccl_stages.${schedule}
             COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_train_nccl_stages_fakes.py
                     --module $<TARGET_FILE:vitpipe_cuda_on_fakes> --fake-driver $<TARGET_FILE:fake_cuda_driver>
                     --case ${schedule})
    set_tests_properties(cuda.fakes.train_nccl_stages.${schedule} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}"
                         LABELS cuda SKIP_RETURN_CODE 77 TIMEOUT 120)
  endforeach()
  # `vitpipe train --device cuda` with 2 data-parallel replicas under mpirun -np 2, the ranks processes reducing over
  # the fake NCCL's shared-memory transport (executors/fake_nccl_processes.h): all-reduce, and --shard-optimizer's
  # reduce and broadcast; losses and exported weights equal the one-process run's. About 2 s each.
  foreach(case all-reduce shard-optimizer stages-x-replicas)
    add_test(NAME cuda.fakes.train_nccl_replicas.${case}
             COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_train_nccl_replicas_fakes.py
                     --module $<TARGET_FILE:vitpipe_cuda_on_fakes> --fake-driver $<TARGET_FILE:fake_cuda_driver>
                     --mpiexec "${MPIEXEC_EXECUTABLE}" --case ${case})
    set_tests_properties(cuda.fakes.train_nccl_replicas.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}"
                         LABELS cuda SKIP_RETURN_CODE 77 TIMEOUT 120)
  endforeach()
else()
  # Without CUDA's, cuDNN's and NCCL's headers the module on fakes cannot be built: said, and skipped.
  add_test(NAME cuda.fakes.plan COMMAND ${VITPIPE_PYTHON} -c
           "print('skipped: no CUDA module in this build, so no module on fakes'); raise SystemExit(77)")
  set_tests_properties(cuda.fakes.plan PROPERTIES LABELS "cuda;plan" SKIP_RETURN_CODE 77)
  foreach(schedule 1f1b interleaved zb-h1 gpipe)
    add_test(NAME cuda.fakes.train_nccl_stages.${schedule} COMMAND ${VITPIPE_PYTHON} -c
             "print('skipped: no CUDA module in this build, so no module on fakes'); raise SystemExit(77)")
    set_tests_properties(cuda.fakes.train_nccl_stages.${schedule} PROPERTIES LABELS cuda SKIP_RETURN_CODE 77)
  endforeach()
  foreach(case all-reduce shard-optimizer stages-x-replicas)
    add_test(NAME cuda.fakes.train_nccl_replicas.${case} COMMAND ${VITPIPE_PYTHON} -c
             "print('skipped: no CUDA module in this build, so no module on fakes'); raise SystemExit(77)")
    set_tests_properties(cuda.fakes.train_nccl_replicas.${case} PROPERTIES LABELS cuda SKIP_RETURN_CODE 77)
  endforeach()
endif()
