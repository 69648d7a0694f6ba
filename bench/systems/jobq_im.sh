# jobq with jobq.notify = deferred, set for the benchmark's connections through PGOPTIONS: the
# background worker sends the NOTIFY of an enqueue right after its commit, instead of the
# enqueuing transaction (src/wakes.rs). Same extension, same scripts (bench/scripts/jobq_dn_*
# are links to jobq_*).
. bench/systems/jobq.sh
jobq_dn_install() { :; }
jobq_dn_version() { echo "jobq_dn: jobq with jobq.notify = deferred"; }
jobq_dn_reset() { jobq_reset "$@"; }
jobq_dn_PGOPTIONS="-c jobq.notify=deferred"
