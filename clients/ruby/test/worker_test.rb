# frozen_string_literal: true

require "test_helper"

# Jobq::Worker in a thread of the test process: what it does for a handler, item for item as
# the other libraries' workers.
class WorkerTest < JobqTest
  def test_a_committed_job_runs_and_a_rolled_back_one_never_does
    worker = new_worker
    worker.handle(queue) { |job| { "got" => job.payload["n"] } }
    start_worker(worker)
    conn = connect
    c = Jobq::Client.new(conn)
    conn.exec("BEGIN")
    gone = c.enqueue(queue, { "n" => 0 })
    conn.exec("ROLLBACK")
    kept = conn.transaction { c.enqueue(queue, { "n" => 1 }) }
    row = wait_state([kept], "completed").first
    assert_equal({ "got" => 1 }, JSON.parse(row["result"]))
    assert_equal worker.worker_id, row["worker_id"]
    assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE id = $1", [gone]).getvalue(0, 0)
  end

  def test_n_handlers_run_at_once
    inside = Thread::Queue.new
    release = Thread::Queue.new
    worker = new_worker(concurrency: 3)
    worker.handle(queue) do |_job|
      inside << 1
      release.pop
      "done"
    end
    start_worker(worker)
    ids = client.enqueue_batch(queue, [{}, {}, {}, {}])
    3.times { Timeout.timeout(10) { inside.pop } } # three at once, none waiting for another
    assert_equal 3, wait_until("three jobs executing") {
      n = admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE id = ANY($1::bigint[]) AND state = 'executing'",
                            ["{#{ids.join(',')}}"]).getvalue(0, 0).to_i
      n == 3 && n
    }
    4.times { release << 1 }
    wait_state(ids, "completed")
  end

  def test_short_jobs_are_taken_ahead_and_run_as_threads_free_up
    # After short jobs (handlers under 10 ms on average) the worker holds up to twice its
    # concurrency in hand: the jobs beyond it wait for a thread, not for a round trip.
    worker = new_worker(concurrency: 2)
    gate = Thread::Queue.new
    inside = Thread::Queue.new
    worker.handle("short") { |job| job.payload["n"] }
    worker.handle("held") do |job|
      inside << job.id
      gate.pop
      "held"
    end
    start_worker(worker)
    short = client.enqueue_batch(queue, (1..30).map { |n| { "n" => n } }, kind: "short")
    wait_state(short, "completed")
    held = client.enqueue_batch(queue, [{}, {}, {}, {}, {}], kind: "held")
    2.times { Timeout.timeout(10) { inside.pop } }
    executing = wait_until("four jobs in the worker's hand") do
      n = admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE id = ANY($1::bigint[]) AND state = 'executing' AND worker_id = $2",
                            ["{#{held.join(',')}}", worker.worker_id]).getvalue(0, 0).to_i
      n == 4 && n
    end
    assert_equal 4, executing
    assert inside.empty?, "only two handlers run at once"
    5.times { gate << 1 }
    wait_state(held, "completed")
  end

  def test_results_errors_no_handler_and_retry_delays
    worker = new_worker
    worker.handle("ok") { |job| { "n" => job.payload["n"], "attempt" => job.attempt } }
    worker.handle("boom") { |_job| raise ArgumentError, "bad input" }
    worker.handle("later") do |_job|
      raise Timeout::Error, "slow upstream"
    rescue Timeout::Error
      raise Jobq::RetryIn, 3600
    end
    worker.handle("not_json") { |_job| Object.new.tap { |o| def o.to_json(*) = raise(JSON::GeneratorError, "no") } }
    worker.handle("final") do |_job|
      raise IOError, "card declined"
    rescue IOError
      raise Jobq::Discard
    end
    start_worker(worker)
    ok = client.enqueue(queue, { "n" => 7 }, kind: "ok")
    boom = client.enqueue(queue, nil, kind: "boom", max_attempts: 1)
    later = client.enqueue(queue, nil, kind: "later")
    nohandler = client.enqueue(queue, nil, kind: "nobody-handles-this")
    not_json = client.enqueue(queue, nil, kind: "not_json", max_attempts: 1)
    final = client.enqueue(queue, nil, kind: "final")
    assert_equal({ "n" => 7, "attempt" => 1 }, JSON.parse(wait_state([ok], "completed").first["result"]))
    assert_equal({ "type" => "ArgumentError", "message" => "bad input" }, JSON.parse(wait_state([boom], "dead").first["last_error"]))
    dead = wait_state([nohandler], "dead").first
    assert_equal "NoHandler", JSON.parse(dead["last_error"])["type"]
    assert_equal "1", dead["attempt"] # discarded, not retried
    assert_equal "JSON::GeneratorError", JSON.parse(wait_state([not_json], "dead").first["last_error"])["type"]
    discarded = wait_state([final], "dead").first
    assert_equal [{ "type" => "IOError", "message" => "card declined" }, "1"], [JSON.parse(discarded["last_error"]), discarded["attempt"]]
    row = wait_until("the retry to be scheduled") { (r = job_row(later))["last_error"] && r }
    assert_equal({ "type" => "Timeout::Error", "message" => "slow upstream" }, JSON.parse(row["last_error"]))
    assert_equal "ready", row["state"]
    assert_operator Time.parse(row["run_at"]), :>, Time.now + 3500
  end

  def test_a_job_without_kind_is_routed_by_its_queue
    worker = new_worker
    worker.handle(queue) { |job| "queue #{job.queue}" }
    start_worker(worker)
    id = client.enqueue(queue)
    assert_equal "queue #{queue}", JSON.parse(wait_state([id], "completed").first["result"])
  end

  def test_a_cancel_reaches_a_running_handler
    worker = new_worker
    seen = Thread::Queue.new
    worker.handle(queue) do |job|
      seen << job.wait_cancelled(20)
      raise "stopped on request" if job.cancelled?
    end
    start_worker(worker)
    id = client.enqueue(queue)
    wait_state([id], "executing")
    assert_equal "executing", client.cancel(id) # requested; the worker's next heartbeat delivers it
    assert_equal true, Timeout.timeout(20) { seen.pop }
    wait_state([id], "cancelled")
  end

  def test_a_reaped_worker_drops_its_jobs_and_registers_again
    runs = Thread::Queue.new
    first_runs = {}
    lock = Mutex.new
    worker = new_worker(concurrency: 2)
    worker.handle(queue) do |job|
      first = lock.synchronize { first_runs[job.id].nil? && (first_runs[job.id] = true) }
      if first
        runs << [job.id, job.attempt, job.wait_cancelled(30)] # waits for the worker to lose it
        next({ "run" => "first" }) # must not be reported
      end
      { "run" => "second", "worker" => job.worker_id }
    end
    start_worker(worker)
    first_id = worker.worker_id
    ids = client.enqueue_batch(queue, [{}, {}])
    wait_state(ids, "executing")
    # As an administrator, unregister the worker behind its back: its jobs go back to the
    # queue, and its next call gets JQ001.
    assert_equal "2", admin.exec_params("SELECT jobq_unregister_worker($1)", [first_id]).getvalue(0, 0)
    rows = wait_state(ids, "completed")
    second_id = worker.worker_id
    refute_nil second_id
    refute_equal first_id, second_id
    assert_equal [{ "run" => "second", "worker" => second_id }] * 2, rows.map { |r| JSON.parse(r["result"]) }
    assert_equal ids.map { |i| [i, 1, true] }, Array.new(2) { runs.pop }.sort # both first runs were told
  end

  def test_a_job_finished_elsewhere_takes_the_jq002_fallback
    release = Thread::Queue.new
    log = StringIO.new
    worker = new_worker(concurrency: 1, logger: Logger.new(log, level: Logger::INFO))
    worker.handle(queue) do |job|
      release.pop if job.attempt == 1
      { "attempt" => job.attempt }
    end
    start_worker(worker)
    id = client.enqueue(queue)
    wait_state([id], "executing")
    # The server takes the job back while its handler runs (a heartbeat holding nothing), so
    # the worker's complete-and-checkout of it is refused with JQ002.
    admin.exec_params("SELECT jobq_heartbeat($1, '{}')", [worker.worker_id])
    assert_equal "ready", job_row(id)["state"]
    release << 1
    assert_equal({ "attempt" => 2 }, JSON.parse(wait_state([id], "completed").first["result"]))
    assert_includes log.string, "no longer this worker's"
  end

  def test_pooled_mode_behind_pgbouncer
    worker = new_worker(TestEnv::POOLER_DSN, concurrency: 3, pooled: true, wait: 1)
    worker.handle("quick") { |job| { "n" => job.payload["n"] } }
    worker.handle("slow") do |_job|
      sleep 3.5 # longer than jobq.heartbeat_timeout: only heartbeats keep it
      "slow"
    end
    worker.handle("fails") { |_job| raise "through the pooler" }
    start_worker(worker)
    wid = worker.worker_id
    assert_nil admin.exec_params("SELECT backend_pid FROM jobq.workers WHERE id = $1", [wid]).getvalue(0, 0)
    pooled = Jobq::Client.new(connect(TestEnv::POOLER_DSN))
    slow = pooled.enqueue(queue, nil, kind: "slow")
    ids = pooled.enqueue_batch(queue, (0...20).map { |n| { "n" => n } }, kind: "quick")
    failing = pooled.enqueue(queue, nil, kind: "fails", max_attempts: 1)
    assert_equal (0...20).map { |n| { "n" => n } }, wait_state(ids, "completed").map { |r| JSON.parse(r["result"]) }
    assert_equal({ "type" => "RuntimeError", "message" => "through the pooler" }, JSON.parse(wait_state([failing], "dead").first["last_error"]))
    slow_row = wait_state([slow], "completed").first
    assert_equal ["1", nil, wid], slow_row.values_at("attempt", "interrupted_at", "worker_id")
  end

  def test_stop_drains_the_jobs_in_flight
    inside = Thread::Queue.new
    release = Thread::Queue.new
    worker = new_worker(concurrency: 3)
    worker.handle(queue) do |_job|
      inside << 1
      release.pop
      "drained"
    end
    w = start_worker(worker)
    wid = worker.worker_id
    ids = client.enqueue_batch(queue, [{}, {}])
    2.times { Timeout.timeout(10) { inside.pop } }
    worker.stop
    2.times { release << 1 }
    refute_nil w[:thread].join(20)
    assert_nil w[:error]
    assert_equal %w["drained" "drained"], wait_state(ids, "completed", timeout: 1).map { |r| r["result"] }
    assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.workers WHERE id = $1", [wid]).getvalue(0, 0)
  end

  def test_stopping_an_idle_worker_logs_no_error_on_the_server
    [false, true].each do |pooled|
      log = ServerLog.new
      name = "idle-#{pooled}-#{queue[-8..]}"
      worker = new_worker(pooled ? TestEnv::POOLER_DSN : TestEnv::DSN, name: name, wait: 60, pooled: pooled, handle_signals: false)
      w = start_worker(worker)
      if pooled # through PgBouncer the server's session carries PgBouncer's name
        wait_until("the pooled worker to wait inside the server") do
          admin.exec_params("SELECT count(*) > 0 FROM pg_stat_activity WHERE state = 'active' AND wait_event = ANY($1::text[]) " \
                            "AND usename = 'jobq_test_app'", [TestEnv::WAITING_EVENTS]).getvalue(0, 0) == "t"
        end
      else
        await_waiting_checkout(name)
      end
      stop_worker(w) # within 20 s: a wait of 60 s that ran out would fail here
      written = log.since
      refute_match(/ERROR|canceling statement/, written)
    end
  end

  def test_a_job_committed_as_the_worker_stops_is_never_started
    8.times do |round|
      ran = Thread::Queue.new
      name = "stopping-#{round}-#{queue[-8..]}"
      worker = new_worker(name: name, wait: 60, handle_signals: false)
      worker.handle(queue) { |job| ran << job.id }
      w = start_worker(worker)
      await_waiting_checkout(name)
      worker.stop
      id = client.enqueue(queue, { "round" => round })
      refute_nil w[:thread].join(20)
      assert_nil w[:error]
      assert ran.empty?, "round #{round}: the stopping worker started a job"
      assert_equal ["ready", "0", nil], job_row(id).values_at("state", "attempt", "interrupted_at"), "round #{round}"
      assert_equal "cancelled", client.cancel(id) # not for the next round's worker
    end
  end

  def test_a_worker_of_a_role_without_jobq_worker_fails_to_start
    worker = Jobq::Worker.new(TestEnv.as("jobq_test_producer"), queues: ["anything"], handle_signals: false, logger: quiet_logger)
    error = assert_raises(Jobq::PermissionDenied) { Timeout.timeout(20) { worker.run } }
    assert_equal "42501", error.sqlstate
  end

  def test_a_lost_connection_reconnects_and_registers_again
    name = "#{queue}-w"
    worker = new_worker(concurrency: 1, name: name)
    worker.handle(queue, &:payload)
    start_worker(worker)
    first_id = worker.worker_id
    before = client.enqueue(queue, "before")
    assert_equal '"before"', wait_state([before], "completed").first["result"]
    # The server ends the session that registered the worker: bound to it, the worker is dead
    # at once; the worker reconnects (after 1 s) and registers again.
    killed = admin.exec_params("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                               ["#{name}-jobs"]).getvalue(0, 0)
    assert_equal "1", killed
    wait_until("the worker to register again") { ![nil, first_id].include?(worker.worker_id) }
    after = client.enqueue(queue, "after")
    row = wait_state([after], "completed").first
    assert_equal ['"after"', worker.worker_id], row.values_at("result", "worker_id")
  end

  def test_holding_reaches_the_server_while_the_worker_idles_in_waiting_checkouts
    # Free slots: the worker is nearly always inside a waiting checkout, when its periodic
    # heartbeat carries no list. A claim made for it whose reply it never got must still go
    # back to the queue, through the list it sends between two checkouts.
    worker = new_worker(wait: 1)
    worker.handle(queue) { "ran" }
    start_worker(worker)
    wid = worker.worker_id
    other = "#{queue}-other" # a queue this worker does not take
    stray = client.enqueue(other)
    claimed = admin.exec_params("SELECT id FROM jobq_checkout($1::uuid, ARRAY[$2])", [wid, other]).column_values(0)
    assert_equal [stray.to_s], claimed
    row = wait_until("the claim the worker never received to go back to ready", timeout: 10) do
      (r = job_row(stray))["state"] == "ready" && r
    end
    refute_nil row["interrupted_at"]
    after = client.enqueue(queue)
    assert_equal ['"ran"', wid], wait_state([after], "completed").first.values_at("result", "worker_id")
  end

  def test_a_dead_workers_job_comes_back_to_a_running_worker_with_nobody_reaping
    # The SQL edition has no background worker: its passes run in the workers' heartbeats, so
    # a database whose only activity is this library's worker is served. Nothing here calls
    # jobq_reap(). (On the extension its background worker reaps too: the same holds.)
    doomed = client.register_worker(name: "doomed", bind_to_session: false)
    id = client.enqueue(queue, { "n" => 1 })
    assert_equal [id], client.checkout(doomed, queues: [queue]).map(&:id)
    worker = new_worker(concurrency: 2)
    worker.handle(queue) { |job| { "attempt" => job.attempt } }
    start_worker(worker)
    assert_equal TestEnv::EDITION, worker.server_edition
    row = wait_state([id], "completed").first
    assert_equal [{ "attempt" => 2 }, worker.worker_id], [JSON.parse(row["result"]), row["worker_id"]]
    refute_nil row["interrupted_at"]
    assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.workers WHERE id = $1", [doomed]).getvalue(0, 0)
  end

  def test_durable_steps_step_sleep_spawn_gather_and_await_an_event
    calls = Hash.new(0)
    lock = Mutex.new
    worker = new_worker(concurrency: 4)
    worker.handle("order") do |job|
      steps = job.durable
      charge = steps.step("charge") { lock.synchronize { calls[job.id] += 1 }; { "charged" => 10 } }
      steps.sleep("pause", 0.3)
      boxes = steps.spawn("ship", queue, [{ "box" => 1 }, { "box" => 2 }], kind: "box")
      shipped = steps.gather(boxes)
      delivered = steps.await_event("delivered-#{job.id}", timeout: 60)
      { "charge" => charge, "shipped" => shipped.map(&:result), "delivered" => delivered }
    end
    worker.handle("box") { |job| job.payload["box"] * 10 }
    start_worker(worker)
    id = client.enqueue(queue, nil, kind: "order")
    wait_until("the order to await its event") do
      admin.exec_params("SELECT count(*) FROM jobq.blocked WHERE job_id = $1 AND event IS NOT NULL", [id]).getvalue(0, 0) == "1"
    end
    assert_equal 1, admin_client.emit_event("delivered-#{id}", { "at" => "door" })
    row = wait_state([id], "completed").first
    assert_equal({ "charge" => { "charged" => 10 }, "shipped" => [10, 20], "delivered" => { "at" => "door" } }, JSON.parse(row["result"]))
    assert_equal 1, calls[id] # the step ran once across the replays
  end
end
