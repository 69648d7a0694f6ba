# frozen_string_literal: true

# A minimal Rails application with jobq as its ActiveJob adapter, for test/rails_test.rb: it
# boots, enqueues one job in a transaction, runs the jobq worker's handler for it inside
# Rails' executor, and prints what it saw as JSON on stdout.
require "rails"
require "active_record/railtie"
require "active_job/railtie"
require "jobq"

class RailsTestApp < Rails::Application
  config.eager_load = false
  config.logger = Logger.new(nil)
  config.secret_key_base = "test"
  config.active_job.queue_adapter = :jobq
  config.root = __dir__
end

ENV["DATABASE_URL"] = ENV.fetch("JOBQ_TEST_DSN")
RailsTestApp.initialize!

class RailsProbeJob < ActiveJob::Base
  def perform(queue)
    # Rails' executor is running this job: ActiveSupport's execution context is active.
    ActiveRecord::Base.connection.exec_query("SELECT 1")
    $seen = { "queue" => queue, "executor_active" => Rails.application.executor.active? }
  end
end

queue = ARGV.fetch(0)
job = ActiveRecord::Base.transaction { RailsProbeJob.set(queue: queue).perform_later(queue) }
worker = Jobq::ActiveJob.worker(Jobq::ActiveJob.dsn, queues: [queue], concurrency: 1, wait: 1, handle_signals: false,
                                                     logger: Logger.new(nil))
Thread.new do
  sleep 0.05 until $seen
  worker.stop
end
worker.run
tasks = (Rails.application.load_tasks && Rake::Task.tasks.map(&:name).grep(/\Ajobq:/))
puts JSON.generate($seen.merge("adapter" => ActiveJob::Base.queue_adapter.class.name, "job_id" => job.provider_job_id,
                               "tasks" => tasks))
