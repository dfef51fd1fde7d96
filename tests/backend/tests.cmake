# CPU levels: the binary's instruction sets confined to the dispatched kernels (a static proof), the binary on
# emulated CPUs (qemu-user), and the golden tests again at each level below this CPU's best (skipped where none).
set(confinement_flags)
if(VITPIPE_HAS_AVX512_LEVELS)
  set(confinement_flags --expect-avx512)
endif()
add_test(NAME backend.isa_confinement
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_isa_confinement.py $<TARGET_FILE:vitpipe>
                 ${confinement_flags})
add_test(NAME backend.emulated_cpus COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_emulated_cpus.py)
set_tests_properties(backend.isa_confinement backend.emulated_cpus PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}"
                     LABELS backend SKIP_RETURN_CODE 77)

# `vitpipe bench`'s per-operation figures against their bounds: consistent with each other and with the model.
add_test(NAME backend.bench_operations
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_bench_operations.py)
set_tests_properties(backend.bench_operations PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS backend)
