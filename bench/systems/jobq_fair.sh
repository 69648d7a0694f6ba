# jobq with every job fair: one of 100 fairness keys in queue 'bench', taken in turns
# (src/fairness.rs; jobq_reset's fkey backlog). Same extension, jobq's pgbench scripts.
. bench/systems/jobq.sh
jobq_fair_SCRIPTS=jobq
jobq_fair_install() { :; }
jobq_fair_version() { echo "jobq_fair: jobq, every job with one of 100 fairness keys"; }
jobq_fair_reset() { jobq_reset "$1" fkey; }
