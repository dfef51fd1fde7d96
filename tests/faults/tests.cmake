# Disk faults (ENOSPC, EIO) injected into running vitpipe processes by an LD_PRELOAD shim, and a chaos test that
# SIGKILLs random ranks of mpirun trainings and resumes them.
add_library(vitpipe_fault_shim SHARED ${PROJECT_SOURCE_DIR}/tools/fault_shim/fault_shim.c)
target_link_libraries(vitpipe_fault_shim PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(vitpipe_fault_shim PROPERTIES C_STANDARD 11)

add_test(NAME faults.disk COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_disk_faults.py)
set_tests_properties(faults.disk PROPERTIES
  ENVIRONMENT "${VITPIPE_TEST_ENV};FAULT_SHIM=$<TARGET_FILE:vitpipe_fault_shim>" LABELS faults TIMEOUT 600)

add_test(NAME faults.data COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_data_faults.py)
set_tests_properties(faults.data PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS faults TIMEOUT 600)

set(VITPIPE_CHAOS_RUNS 3 CACHE STRING "Kill-and-resume runs of faults.chaos (the full check: 20)")
add_test(NAME faults.chaos COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_chaos.py
         --mpiexec ${MPIEXEC_EXECUTABLE} --runs ${VITPIPE_CHAOS_RUNS})
set_tests_properties(faults.chaos PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS faults TIMEOUT 900)
