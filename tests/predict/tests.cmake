# Golden test of `vitpipe predict` against transformers' ViTImageProcessor + ViTForImageClassification (transcribed
# in hf_vit.py), on checkpoints and images written by Python: logits to 1e-4, probabilities, CSV, refusals.
foreach(case chestxray14-p16 p8-no-qkv-bias-old-size bicubic-one-label-legacy-names sharded-two-labels f16-weights
        single-label-problem-one-label no-resize-native-images vit-tiny-224
        refusals)
  add_test(NAME predict.golden.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/predict_golden.py --case ${case})
  set_tests_properties(predict.golden.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS predict TIMEOUT 300)
endforeach()

# DeiT, DINOv2 and DINOv2 with registers with their processors (resize + centre crop, shortest edge + crop).
foreach(case dinov2-bit-interpolated dinov2-swiglu-rad-dino-processor dinov2-registers-bit deit-distilled-crop
        deit-with-token-crop)
  add_test(NAME predict.families.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/predict_families.py --case ${case})
  set_tests_properties(predict.families.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS predict
                       TIMEOUT 300)
endforeach()

# A peft LoRA adapter directory as --model, against peft's unmerged LoRA forward (transcribed) on transformers' ViT.
foreach(case names-classifier regex-patterns-rslora layers-bias-all-bin new-labels train-continues refusals)
  add_test(NAME predict.peft.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/predict_peft.py --case ${case})
  set_tests_properties(predict.peft.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS predict TIMEOUT 300)
endforeach()

# Many inputs: folders (recursive, by extension and DICOM signature), @LIST files, unreadable files among readable
# ones (rows still written, reported at the end, exit 1 unless --skip-unreadable), streaming.
add_test(NAME predict.many COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/predict_many.py)
set_tests_properties(predict.many PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS predict TIMEOUT 300)

# Output that cannot be written (stdout on a full disk: /dev/full) ends predict and eval with exit 1 and one line.
add_test(NAME predict.output_not_written COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/output_not_written.py)
set_tests_properties(predict.output_not_written PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS predict TIMEOUT 300
                     SKIP_RETURN_CODE 77)
