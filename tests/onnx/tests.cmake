# `vitpipe export --format onnx` in the real ONNX Runtime (npm's onnxruntime-node, installed by setup.sh --tests into
# tests/onnx/node_modules) against `vitpipe predict`, every family, batch 1 and 5; python3-onnx checks the files.
foreach(case vit vit-external-data vit-other-size dinov2-bit-interpolated dinov2-swiglu-rad-dino-processor
        dinov2-registers-bit deit-distilled-crop deit-with-token-crop lora-adapter train-export-onnx refusals)
  add_test(NAME onnx.export.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/onnx_export.py --case ${case})
  set_tests_properties(onnx.export.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS onnx TIMEOUT 300)
endforeach()
