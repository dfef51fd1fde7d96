# tests/image: the Pillow/numpy reference data is generated at test time by make_references.py, run by the gtests
# in test_pillow_reference.cpp with this interpreter (Debian's python3 with PIL and numpy).
target_compile_definitions(test_image PRIVATE VITPIPE_PYTHON_EXECUTABLE="${VITPIPE_PYTHON}")
