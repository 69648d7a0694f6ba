# jobq's SQL edition as jobq's workers run it (clients/*: the one-commit protocol, one job in
# hand): each call completes the job in hand and checks out the next, jobq_complete_and_checkout
# (bench/scripts/jobq_sql_w_checkout_complete.sql, a link to jobq_fused.sql, batch 1): one call
# and one transaction per job, where the row jobq_sql makes the two calls, two transactions.
# The same install as jobq_sql (bench/systems/jobq_sql.sh). Workload a only (bench/compare.sh).
. bench/systems/jobq_sql.sh
jobq_sql_w_install() { jobq_sql_install; }
jobq_sql_w_version() { echo "jobq_sql_w: the SQL edition as jobq's workers run it (jobq_complete_and_checkout with the job in hand)"; }
jobq_sql_w_reset() { jobq_sql_reset "$@"; }
jobq_sql_w_PGBENCH="-D batch=1 -D ids={}"
