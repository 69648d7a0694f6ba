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

      # ActiveJob 7.1+ (perform_all_later). Jobs with no key of jobq's go in one
      # jobq_enqueue_batch per (queue, class, priority, run_at, max_attempts); a job with a
      # unique key on its own, so that a taken key refuses only its job; jobs with other keys in
      # one jobq_enqueue_graph. Returns how many were enqueued (those with a provider_job_id).
      def enqueue_all(jobs)
        client = Jobq::ActiveJob.client
        planned = jobs.map { |job| [job, Jobq::ActiveJob.enqueue_options(job, scheduled_at(job))] }
        keyed, rest = planned.partition { |_, options| options.key?(:unique_key) }
        plain, other = rest.partition { |_, options| (options.keys - BATCH_OPTIONS).empty? }
        plain.group_by { |job, options| [job.queue_name, options] }.each do |(queue, options), group|
          ids = client.enqueue_batch(queue, group.map { |job, _| job.serialize }, **options)
          ids.zip(group) { |id, (job, _)| accepted(job, id) }
        end
        unless other.empty?
          graph = other.map do |job, options|
            { queue: job.queue_name, payload: job.serialize }.merge(options, run_at: Jobq::Calls.time(options[:run_at])).compact
          end
          client.enqueue_graph(graph).zip(other) { |id, (job, _)| accepted(job, id) }
        end
        keyed.each do |job, options|
          accepted(job, client.enqueue(job.queue_name, job.serialize, **options))
        rescue Jobq::UniqueConflict
          job.successfully_enqueued = false if job.respond_to?(:successfully_enqueued=)
        end
        jobs.count(&:provider_job_id)
      end

      BATCH_OPTIONS = %i[kind priority run_at max_attempts fairness_key].freeze

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

      # When a job built for enqueue_all is due: ActiveJob 6.1 and 7.0 keep a Float, 7.1+ a Time.
      def scheduled_at(job)
        at = job.respond_to?(:scheduled_at) ? job.scheduled_at : nil
        at && Time.at(at.to_f)
      end

      def accepted(job, id)
        job.provider_job_id = id
        job.successfully_enqueued = !id.nil? if job.respond_to?(:successfully_enqueued=)
      end
    end
  end
end
