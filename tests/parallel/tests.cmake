# The MPI communicator under mpirun (oversubscribed: CI has 2 cores): a driver runs one scenario on every rank.
add_executable(parallel_mpi_driver ${CMAKE_CURRENT_LIST_DIR}/mpi/mpi_driver.cpp)
target_link_libraries(parallel_mpi_driver PRIVATE vitpipe_library)

set(VITPIPE_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root)
set(VITPIPE_MPI_DRIVER $<TARGET_FILE:parallel_mpi_driver>)
set(VITPIPE_MPI_TESTS)
macro(vitpipe_mpi_test name ranks)
  add_test(NAME ${name} COMMAND ${VITPIPE_MPIRUN} -np ${ranks} ${VITPIPE_MPI_DRIVER} ${ARGN})
  list(APPEND VITPIPE_MPI_TESTS ${name})
endmacro()

vitpipe_mpi_test(parallel_mpi_p2p_np2 2 p2p)
vitpipe_mpi_test(parallel_mpi_p2p_np4 4 p2p)
vitpipe_mpi_test(parallel_mpi_collectives_np2 2 collectives)
vitpipe_mpi_test(parallel_mpi_collectives_np4 4 collectives ${CMAKE_CURRENT_BINARY_DIR}/parallel_mpi_trace.json)
vitpipe_mpi_test(parallel_mpi_pipeline_gpipe_np4 4 pipeline gpipe 2 1 4)
vitpipe_mpi_test(parallel_mpi_pipeline_1f1b_np4 4 pipeline 1f1b 4 1 6)
vitpipe_mpi_test(parallel_mpi_pipeline_interleaved_np4 4 pipeline interleaved-1f1b 2 2 4)
vitpipe_mpi_test(parallel_mpi_pipeline_zbh1_np4 4 pipeline zb-h1 4 1 5)
set_tests_properties(${VITPIPE_MPI_TESTS} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" TIMEOUT 60 LABELS parallel)

# A rank that throws, exits early or dies must bring the whole job down within seconds, its reason shown.
foreach(case "fail;error: rank 3: injected failure at step 3" "exit;exiting before the job finished" "die;")
  list(GET case 0 scenario)
  list(LENGTH case parts)
  set(expected "")
  if(parts GREATER 1)
    list(GET case 1 expected)
  endif()
  add_test(NAME parallel_mpi_failure_${scenario}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/mpi/expect_job_failure.py --seconds 10
                   --expect "${expected}" -- ${VITPIPE_MPIRUN} -np 4 ${VITPIPE_MPI_DRIVER} ${scenario})
  set_tests_properties(parallel_mpi_failure_${scenario} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" TIMEOUT 60
                       LABELS parallel)
endforeach()

# MPI_Finalize under the deadline: rank 0 late at the end past VITPIPE_COMM_TIMEOUT, the others say so and the job ends.
add_test(NAME parallel_mpi_failure_late-finalize
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/mpi/expect_job_failure.py --seconds 15
                 --expect "MPI_Finalize: the job's end, with every rank" -- ${VITPIPE_MPIRUN} -np 2 ${VITPIPE_MPI_DRIVER}
                 late-finalize)
set_tests_properties(parallel_mpi_failure_late-finalize PROPERTIES
                     ENVIRONMENT "${VITPIPE_TEST_ENV};VITPIPE_COMM_TIMEOUT=2" TIMEOUT 60 LABELS parallel)
