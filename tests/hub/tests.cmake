# Hub downloads against a loopback Hub emulator, and pytorch_model.bin reading against files torch.save wrote.
add_executable(hub_resolve_model ${CMAKE_CURRENT_LIST_DIR}/tools/resolve_model.cpp)
target_link_libraries(hub_resolve_model PRIVATE vitpipe_library)
add_executable(hub_dump_pytorch_bin ${CMAKE_CURRENT_LIST_DIR}/tools/dump_pytorch_bin.cpp)
target_link_libraries(hub_dump_pytorch_bin PRIVATE vitpipe_library)

set(HUB_TEST_ENV ${VITPIPE_TEST_ENV}
    "HUB_RESOLVE_MODEL=$<TARGET_FILE:hub_resolve_model>"
    "HUB_DUMP_PYTORCH_BIN=$<TARGET_FILE:hub_dump_pytorch_bin>")

set(HUB_DOWNLOAD_CASES
    first_download_then_offline_reuse cache_layout_matches_huggingface_hub resume_after_interruption
    resume_after_killed_process storage_unavailable_then_retried range_ignored_by_server corrupted_blob_refused token_sent_to_hub_not_storage
    token_not_sent_to_same_host_storage
    token_from_hf_home_file missing_or_wrong_token gated_repo revision_pinning_by_branch_and_commit
    unknown_repo_revision_and_file offline_with_empty_cache missing_optional_file_recorded sharded_safetensors
    pytorch_bin_only concurrent_downloads_share_one_transfer implicit_download_through_model_reference
    model_reference_paths_and_ids adapter_repository tls_verified_against_ca_bundle proxy_from_environment
    hub_unreachable)
foreach(case ${HUB_DOWNLOAD_CASES})
  add_test(NAME hub.download.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_hub_download.py HubDownloadTest.test_${case})
  set_tests_properties(hub.download.${case} PROPERTIES ENVIRONMENT "${HUB_TEST_ENV}" LABELS hub TIMEOUT 120)
endforeach()

set(HUB_PYTORCH_BIN_CASES
    zip_formats_match_torch legacy_format_matches_torch sharded_index_matches_torch dtypes_and_shapes torch2_layout
    hostile_reduce_os_system hostile_builtins_eval hostile_unknown_torch_global hostile_recursion_bombs
    hostile_out_of_bounds_storage truncated_files hostile_record_sizes)
foreach(case ${HUB_PYTORCH_BIN_CASES})
  add_test(NAME hub.pytorch_bin.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_pytorch_bin.py PytorchBinTest.test_${case})
  set_tests_properties(hub.pytorch_bin.${case} PROPERTIES ENVIRONMENT "${HUB_TEST_ENV}" LABELS hub TIMEOUT 120)
endforeach()

# Model directories with only pytorch_model.bin, through load_model (the io layer's probe and HF-structured torch model).
foreach(case pytorch_model_bin_formats_load_like_safetensors sharded_bin_index bf16_backbone_bin_gets_a_fresh_head
             safetensors_preferred_and_hostile_bin_refused)
  add_test(NAME hub.model_dir.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_model_dir_bin.py ModelDirectoryBinTest.test_${case})
  set_tests_properties(hub.model_dir.${case} PROPERTIES
    ENVIRONMENT "${HUB_TEST_ENV};IO_PROBE=$<TARGET_FILE:io_probe>" LABELS hub TIMEOUT 120)
endforeach()

# `vitpipe push` and `train --push-to-hub` against the emulator's upload side: download back byte-identical, no LFS
# object sent twice, a bad token or namespace leaves the repository unchanged, 503s and broken uploads retried.
foreach(case train_push_to_hub_then_download_byte_identical second_push_uploads_no_lfs_again
             bad_token_fails_and_leaves_repo_unchanged forbidden_namespace_and_missing_revision
             unavailable_storage_and_broken_connection_are_retried storage_failing_every_time_commits_nothing
             create_pr_into_a_private_repo local_folder_checked_before_token_and_network)
  add_test(NAME hub.push.${case}
           COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_hub_push.py HubPushTest.test_${case})
  set_tests_properties(hub.push.${case} PROPERTIES ENVIRONMENT "${HUB_TEST_ENV}" LABELS hub TIMEOUT 120)
endforeach()
