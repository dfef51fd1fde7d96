# Heatmaps checked on a task whose evidence has a known place (explain_finds_the_patch.py).
add_test(NAME explain.finds_the_patch COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/explain_finds_the_patch.py)
set_tests_properties(explain.finds_the_patch PROPERTIES
  ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS explain TIMEOUT 600)

# DeiT (teacher head), DINOv2 (SwiGLU) and DINOv2 with registers: every method's map against a float64 reference,
# and the overlay of a centre-cropping processor (explain_families.py).
foreach(case deit-distilled-crop dinov2-swiglu-rad-dino-processor dinov2-registers-bit)
  add_test(NAME explain.families.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/explain_families.py --case ${case})
  set_tests_properties(explain.families.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS explain
                       TIMEOUT 300)
endforeach()
