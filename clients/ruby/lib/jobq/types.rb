# frozen_string_literal: true

module Jobq
  # A job checked out by a worker: a row of jobq.job. Jobq::Worker passes one to each handler
  # call; Jobq::Client#checkout returns them.
  #
  # id, queue, kind (nil: the worker routes it by queue), payload (decoded JSON), priority
  # (lower runs first), attempt (from 1), max_attempts, run_at, enqueued_at, unique_key,
  # concurrency_key, interrupted_at (an earlier attempt was cut off), last_error (decoded
  # JSON), unique_strategy, concurrency_limit, started_at, depends_on, checkpoints (what its
  # durable steps recorded; {} when none), worker_id (the registration that checked it out).
  Job = Struct.new(:id, :queue, :kind, :payload, :priority, :attempt, :max_attempts, :run_at, :enqueued_at,
                   :unique_key, :concurrency_key, :interrupted_at, :last_error, :unique_strategy,
                   :concurrency_limit, :started_at, :depends_on, :checkpoints, :worker_id) do
    # True once the worker was asked to stop this job: its cancellation was requested
    # (jobq_cancel), or the worker lost it (reaped: the job runs again elsewhere, and what this
    # handler returns is not reported). A handler that checks it may stop early by raising.
    def cancelled?
      @cancelled == true
    end

    # Blocks until the job is cancelled (true) or timeout seconds pass (false).
    def wait_cancelled(timeout = nil)
      deadline = timeout && Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      CANCEL_LOCK.synchronize do
        until @cancelled
          left = deadline && deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          return false if left && left <= 0

          CANCELLED.wait(CANCEL_LOCK, left)
        end
        true
      end
    end

    # Durable steps for this job (Jobq::Durable), in a handler run by a Jobq::Worker.
    def durable
      raise ArgumentError, "durable steps need a job run by a Jobq::Worker" if @runner.nil?

      Durable.new(self, @runner)
    end

    # Set by Jobq::Worker.
    def _cancel!
      CANCEL_LOCK.synchronize do
        @cancelled = true
        CANCELLED.broadcast
      end
    end
    def _runner=(runner)
      @runner = runner
    end
  end

  # Cancellations are rare: one lock and condition for every job's wait_cancelled.
  CANCEL_LOCK = Mutex.new
  CANCELLED = ConditionVariable.new

  # The state and outcome of a job (jobq_results).
  JobResult = Struct.new(:id, :kind, :state, :attempt, :result, :last_error)

  # A row of jobq.queue_stats; oldest_ready_age in seconds (nil when nothing is ready).
  QueueStats = Struct.new(:queue, :ready, :scheduled, :executing, :dead, :oldest_ready_age)

  # What jobq_reap() did.
  ReapResult = Struct.new(:workers_reaped, :jobs_requeued, :jobs_dead, :locks_released, :jobs_pruned)
end
