# tests/evaluation: the subgroup reference comparisons run inside test_evaluation (each test starts its Python
# script), so they need the interpreter that has numpy and scikit-learn.
target_compile_definitions(test_evaluation PRIVATE VITPIPE_PYTHON="${VITPIPE_PYTHON}")
# The metrics live in src/evaluation/, which reads no layer above it; the report does not reach into train.
add_test(NAME evaluation.layering COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_layering.py)
set_tests_properties(evaluation.layering PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS evaluation TIMEOUT 60)
