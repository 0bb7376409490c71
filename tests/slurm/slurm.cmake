# tests/slurm/: launch/README.md's Slurm commands (srun in an allocation, a job script
# preempted with scancel --signal=TERM/USR1 and requeued, a task killed) run for real on a
# single-node Slurm that slurm_test.sh starts itself as root (munged, slurmctld, slurmd from
# Debian's slurm-wlm and munge, which scripts/setup.sh installs; a config in a temporary folder).
# It runs the built trident as it is (no target dependency) and fails, saying why, where it
# cannot run (not root, a program missing). About 60 s on 2 cores; the script stops itself at
# 240 s, before this TIMEOUT, so that its own cleanup stops the daemons.
add_test(NAME Slurm COMMAND bash ${PROJECT_SOURCE_DIR}/tests/slurm/slurm_test.sh ${PROJECT_BINARY_DIR}
                            ${PROJECT_SOURCE_DIR})
# The README's srun line uses the default MASTER_PORT (29500), as a user types it.
# Label slow too: starting Slurm's daemons is what only a full run needs (the launcher's reading
# of Slurm's environment without Slurm: TwoNodes.SlurmVariablesWithoutLauncher).
set_tests_properties(Slurm PROPERTIES LABELS "slurm;slow" TIMEOUT 300 RESOURCE_LOCK master_port_29500 COST 60)
