# `vitpipe train` across hosts made of network namespaces on this machine (namespaced_hosts.py: veth links shaped
# by tc, mpirun's daemons started in each namespace by an rsh agent): layouts across the link equal one process; a
# link taken down, a silent link (every link up, frames dropped) and a rank SIGKILLed on the other host each end
# every process within 120 s with the ranks' lines in <output-dir>/failures.log, and the run resumes to the
# uninterrupted weights bit for bit. Needs root and iproute2; skipped (exit 77) otherwise. About 75 s together.
foreach(case equal.replicas1x2 equal.stages2x2 lost-link silent-link killed-rank)
  add_test(NAME multihost.${case} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_multihost.py ${case})
  set_tests_properties(multihost.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS multihost TIMEOUT 170
                       SKIP_RETURN_CODE 77 RESOURCE_LOCK multihost)
endforeach()
