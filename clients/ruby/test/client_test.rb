# frozen_string_literal: true

require "test_helper"

# Jobq::Client: each SPEC call through the library, on the caller's connection and transaction.
class ClientTest < JobqTest
  def test_enqueue_sends_every_option_and_the_server_keeps_them
    run_at = Time.now + 3600
    id = client.enqueue(queue, { "to" => "a@example.com" }, kind: "mail", priority: 3, run_at: run_at, max_attempts: 4,
                                                             unique_key: "u-#{queue}", concurrency_key: "c-#{queue}",
                                                             concurrency_limit: 2, rate_key: "r-#{queue}",
                                                             fairness_key: "tenant-7")
    row = job_row(id)
    assert_equal [queue, "mail", '{"to": "a@example.com"}', "3", "4", "ready"],
                 row.values_at("queue", "kind", "payload", "priority", "max_attempts", "state")
    assert_equal ["u-#{queue}", "c-#{queue}", "2", "r-#{queue}"], row.values_at("unique_key", "concurrency_key", "concurrency_limit", "rate_key")
    assert_equal "tenant-7", row["fairness_key"]
    assert_in_delta run_at.to_f, Time.parse(row["run_at"]).to_f, 0.001
  end

  def test_options_left_nil_take_the_servers_defaults
    row = job_row(client.enqueue(queue))
    assert_equal ["{}", "0", "25", nil, "ready"], row.values_at("payload", "priority", "max_attempts", "kind", "state")
  end

  def test_a_taken_unique_key_raises_unique_conflict_naming_the_holder_and_adds_nothing
    first = client.enqueue(queue, nil, unique_key: "k-#{queue}")
    error = assert_raises(Jobq::UniqueConflict) { client.enqueue(queue, { "b" => 1 }, unique_key: "k-#{queue}") }
    assert_equal "23505", error.sqlstate
    assert_equal first, error.job_id
    assert_nil client.enqueue(queue, nil, unique_key: "k-#{queue}", on_conflict: :discard)
    assert_equal "1", admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE queue = $1", [queue]).getvalue(0, 0)
  end

  def test_bad_input_raises_invalid_argument_and_changes_nothing
    error = assert_raises(Jobq::InvalidArgument) { client.enqueue(queue, nil, max_attempts: 0) }
    assert_equal "22023", error.sqlstate
    assert_raises(Jobq::InvalidArgument) { client.enqueue(queue, nil, on_conflict: "sometimes") }
    assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE queue = $1", [queue]).getvalue(0, 0)
  end

  def test_a_role_without_a_jobq_role_is_refused_with_permission_denied
    nobody = Jobq::Client.new(connect(TestEnv.as("jobq_test_nobody")))
    error = assert_raises(Jobq::PermissionDenied) { nobody.enqueue(queue) }
    assert_equal "42501", error.sqlstate
    assert_raises(Jobq::PermissionDenied) { client.pause(queue) } # jobq_admin's
    assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE queue = $1", [queue]).getvalue(0, 0)
  end

  def test_a_call_runs_in_the_callers_transaction
    conn = connect
    c = Jobq::Client.new(conn)
    conn.exec("BEGIN")
    rolled_back = c.enqueue(queue)
    conn.exec("ROLLBACK")
    assert_equal 0, admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE id = $1", [rolled_back]).getvalue(0, 0).to_i
    kept = conn.transaction { c.enqueue(queue) }
    assert_equal "ready", job_row(kept)["state"]
  end

  def test_batch_results_cancel_retry_and_queue_stats
    ids = client.enqueue_batch(queue, [{ "n" => 1 }, { "n" => 2 }, [1, "x\"y"]], kind: "batch", priority: 2)
    assert_equal 3, ids.size
    assert_equal [[1, "x\"y"], "2"], [JSON.parse(job_row(ids[2])["payload"]), job_row(ids[2])["priority"]]
    assert_equal "cancelled", client.cancel(ids[0])
    assert_nil client.cancel(-1)
    assert client.retry_job(ids[0])
    results = client.results(ids.reverse)
    assert_equal ids.reverse, results.map(&:id)
    assert_equal %w[ready ready ready], results.map(&:state)
    stats = client.queue_stats(queue).first
    assert_equal [queue, 3, 0, 0, 0], [stats.queue, stats.ready, stats.scheduled, stats.executing, stats.dead]
  end

  def test_the_worker_protocol_by_hand_checkout_complete_fail_and_fencing
    id = client.enqueue(queue, { "a" => 1 }, kind: "k")
    other = client.enqueue(queue, { "a" => 2 }, kind: "k")
    wid = client.register_worker(name: "by-hand", metadata: { "t" => 1 })
    jobs = client.checkout(wid, queues: [queue], max_jobs: 1)
    job = jobs.first
    assert_equal [id, queue, "k", { "a" => 1 }, 1, wid, {}], [job.id, job.queue, job.kind, job.payload, job.attempt, job.worker_id, job.checkpoints]
    assert_kind_of Time, job.enqueued_at
    next_jobs = client.complete_and_checkout(wid, [id], [{ "ok" => true }], queues: [queue], max_jobs: 5)
    assert_equal [other], next_jobs.map(&:id)
    assert_equal({ "ok" => true }, client.results([id]).first.result)
    error = assert_raises(Jobq::JobsFenced) { client.complete_and_checkout(wid, [id, other], queues: [queue]) }
    assert_equal [id], error.job_ids
    assert_equal "ready", client.fail(other, wid, { "type" => "E", "message" => "m" }, retry_in: 0)
    assert_equal({ "type" => "E", "message" => "m" }, JSON.parse(job_row(other)["last_error"]))
    assert_equal [], client.heartbeat(wid, holding: [])
    assert_equal 0, client.unregister_worker(wid)
    assert_raises(Jobq::WorkerLost) { client.heartbeat(wid) }
  end

  def test_events_rate_limits_locks_pause_and_schedules_as_an_admin
    assert_equal 0, admin_client.emit_event("e-#{queue}", { "v" => 1 })
    admin_client.set_rate_limit("r-#{queue}", 2, 60)
    admin_client.set_rate_limit("r-#{queue}", nil)
    wid = client.register_worker(name: "locker")
    assert client.acquire_lock("l-#{queue}", wid, ttl: 30)
    assert_equal wid, client.lock_holder("l-#{queue}")
    assert client.release_lock("l-#{queue}", wid)
    assert_nil client.lock_holder("l-#{queue}")
    admin_client.pause(queue)
    client.enqueue(queue)
    assert_empty client.checkout(wid, queues: [queue])
    admin_client.resume(queue)
    assert_equal 1, client.checkout(wid, queues: [queue]).size
    admin_client.schedule("s-#{queue}", "*/5 * * * *", queue, { "tick" => true }, kind: "tick", time_zone: "Europe/Paris")
    row = admin.exec_params("SELECT cron, time_zone, kind FROM jobq.schedules WHERE name = $1", ["s-#{queue}"]).first
    assert_equal({ "cron" => "*/5 * * * *", "time_zone" => "Europe/Paris", "kind" => "tick" }, row)
    assert_raises(Jobq::InvalidArgument) { admin_client.schedule("s2-#{queue}", "not cron", queue) }
    assert admin_client.unschedule("s-#{queue}")
    refute admin_client.unschedule("s-#{queue}")
  end

  def test_version_names_the_servers_edition
    version, edition = client.version
    assert_match(/\A\d+\.\d+\.\d+\z/, version)
    assert_equal TestEnv::EDITION, edition
  end

  def test_a_graph_enqueues_dependents_blocked_until_their_parents_finish
    ids = client.enqueue_graph([{ queue: queue, kind: "a" }, { queue: queue, kind: "b", after: [0] }])
    assert_equal %w[ready blocked], ids.map { |i| job_row(i)["state"] }
  end
end
