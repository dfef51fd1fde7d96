# --- The README and docs/ (check_docs.py): the README short, every link resolving, every command one vitpipe takes,
# every --help free of CLI11's "{false}" ---
foreach(case length links commands help)
  add_test(NAME docs.${case} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_docs.py --case ${case})
  set_tests_properties(docs.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS docs TIMEOUT 300)
endforeach()
