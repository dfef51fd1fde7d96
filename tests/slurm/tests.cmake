# `vitpipe train` under a real Slurm 22.05 (slurm_cluster.py: slurmctld and 2 slurmd nodes in network namespaces, one
# munged; all torn down by pid, namespaces and state removed, also on failure) through scripts/slurm/train.sbatch:
# 2 nodes x 1 rank over srun --mpi=pmix equal one process, so do 2 nodes x 2 ranks; mpirun inside an allocation takes its threads from
# SLURM_CPUS_PER_TASK and `plan` finds Slurm's nodes; a job requeued mid-run by `scontrol requeue`, and a SIGUSR1 to
# the batch shell (the template's trap requeues the job, or says it cannot), end at exactly the uninterrupted weights.
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge (scripts/setup.sh --tests); skipped (exit 77)
# otherwise. About 2 minutes together on 2 cores; each wait is on a state (nodes idle, a job done) with a deadline
# generous enough for a loaded machine (2 cores at load 15), and probes that time out are asked again; OpenMP threads
# sleep at barriers (see tests/train_e2e/tests.cmake: spinning ones crawl on a shared machine).
foreach(case template mpirun srun-2x2 requeue usr1-requeue usr1)
  add_test(NAME slurm.${case} COMMAND ${VITPIPE_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_slurm.py ${case})
  set_tests_properties(slurm.${case} PROPERTIES ENVIRONMENT "${VITPIPE_TEST_ENV};OMP_WAIT_POLICY=passive"
                       LABELS slurm TIMEOUT 600
                       SKIP_RETURN_CODE 77 RESOURCE_LOCK slurm)
endforeach()
