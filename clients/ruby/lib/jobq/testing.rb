# frozen_string_literal: true

require "jobq"

module Jobq
  # Testing your own handlers (require "jobq/testing"): run the due jobs of some queues inline,
  # in the test (Jobq::Testing.drain), look up the jobs code under test enqueued
  # (Jobq::Testing.enqueued), and build a job to call a handler with directly
  # (Jobq::Testing.make_job).
  #
  # Both go through jobq's SQL, never around it: drain is a worker of its own that runs one
  # job at a time in the calling thread (jobq_register_worker, then jobq_checkout of one job,
  # the handler, jobq_complete or jobq_fail, again until no job is due, then
  # jobq_unregister_worker), and enqueued is one SELECT on jobq.live_jobs:
  #
  #   require "jobq/testing"
  #
  #   def test_signup_sends_the_welcome_mail
  #     signup(conn, "ada@example.com")                   # the code under test enqueues
  #     assert_equal 1, Jobq::Testing.enqueued(conn, "mail", kind: "welcome").size
  #     drained = Jobq::Testing.drain(conn, ["mail"], { "welcome" => method(:welcome) })
  #     assert_equal ["completed"], drained.jobs.map(&:state)
  #   end
  #
  # The calls run on the connection given (a PG::Connection, an ActiveRecord connection, or a
  # Jobq::Client), in its transaction when one is open, so a test that enqueues and drains in
  # one transaction and rolls it back leaves nothing behind; given a DSN, a connection of its
  # own (autocommit), closed after. The guide is docs/testing.md.
  module Testing
    # How many jobs drain runs at most unless told otherwise.
    DEFAULT_MAX_JOBS = 1000

    # The name the drain's worker registers with (jobq.workers.name).
    WORKER_NAME = "jobq.testing.drain"

    # One job drain ran, and what came of it: job (as its handler got it); state, the server's
    # answer ("completed"; after a failure "ready", "dead" or "cancelled"; nil when the job was
    # no longer the drain's); result (what the handler returned, nil after a failure); error
    # (what was reported with jobq_fail, {"type", "message"} as Jobq::Worker reports it, nil when
    # the handler returned); exception (what the handler raised, nil when it returned or had no
    # handler).
    DrainedJob = Struct.new(:job, :state, :result, :error, :exception) do
      # True when the handler failed the job (or none was registered for it).
      def failed? = !error.nil?
    end

    # What drain did: the jobs it ran, in the order it ran them.
    Drained = Struct.new(:jobs) do
      # The jobs whose handler returned (jobq_complete).
      def completed = jobs.reject(&:failed?)

      # The jobs whose handler raised, or that had no handler (jobq_fail).
      def failed = jobs.select(&:failed?)

      def size = jobs.size
    end

    # drain ran max_jobs jobs and another was still due: most likely a handler that enqueues a
    # job that enqueues one again, forever. The job it checked out last was not started:
    # unregistering the drain's worker gave it back, its attempt not counted.
    class DrainLimitReached < StandardError
      attr_reader :max_jobs, :drained

      def initialize(max_jobs, drained)
        @max_jobs = max_jobs
        @drained = drained
        super("Jobq::Testing.drain ran #{max_jobs} jobs and more are due (max_jobs: #{max_jobs})")
      end
    end

    # A job waiting to run, as enqueued reads it from jobq.live_jobs: state is "ready", or
    # "blocked" (waiting for the jobs it depends on, or for an event); scheduled is true for a
    # ready job not due yet (run_at in the future: scheduled, or a retry's backoff).
    EnqueuedJob = Struct.new(:id, :queue, :kind, :payload, :priority, :state, :run_at, :scheduled, :enqueued_at,
                             :attempt, :max_attempts, :unique_key, :concurrency_key, :depends_on)

    ENQUEUED_SQL = "SELECT id, queue, kind, payload, priority, state, run_at, " \
                   "state = 'ready' AND run_at > clock_timestamp() AS scheduled, " \
                   "enqueued_at, attempt, max_attempts, unique_key, concurrency_key, depends_on " \
                   "FROM jobq.live_jobs WHERE queue = $1 AND state IN ('ready', 'blocked') " \
                   "AND ($2::text IS NULL OR kind = $2::text) AND ($3::jsonb IS NULL OR payload @> $3::jsonb) " \
                   "ORDER BY id"
    ENQUEUED_TYPES = PG::TypeMapByColumn.new(
      [Calls::INT, nil, nil, Calls::JSONB, Calls::INT, nil, Calls::TIME, PG::TextDecoder::Boolean.new, Calls::TIME,
       Calls::INT, Calls::INT, nil, nil, Calls::INT_ARRAY]
    )

    module_function

    # A Jobq::Job for calling a handler directly in a unit test, as a checkout would hand it
    # over: id 0 (no job has it), attempt 1 of 25, priority 0, due, enqueued and started now, no
    # keys, no checkpoints; payload nil is {}, the server's default. Any other member of
    # Jobq::Job may be given by name (attempt: 3, last_error: {...}, checkpoints: {...}):
    #
    #   job = Jobq::Testing.make_job("mail", { "to" => "ada@example.com" }, kind: "welcome", attempt: 3)
    #   assert_equal({ "sent" => true }, welcome(job))
    #
    # job._cancel! makes job.cancelled? true, as the worker does when jobq_cancel reaches it;
    # job.durable raises ArgumentError, as in drain.
    def make_job(queue, payload = nil, kind: nil, **fields)
      unknown = fields.keys - Job.members
      raise ArgumentError, "unknown Jobq::Job members: #{unknown.join(', ')}" unless unknown.empty?

      now = Time.now.utc
      job = Job.new
      { id: 0, queue: queue, kind: kind, payload: payload.nil? ? {} : payload, priority: 0, attempt: 1, max_attempts: 25,
        run_at: now, enqueued_at: now, started_at: now, checkpoints: {} }.merge(fields).each { |k, v| job[k] = v }
      job
    end

    # The jobs of queue waiting to run (state "ready", due or scheduled, or "blocked"), oldest
    # first: what a test asserts its code enqueued. kind: only jobs of this kind; payload: only
    # jobs whose payload contains this JSON (payload @> payload: { "to" => "ada@example.com" }
    # matches a payload with more keys). target: a connection (read in its transaction, so a job
    # enqueued there and not committed is found), or a DSN. One SELECT on jobq.live_jobs
    # (jobq_reader); it changes nothing.
    def enqueued(target, queue, kind: nil, payload: nil)
      with_client(target) do |client|
        contains = payload.nil? ? nil : JSON.generate(payload)
        call = Calls::Call.new(ENQUEUED_SQL, [queue, kind, contains], lambda { |res|
          res.type_map = ENQUEUED_TYPES
          res.values.map { |v| EnqueuedJob.new(*v) }
        })
        client.run(call)
      end
    end

    # Runs every due job of queues (a name or a list) with handlers ({ kind => callable }, the
    # callables a Jobq::Worker's handle takes: each gets the Jobq::Job and returns its result;
    # a job without a kind is routed by its queue), one at a time in the calling thread, until
    # none is due, and returns a Drained.
    #
    # It is a worker of its own, through jobq's SQL: it registers (jobq_register_worker, named
    # jobq.testing.drain, not bound to the session), checks out one job (jobq_checkout), runs
    # its handler, reports it (jobq_complete with the result, or jobq_fail with the error, as
    # Jobq::Worker does: Jobq::RetryIn's delay as retry_in, Jobq::Discard and a job without a
    # handler ("NoHandler") discarded), heartbeats, and checks out again, so that a job a
    # handler enqueues (due now) is drained too; then it unregisters. Jobs not due yet and
    # blocked jobs are left alone, as every worker leaves them.
    #
    # target: a connection (the calls run in its transaction when one is open, so jobs enqueued
    # in it and not committed are drained too, and nothing is committed), or a DSN (an
    # autocommit connection of its own, which sees committed jobs only). max_jobs: how many jobs
    # to run at most; when another is due after that, raises DrainLimitReached (the job is given
    # back, its attempt not counted).
    #
    # A handler's exception does not propagate: the job fails, and the DrainedJob keeps it.
    # Durable steps (job.durable) need a Jobq::Worker: here they raise ArgumentError, which
    # fails the job.
    def drain(target, queues, handlers, max_jobs: DEFAULT_MAX_JOBS)
      names = Array(queues).map(&:to_s)
      raise ArgumentError, "drain needs at least one queue" if names.empty?
      raise ArgumentError, "max_jobs must be at least 1" unless max_jobs.is_a?(Integer) && max_jobs >= 1

      by_name = handlers.to_h { |k, fn| [k.to_s, fn] }
      with_client(target) { |client| drain_on(client, names, by_name, max_jobs) }
    end

    def drain_on(client, queues, handlers, max_jobs)
      worker = client.register_worker(name: WORKER_NAME, metadata: { "lang" => "ruby", "pid" => Process.pid, "testing" => true },
                                      bind_to_session: false)
      ran = []
      begin
        loop do
          client.heartbeat(worker) unless ran.empty? # a long drain outlives jobq.heartbeat_timeout
          job = client.checkout(worker, queues: queues, max_jobs: 1).first
          break if job.nil?
          raise DrainLimitReached.new(max_jobs, Drained.new(ran)) if ran.size == max_jobs

          ran << report(client, worker, job, run(handlers[job.kind || job.queue], job))
        end
      rescue DrainLimitReached
        client.unregister_worker(worker) # gives the job in hand back, uncounted
        raise
      rescue Exception # rubocop:disable Lint/RescueException -- unregister, then re-raise whatever it was
        begin
          client.unregister_worker(worker)
        rescue StandardError
          nil # e.g. the transaction is aborted: the first error is the one to see
        end
        raise
      end
      client.unregister_worker(worker)
      Drained.new(ran)
    end

    # What a handler's run comes to: [result, error, retry_in, discard, exception], the
    # arguments of jobq_complete or jobq_fail, as Jobq::Worker#run_handler makes them (the errors
    # described by the same Jobq.no_handler_error, handler_error and result_error).
    def run(handler, job)
      return [nil, Jobq.no_handler_error(job), nil, true, nil] if handler.nil?

      begin
        result = handler.call(job)
      rescue RetryIn, Discard => e
        return [nil, Jobq.handler_error(e), e.is_a?(RetryIn) ? e.delay : nil, e.is_a?(Discard), e]
      rescue Exception => e # rubocop:disable Lint/RescueException -- every error fails the job, as in Jobq::Worker
        raise if e.is_a?(SystemExit) || e.is_a?(NoMemoryError)

        return [nil, Jobq.handler_error(e), nil, false, e]
      end
      begin
        JSON.generate(result) unless result.nil?
      rescue StandardError => e
        return [nil, Jobq.result_error(e), nil, false, e]
      end
      [result, nil, nil, false, nil]
    end

    def report(client, worker, job, outcome)
      result, error, retry_in, discard, exception = outcome
      state = if error.nil?
                client.complete(job.id, worker, result) ? "completed" : nil
              else
                client.fail(job.id, worker, error, retry_in: retry_in, discard: discard || nil)
              end
      DrainedJob.new(job, state, result, error, exception)
    end

    def with_client(target)
      return yield(target) if target.is_a?(Client)
      return yield(Client.new(target)) unless target.is_a?(String)

      own = PG.connect(target)
      begin
        yield Client.new(own)
      ensure
        own.close
      end
    end

    private_class_method :drain_on, :run, :report, :with_client
  end
end
