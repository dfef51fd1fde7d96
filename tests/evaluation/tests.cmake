# tests/evaluation: the subgroup reference comparisons run inside test_evaluation (each test starts its Python
# script), so they need the interpreter that has numpy and scikit-learn.
target_compile_definitions(test_evaluation PRIVATE VITPIPE_PYTHON="${VITPIPE_PYTHON}")
# The metrics live in src/evaluation/, which reads no layer above it; the report does not reach into train.
add_test(NAME evaluation.layering COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_layering.py)
set_tests_properties(evaluation.layering PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS evaluation TIMEOUT 60)
# A run's report sections (a vit-micro for 6 steps on the bundled sample as a csv: dataset): train --subgroup's
# subgroups in metrics.jsonl beside the other metrics and in the report, per-site AUCs against scikit-learn; the
# localization section from eval --boxes --save-localization on the sample's 9 boxes, "not evaluated" before.
add_test(NAME evaluation.train_report_sections
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/train_report_sections.py)
set_tests_properties(evaluation.train_report_sections PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS evaluation
                     TIMEOUT 300 SKIP_RETURN_CODE 77)
