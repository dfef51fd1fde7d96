// The launcher's variables (parallel/launch_environment.h): Open MPI's mpirun, MPICH's Hydra and Slurm's srun, which
// comes first when several are set (mpirun inside a Slurm allocation), Slurm's compressed task counts, the threads
// per rank, and one clear message for a malformed value.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "parallel/launch_environment.h"
#include "util/error.h"

namespace vitpipe {
namespace {

LaunchEnvironment read(const std::map<std::string, std::string>& variables) {
  return read_launch_environment([&](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

std::string message_of(const std::map<std::string, std::string>& variables) {
  try {
    read(variables);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnvironment, NoLauncherIsOneRankWithoutCpusPerTask) {
  const LaunchEnvironment launch = read({});
  EXPECT_EQ(launch.local_rank, 0);
  EXPECT_EQ(launch.local_ranks, 1);
  EXPECT_EQ(launch.cpus_per_task, 0);
  EXPECT_EQ(launch.local_source, "");
}

TEST(LaunchEnvironment, SrunGivesTheLocalRankAndTheStepsTasksOnThisNode) {
  // srun -N3 -n5: 2 tasks on each of the first 2 nodes, 1 on the third; this is the second task of node 1.
  const LaunchEnvironment launch = read({{"SLURM_LOCALID", "1"},
                                         {"SLURM_NODEID", "1"},
                                         {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                                         {"SLURM_TASKS_PER_NODE", "4(x3)"},
                                         {"SLURM_CPUS_PER_TASK", "8"}});
  EXPECT_EQ(launch.local_source, "Slurm");
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_ranks, 2);  // the step's count, not the job's
  EXPECT_EQ(launch.cpus_per_task, 8);
  EXPECT_EQ(read({{"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}}).local_ranks,
            1);
  // Without the step's counts (a batch step), the job's.
  EXPECT_EQ(read({{"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "3"}}).local_ranks, 3);
}

TEST(LaunchEnvironment, MpirunInsideAnAllocationWinsOverSlurmsOneTaskPerNode) {
  // mpirun's daemons are srun tasks (one per node: SLURM_LOCALID 0 for every rank); Open MPI's numbers are the ranks'.
  const LaunchEnvironment launch = read({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                         {"SLURM_LOCALID", "0"},
                                         {"SLURM_NODEID", "0"},
                                         {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                                         {"SLURM_CPUS_PER_TASK", "2"}});
  EXPECT_EQ(launch.local_source, "Open MPI");
  EXPECT_EQ(launch.local_rank, 3);
  EXPECT_EQ(launch.local_ranks, 4);
  EXPECT_EQ(launch.cpus_per_task, 2);
  const LaunchEnvironment hydra = read({{"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}, {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(hydra.local_source, "MPICH");
  EXPECT_EQ(hydra.local_rank, 1);
  EXPECT_EQ(hydra.local_ranks, 2);
}

TEST(LaunchEnvironment, SlurmsCompressedTaskCounts) {
  EXPECT_EQ(tasks_on_node("4", 0, "X"), 4);
  EXPECT_EQ(tasks_on_node("2(x3)", 2, "X"), 2);
  EXPECT_EQ(tasks_on_node("2(x3),1,5(x2)", 3, "X"), 1);
  EXPECT_EQ(tasks_on_node("2(x3),1,5(x2)", 5, "X"), 5);
  EXPECT_THROW(tasks_on_node("2(x3)", 3, "X"), Error);  // past the last node
  EXPECT_THROW(tasks_on_node("2(x", 0, "X"), Error);
  EXPECT_THROW(tasks_on_node("two", 0, "X"), Error);
}

TEST(LaunchEnvironment, ThreadsPerRankNeverOversubscribeTheNode) {
  LaunchEnvironment launch;
  EXPECT_EQ(default_threads_per_rank(launch, 64, 64), 64);  // one process: every core it may use
  EXPECT_EQ(default_threads_per_rank(launch, 64, 8), 8);    // capped at its affinity mask
  launch.local_ranks = 4;
  EXPECT_EQ(default_threads_per_rank(launch, 64, 64), 16);  // the node's cores over its ranks
  launch.local_ranks = 4;
  EXPECT_EQ(default_threads_per_rank(launch, 2, 2), 1);  // at least one
  launch.cpus_per_task = 6;
  EXPECT_EQ(default_threads_per_rank(launch, 64, 64), 6);  // Slurm's --cpus-per-task, whatever the node has
}

TEST(LaunchEnvironment, SrunTasksWithoutMpiAreRefused) {
  const LaunchEnvironment two_tasks = read({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(two_tasks.srun_tasks, 2);
  EXPECT_NO_THROW(refuse_srun_tasks_without_mpi(two_tasks, true));  // srun --mpi=pmix
  try {
    refuse_srun_tasks_without_mpi(two_tasks, false);  // srun --mpi=none: each task alone
    ADD_FAILURE() << "2 srun tasks without MPI were not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("srun started 2 tasks (SLURM_STEP_NUM_TASKS) but MPI did not start"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(refuse_srun_tasks_without_mpi(read({{"SLURM_STEP_NUM_TASKS", "1"}}), false));  // srun -n1
  EXPECT_NO_THROW(refuse_srun_tasks_without_mpi(read({{"SLURM_TASKS_PER_NODE", "4"}}), false));  // a batch script
}

TEST(LaunchEnvironment, AMalformedValueIsNamedWithWhatWasExpected) {
  EXPECT_EQ(message_of({{"SLURM_CPUS_PER_TASK", "eight"}}),
            "environment variable SLURM_CPUS_PER_TASK: expected an integer >= 1, got 'eight'");
  EXPECT_EQ(message_of({{"SLURM_CPUS_PER_TASK", "0"}}),
            "environment variable SLURM_CPUS_PER_TASK: expected an integer >= 1, got '0'");
  EXPECT_EQ(message_of({{"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}}),
            "environment variable OMPI_COMM_WORLD_LOCAL_RANK: expected an integer >= 0, got '-1'");
  EXPECT_NE(message_of({{"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}})
                .find("SLURM_STEP_TASKS_PER_NODE: '1(x2)' counts 2 node(s), this is node 4"),
            std::string::npos);
  EXPECT_NE(message_of({{"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}).find("not below"),
            std::string::npos);
}

}  // namespace
}  // namespace vitpipe
