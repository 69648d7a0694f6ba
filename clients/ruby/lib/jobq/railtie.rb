# frozen_string_literal: true

# The adapter is defined as soon as the gem loads in a Rails app with ActiveJob (before Rails
# reads config.active_job.queue_adapter = :jobq).
require "jobq/active_job" if defined?(::ActiveJob)

module Jobq
  # In a Rails app: the rake tasks jobq:work and jobq:schedules.
  class Railtie < ::Rails::Railtie
    rake_tasks { load File.expand_path("tasks/jobq.rake", __dir__) }
  end
end
