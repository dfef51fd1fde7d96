# ThreadSanitizer over the code that runs threads of its own: ranks as threads (LocalCommunicator), the gradient
# buckets' overlapped all-reduce, the data loader's and `data prepare`'s thread pools, serve's dynamic batcher. Not
# serve's HTTP connection server: its workers run Debian's cpp-httplib, which is not instrumented, and a report
# inside its process_request (seen once in a clean-clone run) cannot be told from a false one there.
# Built only in a build directory configured with -DVITPIPE_TSAN_TESTS=ON (scripts/test_sanitized.sh: build-tsan/),
# from the sources those tests need compiled with -fsanitize=thread. The kernels, the model and the pipeline executor are left out:
# their OpenMP parallel regions run on GCC's libgomp, which ThreadSanitizer cannot see into (false reports).
option(VITPIPE_TSAN_TESTS "Build test_threads_tsan (ThreadSanitizer; a build directory of its own)" OFF)
if(VITPIPE_TSAN_TESTS)
  file(GLOB tsan_sources CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/src/util/*.cpp ${PROJECT_SOURCE_DIR}/src/tensor/*.cpp ${PROJECT_SOURCE_DIR}/src/io/*.cpp
       ${PROJECT_SOURCE_DIR}/src/data/*.cpp)
  # The ONNX export is neither threaded nor built without ONNX's compile definitions.
  list(REMOVE_ITEM tsan_sources ${PROJECT_SOURCE_DIR}/src/io/onnx_export.cpp)
  foreach(file parallel/communicator parallel/local_communicator parallel/mpi_communicator parallel/gradient_buckets
          parallel/schedule parallel/process_grid parallel/trace parallel/optimizer_shards parallel/parameter_gather
          parallel/comm_deadline parallel/ring_allreduce parallel/chain_collectives
          model/vit_config model/parameter_layout model/initializer model/position_interpolation model/model_family
          model/presets model/trainable_set model/low_rank_update serve/inference_batcher serve/serve_metrics
          backend/backend_memory evaluation/subgroup_attributes)
    list(APPEND tsan_sources ${PROJECT_SOURCE_DIR}/src/${file}.cpp)
  endforeach()
  add_executable(test_threads_tsan ${tsan_sources}
    ${PROJECT_SOURCE_DIR}/tests/parallel/test_local_communicator.cpp
    ${PROJECT_SOURCE_DIR}/tests/parallel/test_gradient_buckets.cpp
    ${PROJECT_SOURCE_DIR}/tests/parallel/test_chain_collectives.cpp
    ${PROJECT_SOURCE_DIR}/tests/parallel/test_stop_request.cpp
    ${PROJECT_SOURCE_DIR}/tests/data/test_cache_and_loader.cpp
    ${PROJECT_SOURCE_DIR}/tests/data/test_archive_prepare.cpp
    ${PROJECT_SOURCE_DIR}/tests/serve/test_inference_batcher_threads.cpp)
  target_include_directories(test_threads_tsan PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests/data)
  target_compile_definitions(test_threads_tsan PRIVATE VITPIPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # No -fopenmp: the few OpenMP loops in these files run serially, on threads ThreadSanitizer sees.
  target_compile_options(test_threads_tsan PRIVATE -fsanitize=thread -O1 -g1 -Wno-unknown-pragmas)
  target_link_options(test_threads_tsan PRIVATE -fsanitize=thread)
  target_link_libraries(test_threads_tsan PRIVATE GTest::gtest_main MPI::MPI_C PkgConfig::SPNG JPEG::JPEG
    nlohmann_json::nlohmann_json CURL::libcurl OpenSSL::Crypto yaml-cpp PkgConfig::LIBZIP PkgConfig::LIBARCHIVE ZLIB::ZLIB
    Threads::Threads CLI11::CLI11 DCMTK::dcmdata DCMTK::dcmjpeg DCMTK::dcmjpls PkgConfig::OPENJPEG
    ${OpenMP_gomp_LIBRARY})  # util/threads calls omp_set_num_threads
  add_test(NAME tsan.threads COMMAND test_threads_tsan)
  set_tests_properties(tsan.threads PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV};TSAN_OPTIONS=halt_on_error=1"
                       LABELS tsan TIMEOUT 600)
  # The negative control: a program with a data race must be reported.
  add_executable(tsan_race_canary ${CMAKE_CURRENT_LIST_DIR}/race_canary.cpp)
  target_compile_options(tsan_race_canary PRIVATE -fsanitize=thread -O1 -g1)
  target_link_options(tsan_race_canary PRIVATE -fsanitize=thread)
  target_link_libraries(tsan_race_canary PRIVATE Threads::Threads)
  add_test(NAME tsan.canary COMMAND tsan_race_canary)
  set_tests_properties(tsan.canary PROPERTIES ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1" LABELS tsan
                       PASS_REGULAR_EXPRESSION "WARNING: ThreadSanitizer: data race")
endif()
