# io: the C++ probe the Python reference checks drive, and those checks (independent numpy/json safetensors reader
# and writer, a torch model with Hugging Face's module names, torch's bicubic interpolation).
add_executable(io_probe ${CMAKE_CURRENT_LIST_DIR}/probe/io_probe.cpp)
target_link_libraries(io_probe PRIVATE vitpipe_library)

foreach(check safetensors_interop model_interop position_interpolation_reference)
  add_test(NAME io.python.${check}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/${check}.py)
  set_tests_properties(io.python.${check} PROPERTIES
    ENVIRONMENT "${VITPIPE_TEST_ENV};IO_PROBE=$<TARGET_FILE:io_probe>" LABELS io TIMEOUT 300)
endforeach()

# JSON files with a control or non-UTF-8 byte on the command line (a model's config.json, train --config, --labels
# FILE): one error line naming the file, the byte offset and the byte as \xNN, stderr strict UTF-8 (json_bad_bytes.py).
add_test(NAME io.json_bad_bytes COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/json_bad_bytes.py)
set_tests_properties(io.json_bad_bytes PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS io TIMEOUT 120)
