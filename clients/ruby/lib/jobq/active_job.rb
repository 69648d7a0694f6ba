# frozen_string_literal: true

require "active_job"
require "securerandom"
require_relative "../jobq"

module Jobq
  # ActiveJob on jobq: the adapter (ActiveJob::QueueAdapters::JobqAdapter, selected with
  # `config.active_job.queue_adapter = :jobq` or `ActiveJob::Base.queue_adapter = :jobq`), the
  # per-class options (jobq_options), recurring jobs kept by jobq's schedules, and the worker
  # that runs ActiveJob jobs (Jobq::ActiveJob.worker; the jobq-worker command).
  #
  # How an ActiveJob job maps to a jobq job: the queue name is the jobq queue, the priority is
  # jobq's (lower runs first), set(wait:)/set(wait_until:) is run_at, the job class name is the
  # jobq kind, the job's serialized form is the payload, and provider_job_id is the jobq id.
  module ActiveJob
    # The job class's options for jobq, each a value or a callable taking the job:
    #
    #   class ReportJob < ApplicationJob
    #     jobq_options unique_key: ->(job) { "report-#{job.arguments.first}" }, on_conflict: :discard,
    #                  concurrency_key: "reports", concurrency_limit: 2, rate_key: "mailer",
    #                  max_attempts: 1
    #   end
    #
    # unique_key, unique_strategy, on_conflict, concurrency_key, concurrency_limit, rate_key,
    # fairness_key (fairness_key: ->(job) { job.arguments.first.account_id }: the accounts' jobs
    # are served in turns) and max_attempts are jobq_enqueue's arguments. ActiveJob's retry_on is what retries errors: an
    # error past retry_on and discard_on makes the jobq job dead at once, its error recorded.
    # max_attempts (default Jobq::ActiveJob.max_attempts, nil: the server's 25) bounds the runs
    # of a job whose worker died under it (killed, out of memory, its host gone): the server
    # runs it again on another worker while attempts remain. retry_errors: true hands errors to
    # jobq instead: each error fails the attempt and the server retries it after its backoff
    # while attempts remain (for classes without retry_on: the retried attempt runs the same
    # payload, so ActiveJob's executions count does not advance).
    module Options
      KEYS = %i[unique_key unique_strategy on_conflict concurrency_key concurrency_limit rate_key max_attempts
                fairness_key retry_errors].freeze

      def self.included(base)
        base.class_attribute :jobq_options_hash, instance_writer: false, default: {}
        base.extend(ClassMethods)
      end

      module ClassMethods
        def jobq_options(**options)
          unknown = options.keys - KEYS
          raise ArgumentError, "jobq_options: unknown #{unknown.join(', ')} (known: #{KEYS.join(', ')})" if unknown.any?

          self.jobq_options_hash = jobq_options_hash.merge(options)
        end
      end
    end

    class << self
      # max_attempts of ActiveJob jobs whose class sets none (nil: the server's default; see
      # Options).
      attr_accessor :max_attempts
      # The connection the adapter enqueues on: a callable returning a PG::Connection or an
      # ActiveRecord connection. Default: ActiveRecord::Base.connection, so that a job enqueued
      # inside an ActiveRecord transaction exists only if that transaction commits.
      attr_writer :connection
      # Recurring jobs: { name => { cron:, class:, args: [], queue:, priority:, time_zone:,
      # catch_up: } }, kept by jobq's schedules named "activejob:<name>" (apply_schedules).
      attr_accessor :recurring

      def connection
        return @connection.call if @connection
        raise "Jobq::ActiveJob.connection is not set and ActiveRecord is not loaded" unless defined?(::ActiveRecord::Base)

        ::ActiveRecord::Base.connection
      end

      def client = Client.new(connection)

      # jobq_enqueue's arguments for an ActiveJob job (run_at: a Time, or nil for now).
      #
      # A job enqueued by itself while it runs (retry_on's retry, which keeps its job_id) goes
      # without its unique key: the running job holds that key until it finishes, and the retry
      # would be refused. Its concurrency and rate keys stay.
      def enqueue_options(job, run_at = nil)
        options = job.class.respond_to?(:jobq_options_hash) ? job.class.jobq_options_hash : {}
        resolved = options.except(:retry_errors).transform_values { |v| v.respond_to?(:call) ? v.call(job) : v }
        resolved = resolved.except(:unique_key, :unique_strategy, :on_conflict) if job.job_id == Thread.current[:jobq_running_job_id]
        { kind: job.class.name, priority: job.priority, run_at: run_at, max_attempts: max_attempts }
          .merge(resolved).compact
      end

      # Runs the ActiveJob job a jobq job carries (what the worker's handler does): ActiveJob's
      # own execution, with its callbacks, retry_on and discard_on (and, in a Rails app, its
      # executor). Returns nil: an ActiveJob job has no result.
      #
      # An error that ActiveJob lets out (past retry_on and discard_on) is final: the jobq job
      # fails for good (Jobq::Discard), with that error recorded; unless the class says
      # jobq_options retry_errors: true, when the server retries it after its backoff.
      def execute(job)
        data = job.payload.dup
        data["provider_job_id"] = job.id
        data["job_id"] ||= SecureRandom.uuid # a recurring job's payload has none of its own
        Thread.current[:jobq_running_job_id] = data["job_id"]
        begin
          ::ActiveJob::Base.execute(data)
        rescue StandardError
          klass = data["job_class"].to_s.safe_constantize
          raise if klass.respond_to?(:jobq_options_hash) && klass.jobq_options_hash[:retry_errors]

          raise Discard
        end
        nil
      ensure
        Thread.current[:jobq_running_job_id] = nil
      end

      # A Jobq::Worker that runs ActiveJob jobs (every kind), with Rails' executor around each
      # job when in a Rails app. Options are Jobq::Worker's.
      def worker(dsn, **options)
        around = nil
        if defined?(::Rails) && ::Rails.respond_to?(:application) && ::Rails.application
          executor = ::Rails.application.executor
          around = ->(_job, &run) { executor.wrap(&run) }
        end
        Worker.new(dsn, fallback: method(:execute), around: around, **options)
      end

      SCHEDULE_PREFIX = "activejob:"

      # Makes jobq's schedules named "activejob:<name>" equal to recurring: creates or replaces
      # each, removes those no longer declared. Runs as a role granted jobq_admin, in one
      # transaction when the client's connection has one. Returns the names applied.
      def apply_schedules(client = self.client)
        declared = (recurring || {}).to_h { |name, spec| ["#{SCHEDULE_PREFIX}#{name}", spec.transform_keys(&:to_sym)] }
        declared.each do |name, spec|
          klass = spec.fetch(:class)
          klass = klass.constantize if klass.is_a?(String)
          job = klass.new(*Array(spec[:args]))
          job.queue_name = spec[:queue].to_s if spec[:queue]
          job.priority = spec[:priority] if spec.key?(:priority)
          payload = job.serialize.except("job_id", "provider_job_id", "enqueued_at")
          options = enqueue_options(job)
          client.schedule(name, spec.fetch(:cron), job.queue_name, payload,
                          kind: options[:kind], priority: options[:priority], max_attempts: options[:max_attempts],
                          time_zone: spec[:time_zone], catch_up: spec[:catch_up])
        end
        (client.run(Calls.schedule_names(SCHEDULE_PREFIX)) - declared.keys).each { |name| client.unschedule(name) }
        declared.keys
      end
    end

    self.max_attempts = nil
    self.recurring = {}
  end
end

ActiveSupport.on_load(:active_job) { include Jobq::ActiveJob::Options }
require_relative "../active_job/queue_adapters/jobq_adapter"

module Jobq
  module ActiveJob
    class << self
      # A libpq connection string for ActiveRecord's primary database (Rails' database.yml), for
      # the worker: JOBQ_DATABASE_URL wins, then DATABASE_URL, then ActiveRecord's settings.
      def dsn
        url = ENV["JOBQ_DATABASE_URL"] || ENV["DATABASE_URL"]
        return url if url && !url.empty?
        raise "set JOBQ_DATABASE_URL (no ActiveRecord to read the database from)" unless defined?(::ActiveRecord::Base)

        c = ::ActiveRecord::Base.connection_db_config.configuration_hash
        { host: c[:host], port: c[:port], dbname: c[:database], user: c[:username], password: c[:password],
          sslmode: c[:sslmode] }.compact.map { |k, v| "#{k}=#{PG::Connection.quote_connstr(v.to_s)}" }.join(" ")
      end
    end
  end
end
