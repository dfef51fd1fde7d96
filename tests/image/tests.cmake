# tests/image: the Pillow/numpy reference data is generated at test time by make_references.py, run by the gtests
# in test_pillow_reference.cpp with this interpreter (Debian's python3 with PIL and numpy).
target_compile_definitions(test_image PRIVATE VITPIPE_PYTHON_EXECUTABLE="${VITPIPE_PYTHON}")
# DICOM pixels against the reference rule written again with pydicom + numpy (and DCMTK's dcmj2pnm), 16-bit PNG
# intensity policies against numpy and Pillow, and bad input (DICOM, CheXpert CSV): one line, exit 1, nothing written.
foreach(check check_dicom check_png_intensity check_bad_input)
  add_test(NAME image.${check} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/${check}.py)
  set_tests_properties(image.${check} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS image TIMEOUT 300)
endforeach()
