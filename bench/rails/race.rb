# frozen_string_literal: true

# One step of the ActiveJob race (bench/rails/race.sh), on the backend RACE_BACKEND
# (race_app.rb):
#   ruby race.rb enqueue single|bulk COUNT   COUNT NoopJobs on RACE_THREADS threads, through
#                                            perform_later (single) or the backend's bulk call
#                                            in batches of 1,000; prints jobs/s
#   ruby race.rb delayed_job_worker          a DelayedJob worker process with RACE_THREADS
#                                            threads (DelayedJob's own runs one job at a time)
#   ruby race.rb execute_cost                CPU µs per job of ActiveJob's own execution of a
#                                            NoopJob (ActiveJob::Base.execute, no queue at all)
require_relative "race_app"

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

# The backend's bulk enqueue of jobs (one call per 1,000): jobq's adapter enqueue_all (one
# jobq_enqueue_graph), Sidekiq's push_bulk; DelayedJob has none.
def bulk(jobs)
  case BACKEND
  when "jobq" then ActiveJob::Base.queue_adapter.enqueue_all(jobs)
  when "sidekiq"
    Sidekiq::Client.push_bulk("class" => ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper, "queue" => "race",
                              "args" => jobs.map { |j| [j.serialize] })
  else abort "#{BACKEND} has no bulk enqueue"
  end
end

def enqueue(mode, count)
  per = count / THREADS
  start = now
  Array.new(THREADS) do |t|
    Thread.new do
      ActiveRecord::Base.connection_pool.with_connection do
        if mode == "single"
          per.times { |i| NoopJob.perform_later(t * per + i) }
        else
          per.times.each_slice(1000) { |slice| bulk(slice.map { |i| NoopJob.new(t * per + i) }) }
        end
      end
    end
  end.each(&:join)
  puts format("%.0f", per * THREADS / (now - start))
end

def delayed_job_worker
  stop = false
  %w[TERM INT].each { |s| Signal.trap(s) { stop = true } }
  Array.new(THREADS) do
    Thread.new do
      ActiveRecord::Base.connection_pool.with_connection do
        worker = Delayed::Worker.new(queues: ["race"])
        until stop
          done, failed = worker.work_off(100)
          sleep Delayed::Worker.sleep_delay if done.to_i + failed.to_i < 100 && done.to_i.zero?
        end
      end
    end
  end.each(&:join)
end

# What every backend's worker pays per job before any queue: ActiveJob's execution of the job
# (deserialize, callbacks, perform), on one thread.
def execute_cost
  data = NoopJob.new(1).serialize
  2_000.times { ActiveJob::Base.execute(data) }
  n = 20_000
  cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  n.times { ActiveJob::Base.execute(data) }
  puts format("%.0f", (Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu) * 1e6 / n)
end

case ARGV[0]
when "enqueue" then enqueue(ARGV.fetch(1), Integer(ARGV.fetch(2)))
when "delayed_job_worker" then delayed_job_worker
when "execute_cost" then execute_cost
else abort "usage: race.rb enqueue single|bulk COUNT | delayed_job_worker | execute_cost"
end
