# frozen_string_literal: true

# What the tests share. They run against the server scripts/test-clients.sh starts, which
# exports JOBQ_TEST_DSN (role jobq_test_app, granted jobq_worker), JOBQ_TEST_ADMIN_DSN (the
# superuser), JOBQ_TEST_POOLER_DSN (jobq_test_app through PgBouncer in transaction mode),
# JOBQ_TEST_SERVER_LOG and JOBQ_TEST_EDITION ("extension", or "sql": no background worker, the
# workers' heartbeats run the passes), with jobq.heartbeat_timeout = 3s and
# jobq.reap_interval = 200ms.
require "minitest/autorun"
require "logger"
require "securerandom"
require "stringio"
require "timeout"
require "jobq"

module TestEnv
  def self.fetch(name)
    ENV.fetch(name) { abort "#{name} is not set: run the suite with scripts/test-clients.sh ruby" }
  end

  DSN = fetch("JOBQ_TEST_DSN")
  ADMIN_DSN = fetch("JOBQ_TEST_ADMIN_DSN")
  POOLER_DSN = fetch("JOBQ_TEST_POOLER_DSN")
  SERVER_LOG = fetch("JOBQ_TEST_SERVER_LOG")
  EDITION = ENV.fetch("JOBQ_TEST_EDITION", "extension")
  # What a waiting checkout waits on in pg_stat_activity (a text[] literal): the extension's
  # latch, or in the SQL edition the pg_sleep of the call that polls, or the advisory lock it
  # holds, on which the others sleep.
  WAITING_EVENTS = EDITION == "sql" ? "{PgSleep,advisory}" : "{Extension}"

  # The DSN with another login role.
  def self.as(role, dsn = DSN) = dsn.sub(%r{\A(postgresql://)[^@/]+@}, "\\1#{role}@")

  # A table the handlers of the process tests write one row to per run.
  PG.connect(ADMIN_DSN).tap do |c|
    c.exec("SET client_min_messages = warning")
    c.exec("CREATE TABLE IF NOT EXISTS public.handler_runs (job_id bigint NOT NULL, pid integer NOT NULL, " \
           "attempt integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())")
    c.exec("GRANT SELECT, INSERT ON public.handler_runs TO PUBLIC")
  end.close
end

class JobqTest < Minitest::Test
  def setup
    @conns = []
    @workers = []
  end

  def teardown
    @workers.each { |w| stop_worker(w) if w[:thread].alive? }
    @conns.each { |c| c.close unless c.finished? }
  end

  # A queue name of this test's own (the database is shared by the suite).
  def queue = @queue ||= "#{name.sub(/\Atest_/, '')[0, 40]}-#{SecureRandom.hex(4)}"

  def connect(dsn = TestEnv::DSN) = PG.connect(dsn).tap { |c| @conns << c }

  # An autocommit superuser connection, for reading jobq's tables and forcing states.
  def admin = @admin ||= connect(TestEnv::ADMIN_DSN)

  # A client as jobq_test_app (a worker's role), jobq_test_admin (jobq_admin), or the superuser.
  def client = @client ||= Jobq::Client.new(connect)
  def admin_client = @admin_client ||= Jobq::Client.new(connect(TestEnv.as("jobq_test_admin")))

  def job_row(id)
    row = admin.exec_params("SELECT * FROM jobq.jobs WHERE id = $1", [id]).first
    refute_nil row, "job #{id} does not exist"
    row
  end

  # Polls the block until it returns something truthy, which it returns.
  def wait_until(what = "a condition", timeout: 20)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      value = yield
      return value if value
      flunk "timed out after #{timeout} s waiting for #{what}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.05
    end
  end

  # Waits until every job of ids is in state; returns their rows in id order.
  def wait_state(ids, state, timeout: 20)
    wait_until("jobs #{ids} to be #{state}", timeout: timeout) do
      rows = admin.exec_params("SELECT * FROM jobq.jobs WHERE id = ANY($1::bigint[]) ORDER BY id", ["{#{ids.join(',')}}"]).to_a
      rows if rows.size == ids.size && rows.all? { |r| r["state"] == state }
    end
  end

  def quiet_logger = Logger.new($stderr, level: ENV["JOBQ_TEST_LOG"] ? Logger::DEBUG : Logger::WARN)

  def new_worker(dsn = TestEnv::DSN, **options)
    Jobq::Worker.new(dsn, queues: [queue], concurrency: 4, wait: 2, logger: quiet_logger, **options)
  end

  # Runs the worker in a thread until it has registered; it is stopped (and must stop
  # cleanly) at the end of the test.
  def start_worker(worker)
    w = { worker: worker, error: nil }
    w[:thread] = Thread.new do
      worker.run
    rescue Exception => e # rubocop:disable Lint/RescueException -- surfaced by stop_worker
      w[:error] = e
    end
    @workers << w
    wait_until("the worker to register", timeout: 10) { worker.worker_id || !w[:thread].alive? }
    assert_nil w[:error]
    w
  end

  def stop_worker(w, timeout: 20)
    w[:worker].stop
    refute_nil w[:thread].join(timeout), "the worker did not stop"
    assert_nil w[:error]
  end

  # Until the worker named worker_name is inside a waiting checkout on the server.
  def await_waiting_checkout(worker_name)
    wait_until("worker #{worker_name} to wait inside the server") do
      admin.exec_params("SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' " \
                        "AND wait_event = ANY($2::text[])", ["#{worker_name}-jobs", TestEnv::WAITING_EVENTS]).getvalue(0, 0) == "t"
    end
  end

  # What the server logs from now on.
  class ServerLog
    def initialize = @offset = File.size(TestEnv::SERVER_LOG)
    def since = File.binread(TestEnv::SERVER_LOG, nil, @offset).to_s
  end
end
