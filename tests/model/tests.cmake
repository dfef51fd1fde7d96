# Golden tests: forward, loss and every parameter gradient against a float64 PyTorch reference ViT.
add_executable(vit_gradient_probe ${PROJECT_SOURCE_DIR}/tools/vit_gradient_probe.cpp)
target_link_libraries(vit_gradient_probe PRIVATE vitpipe_library CLI11::CLI11)
foreach(case fp32-basic fp32-no-qkv-bias-single-label fp32-one-channel-big-patch fp32-stages-and-accumulation
        fp32-recompute-head-only-stage fp32-vit-micro-shape bf16-basic bf16-stages-recompute-single
        fp32-split-backward-stages bf16-split-backward-single)
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
