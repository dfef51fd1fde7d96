# The HTML report: its numbers against scikit-learn and eval, and a real (headless) Chromium opening it offline.
add_test(NAME report.in_browser COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/report_in_browser.py)
set_tests_properties(report.in_browser PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS report TIMEOUT 600
                     SKIP_RETURN_CODE 77)

# The model card's subgroup section (report/card_subgroups.h) against `vitpipe eval --json` on the same split, cell by
# cell, and "not evaluated" where the predictions carry no sex, age or view or no run is known.
add_test(NAME report.card_subgroups COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/card_subgroups.py)
set_tests_properties(report.card_subgroups PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS report TIMEOUT 300)

# Errors about the report's JSON inputs (train_options.json, heatmaps/index.json, --localization) holding \xff, DEL or
# ill-formed UTF-8: strict UTF-8 on stderr naming the file and byte offset, the byte written \xNN, non-zero exit.
add_test(NAME report.input_error_bytes COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/input_error_bytes.py)
set_tests_properties(report.input_error_bytes PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS report TIMEOUT 60
                     SKIP_RETURN_CODE 77)
