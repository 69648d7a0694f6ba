# frozen_string_literal: true

require "pg"
require "json"

# jobq for Ruby: every jobq call on your own connection and transaction (Jobq::Client), a
# worker that runs handlers with everything the jobq protocol asks of a worker done for you
# (Jobq::Worker), durable steps (Jobq::Durable) and an ActiveJob adapter
# (require "jobq/active_job"; config.active_job.queue_adapter = :jobq). Every guarantee is the
# server's: this library only sends the SQL functions of the contract.
module Jobq
end

require_relative "jobq/version"
require_relative "jobq/errors"
require_relative "jobq/types"
require_relative "jobq/calls"
require_relative "jobq/client"
require_relative "jobq/durable"
require_relative "jobq/worker"
require_relative "jobq/railtie" if defined?(Rails::Railtie)
