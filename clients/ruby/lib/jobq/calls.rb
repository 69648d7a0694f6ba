# frozen_string_literal: true

require "json"
require "time"

module Jobq
  # Every jobq call as SQL text, parameters and a decoder of its result: one builder per SQL
  # function. Jobq::Client runs them on the caller's connection, Jobq::Worker on its own, so
  # both send exactly the same statements. Arguments after the first are passed by name and
  # only when the caller set them (not nil), so the server's defaults stay the server's.
  module Calls
    # One statement: its SQL, its parameters and how its PG::Result becomes the answer.
    Call = Struct.new(:sql, :params, :decode)

    # The columns of jobq.job a Job reads, in the order of Job's members; checkpoints come as
    # NULL when there are none (nearly every job): one JSON document less to decode per job.
    JOB_COLUMNS = "id, queue, kind, payload, priority, attempt, max_attempts, run_at, enqueued_at, " \
                  "unique_key, concurrency_key, interrupted_at, last_error, unique_strategy, " \
                  "concurrency_limit, started_at, depends_on, NULLIF(checkpoints, '{}') AS checkpoints"

    INT = PG::TextDecoder::Integer.new
    JSONB = PG::TextDecoder::JSON.new
    TIME = PG::TextDecoder::TimestampWithTimeZone.new
    INT_ARRAY = PG::TextDecoder::Array.new(elements_type: INT)
    # The rows of JOB_COLUMNS decoded in C, column by column: no catalog lookup, no Ruby per value.
    JOB_TYPES = PG::TypeMapByColumn.new(
      [INT, nil, nil, JSONB, INT, INT, INT, TIME, TIME, nil, nil, TIME, JSONB, nil, INT, TIME, INT_ARRAY, JSONB]
    )
    RESULT_TYPES = PG::TypeMapByColumn.new([INT, nil, nil, INT, JSONB, JSONB])
    TEXT_ARRAY = PG::TextEncoder::Array.new

    # Builds a call's argument list: positional arguments first, then named ones when set.
    class Args
      attr_reader :params

      def initialize
        @parts = []
        @params = []
      end

      def pos(value, cast)
        @params << value
        @parts << "$#{@params.size}::#{cast}"
        self
      end

      def opt(name, value, cast)
        return self if value.nil?

        @params << value
        @parts << "#{name} => $#{@params.size}::#{cast}"
        self
      end

      def call(function)
        "#{function}(#{@parts.join(', ')})"
      end
    end

    module_function

    # A value already encoded as JSON (the worker checks a handler's result once, encoding it).
    class Encoded < String; end

    def json(value)
      return value if value.nil? || value.is_a?(Encoded)

      JSON.generate(value)
    end

    def json_array(values)
      values.nil? ? nil : TEXT_ARRAY.encode(values.map { |v| json(v) })
    end

    def int_array(values)
      values.nil? ? nil : "{#{values.map { |v| Integer(v) }.join(',')}}"
    end

    def text_array(values)
      values.nil? ? nil : TEXT_ARRAY.encode(values.map(&:to_s))
    end

    # Seconds (Integer, Float, ActiveSupport::Duration) as an interval.
    def interval(value)
      value.nil? ? nil : "#{value.to_f} seconds"
    end

    def time(value)
      return nil if value.nil?
      return value if value.is_a?(String)

      value.to_time.utc.iso8601(6)
    end

    def boolean(value)
      value.nil? ? nil : (value ? "true" : "false")
    end

    def scalar(res)
      res.ntuples.zero? ? nil : res.getvalue(0, 0)
    end

    def scalar_call(function, args, &decode)
      Call.new("SELECT #{args.call(function)} AS v", args.params, ->(res) { decode.call(scalar(res)) })
    end

    def to_i(v) = v.nil? ? nil : Integer(v)
    def to_bool(v) = v == "t"
    def to_int_list(v) = v.nil? ? [] : INT_ARRAY.decode(v)

    def jobs_call(function, args, worker)
      Call.new("SELECT #{JOB_COLUMNS} FROM #{args.call(function)}", args.params, lambda { |res|
        res.type_map = JOB_TYPES
        res.values.map { |v| Job.new(*v[0, 17], v[17] || {}, worker) }
      })
    end

    # -- jobs ----------------------------------------------------------------------------

    def enqueue(queue, payload = nil, kind: nil, priority: nil, run_at: nil, max_attempts: nil,
                unique_key: nil, unique_strategy: nil, on_conflict: nil, concurrency_key: nil,
                concurrency_limit: nil, rate_key: nil, depends_on: nil, on_parent_failure: nil,
                fairness_key: nil)
      a = Args.new.pos(queue, "text")
      a.opt("payload", json(payload), "jsonb").opt("kind", kind, "text").opt("priority", priority, "integer")
      a.opt("run_at", time(run_at), "timestamptz").opt("max_attempts", max_attempts, "integer")
      a.opt("unique_key", unique_key, "text").opt("unique_strategy", unique_strategy&.to_s, "text")
      a.opt("on_conflict", on_conflict&.to_s, "text").opt("concurrency_key", concurrency_key, "text")
      a.opt("concurrency_limit", concurrency_limit, "integer").opt("rate_key", rate_key, "text")
      a.opt("depends_on", int_array(depends_on), "bigint[]").opt("on_parent_failure", on_parent_failure&.to_s, "text")
      a.opt("fairness_key", fairness_key, "text")
      scalar_call("jobq_enqueue", a) { |v| to_i(v) }
    end

    def enqueue_batch(queue, payloads, kind: nil, priority: nil, run_at: nil, max_attempts: nil, fairness_key: nil)
      a = Args.new.pos(queue, "text").pos(json_array(payloads), "jsonb[]")
      a.opt("kind", kind, "text").opt("priority", priority, "integer")
      a.opt("run_at", time(run_at), "timestamptz").opt("max_attempts", max_attempts, "integer")
      a.opt("fairness_key", fairness_key, "text")
      Call.new("SELECT v FROM #{a.call('jobq_enqueue_batch')} AS v", a.params,
               ->(res) { res.column_values(0).map { |v| Integer(v) } })
    end

    # Each element: enqueue's arguments by their SQL names, and "after" (0-based positions of
    # earlier elements it depends on). Returns the ids in order (nil where a conflict discarded).
    def enqueue_graph(jobs)
      Call.new("SELECT v FROM jobq_enqueue_graph($1::jsonb) AS v", [json(jobs.to_a)],
               ->(res) { res.column_values(0).map { |v| to_i(v) } })
    end

    def cancel(job_id) = scalar_call("jobq_cancel", Args.new.pos(job_id, "bigint")) { |v| v }
    def retry_job(job_id) = scalar_call("jobq_retry", Args.new.pos(job_id, "bigint")) { |v| to_bool(v) }

    def results(ids)
      Call.new("SELECT id, kind, state, attempt, result, last_error FROM jobq_results($1::bigint[])", [int_array(ids)],
               lambda { |res|
                 res.type_map = RESULT_TYPES
                 res.values.map { |v| JobResult.new(*v) }
               })
    end

    def emit_event(name, payload = nil)
      scalar_call("jobq_emit_event", Args.new.pos(name, "text").opt("payload", json(payload), "jsonb")) { |v| Integer(v) }
    end

    def pause(queue, kind: nil)
      scalar_call("jobq_pause", Args.new.pos(queue, "text").opt("kind", kind, "text")) { nil }
    end

    def resume(queue, kind: nil)
      scalar_call("jobq_resume", Args.new.pos(queue, "text").opt("kind", kind, "text")) { nil }
    end

    # -- schedules and rate limits -------------------------------------------------------

    def schedule(name, cron, queue, payload = nil, kind: nil, priority: nil, max_attempts: nil,
                 time_zone: nil, catch_up: nil)
      a = Args.new.pos(name, "text").pos(cron, "text").pos(queue, "text")
      a.opt("payload", json(payload), "jsonb").opt("kind", kind, "text").opt("priority", priority, "integer")
      a.opt("max_attempts", max_attempts, "integer").opt("time_zone", time_zone, "text")
      a.opt("catch_up", boolean(catch_up), "boolean")
      scalar_call("jobq_schedule", a) { nil }
    end

    def unschedule(name) = scalar_call("jobq_unschedule", Args.new.pos(name, "text")) { |v| to_bool(v) }

    # The names of the schedules that start with prefix (the view jobq.schedules).
    def schedule_names(prefix)
      Call.new("SELECT name FROM jobq.schedules WHERE starts_with(name, $1::text) ORDER BY name", [prefix],
               ->(res) { res.column_values(0) })
    end

    def set_rate_limit(key, max_starts, per = nil)
      a = Args.new.pos(key, "text").pos(max_starts, "integer").pos(interval(per), "interval")
      scalar_call("jobq_set_rate_limit", a) { nil }
    end

    # -- locks ---------------------------------------------------------------------------

    def acquire_lock(key, worker, ttl: nil)
      a = Args.new.pos(key, "text").pos(worker, "uuid").opt("ttl", interval(ttl), "interval")
      scalar_call("jobq_acquire_lock", a) { |v| to_bool(v) }
    end

    def release_lock(key, worker)
      scalar_call("jobq_release_lock", Args.new.pos(key, "text").pos(worker, "uuid")) { |v| to_bool(v) }
    end

    def lock_holder(key) = scalar_call("jobq_lock_holder", Args.new.pos(key, "text")) { |v| v }

    # -- reaping and observing -----------------------------------------------------------

    def reap
      Call.new("SELECT workers_reaped, jobs_requeued, jobs_dead, locks_released, jobs_pruned FROM jobq_reap()", [],
               ->(res) { ReapResult.new(*res.values.first.map { |v| Integer(v) }) })
    end

    def queue_stats(queue = nil)
      sql = "SELECT queue, ready, scheduled, executing, dead, extract(epoch FROM oldest_ready_age) FROM jobq.queue_stats"
      params = []
      if queue.nil?
        sql += " ORDER BY queue"
      else
        sql += " WHERE queue = $1::text"
        params << queue
      end
      Call.new(sql, params, lambda { |res|
        res.values.map do |q, *counts, age|
          QueueStats.new(q, *counts.map { |c| Integer(c) }, age&.to_f)
        end
      })
    end

    def version
      Call.new("SELECT version, edition FROM jobq_version()", [], ->(res) { res.values.first })
    end

    def heartbeat_timeout
      Call.new("SELECT extract(epoch FROM coalesce(current_setting('jobq.heartbeat_timeout', true)::interval, '30s'))",
               [], ->(res) { scalar(res).to_f })
    end

    # jobq.reap_interval in seconds (1 when the setting is not defined or empty, as the SQL
    # edition reads it).
    def reap_interval
      Call.new("SELECT extract(epoch FROM coalesce(nullif(current_setting('jobq.reap_interval', true), '')::interval, '1s'))",
               [], ->(res) { scalar(res).to_f })
    end

    # -- workers -------------------------------------------------------------------------

    def register_worker(name: nil, metadata: nil, bind_to_session: nil)
      a = Args.new.opt("name", name, "text").opt("metadata", json(metadata), "jsonb")
      a.opt("bind_to_session", boolean(bind_to_session), "boolean")
      scalar_call("jobq_register_worker", a) { |v| v }
    end

    def heartbeat(worker, holding: nil)
      a = Args.new.pos(worker, "uuid").opt("holding", int_array(holding), "bigint[]")
      scalar_call("jobq_heartbeat", a) { |v| to_int_list(v) }
    end

    def unregister_worker(worker)
      scalar_call("jobq_unregister_worker", Args.new.pos(worker, "uuid")) { |v| v.nil? ? 0 : Integer(v) }
    end

    def stop_checkouts(worker) = scalar_call("jobq_stop_checkouts", Args.new.pos(worker, "uuid")) { nil }

    def checkout(worker, queues: nil, max_jobs: nil, wait: nil)
      a = Args.new.pos(worker, "uuid").opt("queues", text_array(queues), "text[]")
      a.opt("max_jobs", max_jobs, "integer").opt("wait", interval(wait), "interval")
      jobs_call("jobq_checkout", a, worker)
    end

    def complete(job_id, worker, result = nil)
      a = Args.new.pos(job_id, "bigint").pos(worker, "uuid").opt("result", json(result), "jsonb")
      scalar_call("jobq_complete", a) { |v| to_bool(v) }
    end

    def fail(job_id, worker, error = nil, retry_in: nil, discard: nil)
      a = Args.new.pos(job_id, "bigint").pos(worker, "uuid").opt("error", json(error), "jsonb")
      a.opt("retry_in", interval(retry_in), "interval").opt("discard", boolean(discard), "boolean")
      scalar_call("jobq_fail", a) { |v| v }
    end

    def complete_many(worker, job_ids, results = nil)
      a = Args.new.pos(worker, "uuid").pos(int_array(job_ids), "bigint[]").opt("results", json_array(results), "jsonb[]")
      scalar_call("jobq_complete_many", a) { |v| to_int_list(v) }
    end

    def fail_many(worker, job_ids, errors = nil)
      a = Args.new.pos(worker, "uuid").pos(int_array(job_ids), "bigint[]").opt("errors", json_array(errors), "jsonb[]")
      scalar_call("jobq_fail_many", a) { |v| v.nil? ? [] : PG::TextDecoder::Array.new.decode(v) }
    end

    def complete_and_checkout(worker, job_ids, results = nil, queues: nil, max_jobs: nil)
      a = Args.new.pos(worker, "uuid").pos(int_array(job_ids), "bigint[]").opt("results", json_array(results), "jsonb[]")
      a.opt("queues", text_array(queues), "text[]").opt("max_jobs", max_jobs, "integer")
      jobs_call("jobq_complete_and_checkout", a, worker)
    end

    def fail_and_checkout(worker, job_ids, errors = nil, queues: nil, max_jobs: nil)
      a = Args.new.pos(worker, "uuid").pos(int_array(job_ids), "bigint[]").opt("errors", json_array(errors), "jsonb[]")
      a.opt("queues", text_array(queues), "text[]").opt("max_jobs", max_jobs, "integer")
      jobs_call("jobq_fail_and_checkout", a, worker)
    end

    def checkpoint(job_id, worker, step, value)
      a = Args.new.pos(job_id, "bigint").pos(worker, "uuid").pos(step, "text").pos(JSON.generate(value), "jsonb")
      scalar_call("jobq_checkpoint", a) { |v| to_bool(v) }
    end

    def snooze(job_id, worker, until_time)
      a = Args.new.pos(job_id, "bigint").pos(worker, "uuid").pos(time(until_time), "timestamptz")
      scalar_call("jobq_snooze", a) { |v| to_bool(v) }
    end

    def await_jobs(job_id, worker, jobs)
      a = Args.new.pos(job_id, "bigint").pos(worker, "uuid").pos(int_array(jobs), "bigint[]")
      scalar_call("jobq_await_jobs", a) { |v| v }
    end

    def await_event(job_id, worker, event, timeout: nil)
      a = Args.new.pos(job_id, "bigint").pos(worker, "uuid").pos(event, "text").opt("timeout", interval(timeout), "interval")
      scalar_call("jobq_await_event", a) { |v| v }
    end

    # The job's checkpoints as the server has them now (read after an await_event).
    def checkpoints(job_id)
      Call.new("SELECT checkpoints FROM jobq.jobs WHERE id = $1::bigint", [job_id],
               ->(res) { res.ntuples.zero? ? {} : JSON.parse(res.getvalue(0, 0)) })
    end
  end
end
