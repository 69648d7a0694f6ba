# frozen_string_literal: true

require "time"

module Jobq
  # Durable steps of one job, for its handler: job.durable. Each is one or two jobq calls
  # (jobq_checkpoint, jobq_snooze, jobq_await_event, jobq_await_jobs, jobq_results); every
  # guarantee is the server's.
  #
  # A handler that uses them is replayed from the top on each attempt (after a crash, a
  # failure, or a suspension): what a step returned before comes back from the job's
  # checkpoints instead of running again. A call that suspends the job (sleep, an await_event
  # or gather that must wait) raises Jobq::Suspended; the worker then reports nothing for the
  # job, which the server makes ready again when its time, event or jobs come:
  #
  #   worker.handle("order") do |job|
  #     steps = job.durable
  #     charge = steps.step("charge") { Payments.charge(job.payload["order"]) }
  #     boxes = steps.spawn("ship", "shipments", [{ box: 1 }, { box: 2 }])
  #     shipped = steps.gather(boxes)                  # suspends until both finish
  #     delivered = steps.await_event("order-#{job.payload['order']}:delivered", timeout: 86_400)
  #     { charge: charge, shipped: shipped.size, delivered: delivered }
  #   end
  class Durable
    # runner: runs a list of Jobq::Calls::Call in one transaction and returns their answers
    # (the worker gives it).
    def initialize(job, runner)
      raise ArgumentError, "durable steps need a job checked out by a worker" if job.worker_id.nil?

      @job = job
      @run = runner
    end

    # The block's result, computed once: kept as the checkpoint name (JSON) and returned from it
    # on later attempts. The block runs again only if an attempt ended before its checkpoint
    # committed.
    def step(name)
      return @job.checkpoints[name] if @job.checkpoints.key?(name)

      keep(name, yield)
    end

    # Sleeps duration seconds durably: the job is snoozed until then (Jobq::Suspended) and,
    # replayed, goes past this call once the time has come.
    def sleep(name, duration)
      deadline = deadline("sleep:#{name}", duration)
      return nil if Time.now >= deadline

      ok, = @run.call([Calls.snooze(@job.id, @job.worker_id, deadline)])
      raise lost unless ok

      raise Suspended, "job #{@job.id} sleeps until #{deadline.utc.iso8601}"
    end

    # The payload of event name (Jobq::Client#emit_event): at once if it was emitted, else the
    # job is blocked until it is (Jobq::Suspended). With timeout (seconds, counted from this
    # step's first call), Jobq::EventTimeout once it has passed.
    def await_event(name, timeout: nil)
      key = "event:#{name}"
      unless @job.checkpoints.key?(key)
        left = nil
        unless timeout.nil?
          left = deadline("await:#{name}", timeout) - Time.now
          raise EventTimeout, name if left <= 0
        end
        state, checkpoints = @run.call([Calls.await_event(@job.id, @job.worker_id, name, timeout: left),
                                        Calls.checkpoints(@job.id)])
        raise Suspended, "job #{@job.id} awaits event #{name.inspect}" if state == "waiting"
        raise lost unless state == "emitted"

        @job.checkpoints.merge!(checkpoints)
      end
      @job.checkpoints[key]["payload"]
    end

    # Fan-out, once: one job per payload in queue (enqueue_batch's options), their ids kept as
    # the checkpoint name in the same statement.
    def spawn(name, queue, payloads, **options)
      return @job.checkpoints[name].to_a if @job.checkpoints.key?(name)

      batch = Calls.enqueue_batch(queue, payloads, **options)
      n = batch.params.size
      # The jobs and the checkpoint of their ids in one statement: on a replay either both
      # exist or neither.
      both = Calls::Call.new(
        "SELECT x.ids, jobq_checkpoint($#{n + 1}::bigint, $#{n + 2}::uuid, $#{n + 3}::text, to_jsonb(x.ids)) AS ok " \
        "FROM (SELECT coalesce(array_agg(b.v ORDER BY b.v), '{}') AS ids FROM (#{batch.sql}) b) x",
        [*batch.params, @job.id, @job.worker_id, name],
        ->(res) { [Calls.to_int_list(res.getvalue(0, 0)), Calls.to_bool(res.getvalue(0, 1))] }
      )
      (ids, ok), = @run.call([both])
      raise lost unless ok

      @job.checkpoints[name] = ids
    end

    # Fan-in: the results of jobs ids (Jobq::JobResult, in order) once every one is finished;
    # until then the job is blocked (Jobq::Suspended).
    def gather(ids)
      state, results = @run.call([Calls.await_jobs(@job.id, @job.worker_id, ids), Calls.results(ids)])
      raise Suspended, "job #{@job.id} awaits #{ids.size} jobs" if state == "waiting"
      raise lost unless state == "finished"

      results
    end

    private

    def keep(name, value)
      ok, = @run.call([Calls.checkpoint(@job.id, @job.worker_id, name, value)])
      raise lost unless ok

      @job.checkpoints[name] = value
    end

    def deadline(key, after)
      kept = @job.checkpoints[key]
      return Time.iso8601(kept.to_s) unless kept.nil?

      at = Time.now + after.to_f
      keep(key, at.utc.iso8601(6))
      at
    end

    def lost = Cancelled.new("job #{@job.id} is no longer this worker's")
  end
end
