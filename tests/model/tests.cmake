# Golden tests: forward, loss and every parameter gradient against a float64 PyTorch reference ViT.
add_executable(vit_gradient_probe ${PROJECT_SOURCE_DIR}/tools/vit_gradient_probe.cpp
               ${PROJECT_SOURCE_DIR}/tools/seam_backend.cpp)
target_link_libraries(vit_gradient_probe PRIVATE vitpipe_library CLI11::CLI11)
# Exported symbols name the frames of the seam's call stacks (tools/seam_backend.h).
set_target_properties(vit_gradient_probe PROPERTIES ENABLE_EXPORTS ON)
# The trainer through the same seam (tests/cuda/check_seam_train.py).
add_executable(train_seam_probe ${PROJECT_SOURCE_DIR}/tools/train_seam_probe.cpp ${PROJECT_SOURCE_DIR}/tools/seam_backend.cpp
               ${PROJECT_SOURCE_DIR}/src/cli/cmd_predict.cpp ${PROJECT_SOURCE_DIR}/src/cli/cmd_explain.cpp)
target_link_libraries(train_seam_probe PRIVATE vitpipe_library CLI11::CLI11)
set_target_properties(train_seam_probe PROPERTIES ENABLE_EXPORTS ON)
foreach(case fp32-basic fp32-no-qkv-bias-single-label fp32-one-channel-big-patch fp32-stages-and-accumulation
        fp32-recompute-head-only-stage fp32-vit-micro-shape bf16-basic bf16-stages-recompute-single
        fp32-split-backward-stages bf16-split-backward-single bf16-head-64)
  add_test(NAME golden_vit.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/reference_vit.py
                   --probe $<TARGET_FILE:vit_gradient_probe> --case ${case})
  set_tests_properties(golden_vit.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS model)
  # The same at each CPU level below this machine's best (skipped where there is none).
  foreach(level avx2 avx512 avx512_bf16)
    add_test(NAME golden_vit.${case}.at-${level}
             COMMAND ${VITPIPE_PYTHON} ${PROJECT_SOURCE_DIR}/tests/backend/at_cpu_level.py ${level} --
                     ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/reference_vit.py
                     --probe $<TARGET_FILE:vit_gradient_probe> --case ${case})
    set_tests_properties(golden_vit.${case}.at-${level} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS model
                         SKIP_RETURN_CODE 77)
  endforeach()
endforeach()

# The bf16 model with 64-wide heads through the tile attention on the emulated tile unit (kernels/tile_ops.h).
add_test(NAME golden_vit.bf16-head-64.tiles-emulated
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/reference_vit.py
                 --probe $<TARGET_FILE:vit_gradient_probe> --case bf16-head-64)
set_tests_properties(golden_vit.bf16-head-64.tiles-emulated PROPERTIES
                     ENVIRONMENT "${VITPIPE_TEST_ENV};VITPIPE_ATTENTION_TILES=emulated" LABELS model)

# The same golden checks with every tensor the backend is handed closed to the host between its calls
# (tools/seam_backend.h): the numbers must not change, and the probe reports what touched the closed pages.
foreach(case fp32-stages-and-accumulation bf16-stages-recompute-single)
  add_test(NAME golden_vit.${case}.seam
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/reference_vit.py
                   --probe $<TARGET_FILE:vit_gradient_probe> --case ${case})
  set_tests_properties(golden_vit.${case}.seam PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV};VITPIPE_PROBE_SEAM=1"
                       LABELS model)
endforeach()

# The model families (DeiT, DINOv2 with and without registers, SwiGLU, interpolated grids), LoRA and frozen modes.
foreach(case dinov2-native-grid dinov2-interpolated-grid dinov2-upsampled-grid-stages dinov2-swiglu-recompute
        dinov2-registers-native dinov2-registers-interpolated deit-with-token deit-distilled-teacher lora-vit-qv
        lora-dinov2-all-recompute lora-deit-teacher-all freeze-backbone-dinov2 freeze-layers-vit-stages
        bf16-dinov2-registers-interpolated bf16-deit-teacher-lora bf16-dinov2-swiglu trajectory-freeze-layers-dinov2
        trajectory-freeze-backbone-deit trajectory-lora-vit split-dinov2-registers-swiglu-stages split-dinov2-one-stage
        split-deit-teacher-stages split-lora-dinov2-all-stages split-lora-vit-stages split-freeze-backbone-deit-teacher
        split-freeze-layers-vit-stages bf16-split-dinov2-swiglu bf16-split-deit-teacher-lora
        split-trajectory-lora-dinov2-registers)
  add_test(NAME golden_families.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/reference_families.py
                   --probe $<TARGET_FILE:vit_gradient_probe> --case ${case})
  set_tests_properties(golden_families.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS model)
endforeach()
