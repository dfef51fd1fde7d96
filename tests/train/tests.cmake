# tests/train: the reference comparisons run inside test_train (each test starts its Python script), so they need
# the interpreter that has torch, numpy and scikit-learn.
target_compile_definitions(test_train PRIVATE VITPIPE_PYTHON="${VITPIPE_PYTHON}")
