#!/usr/bin/env ruby
# frozen_string_literal: true

# A jobq worker in Ruby: the `jobq` gem (clients/ruby) with the demo handler.
#
#   JOBQ_DSN=postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo ruby -Iclients/ruby/lib examples/ruby/worker.rb
#
# The gem does the protocol (heartbeats with what it holds, the one-commit complete-and-checkout,
# waiting inside the server, SIGTERM draining, re-registration, reconnection, pooled mode). The
# demo handler reads the payload: {"sleep_ms": N} sleeps N ms (a cancel cuts it short),
# {"fail": true} raises, anything else completes; the result is {"worker": <name>, "lang":
# "ruby"}. It handles the demo's kinds, and the queues of JOBQ_QUEUES for jobs without a kind.
# The "order" handler is a workflow of durable steps (job.durable): charge, pack, three
# shipments fanned out and gathered, then a "delivered" event awaited.
#
# Environment: JOBQ_DSN, JOBQ_QUEUES (comma-separated; empty: every queue), JOBQ_CONCURRENCY (jobs
# at once, 10), JOBQ_NAME (rb-<host>-<pid>), JOBQ_POOLED=1 (behind a transaction-mode pooler),
# JOBQ_WAIT_S (an idle checkout's wait inside the server, 5), JOBQ_LOG_JSON=1 (one JSON line per
# event on stdout: the handler's "started"/"finished", the gem's log lines as "log").
require "jobq"
require "logger"
require "socket"

def env(key, default = "") = ENV[key].to_s.empty? ? default : ENV[key]

NAME = env("JOBQ_NAME", "rb-#{Socket.gethostname}-#{Process.pid}")
QUEUES = env("JOBQ_QUEUES").split(",").reject(&:empty?)
KINDS = %w[send_mail build_report sync_inventory call_partner transcode tick ship].freeze
OUT = Mutex.new
$stdout.sync = true

# Handlers run on threads: one whole line at a time.
def say(event, **fields)
  line = { ts: Time.now.to_f.round(3), event: event, worker: NAME, lang: "ruby", **fields }
  OUT.synchronize { puts(env("JOBQ_LOG_JSON") == "1" ? JSON.generate(line) : line.inspect) }
end

demo = lambda do |job|
  say("started", id: job.id, attempt: job.attempt)
  payload = job.payload.is_a?(Hash) ? job.payload : {}
  raise Jobq::Cancelled, "job #{job.id} was cancelled" if payload["sleep_ms"] && job.wait_cancelled(payload["sleep_ms"] / 1000.0)
  raise "job #{job.id} failed on purpose" if payload["fail"]

  say("finished", id: job.id)
  { worker: NAME, lang: "ruby" }
end

# A workflow: each step once, across crashes and suspensions.
order = lambda do |job|
  say("started", id: job.id, attempt: job.attempt)
  steps = job.durable
  n = job.payload["order"]
  charge = steps.step("charge") { { "charged_by" => NAME } }
  say("step", id: job.id, step: "pack")
  steps.step("pack") do
    sleep job.payload["pack_ms"] / 1000.0
    { "packed_by" => NAME }
  end
  boxes = steps.spawn("ship", "shipments", (0...3).map { |b| { sleep_ms: 200, order: n, box: b } }, kind: "ship")
  shipped = steps.gather(boxes) # suspends the order until the three are done
  delivered = steps.await_event("order-#{n}:delivered") # suspends it until the event comes
  say("finished", id: job.id)
  { worker: NAME, lang: "ruby", **charge, shipped: shipped.size, delivered: delivered }
end

# The gem's log lines as event lines.
logger = Logger.new($stdout, level: Logger::INFO)
logger.formatter = proc { |severity, _, _, message| say("log", level: severity.downcase, message: message) && nil }
handlers = (KINDS + QUEUES).to_h { |k| [k, demo] }.merge("order" => order)
worker = Jobq::Worker.new(env("JOBQ_DSN", "postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo"),
                          queues: QUEUES.empty? ? nil : QUEUES, name: NAME, concurrency: Integer(env("JOBQ_CONCURRENCY", "10")),
                          pooled: env("JOBQ_POOLED") == "1", wait: Float(env("JOBQ_WAIT_S", "5")), handlers: handlers,
                          logger: logger)
worker.run
