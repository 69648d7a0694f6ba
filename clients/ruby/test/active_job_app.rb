# frozen_string_literal: true

# The ActiveJob application of the adapter's tests: ActiveRecord on the test database (role
# jobq_test_app), the jobq adapter, and the job classes the tests enqueue. Loaded by the tests
# and, with --require, by the jobq-worker command they run.
require "active_record"
require "active_job"
require "jobq/active_job"

ActiveRecord::Base.establish_connection(ENV.fetch("JOBQ_TEST_DSN"))
ActiveRecord::Base.logger = nil
ActiveJob::Base.queue_adapter = :jobq
ActiveJob::Base.logger = Logger.new(nil)

# One row per perform: what the tests read to know a job ran (public.aj_runs, made by the tests).
class AjRun < ActiveRecord::Base
  self.table_name = "public.aj_runs"
end

class RecordJob < ActiveJob::Base
  def perform(tag, value = nil)
    AjRun.create!(tag: tag, value: value.to_s, provider_job_id: provider_job_id, executions: executions)
  end
end

class FlakyError < StandardError; end
class DiscardMe < StandardError; end

class RetriedJob < ActiveJob::Base
  retry_on FlakyError, wait: 0, attempts: 3

  def perform(tag)
    AjRun.create!(tag: tag, provider_job_id: provider_job_id, executions: executions)
    raise FlakyError, "still flaky"
  end
end

class UniqueRetriedJob < ActiveJob::Base
  jobq_options unique_key: ->(job) { "unique-retried-#{job.arguments.first}" }
  retry_on FlakyError, wait: 0, attempts: 2

  def perform(tag)
    AjRun.create!(tag: tag, provider_job_id: provider_job_id, executions: executions)
    raise FlakyError, "still flaky"
  end
end

class DiscardedJob < ActiveJob::Base
  discard_on DiscardMe

  def perform(tag)
    AjRun.create!(tag: tag, provider_job_id: provider_job_id, executions: executions)
    raise DiscardMe, "not worth it"
  end
end

class BrokenJob < ActiveJob::Base
  def perform(_tag) = raise(ArgumentError, "broken for good")
end

class JobqRetriedJob < ActiveJob::Base
  jobq_options retry_errors: true, max_attempts: 2

  def perform(tag)
    AjRun.create!(tag: tag, provider_job_id: provider_job_id, executions: executions)
    raise IOError, "retried by jobq"
  end
end

class UniqueReportJob < ActiveJob::Base
  jobq_options unique_key: ->(job) { "report-#{job.arguments.first}" }, on_conflict: :discard,
               concurrency_key: "reports", concurrency_limit: 2, rate_key: "report-rate", max_attempts: 5

  def perform(tag) = AjRun.create!(tag: tag, provider_job_id: provider_job_id, executions: executions)
end

class LimitedJob < ActiveJob::Base
  jobq_options concurrency_key: ->(job) { "limited-#{job.arguments.first}" }, concurrency_limit: 3

  def perform(_tag); end
end

class StrictUniqueJob < ActiveJob::Base
  jobq_options unique_key: ->(job) { "strict-#{job.arguments.first}" }

  def perform(_tag); end
end
