# CPU levels: the binary's instruction sets confined to the dispatched kernels (a static proof), the binary on
# emulated CPUs (qemu-user), and the golden tests again at each level below this CPU's best (skipped where none).
set(confinement_flags)
if(VITPIPE_HAS_AVX512_LEVELS)
  set(confinement_flags --expect-avx512)
endif()
if("amx" IN_LIST VITPIPE_CPU_LEVELS)
  list(APPEND confinement_flags --expect-amx)
endif()
add_test(NAME backend.isa_confinement
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_isa_confinement.py $<TARGET_FILE:vitpipe>
                 ${confinement_flags})
add_test(NAME backend.emulated_cpus COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_emulated_cpus.py)
# Training (loader, backward, optimizer, validation, export; fp32 and bf16) on the emulated Haswell too: about 15 s.
add_test(NAME backend.emulated_cpu_training
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_emulated_cpu_training.py)
set_tests_properties(backend.isa_confinement backend.emulated_cpus backend.emulated_cpu_training PROPERTIES
                     ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS backend SKIP_RETURN_CODE 77)

# `vitpipe bench`'s per-operation figures against their bounds: consistent with each other and with the model.
add_test(NAME backend.bench_operations
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_bench_operations.py)
set_tests_properties(backend.bench_operations PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS backend)

# The tile attention (kernels/attention_tiles.cpp) on the emulated tile unit at every level this CPU runs: the
# kernels' packing, padding and transposed products against the float64 reference, on any CPU. On an AMX CPU the
# plain runs of the same tests at the amx level run them on AMX itself.
add_test(NAME backend.tile_attention_emulated
         COMMAND test_backend --gtest_filter=*Attention*:*TileAttention*)
set_tests_properties(backend.tile_attention_emulated PROPERTIES
                     ENVIRONMENT "${VITPIPE_TEST_ENV};VITPIPE_ATTENTION_TILES=emulated" LABELS backend)

# `vitpipe info` names what runs bf16 attention (AMX tiles, oneDNN, the emulation) and refuses a bad override.
add_test(NAME backend.attention_unit COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_attention_unit.py)
set_tests_properties(backend.attention_unit PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS backend)

# bench/matrix_unit_check.py (the matrix-unit acceptance run) refuses bad input in one line, before any benchmark.
add_test(NAME backend.matrix_unit_check_input
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_matrix_unit_check.py)
set_tests_properties(backend.matrix_unit_check_input PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS backend)

# bench_instruction_peak reports every chain the CPU has and skips the others (it is built with the benchmarks).
if(VITPIPE_BENCHMARKS)
  add_test(NAME backend.instruction_peak
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_instruction_peak.py
                   $<TARGET_FILE:bench_instruction_peak>)
  set_tests_properties(backend.instruction_peak PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS backend)
endif()
