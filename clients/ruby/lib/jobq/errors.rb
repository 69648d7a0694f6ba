# frozen_string_literal: true

module Jobq
  # A jobq call refused by the database: every error that carries a SQLSTATE is raised as a
  # Jobq::Error, or as the subclass its SQLSTATE maps to:
  #
  #   23505  UniqueConflict    enqueue with a taken unique_key and on_conflict "reject"
  #   JQ001  WorkerLost        the worker is unknown, unregistered, reaped or expired
  #   JQ002  JobsFenced        a fused call's job in hand is no longer the worker's
  #   22023  InvalidArgument   a value out of its domain
  #   22004  InvalidArgument   a NULL where a value is required
  #   42501  PermissionDenied  the role lacks the jobq role, or names another role's worker
  #   other  Error             e.g. 40001 under REPEATABLE READ, 57014 a cancelled wait
  #
  # The PG::Error is kept as #pg_error (and #cause). Errors without a SQLSTATE (a lost
  # connection) are pg's own PG::ConnectionBad / PG::UnableToSend and pass through.
  class Error < StandardError
    attr_reader :sqlstate, :detail, :hint, :pg_error

    def initialize(message, sqlstate: nil, detail: nil, hint: nil, pg_error: nil)
      @sqlstate = sqlstate
      @detail = detail
      @hint = hint
      @pg_error = pg_error
      parse
      text = detail ? "#{message} (DETAIL: #{detail})" : message
      super(sqlstate ? "[#{sqlstate}] #{text}" : text)
    end

    private

    def parse; end
  end

  # 23505: the job's unique_key is held; nothing was enqueued. #job_id: the holder's id (nil
  # when a worker's named lock holds the key: #lock_worker_id).
  class UniqueConflict < Error
    attr_reader :job_id, :lock_worker_id

    private

    def parse
      @job_id = detail.to_s[/existing job id: (-?\d+)/, 1]&.to_i
      @lock_worker_id = detail.to_s[/held by the lock of worker ([0-9a-fA-F-]{36})/, 1]
    end
  end

  # JQ001: the worker was reaped or unregistered; register again (Jobq::Worker does).
  class WorkerLost < Error; end

  # JQ002: a job handed to complete_and_checkout / fail_and_checkout is no longer the
  # worker's; nothing was done. #job_ids: the ids the server named.
  class JobsFenced < Error
    attr_reader :job_ids

    private

    def parse
      list = message_text[/jobs \{([-\d,]*)\}/, 1]
      @job_ids = list ? list.split(",").map(&:to_i) : []
    end

    def message_text = @pg_error&.result&.error_field(PG::PG_DIAG_MESSAGE_PRIMARY).to_s
  end

  # 22023 or 22004: a bug in the caller; nothing changed.
  class InvalidArgument < Error; end

  # 42501: grant the login role the jobq role the call needs.
  class PermissionDenied < Error; end

  CLASSES = {
    "23505" => UniqueConflict, "JQ001" => WorkerLost, "JQ002" => JobsFenced,
    "22023" => InvalidArgument, "22004" => InvalidArgument, "42501" => PermissionDenied
  }.freeze

  # The Jobq::Error for a PG::Error that carries a SQLSTATE; the error itself otherwise.
  def self.error_from(pg_error)
    res = pg_error.respond_to?(:result) ? pg_error.result : nil
    sqlstate = res&.error_field(PG::PG_DIAG_SQLSTATE)
    return pg_error if sqlstate.nil?

    CLASSES.fetch(sqlstate, Error).new(
      res.error_field(PG::PG_DIAG_MESSAGE_PRIMARY) || pg_error.message.strip,
      sqlstate: sqlstate, detail: res.error_field(PG::PG_DIAG_MESSAGE_DETAIL),
      hint: res.error_field(PG::PG_DIAG_MESSAGE_HINT), pg_error: pg_error
    )
  end

  # What Jobq::Worker (and Jobq::Testing.drain) reports with jobq_fail, {"type", "message"}:
  # for a job whose kind (or queue) has no handler;
  def self.no_handler_error(job)
    what = job.kind ? "kind #{job.kind.inspect}" : "queue #{job.queue.inspect} (the job has no kind)"
    { "type" => "NoHandler", "message" => "no handler for #{what}" }
  end

  # for a handler's exception (Jobq::RetryIn and Jobq::Discard: their #cause's, when they have one);
  def self.handler_error(e)
    if (e.is_a?(RetryIn) || e.is_a?(Discard)) && (cause = e.cause)
      { "type" => cause.class.name, "message" => cause.message }
    elsif e.is_a?(RetryIn) || e.is_a?(Discard)
      { "type" => e.class.name.split("::").last, "message" => e.message }
    else
      { "type" => e.class.name, "message" => e.message }
    end
  end

  # for a handler's result that JSON.generate refused with e.
  def self.result_error(e)
    { "type" => e.class.name, "message" => "the handler's result is not JSON: #{e.message}" }
  end

  # Raised by a handler to fail its job and have it retried after delay seconds (jobq_fail's
  # retry_in; dead when no attempt remains). The error recorded is the exception's #cause if
  # any ({"type", "message"}), else {"type" => "RetryIn", "message" => message}:
  #
  #   rescue Timeout::Error
  #     raise Jobq::RetryIn.new(30)
  class RetryIn < StandardError
    attr_reader :delay

    def initialize(delay, message = nil)
      raise ArgumentError, "delay must be at least 0" if delay.to_f.negative?

      @delay = delay.to_f
      super(message || "retry in #{@delay} s")
    end
  end

  # Raised by a handler to fail its job for good: dead at once, whatever attempts remain
  # (jobq_fail's discard). The error recorded is the exception's #cause if any, else this one:
  #
  #   rescue PaymentDeclined
  #     raise Jobq::Discard
  class Discard < StandardError
    def initialize(message = "discarded")
      super
    end
  end

  # Raised by durable steps when the job is no longer this worker's (cancelled, reaped).
  class Cancelled < StandardError; end

  # The job was suspended (asleep, or blocked on an event or on other jobs): its handler stops
  # here and the worker reports nothing; the job runs again from the top when it is ready.
  # Raised by Jobq::Durable; let it propagate.
  class Suspended < StandardError; end

  # Jobq::Durable#await_event's timeout passed before the event came.
  class EventTimeout < StandardError
    attr_reader :event

    def initialize(event)
      @event = event
      super("event #{event.inspect} did not come in time")
    end
  end
end
