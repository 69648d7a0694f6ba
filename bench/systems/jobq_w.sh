# jobq as jobq's workers run it (clients/*: the one-commit protocol, one job in hand): each call
# completes the job in hand and checks out the next, jobq_complete_and_checkout
# (bench/scripts/jobq_w_checkout_complete.sql, a link to jobq_fused.sql, batch 1): one call and
# one transaction per job, where the row jobq makes the two calls, two transactions. The same
# install as jobq (bench/systems/jobq.sh). Workload a only (bench/compare.sh).
. bench/systems/jobq.sh
jobq_w_install() { jobq_install; }
jobq_w_version() { echo "jobq_w: jobq as its workers run it (jobq_complete_and_checkout with the job in hand)"; }
jobq_w_reset() { jobq_reset "$@"; }
jobq_w_PGBENCH="-D batch=1 -D ids={}"
