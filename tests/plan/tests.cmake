# `vitpipe bench --scaling 1,2` per operation and `vitpipe plan --scaling` splitting a node into ranks x threads by
# it (bench_scaling.py; the figures are recomputed from bench's own times, none asserted: the machine is shared).
add_test(NAME plan.bench_scaling COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/bench_scaling.py)
set_tests_properties(plan.bench_scaling PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS plan TIMEOUT 300)

# `plan` and `train --layout auto` split a node into ranks x threads by a core-scaling profile (--scaling FILE or the
# profile cache's core_scaling.json), memory permitting, and keep one rank of every thread without one.
add_test(NAME plan.layout_auto_scaling COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/layout_auto_scaling.py)
set_tests_properties(plan.layout_auto_scaling PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS plan TIMEOUT 120)
