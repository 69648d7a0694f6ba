# frozen_string_literal: true

require_relative "lib/jobq/version"

Gem::Specification.new do |s|
  s.name = "jobq"
  s.version = Jobq::VERSION
  s.summary = "jobq for Ruby: a job queue whose guarantees live in PostgreSQL, with an ActiveJob adapter"
  s.description = "A thin client of jobq's SQL functions: enqueue on your own connection and transaction, " \
                  "a threaded worker with heartbeats, the one-commit complete-and-checkout and a graceful drain, " \
                  "durable steps, and an ActiveJob adapter (config.active_job.queue_adapter = :jobq)."
  s.license = "MIT"
  s.authors = ["jobq"]
  s.required_ruby_version = ">= 3.1"
  s.files = Dir["lib/**/*.rb", "lib/**/*.rake", "exe/*", "README.md"]
  s.bindir = "exe"
  s.executables = ["jobq-worker"]
  s.require_paths = ["lib"]
  s.add_dependency "pg", "~> 1.2"
  s.metadata["rubygems_mfa_required"] = "true"
end
