# Heatmaps checked on a task whose evidence has a known place (explain_finds_the_patch.py).
add_test(NAME explain.finds_the_patch COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/explain_finds_the_patch.py)
set_tests_properties(explain.finds_the_patch PROPERTIES
  ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS explain TIMEOUT 600)
