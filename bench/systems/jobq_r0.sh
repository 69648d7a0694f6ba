# jobq with jobq.retention = 0, set for the benchmark's connections through PGOPTIONS: nothing
# finished is kept, so jobq_complete deletes the job, as the baseline and Graphile Worker do
# (the jobq row keeps every finished job for the default day, as Procrastinate does). Same
# extension, same scripts (bench/scripts/jobq_r0_* are links to jobq_*).
. bench/systems/jobq.sh
jobq_r0_install() { :; }
jobq_r0_version() { echo "jobq_r0: jobq with jobq.retention = 0"; }
jobq_r0_reset() { jobq_reset "$@"; }
jobq_r0_PGOPTIONS="-c jobq.retention=0"
