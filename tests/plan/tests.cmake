# `vitpipe bench --scaling 1,2` per operation and `vitpipe plan --scaling` splitting a node into ranks x threads by
# it (bench_scaling.py; the figures are recomputed from bench's own times, none asserted: the machine is shared).
add_test(NAME plan.bench_scaling COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/bench_scaling.py)
set_tests_properties(plan.bench_scaling PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS plan TIMEOUT 300)
