# tests/evaluation: the subgroup reference comparisons run inside test_evaluation (each test starts its Python
# script), so they need the interpreter that has numpy and scikit-learn.
target_compile_definitions(test_evaluation PRIVATE VITPIPE_PYTHON="${VITPIPE_PYTHON}")
