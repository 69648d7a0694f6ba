# frozen_string_literal: true

require "test_helper"
require "active_job_app"
require "open3"

# The ActiveJob adapter with Debian's ActiveJob and ActiveRecord, against the real server.
class ActiveJobTest < JobqTest
  PG.connect(TestEnv::ADMIN_DSN).tap do |c|
    c.exec("SET client_min_messages = warning")
    c.exec("CREATE TABLE IF NOT EXISTS public.aj_runs (id bigserial PRIMARY KEY, tag text NOT NULL, value text, " \
           "provider_job_id bigint, executions integer, at timestamptz NOT NULL DEFAULT clock_timestamp())")
    c.exec("GRANT SELECT, INSERT ON public.aj_runs TO PUBLIC; GRANT USAGE ON SEQUENCE public.aj_runs_id_seq TO PUBLIC")
  end.close

  def jobs_of(kind, tag)
    admin.exec_params("SELECT * FROM jobq.jobs WHERE kind = $1 AND payload->'arguments'->>0 = $2 ORDER BY id", [kind, tag]).to_a
  end

  def runs(tag) = admin.exec_params("SELECT * FROM public.aj_runs WHERE tag = $1 ORDER BY id", [tag]).to_a

  def start_aj_worker(**options)
    start_worker(Jobq::ActiveJob.worker(TestEnv::DSN, queues: [queue], concurrency: 3, wait: 2, logger: quiet_logger,
                                                      handle_signals: false, **options))
  end

  def test_perform_later_maps_queue_priority_wait_class_and_provider_job_id
    job = RecordJob.set(queue: queue, priority: 7).perform_later("mapped", 1)
    row = job_row(job.provider_job_id)
    assert_equal [queue, "RecordJob", "7", "25", "ready"], row.values_at("queue", "kind", "priority", "max_attempts", "state")
    payload = JSON.parse(row["payload"])
    assert_equal ["RecordJob", job.job_id, ["mapped", 1]], payload.values_at("job_class", "job_id", "arguments")
    later = RecordJob.set(queue: queue, wait: 3600).perform_later("later")
    assert_in_delta Time.now.to_f + 3600, Time.parse(job_row(later.provider_job_id)["run_at"]).to_f, 5
    at = Time.now + 7200
    exact = RecordJob.set(queue: queue, wait_until: at).perform_later("exact")
    assert_in_delta at.to_f, Time.parse(job_row(exact.provider_job_id)["run_at"]).to_f, 0.01
  end

  def test_a_job_enqueued_in_a_transaction_exists_only_if_it_commits
    kept = nil
    ActiveRecord::Base.transaction do
      AjRun.create!(tag: "tx-#{queue}")
      kept = RecordJob.set(queue: queue).perform_later("committed-#{queue}")
    end
    gone = nil
    ActiveRecord::Base.transaction do
      gone = RecordJob.set(queue: queue).perform_later("rolled-back-#{queue}")
      raise ActiveRecord::Rollback
    end
    assert_equal "ready", job_row(kept.provider_job_id)["state"]
    refute_nil gone.provider_job_id
    assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE id = $1", [gone.provider_job_id]).getvalue(0, 0)
    assert_empty jobs_of("RecordJob", "rolled-back-#{queue}")
  end

  def test_the_worker_runs_activejob_jobs
    start_aj_worker
    ids = (1..5).map { |n| RecordJob.set(queue: queue).perform_later("ran-#{queue}", n).provider_job_id }
    wait_state(ids, "completed")
    got = runs("ran-#{queue}")
    assert_equal %w[1 2 3 4 5], got.map { |r| r["value"] }.sort
    assert_equal ids.sort, got.map { |r| r["provider_job_id"].to_i }.sort
    assert(got.all? { |r| r["executions"] == "1" })
  end

  def test_retry_on_enqueues_the_retries_and_an_error_past_them_fails_the_jobq_attempt
    start_aj_worker
    tag = "retried-#{queue}"
    RetriedJob.set(queue: queue).perform_later(tag)
    rows = wait_until("three attempts, the last dead") { (r = jobs_of("RetriedJob", tag)).size == 3 && r.last["state"] == "dead" && r }
    assert_equal %w[completed completed dead], rows.map { |r| r["state"] }
    assert_equal [1, 2, 3], runs(tag).map { |r| r["executions"].to_i }
    error = JSON.parse(rows.last["last_error"])
    assert_equal({ "type" => "FlakyError", "message" => "still flaky" }, error)
  end

  def test_retry_on_of_a_job_with_a_unique_key_is_not_refused_by_its_own_key
    start_aj_worker
    tag = "unique-retried-#{queue}"
    UniqueRetriedJob.set(queue: queue).perform_later(tag)
    rows = wait_until("two attempts, the last dead") { (r = jobs_of("UniqueRetriedJob", tag)).size == 2 && r.last["state"] == "dead" && r }
    assert_equal [["completed", "unique-retried-#{tag}"], ["dead", nil]], rows.map { |r| r.values_at("state", "unique_key") }
    assert_equal [1, 2], runs(tag).map { |r| r["executions"].to_i }
  end

  def test_discard_on_completes_the_job_and_an_unhandled_error_makes_it_dead
    start_aj_worker
    discarded = DiscardedJob.set(queue: queue).perform_later("discarded-#{queue}")
    broken = BrokenJob.set(queue: queue).perform_later("broken-#{queue}")
    wait_state([discarded.provider_job_id], "completed")
    assert_equal 1, runs("discarded-#{queue}").size
    dead = wait_state([broken.provider_job_id], "dead").first
    assert_equal({ "type" => "ArgumentError", "message" => "broken for good" }, JSON.parse(dead["last_error"]))
    assert_equal %w[1 25], dead.values_at("attempt", "max_attempts") # final at once: retry_on is what retries
  end

  def test_retry_errors_hands_an_error_to_jobqs_retries
    start_aj_worker
    tag = "jobq-retried-#{queue}"
    job = JobqRetriedJob.set(queue: queue).perform_later(tag)
    # The first failure is retried after the server's backoff (a few seconds); the second
    # is the last of max_attempts 2.
    row = wait_until("the retried job to be dead", timeout: 30) { (r = job_row(job.provider_job_id))["state"] == "dead" && r }
    assert_equal ["2", { "type" => "IOError", "message" => "retried by jobq" }], [row["attempt"], JSON.parse(row["last_error"])]
    assert_equal [job.provider_job_id] * 2, runs(tag).map { |r| r["provider_job_id"].to_i } # the same jobq job twice
  end

  def test_jobq_options_set_keys_limits_and_attempts
    first = UniqueReportJob.set(queue: queue).perform_later("r-#{queue}")
    second = UniqueReportJob.set(queue: queue).perform_later("r-#{queue}")
    assert_nil second.provider_job_id # on_conflict :discard: not enqueued
    row = job_row(first.provider_job_id)
    assert_equal ["report-r-#{queue}", "reports", "2", "report-rate", "5"],
                 row.values_at("unique_key", "concurrency_key", "concurrency_limit", "rate_key", "max_attempts")
    assert_equal 1, jobs_of("UniqueReportJob", "r-#{queue}").size
    StrictUniqueJob.set(queue: queue).perform_later("s-#{queue}")
    error = assert_raises(Jobq::UniqueConflict) { StrictUniqueJob.set(queue: queue).perform_later("s-#{queue}") }
    assert_equal jobs_of("StrictUniqueJob", "s-#{queue}").first["id"].to_i, error.job_id
    assert_raises(ArgumentError) { Class.new(ActiveJob::Base) { jobq_options unique: true } }
  end

  def test_enqueue_all_puts_jobs_without_keys_in_one_call_and_keyed_ones_alone
    jobs = [RecordJob.new("all-#{queue}", 1), RecordJob.new("all-#{queue}", 2), RecordJob.new("all-#{queue}", 3),
            LimitedJob.new("all-#{queue}"), UniqueReportJob.new("all-#{queue}"), UniqueReportJob.new("all-#{queue}")]
    jobs.each { |j| j.queue_name = queue }
    jobs[1].scheduled_at = Time.now.to_f + 600
    enqueued = ActiveJob::Base.queue_adapter.enqueue_all(jobs)
    assert_equal 5, enqueued
    ids = jobs.map(&:provider_job_id)
    assert_equal [true, true, true, true, true, false], ids.map { |i| !i.nil? }
    rows = ids.compact.map { |i| job_row(i) }
    assert_equal [%w[1 2 3], "RecordJob"], [rows[0, 3].map { |r| JSON.parse(r["payload"])["arguments"][1].to_s }, rows[0]["kind"]]
    assert_in_delta Time.now.to_f + 600, Time.parse(rows[1]["run_at"]).to_f, 5
    assert_operator Time.parse(rows[0]["run_at"]), :<=, Time.now
    assert_equal ["limited-all-#{queue}", "3"], rows[3].values_at("concurrency_key", "concurrency_limit")
    assert_equal "report-all-#{queue}", rows[4]["unique_key"]
  end

  def test_recurring_jobs_are_kept_by_jobq_schedules
    Jobq::ActiveJob.recurring = {
      "nightly-#{queue}" => { cron: "0 3 * * *", class: "RecordJob", args: ["scheduled-#{queue}", 9], queue: queue,
                              time_zone: "Europe/Paris" },
      "hourly-#{queue}" => { "cron" => "0 * * * *", "class" => RecordJob, "queue" => queue, "args" => ["hourly"] }
    }
    names = Jobq::ActiveJob.apply_schedules(admin_client)
    assert_equal ["activejob:nightly-#{queue}", "activejob:hourly-#{queue}"], names
    row = admin.exec_params("SELECT * FROM jobq.schedules WHERE name = $1", ["activejob:nightly-#{queue}"]).first
    assert_equal ["0 3 * * *", "Europe/Paris", queue, "RecordJob", "25"], row.values_at("cron", "time_zone", "queue", "kind", "max_attempts")
    payload = JSON.parse(row["payload"])
    assert_nil payload["job_id"]
    # What a tick enqueues runs: the same payload, through the worker.
    start_aj_worker
    tick = client.enqueue(queue, payload, kind: "RecordJob", max_attempts: 1)
    wait_state([tick], "completed")
    assert_equal [["9", tick.to_s]], runs("scheduled-#{queue}").map { |r| r.values_at("value", "provider_job_id") }
    # A recurring job no longer declared is removed; the others stay.
    Jobq::ActiveJob.recurring.delete("hourly-#{queue}")
    Jobq::ActiveJob.apply_schedules(admin_client)
    left = admin.exec_params("SELECT name FROM jobq.schedules WHERE name LIKE $1 ORDER BY name", ["activejob:%#{queue}"]).column_values(0)
    assert_equal ["activejob:nightly-#{queue}"], left
  ensure
    Jobq::ActiveJob.recurring = {}
    Jobq::ActiveJob.apply_schedules(admin_client)
  end

  def test_the_jobq_worker_command_runs_jobs_and_drains_on_sigterm
    root = File.expand_path("..", __dir__)
    cmd = ["ruby", "-I#{root}/lib", "-I#{root}/test", "#{root}/exe/jobq-worker", "--require", "#{root}/test/active_job_app.rb",
           "--dsn", TestEnv::DSN, "--queues", queue, "--threads", "2"]
    Open3.popen2e(*cmd) do |stdin, out, thread|
      stdin.close
      ids = (1..3).map { |n| RecordJob.set(queue: queue).perform_later("cmd-#{queue}", n).provider_job_id }
      wait_state(ids, "completed")
      Process.kill("TERM", thread.pid)
      assert_equal 0, thread.value.exitstatus, out.read
    end
    assert_equal 3, runs("cmd-#{queue}").size
  end
end
