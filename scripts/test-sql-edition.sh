#!/usr/bin/env bash
# The suites of the guarantees, run against the SQL edition (docs/sql-edition.md): the file built
# from this tree (scripts/build-sql-edition.py), installed in every test database by
# `jobq_installer`, a role with CREATEROLE that is no superuser, on servers without jobq's
# library (tests/common, JOBQ_SQL_EDITION). tests/sql_edition.rs, which runs in every version's
# suite, covers what is the edition's own: its install, a second run, a failing run, its catalog
# against the extension's, pg_dump and restore, the whole pass, pg_cron.
#   scripts/test-sql-edition.sh [VERSION]     PostgreSQL 15 (default), 17 or 18
# Extra arguments: `--test SUITE` (once or more) runs those suites instead of every one;
# `--profile NAME` builds in that profile; any other goes to the suites' binaries (a test name
# filter). The suites run two at a time (scripts/run-suites.py), built with the features of the
# extension's suite (cargo pgrx test's), so that after it nothing is built again.
set -euo pipefail
cd "$(dirname "$0")/.."
v=${1:-15}
shift || true
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
file=$PWD/target/sql-edition/jobq-sql--$version.sql
python3 scripts/build-sql-edition.py "$file" >/dev/null
export JOBQ_SQL_EDITION=$file
features=(--no-default-features --features "pg_test pg$v")
# Every suite of a guarantee of the edition: exactly once, fencing, keys, slots, rate limits,
# locks, schedules, workflows, privileges and search-path pinning, crash recovery, every
# isolation level (in each), fair checkout, the waiting checkout, and the example workers of four languages
# (killed, through PgBouncer in transaction mode).
suites=(exactly_once keys lifecycle complete privileges tenants fairness reaper waits workflows schedules observing cross_language)
skip=(
  # The extension's Rust beside its SQL, compared: the SQL edition has the SQL alone
  # (tests/checkout.rs is all of that kind and does not run here).
  both_paths_leave_the_same_rows_and_release_the_same_keys
  the_fast_paths_serve_a_limited_role_inside_its_grants
  # The fast path's floors of the turns, kept in shared memory (src/fairness.rs).
  a_transaction_that_adds_a_turn_cannot_be_prepared
  # CREATE EXTENSION and DROP EXTENSION in a test database.
  a_session_completes_across_a_drop_and_create_of_the_extension
  a_second_database_and_drop_then_create_extension_work
  # The background worker and the extension's settings: the SQL edition has neither (its
  # passes: tests/sql_edition.rs).
  a_full_max_worker_processes_gets_a_backoff_not_a_line_every_tick
  a_standby_reaps_only_once_promoted
  the_background_worker_behaves_like_postgres_own
  the_background_worker_reaps_by_itself
  the_background_worker_recovers_around_an_open_transaction
  the_background_worker_fires_ticks_once_even_across_a_crash
  keys_left_without_jobs_are_pruned_at_once_when_walks_pass_many
  checkouts_take_every_job_once_while_keys_left_without_jobs_are_pruned_at_once
  a_worker_waiting_longer_than_the_heartbeat_timeout_is_not_reaped
  settings_are_gucs_with_units
  counters_count_what_committed_per_queue_and_minute_with_wait_and_run_times
  counters_stay_exact_while_many_sessions_move_jobs_and_passes_flush
  the_dashboard_views_show_keys_rate_windows_tables_and_health
  # Where the contract lets the SQL edition differ: a bound worker whose session ended is dead
  # at the next pass (not at once); a waiting checkout keeps its statement's snapshot; every
  # waiting checkout looks again at a ring (not exactly one).
  liveness_is_judged_on_the_live_sessions_not_on_a_transactions_snapshot
  a_waiting_checkout_wakes_at_the_commit_of_a_job_for_it_and_holds_no_snapshot
  a_slot_freed_during_a_look_sends_exactly_one_waiter_to_look_again
)
cargo_args=() test_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --test|--profile) cargo_args+=("$1" "$2"); shift 2 ;;
    --test=*|--profile=*) cargo_args+=("${1%%=*}" "${1#*=}"); shift ;;
    *) test_args+=("$1"); shift ;;
  esac
done
case " ${cargo_args[*]} " in
  *" --test "*) ;;
  *) for s in "${suites[@]}"; do cargo_args+=(--test "$s"); done ;;
esac
for s in "${skip[@]}"; do test_args+=(--skip "$s"); done
./scripts/run-suites.py "${features[@]}" "${cargo_args[@]}" -- "${test_args[@]}"
