# frozen_string_literal: true

# The application of the ActiveJob race (bench/rails/race.sh): ActiveRecord on the bench
# database, one job class that does nothing, and the ActiveJob adapter of RACE_BACKEND:
#   jobq         the jobq gem (clients/ruby), enqueued on ActiveRecord's connection
#   sidekiq      Sidekiq 6.4 on Redis (REDIS_URL), ActiveJob's own adapter
#   delayed_job  DelayedJob 4.1 (delayed_job_active_record), ActiveJob's own adapter
# Loaded by race.rb (enqueue, backlog, pending) and by the workers (jobq-worker --require,
# sidekiq -r), so that every backend runs the same job through the same ActiveJob.
require "active_record"
require "active_job"
require "logger"

BACKEND = ENV.fetch("RACE_BACKEND")
THREADS = Integer(ENV.fetch("RACE_THREADS", "10"))

ActiveRecord::Base.establish_connection(ENV.fetch("RACE_DSN") + "?pool=#{THREADS + 5}")
ActiveRecord::Base.logger = nil
ActiveJob::Base.logger = Logger.new(nil)

case BACKEND
when "jobq"
  require "jobq/active_job"
  ActiveJob::Base.queue_adapter = :jobq
when "sidekiq"
  require "sidekiq"
  Sidekiq.configure_client { |c| c.redis = { url: ENV.fetch("REDIS_URL"), size: THREADS + 5 } }
  Sidekiq.configure_server do |c|
    c.redis = { url: ENV.fetch("REDIS_URL") }
    c.logger.level = Logger::WARN
  end
  ActiveJob::Base.queue_adapter = :sidekiq
when "delayed_job"
  require "delayed_job_active_record"
  Delayed::Worker.logger = Logger.new(nil)
  Delayed::Worker.sleep_delay = 0.1 # its idle poll (default 5 s): at most a tenth of a second idle
  ActiveJob::Base.queue_adapter = :delayed_job
else
  abort "RACE_BACKEND must be jobq, sidekiq or delayed_job"
end

# The job of the race: does nothing, so the race measures the queue.
class NoopJob < ActiveJob::Base
  queue_as "race"

  def perform(_n); end
end
