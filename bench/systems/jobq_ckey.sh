# jobq with every job keyed: one of 100 concurrency keys, limit 5 (bench/pressure.py's
# jobq_ckey; jobq_reset's ckey backlog). Same extension.
. bench/systems/jobq.sh
jobq_ckey_install() { :; }
jobq_ckey_version() { echo "jobq_ckey: jobq, every job with one of 100 concurrency keys of limit 5"; }
jobq_ckey_reset() { jobq_reset "$1" ckey; }
