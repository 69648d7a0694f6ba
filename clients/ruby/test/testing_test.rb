# frozen_string_literal: true

require "test_helper"
require "jobq/testing"

# Jobq::Testing: drain (the due jobs of some queues run inline, through the SQL calls),
# enqueued (the jobs waiting in a queue) and make_job, against the real server.
class TestingTest < JobqTest
  T = Jobq::Testing

  # Registrations of the drain's worker still in jobq.workers.
  def drain_workers = Integer(admin.exec("SELECT count(*) FROM jobq.workers WHERE name = 'jobq.testing.drain'").getvalue(0, 0))

  def test_drain_completes_fails_and_discards_each_job_as_a_worker_would
    ok = client.enqueue(queue, { "n" => 2 }, kind: "double")
    boom = client.enqueue(queue, { "n" => 3 }, kind: "boom")
    last = client.enqueue(queue, { "n" => 4 }, kind: "boom", max_attempts: 1)
    orphan = client.enqueue(queue, {}, kind: "nobody")
    plain = client.enqueue(queue, { "n" => 5 }) # no kind: routed by its queue
    gone = client.enqueue(queue, { "n" => 6 }, kind: "discard")

    drained = T.drain(client, [queue], {
                        "double" => ->(job) { { "n" => job.payload["n"] * 2 } },
                        "boom" => ->(job) { raise ArgumentError, "bad #{job.payload['n']}" },
                        queue => ->(_job) { "by queue" },
                        discard: ->(_job) { raise Jobq::Discard, "not wanted" }
                      })

    assert_equal [ok, boom, last, orphan, plain, gone], drained.jobs.map { |d| d.job.id }
    assert_equal %w[completed ready dead dead completed dead], drained.jobs.map(&:state)
    assert_equal [ok, plain], drained.completed.map { |d| d.job.id }
    assert_equal [boom, last, orphan, gone], drained.failed.map { |d| d.job.id }
    assert_equal 6, drained.size
    assert_equal [{ "n" => 4 }, nil], [drained.jobs[0].result, drained.jobs[0].error]
    assert_equal({ "type" => "ArgumentError", "message" => "bad 3" }, drained.jobs[1].error)
    assert_kind_of ArgumentError, drained.jobs[1].exception
    assert drained.jobs[1].failed?
    assert_equal({ "type" => "NoHandler", "message" => "no handler for kind \"nobody\"" }, drained.jobs[3].error)
    assert_nil drained.jobs[3].exception
    assert_equal({ "type" => "Discard", "message" => "not wanted" }, drained.jobs[5].error)
    assert_equal 1, drained.jobs[0].job.attempt

    # The server holds the same story: the calls were jobq_complete and jobq_fail.
    assert_equal '{"n": 4}', job_row(ok)["result"]
    retried = job_row(boom)
    assert_equal %w[ready 1], retried.values_at("state", "attempt")
    assert_equal "t", admin.exec_params("SELECT run_at > now() FROM jobq.jobs WHERE id = $1", [boom]).getvalue(0, 0)
    assert_equal({ "type" => "ArgumentError", "message" => "bad 3" }, JSON.parse(retried["last_error"]))
    assert_equal %w[dead 1], job_row(orphan).values_at("state", "attempt") # discarded at its first attempt
    assert_equal %w[dead 1], job_row(gone).values_at("state", "attempt")
    assert_equal '"by queue"', job_row(plain)["result"]
    assert_equal 0, drain_workers # unregistered
  end

  def test_a_job_a_handler_enqueues_is_drained_in_the_same_call
    first = client.enqueue(queue, { "step" => 1 }, kind: "step")
    step = lambda do |job|
      n = job.payload["step"]
      # The follow-up, committed on a connection of the handler's own.
      Jobq::Client.connect(TestEnv::DSN).tap { |c| c.enqueue(queue, { "step" => n + 1 }, kind: "step") }.connection.close if n < 3
      n
    end
    drained = T.drain(TestEnv::DSN, queue, { "step" => step }) # a DSN: a connection of the drain's own
    assert_equal [1, 2, 3], drained.jobs.map(&:result)
    assert_equal first, drained.jobs[0].job.id
    assert_equal %w[completed completed completed], drained.jobs.map(&:state)
    assert_empty T.enqueued(TestEnv::DSN, queue)
    assert_equal 0, drain_workers
  end

  def test_max_jobs_stops_a_runaway_drain_and_gives_the_next_job_back
    client.enqueue(queue, { "n" => 0 }, kind: "again")
    again = lambda do |job| # enqueues its successor forever
      c = Jobq::Client.connect(TestEnv::DSN)
      c.enqueue(queue, { "n" => job.payload["n"] + 1 }, kind: "again")
      c.connection.close
      nil
    end
    caught = assert_raises(T::DrainLimitReached) { T.drain(client, [queue], { "again" => again }, max_jobs: 4) }
    assert_equal 4, caught.max_jobs
    assert_equal [0, 1, 2, 3], caught.drained.jobs.map { |d| d.job.payload["n"] }
    # The fifth was checked out but not run: unregistering gave it back, its attempt uncounted.
    waiting = T.enqueued(client, queue)
    assert_equal 1, waiting.size
    assert_equal [{ "n" => 4 }, "ready", 0], [waiting[0].payload, waiting[0].state, waiting[0].attempt]
    assert_nil job_row(waiting[0].id)["interrupted_at"]
    assert_equal 0, drain_workers
    assert_raises(ArgumentError) { T.drain(client, [queue], { "again" => again }, max_jobs: 0) }
    assert_raises(ArgumentError) { T.drain(client, [], { "again" => again }) }
    assert_equal 1, T.enqueued(client, queue).size # refused before any call
  end

  def test_jobs_not_due_are_left_alone_and_retry_in_is_reported
    later = client.enqueue(queue, { "later" => true }, kind: "mail", run_at: Time.now + 3600)
    now = client.enqueue(queue, { "later" => false }, kind: "mail")
    busy = lambda do |_job|
      begin
        raise Timeout::Error, "the API is busy"
      rescue Timeout::Error
        raise Jobq::RetryIn, 600
      end
    end
    drained = T.drain(client, [queue], { "mail" => busy })
    assert_equal 1, drained.size # the retry is due in 10 minutes: not again in this drain
    only = drained.jobs[0]
    assert_equal [now, "ready"], [only.job.id, only.state]
    assert_equal({ "type" => "Timeout::Error", "message" => "the API is busy" }, only.error)
    delay = admin.exec_params("SELECT extract(epoch FROM run_at - (errors->0->>'at')::timestamptz)::int FROM jobq.jobs WHERE id = $1", [now])
    assert_equal "600", delay.getvalue(0, 0)
    assert_equal %w[ready 0], job_row(later).values_at("state", "attempt")
  end

  def test_a_result_that_is_not_json_fails_the_job
    client.enqueue(queue, nil, kind: "odd")
    drained = T.drain(client, [queue], { "odd" => ->(_job) { Float::NAN } })
    d = drained.jobs.fetch(0)
    assert_equal "ready", d.state
    assert_match(/not JSON/, d.error["message"])
  end

  def test_drain_in_a_transaction_sees_uncommitted_jobs_and_a_rollback_undoes_everything
    conn = connect
    conn.exec("BEGIN")
    c = Jobq::Client.new(conn)
    c.enqueue(queue, { "order" => 7 }, kind: "charge")
    charge = lambda do |job|
      # The same connection, between the drain's calls: the follow-up joins the transaction.
      c.enqueue(queue, { "order" => job.payload["order"] }, kind: "receipt")
      { "charged" => true }
    end
    drained = T.drain(conn, [queue], { "charge" => charge, "receipt" => ->(_job) { "sent" } })
    assert_equal [%w[charge completed], %w[receipt completed]], drained.jobs.map { |d| [d.job.kind, d.state] }
    # Nothing is committed: another session sees neither the jobs nor the drain's worker.
    assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.jobs WHERE queue = $1", [queue]).getvalue(0, 0)
    conn.exec("ROLLBACK")
    assert_equal "0", conn.exec_params("SELECT count(*) FROM jobq.jobs WHERE queue = $1", [queue]).getvalue(0, 0)
    assert_equal 0, drain_workers
  end

  def test_a_handler_error_that_aborts_the_transaction_unregisters_and_raises_the_first_error
    conn = connect
    conn.exec("BEGIN")
    Jobq::Client.new(conn).enqueue(queue, nil, kind: "breaks")
    breaks = ->(_job) { conn.exec("SELECT 1/0") }
    # The handler's error is the job's failure; reporting it in the aborted transaction is
    # refused, and that refusal is what drain raises.
    error = assert_raises(Jobq::Error) { T.drain(conn, [queue], { "breaks" => breaks }) }
    assert_equal "25P02", error.sqlstate
    conn.exec("ROLLBACK")
    assert_equal 0, drain_workers
  end

  def test_enqueued_filters_by_kind_and_payload_containment
    mail = client.enqueue(queue, { "to" => "ada@example.com", "lang" => "en" }, kind: "welcome", priority: 3)
    other = client.enqueue(queue, { "to" => "bob@example.com", "lang" => "en" }, kind: "welcome")
    later = client.enqueue(queue, { "to" => "ada@example.com" }, kind: "reminder", run_at: Time.now + 86_400)
    child = client.enqueue(queue, { "after" => mail }, kind: "audit", depends_on: [mail])
    client.enqueue("#{queue}-other", { "to" => "ada@example.com" }, kind: "welcome")

    assert_equal [mail, other, later, child], T.enqueued(client, queue).map(&:id)
    assert_equal [mail, other], T.enqueued(client, queue, kind: "welcome").map(&:id)
    assert_equal [mail, later], T.enqueued(client, queue, payload: { "to" => "ada@example.com" }).map(&:id)
    found = T.enqueued(client.connection, queue, kind: "welcome", payload: { "to" => "ada@example.com" })
    assert_equal 1, found.size
    f = found[0]
    assert_equal [mail, queue, "welcome", { "to" => "ada@example.com", "lang" => "en" }, 3], [f.id, f.queue, f.kind, f.payload, f.priority]
    assert_equal ["ready", false, 0, 25], [f.state, f.scheduled, f.attempt, f.max_attempts]
    assert_kind_of Time, f.run_at
    reminder = T.enqueued(client, queue, kind: "reminder").fetch(0)
    assert_equal ["ready", true], [reminder.state, reminder.scheduled]
    audit = T.enqueued(client, queue, kind: "audit").fetch(0)
    assert_equal ["blocked", [mail]], [audit.state, audit.depends_on]
    assert_empty T.enqueued(client, queue, kind: "welcome", payload: { "to" => "eve@example.com" })

    # A drained job is no longer waiting; the child, ready once its parent completed, is
    # drained in the same call; the scheduled one stays.
    drained = T.drain(client, [queue], { "welcome" => ->(_job) {}, "audit" => ->(_job) {} })
    assert_equal [other, mail, child], drained.jobs.map { |d| d.job.id } # priority 0 before 3
    assert_equal [later], T.enqueued(client, queue).map(&:id)
  end

  def test_enqueued_sees_what_the_callers_transaction_enqueued
    conn = connect
    conn.exec("BEGIN")
    id = Jobq::Client.new(conn).enqueue(queue, { "x" => 1 }, kind: "k")
    assert_equal [id], T.enqueued(conn, queue, kind: "k").map(&:id)
    assert_empty T.enqueued(TestEnv::DSN, queue) # not committed: another session sees nothing
    conn.exec("ROLLBACK")
  end

  def test_make_job_builds_a_job_to_call_a_handler_with
    welcome = lambda do |job|
      raise Jobq::Cancelled, "stopped" if job.cancelled?

      { "to" => job.payload["to"], "attempt" => job.attempt }
    end
    job = T.make_job("mail", { "to" => "ada@example.com" }, kind: "welcome", attempt: 3)
    assert_equal [0, "mail", "welcome", 0, 25, {}], [job.id, job.queue, job.kind, job.priority, job.max_attempts, job.checkpoints]
    assert_operator job.run_at, :<=, Time.now
    assert_nil job.last_error
    assert_equal({ "to" => "ada@example.com", "attempt" => 3 }, welcome.call(job))
    job._cancel! # what the worker does when jobq_cancel reaches it
    assert_raises(Jobq::Cancelled) { welcome.call(job) }
    assert_equal({}, T.make_job("q").payload)
    assert_raises(ArgumentError) { T.make_job("q").durable }
    assert_raises(ArgumentError) { T.make_job("q", nil, colour: "red") }
  end
end
