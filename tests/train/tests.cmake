# tests/train: the reference comparisons run inside test_train (each test starts its Python script), so they need
# the interpreter that has torch, numpy and scikit-learn.
target_compile_definitions(test_train PRIVATE VITPIPE_PYTHON="${VITPIPE_PYTHON}")

# `train --config FILE.yaml` errors (a control byte, ill-formed UTF-8, a syntax error, a quoted scalar escaping to
# DEL): strict UTF-8 on stderr naming the file, line and column, the byte written \xNN, non-zero exit.
add_test(NAME train.yaml_config_errors COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/yaml_config_errors.py)
set_tests_properties(train.yaml_config_errors PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS train TIMEOUT 60
                     SKIP_RETURN_CODE 77)
