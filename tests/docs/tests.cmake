# --- The README and docs/ (check_docs.py): the README short, every link resolving, every command one vitpipe takes ---
foreach(case length links commands)
  add_test(NAME docs.${case} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_docs.py --case ${case})
  set_tests_properties(docs.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS docs TIMEOUT 300)
endforeach()
