# `vitpipe train` under real mpirun (oversubscribed: CI has 2 cores) against the same training in one process:
# pipeline stages x data-parallel replicas give the same weights, bad layouts are refused, a failing or killed rank
# takes the job down within seconds, checkpoints resume under another layout, --trace writes every rank's events.
# `distributed.setup` (a fixture) writes the models and the single-process reference runs the others compare with.

# Which images a replica loads in a step (the failure test corrupts one that only one rank reads).
add_executable(distributed_replica_items ${CMAKE_CURRENT_LIST_DIR}/probe/replica_items.cpp)
target_link_libraries(distributed_replica_items PRIVATE vitpipe_library CLI11::CLI11)

set(VITPIPE_DISTRIBUTED_CHECK ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_distributed.py
    --work ${CMAKE_CURRENT_BINARY_DIR}/distributed --mpiexec ${MPIEXEC_EXECUTABLE}
    --probe $<TARGET_FILE:distributed_replica_items>)

add_test(NAME distributed.setup COMMAND ${VITPIPE_DISTRIBUTED_CHECK} setup)
set_tests_properties(distributed.setup PROPERTIES FIXTURES_SETUP distributed_reference)

set(VITPIPE_DISTRIBUTED_TESTS)
foreach(case
    equal.stages2 equal.replicas2 equal.stages2x2-1f1b equal.stages4-gpipe-recompute equal.interleaved2
    equal.interleaved2x2-recompute equal.threads-stages2 equal.masked-stages2x2 equal.interleaved2-24-micro-batches
    equal.zb-h1-stages2 equal.zb-h1-stages4 equal.zb-h1-stages2x2
    sharded.adamw-replicas2 sharded.adamw-replicas4 sharded.lamb-replicas2 sharded.lamb-replicas4
    sharded.lamb-stages2x2-zb-h1 sharded.adamw-stages2x2-interleaved
    families.dinov2-full families.dinov2-lora families.dinov2-freeze-layers1 families.deit-full
    families.deit-freeze-backbone families.deit-lora sharded-lora.stages2x2-zb-h1
    layout-auto.ranks2 layout-auto.ranks4 layout-auto.predicted-vs-measured plan.mini-4-processes plan.under-mpirun plan.nothing-fits
    refuse.ranks-not-multiple-of-stages refuse.more-stages-than-pieces refuse.fewer-micro-batches-than-stages
    refuse.batch-not-divisible refuse.layout-auto-with-stages refuse.zb-h1-with-recompute
    fail.rank-raises fail.rank-killed
    resume.2x2-to-1 resume.1-to-2x2 resume.4stages-gpipe-to-2x2-interleaved
    resume.sharded-replicas4-to-1 resume.1-to-sharded-2x2-zb-h1 resume.sharded-2x2-to-sharded-replicas2
    trace)
  add_test(NAME distributed.${case} COMMAND ${VITPIPE_DISTRIBUTED_CHECK} ${case})
  list(APPEND VITPIPE_DISTRIBUTED_TESTS distributed.${case})
endforeach()
set_tests_properties(${VITPIPE_DISTRIBUTED_TESTS} PROPERTIES FIXTURES_REQUIRED distributed_reference)
set_tests_properties(distributed.setup ${VITPIPE_DISTRIBUTED_TESTS} PROPERTIES
                     ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS distributed TIMEOUT 120)
# Most of its run is the planner's profile, CPU-bound: 11-28 s on a loaded 2-core host, 107 s seen in CI, and a ratio
# out of bounds is measured once more (check_distributed.py, TIMING_ATTEMPTS). Its check is a ratio of two times from
# the same run, not the wall clock, so the timeout only bounds a hang: room for two runs of TIMING_RUN_SECONDS.
set_tests_properties(distributed.layout-auto.predicted-vs-measured PROPERTIES TIMEOUT 300)
