# End-to-end runs of `vitpipe train / eval / export / predict` in one process (stages as threads at most), each a
# Python script driving the binary ($VITPIPE) on generated data or the bundled ChestX-ray14 sample, checked against
# an independent safetensors reader, a plain-torch ViT and scikit-learn; intensity_and_labels: the intensity policy
# through export / predict / eval / the cache, masked labels and cross-dataset label mapping; run_files: what a run
# writes read back from another directory (absolute model paths, `export RUN` = its best model, --keep-checkpoints);
# model_card: the README.md train / export / `vitpipe card` write (PyYAML, huggingface_hub's model-index schema,
# eval's numbers); output_folders: one overwrite rule for every command that writes a folder; concurrent_output_dir:
# a second train into a folder another is writing is refused (the folder's lock).
# OpenMP threads that sleep at barriers instead of spinning: on 2 cores shared with other tests (load 15) a spinning
# thread waits out the time slice of its descheduled partner at every barrier; `train` of vit-micro for 6 steps at
# --threads 2 took 41-80 s spinning and 3.6-6.7 s sleeping, and model_card came near its 600 s TIMEOUT. Nothing
# here is timed.
set(VITPIPE_E2E_WAIT_POLICY "OMP_WAIT_POLICY=passive")
foreach(check train_refuses_bad_flags train_learns_and_exports train_resume train_accumulation eval_matches_sklearn
        train_checkpoint_cadence sbatch_template
        intensity_and_labels train_same_at_every_level eval_patients_and_thresholds run_files model_card
        output_folders concurrent_output_dir)
  add_test(NAME train_e2e.${check} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/${check}.py)
  set_tests_properties(train_e2e.${check} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV};${VITPIPE_E2E_WAIT_POLICY}"
                      LABELS train_e2e TIMEOUT 600
                      SKIP_RETURN_CODE 77)
endforeach()

# Frozen, partial and LoRA fine-tuning of a DINOv2 (checkpoints, resume, stages, mpirun replicas, exports, caches).
add_test(NAME train_e2e.train_modes
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/train_modes.py --mpiexec ${MPIEXEC_EXECUTABLE})
set_tests_properties(train_e2e.train_modes PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS train_e2e TIMEOUT 900)

# A rank frozen mid-run (SIGSTOP: a peer behind a lost link) ends the job at VITPIPE_COMM_TIMEOUT instead of hanging.
add_test(NAME train_e2e.lost_peer
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/lost_peer.py --mpiexec ${MPIEXEC_EXECUTABLE})
set_tests_properties(train_e2e.lost_peer PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV}" LABELS train_e2e TIMEOUT 600)

# SIGINT / SIGTERM / SIGUSR1 mid-run (one process, stages as threads, 2 mpirun ranks): exit 128 + signal, a complete
# checkpoint, resumed bit for bit; a second signal in the middle of the checkpoint (fsyncs slowed by the fault shim).
add_test(NAME train_e2e.train_stop_signals
         COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/train_stop_signals.py --mpiexec ${MPIEXEC_EXECUTABLE})
set_tests_properties(train_e2e.train_stop_signals PROPERTIES
  ENVIRONMENT "${VITPIPE_TEST_ENV};FAULT_SHIM=$<TARGET_FILE:vitpipe_fault_shim>" LABELS train_e2e TIMEOUT 600)
