# --- Findings SR and heatmap Secondary Capture (serve/structured_report.h, serve/secondary_capture.h) ---
# structured_report_tool writes them from arguments; check_structured_report.py makes CR and DX images with pydicom,
# reads what the tool wrote back with pydicom and runs dciodvfy on it (skipped, visibly, where dciodvfy is missing).
add_executable(structured_report_tool ${CMAKE_CURRENT_LIST_DIR}/tools/structured_report_tool.cpp)
target_link_libraries(structured_report_tool PRIVATE vitpipe_library)
foreach(case cr-ascii dx-non-ascii long-labels heatmap refusals)
  add_test(NAME serve.structured_report.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_structured_report.py --case ${case})
  set_tests_properties(serve.structured_report.${case} PROPERTIES
                       ENVIRONMENT "STRUCTURED_REPORT_TOOL=$<TARGET_FILE:structured_report_tool>"
                       LABELS serve TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()

# --- `vitpipe serve` over HTTP on loopback, against `vitpipe predict` on the same files (serve_http.py) ---
foreach(case load overload bad-requests token heatmap stow sigterm)
  add_test(NAME serve.http.${case} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/serve_http.py --case ${case})
  set_tests_properties(serve.http.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS serve TIMEOUT 300)
endforeach()

# --- `vitpipe serve` under attack on loopback (serve_attacks.py): bytes that are not UTF-8, pipelining, slow and idle
# connections, a port in use, --port 0 (two servers, two ports), keep-alive latency, a POST without a length, what
# /v1/model discloses, a decode bomb, control and non-UTF-8 bytes in bodies and part names (escaped \xNN in the
# error) ---
foreach(case non-utf8 pipelining slow-clients port-in-use port-zero keep-alive no-length model-info decode-bomb
        dicom-node dicom-nesting slow-bodies page-policy bad-bytes)
  add_test(NAME serve.attacks.${case} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/serve_attacks.py --case ${case})
  set_tests_properties(serve.attacks.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS serve TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()

# --- `vitpipe serve` as a DICOM node and STOW-RS server of a real Orthanc (serve_orthanc.py; skipped without it) ---
foreach(case store-sr stow refused resume)
  add_test(NAME serve.orthanc.${case} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/serve_orthanc.py --case ${case})
  set_tests_properties(serve.orthanc.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS serve TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()

# --- The page at / in headless Chromium (try_page_in_browser.py): a model trained for two steps on the bundled NIH
# sample, real NIH images chosen in the page (PNG, full-size PNG, DICOM), its probabilities against `vitpipe predict`,
# its flags against thresholds.json, the bearer token; skipped without chromium ---
add_test(NAME serve.try_page COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/try_page_in_browser.py)
set_tests_properties(serve.try_page PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS serve TIMEOUT 300
                     SKIP_RETURN_CODE 77)
