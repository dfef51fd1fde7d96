# `vitpipe data inspect` checked against Python's csv module; `vitpipe data prepare` end to end.
add_test(NAME data_inspect_matches_csv COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_inspect.py)
set_tests_properties(data_inspect_matches_csv PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS data)
add_test(NAME data_prepare_cli COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/check_prepare.sh)
set_tests_properties(data_prepare_cli PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS data)
add_test(NAME data_label_sets_cli COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_label_sets_cli.py)
set_tests_properties(data_label_sets_cli PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS data)
# Silent data choices said in one line each: folder: divided by image (patient leakage), csv: "No Finding" as a label.
add_test(NAME data_choices_said COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_data_choices.py)
set_tests_properties(data_choices_said PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS data)
# Issue 46: prepare from NIH's images_0XX.tar.gz read in place (and the Kaggle layout) equals prepare from the folder;
# a truncated archive is named with its member, and the next run goes on from what was decoded.
add_test(NAME data_prepare_archives COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_prepare_archives.py)
set_tests_properties(data_prepare_archives PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS data TIMEOUT 120)
