# frozen_string_literal: true

# A worker process for the process tests, built on Jobq::Worker:
#
#   ruby -Ilib test/worker_proc.rb DSN QUEUE [CONCURRENCY] [pooled]
#
# Its handler serves the jobs of QUEUE (jobs with no kind are routed by their queue). Each run
# inserts a row into public.handler_runs (job id, pid, attempt) first, then, as the payload says:
# {"block_first_attempt": true}: the first attempt never returns (it waits until cancelled);
# {"hold_until_file": PATH}: waits until PATH exists; and returns {"pid": <this process>}.
# Logs go to stderr, one line per event.
require "jobq"
require "logger"

dsn, queue, concurrency, mode = ARGV
$stderr.sync = true
worker = Jobq::Worker.new(dsn, queues: [queue], concurrency: Integer(concurrency || 4), pooled: mode == "pooled",
                               logger: Logger.new($stderr, level: Logger::INFO))
conns = {} # one connection per handler thread, for the runs table
lock = Mutex.new
worker.handle(queue) do |job|
  conn = lock.synchronize { conns[Thread.current] ||= PG.connect(dsn) }
  conn.exec_params("INSERT INTO public.handler_runs (job_id, pid, attempt) VALUES ($1, $2, $3)", [job.id, Process.pid, job.attempt])
  payload = job.payload.is_a?(Hash) ? job.payload : {}
  if payload["block_first_attempt"] && job.attempt == 1
    job.wait_cancelled
    raise Jobq::Cancelled, "cancelled"
  end
  sleep 0.02 until File.exist?(payload["hold_until_file"]) if payload["hold_until_file"]
  { "pid" => Process.pid }
end
worker.run
