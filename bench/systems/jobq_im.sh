# jobq with jobq.notify = immediate, set for the benchmark's connections through PGOPTIONS: the
# enqueuing transaction sends its NOTIFY in its own commit, instead of the background worker
# right after it (the default, src/wakes.rs). Same extension, same scripts (bench/scripts/jobq_im_*
# are links to jobq_*).
. bench/systems/jobq.sh
jobq_im_install() { :; }
jobq_im_version() { echo "jobq_im: jobq with jobq.notify = immediate"; }
jobq_im_reset() { jobq_reset "$@"; }
jobq_im_PGOPTIONS="-c jobq.notify=immediate"
