# frozen_string_literal: true

require "jobq/active_job"

module ActiveJob
  module QueueAdapters
    # jobq as ActiveJob's queue: `config.active_job.queue_adapter = :jobq`. Jobs are enqueued on
    # Jobq::ActiveJob.connection (ActiveRecord's by default), in its open transaction: a job
    # enqueued inside an ActiveRecord transaction exists only if that transaction commits.
    class JobqAdapter
      # ActiveJob 7.2+: enqueue at once, inside the caller's transaction, which is what makes
      # the enqueue transactional (ActiveJob would otherwise defer it to after the commit).
      def enqueue_after_transaction_commit?
        false
      end

      def enqueue(job)
        enqueue_one(job, nil)
      end

      def enqueue_at(job, timestamp)
        enqueue_one(job, Time.at(timestamp))
      end

      # ActiveJob 7.1+ (perform_all_later): the jobs without a unique key in one call
      # (jobq_enqueue_graph), those with one each on its own, so that a taken key refuses only
      # its job. Returns how many were enqueued (those with a provider_job_id).
      def enqueue_all(jobs)
        client = Jobq::ActiveJob.client
        keyed, plain = jobs.partition { |job| Jobq::ActiveJob.enqueue_options(job).key?(:unique_key) }
        unless plain.empty?
          graph = plain.map do |job|
            run_at = job.respond_to?(:scheduled_at) && job.scheduled_at ? Time.at(job.scheduled_at.to_f) : nil
            options = Jobq::ActiveJob.enqueue_options(job, run_at)
            options[:run_at] = Jobq::Calls.time(options[:run_at]) if options[:run_at]
            { queue: job.queue_name, payload: job.serialize }.merge(options)
          end
          client.enqueue_graph(graph).zip(plain).each { |id, job| accepted(job, id) }
        end
        keyed.each do |job|
          run_at = job.respond_to?(:scheduled_at) && job.scheduled_at ? Time.at(job.scheduled_at.to_f) : nil
          accepted(job, insert(job, run_at, client))
        rescue Jobq::UniqueConflict
          job.successfully_enqueued = false if job.respond_to?(:successfully_enqueued=)
        end
        jobs.count(&:provider_job_id)
      end

      private

      # A taken unique key (on_conflict "reject", the default) raises ActiveJob::EnqueueError
      # where ActiveJob has it (7.0+: perform_later then returns false), else
      # Jobq::UniqueConflict. With on_conflict :discard or :log the job is not enqueued and
      # provider_job_id stays nil.
      def enqueue_one(job, run_at)
        accepted(job, insert(job, run_at, Jobq::ActiveJob.client))
        job
      rescue Jobq::UniqueConflict => e
        raise unless defined?(::ActiveJob::EnqueueError)

        raise ::ActiveJob::EnqueueError, e.message
      end

      def insert(job, run_at, client)
        client.enqueue(job.queue_name, job.serialize, **Jobq::ActiveJob.enqueue_options(job, run_at))
      end

      def accepted(job, id)
        job.provider_job_id = id
        job.successfully_enqueued = !id.nil? if job.respond_to?(:successfully_enqueued=)
      end
    end
  end
end
