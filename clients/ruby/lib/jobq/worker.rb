# frozen_string_literal: true

require "logger"
require "socket"

module Jobq
  # Runs handlers for the jobs of some queues, N at a time on threads, with everything the jobq
  # protocol asks of a worker done for you:
  #
  #   worker = Jobq::Worker.new("postgresql://app@db/app", queues: ["mail"], concurrency: 8)
  #   worker.handle("welcome_mail") do |job|      # jobs of kind "welcome_mail"
  #     Mailer.send(job.payload["to"])
  #     { sent: true }                            # the job's result
  #   end
  #   worker.run                                  # until SIGTERM / SIGINT / worker.stop
  #
  # What it does, all of it through the SQL functions (no guarantee is kept client-side), as
  # the Python, Node and Rust libraries' workers do:
  #
  # - Registers (jobq_register_worker; with bind_to_session unless pooled) and reads
  #   jobq.heartbeat_timeout. At its first registration it learns the server's edition
  #   (jobq_version(); #server_edition).
  # - Keeps up to concurrency jobs in flight, each handler on one of concurrency threads; while
  #   its jobs are short (handlers under 10 ms on average) it holds as many again in hand, so
  #   its threads never wait for the job loop's round trip.
  # - Checks out as many jobs as it has free slots. When it has finished jobs to report it does
  #   both in one call and one commit (jobq_complete_and_checkout), gathering finished jobs for
  #   up to 5 ms while fewer than half of its slots are free; if a job in hand was
  #   finished elsewhere meanwhile (JQ002) it reports the others with jobq_complete_many. When
  #   there is nothing to do it waits inside the server (jobq_checkout(..., wait)), never
  #   polling; jobs that finish meanwhile are reported on a second connection
  #   (jobq_complete_many), and failures at once (jobq_fail).
  # - Heartbeats on a third connection every heartbeat_timeout / 3 with holding = the ids
  #   really in flight (none while a checkout is on its way); the checkout loop sends the list
  #   between two checkouts when none was sent for a heartbeat interval, and after a failed
  #   checkout, so a claim whose reply never reached the worker goes back to the queue. It
  #   delivers cancellation requests: Job#cancelled? turns true. A cancelled handler that
  #   raises fails its job, which becomes cancelled.
  # - On the SQL edition (no background worker) each heartbeat runs the server's maintenance
  #   pass when the last one is older than jobq.reap_interval, so the worker heartbeats at
  #   least that often (read at each registration) and a database whose workers run is served
  #   without pg_cron.
  # - On JQ001 (this worker was reaped or unregistered) it drops the jobs in hand without
  #   reporting them (their handlers see Job#cancelled?; what they return is ignored), registers
  #   again and goes on.
  # - On a lost connection it reconnects with exponential backoff (1 s .. 30 s); bound to its
  #   session (not pooled) it drops its jobs and registers again.
  # - On SIGTERM / SIGINT (when #run is called from the main thread) or #stop it takes no more
  #   jobs: it ends its waiting checkout with jobq_stop_checkouts on the heartbeat connection
  #   (no statement is cancelled: the server logs no error); jobs a checkout claimed as the
  #   stop came are held unstarted and unregistering returns them, their attempt not counted.
  #   It lets the jobs in flight finish, reports them, unregisters and returns.
  #
  # A handler's return value is the job's result (JSON). An exception fails the job with
  # {"type" => class name, "message" => message} and the server's backoff; Jobq::RetryIn asks
  # for a delay of its own, Jobq::Discard makes the job dead at once. A job whose kind (or, with no kind, queue) has no handler and no
  # fallback fails with type "NoHandler" and is discarded (dead, not retried).
  class Worker
    MAX_BACKOFF = 30.0
    # The longest the job loop holds finished jobs back to report several in one call.
    BATCH_WAIT = 0.005
    # Jobs whose handlers take less than this on average are taken ahead (#capacity).
    PREFETCH_BELOW = 0.01

    # A job in hand: checked out under registration reg and not yet reported.
    Slot = Struct.new(:job, :reg, :cancel_requested, :dropped)
    Failure = Struct.new(:slot, :error, :retry_in, :discard)
    # One registration; registrations are compared by identity (equal?).
    Registration = Struct.new(:id)

    attr_reader :name, :queues, :concurrency, :server_edition

    # dsn: libpq connection string of a role granted jobq_worker.
    # queues: the queues to take jobs from (nil: every queue).
    # concurrency: jobs in flight at once (handler threads).
    # name: the worker's name in jobq.workers (default rb-<host>-<pid>); metadata: extra JSON
    #   for jobq.workers.metadata (lang, pid and host are added).
    # pooled: behind a transaction-mode pooler: no bind_to_session; liveness is the heartbeats.
    # wait: seconds an idle checkout waits inside the server (at most 3600).
    # heartbeat_interval: seconds between heartbeats (default: jobq.heartbeat_timeout / 3; on
    #   the SQL edition at most jobq.reap_interval).
    # handlers: { kind => callable }, as #handle takes them; fallback: the handler of jobs with
    #   no handler of their own (the ActiveJob worker uses it).
    # around: called as around.call(job) { run the handler } around each job (the ActiveJob
    #   worker wraps jobs in Rails' executor with it).
    # connect_options: more options for PG.connect. handle_signals: stop gracefully on SIGTERM
    #   and SIGINT when #run runs in the main thread. logger: a Logger.
    def initialize(dsn, queues: nil, concurrency: 10, name: nil, metadata: nil, pooled: false, wait: 5.0,
                   heartbeat_interval: nil, handlers: {}, fallback: nil, around: nil, connect_options: {},
                   handle_signals: true, logger: nil)
      raise ArgumentError, "concurrency must be at least 1" if concurrency < 1
      raise ArgumentError, "wait must be more than 0 and at most 3600 seconds" unless wait.positive? && wait <= 3600

      @dsn = dsn
      @queues = queues&.map(&:to_s)
      @concurrency = concurrency
      host = Socket.gethostname
      @name = name || "rb-#{host}-#{Process.pid}"
      @metadata = { "lang" => "ruby", "pid" => Process.pid, "host" => host }.merge(metadata || {})
      @pooled = pooled
      @wait = wait.to_f
      @heartbeat_interval = heartbeat_interval
      @handlers = {}
      handlers.each { |kind, fn| handle(kind, &fn) }
      @fallback = fallback
      @around = around
      @connect_options = connect_options
      @handle_signals = handle_signals
      @log = logger || Logger.new($stderr, level: Logger::INFO, progname: "jobq")
      @lock = Mutex.new          # the state below
      @hand_lock = Mutex.new     # a checkout's claim against a heartbeat's list of jobs in hand
      @hb_lock = Mutex.new       # one call at a time on the heartbeat connection
      @steps_lock = Mutex.new    # one durable step at a time on the steps connection
      @dispatch_cv = ConditionVariable.new
      @report_cv = ConditionVariable.new
      @hb_cv = ConditionVariable.new
      @reg = nil
      @stop_requested = false
      @running_now = false
    end

    # Registers the block as the handler of jobs of kind name (and of jobs with no kind in
    # queue name); it takes the Jobq::Job and returns its result.
    def handle(name, &block)
      raise ArgumentError, "a handler needs a block" if block.nil?

      @handlers[name.to_s] = block
      self
    end

    # The current registration's worker id (it changes when the worker registers again), or nil.
    def worker_id = @reg&.id

    # Runs the worker until #stop, SIGTERM or SIGINT, then drains and returns. Raises what a
    # deployment error raises, e.g. Jobq::PermissionDenied when the role may not register.
    def run
      reset
      signals = install_signals
      @pool = Array.new(@concurrency) { |i| Thread.new { Thread.current.name = "jobq-handler-#{i}"; handler_loop } }
      heartbeat = Thread.new { Thread.current.name = "jobq-heartbeat"; heartbeat_loop }
      reporter = Thread.new { Thread.current.name = "jobq-reporter"; report_loop }
      clean = false
      begin
        dispatch_loop
        clean = true
      ensure
        @lock.synchronize do
          @reporter_exit = true
          @heartbeat_exit = true
          @report_cv.broadcast
          @hb_cv.broadcast
        end
        [reporter, heartbeat].each { |t| t.join }
        @ready.close
        @pool.each { |t| clean ? t.join : (t.join(0.1) || t.kill) }
        @steps_conn&.close
        @steps_conn = nil
        signals.each { |sig, old| Signal.trap(sig, old || "DEFAULT") }
        @lock.synchronize do
          @running_now = false
          @stop_requested = false
        end
        @log.info("jobq worker #{@name}: stopped")
      end
    end

    # Asks the worker to stop: it takes no more jobs, finishes and reports those in flight,
    # unregisters, and #run returns. Safe from any thread; returns at once. (From a signal
    # handler, call it on a new thread: Thread.new { worker.stop }.)
    def stop
      reg = @lock.synchronize do
        @stop_requested = true
        next nil if !@running_now || @stopping

        @log.info("jobq worker #{@name}: stopping")
        @stopping = true
        @dispatch_cv.broadcast
        @report_cv.broadcast
        @reg
      end
      stop_checkouts(reg) if reg
      nil
    end

    private

    def reset
      @lock.synchronize do
        raise "the worker is running already" if @running_now

        @running_now = true
        @stopping = @stop_requested
      end
      @ready = Thread::Queue.new
      @in_hand = {}
      @running = 0          # jobs in hand whose handlers have not ended (started or queued)
      @avg_s = nil          # the handlers' average duration (seconds, moving)
      @done = []            # [slot, Encoded result or nil]
      @failed = []
      @reaped = nil
      @checkouts = 0
      @dispatcher_waiting = false
      @reporter_exit = false
      @reporter_done = false
      @heartbeat_exit = false
      @hb_wakes = 0
      @heartbeat_s = @heartbeat_interval || 10.0
      @holding_s = @heartbeat_s
      @holding_at = now
      @holding_due = false
      @hb_conn = nil
      @steps_conn = nil
      @steps_runner = method(:run_steps)
    end

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    # -- connections, registration, signals ---------------------------------------------

    def connect(role)
      PG.connect(@dsn, connect_timeout: 10, application_name: "#{@name}-#{role}", **@connect_options)
    end

    def call(conn, call) = Client.run(conn, call)

    # Whether error means the connection is gone (so: reconnect), not a refused call.
    def lost?(error, conn)
      return true if conn && (conn.finished? || conn.status != PG::CONNECTION_OK)
      return true if error.is_a?(PG::ConnectionBad) || error.is_a?(PG::UnableToSend)

      error.is_a?(Jobq::Error) && error.sqlstate.to_s.start_with?("08", "57P")
    end

    def register(conn)
      again = !@reaped.nil?
      id = call(conn, Calls.register_worker(name: @name, metadata: @metadata, bind_to_session: !@pooled))
      timeout = call(conn, Calls.heartbeat_timeout)
      beat = @heartbeat_interval || [timeout / 3, 0.05].max
      if @server_edition.nil?
        begin
          @server_edition = call(conn, Calls.version)[1]
        rescue Jobq::Error => e
          raise unless e.sqlstate == "42883" # no jobq_version(): a jobq older than 0.4, an extension

          @server_edition = "extension"
        end
      end
      holding = beat
      # No background worker: the heartbeats run the passes, each when the last one is older
      # than jobq.reap_interval, so beat at least that often. (The list of jobs in hand keeps
      # its own period: it is about heartbeat_timeout, not the passes.)
      beat = [beat, [call(conn, Calls.reap_interval), 0.05].max].min if @server_edition == "sql"
      @lock.synchronize do
        @heartbeat_s = beat
        @holding_s = holding
        @reg = Registration.new(id)
        @holding_at = now # a new registration holds nothing
        @holding_due = false
        @hb_wakes += 1 # the next heartbeat is one interval from now
        @hb_cv.broadcast
      end
      @log.info("jobq worker #{@name}: #{again ? 'registered again' : 'registered'} as #{id}")
    end

    def install_signals
      return {} unless @handle_signals && Thread.current == Thread.main

      %w[TERM INT].to_h { |sig| [sig, Signal.trap(sig) { Thread.new { stop } }] }
    end

    # Ends the waiting checkout, if any, by jobq_stop_checkouts on the heartbeat connection:
    # the server returns it with no job, and no later checkout of reg claims one.
    def stop_checkouts(reg)
      @hb_lock.synchronize do
        @hb_conn ||= connect("heartbeat")
        call(@hb_conn, Calls.stop_checkouts(reg.id))
      rescue WorkerLost
        @lock.synchronize { @reaped = reg }
      rescue StandardError => e # the wait ends by itself at worst, within wait
        @log.warn("jobq worker #{@name}: could not end the waiting checkout: #{e.message.strip}")
        close_heartbeat_conn if @hb_conn && lost?(e, @hb_conn)
      end
    end

    # -- jobs in hand ----------------------------------------------------------------------

    # Jobs a checkout returned become jobs in hand (with @hand_lock held since the checkout's
    # answer, so a heartbeat never sees the one without the other). Called with @lock held.
    def take(jobs, reg)
      if !@reaped.nil? && @reaped.equal?(reg) || !@reg.equal?(reg)
        @log.warn("jobq worker #{@name}: dropped #{jobs.map(&:id)} claimed by a lost registration") if jobs.any?
        return []
      end
      jobs.map do |job|
        job._runner = @steps_runner
        @in_hand[job.id] = Slot.new(job, reg, false, false)
      end
    end

    # JQ001 on a call for reg: if reg is still the registration, its jobs are dropped and the
    # job loop, woken, registers again.
    def reaped(reg)
      @lock.synchronize do
        next unless @reg.equal?(reg)

        @log.warn("jobq worker #{@name}: #{reg.id} was reaped (JQ001)")
        @reaped = reg
        drop_all("this worker was reaped")
        @dispatch_cv.signal
      end
    end

    # Drops every job in hand without reporting it: the server has returned them, or will, and
    # they run again. Their handlers see Job#cancelled?. Called with @lock held.
    def drop_all(why)
      dropped = @in_hand.keys.sort
      @in_hand.each_value do |slot|
        slot.dropped = true
        slot.job._cancel!
      end
      @in_hand.clear
      @done.clear
      @failed.clear
      @log.warn("jobq worker #{@name}: #{why}: dropped jobs #{dropped} without reporting them") if dropped.any?
    end

    # Reported (or lost): no longer in hand. Called with @lock held.
    def release(slots)
      slots.each { |slot| @in_hand.delete(slot.job.id) if @in_hand[slot.job.id].equal?(slot) }
    end

    # A durable step's calls (Jobq::Durable), in one transaction on the worker's steps
    # connection (opened on first use, again after it was lost).
    def run_steps(calls)
      @steps_lock.synchronize do
        @steps_conn = connect("steps") if @steps_conn.nil? || @steps_conn.finished? || @steps_conn.status != PG::CONNECTION_OK
        @steps_conn.transaction { |c| calls.map { |x| call(c, x) } }
      end
    end

    # -- running one job (on a handler thread) -----------------------------------------------

    def handler_loop
      while (slot = @ready.pop)
        began = now
        begin
          run_handler(slot) unless slot.dropped # a job held ahead and dropped meanwhile: not run
        rescue Exception => e # rubocop:disable Lint/RescueException -- the thread must go on
          @log.error("jobq worker #{@name}: job #{slot.job.id}: the worker failed running it: #{e.class}: #{e.message}")
        ensure
          @lock.synchronize do
            @running -= 1 # its slot is free
            timed(now - began)
            # Wake the job loop only where its wait can end: the first free slot, half of them
            # free, or none running (not at every job: a wake-up per job cost more than the job).
            free = capacity - @running
            @dispatch_cv.signal if free == 1 || free * 2 >= capacity && (free - 1) * 2 < capacity || @running.zero?
          end
        end
      end
    end

    def run_handler(slot)
      job = slot.job
      handler = @handlers[job.kind || job.queue] || @fallback
      return failure(slot, Jobq.no_handler_error(job), nil, true) if handler.nil?

      begin
        result = @around ? @around.call(job) { handler.call(job) } : handler.call(job)
      rescue Suspended => e
        # The server has the job (snoozed, or blocked on an event or on other jobs): nothing to
        # report, and its slot is free.
        @log.debug("jobq worker #{@name}: job #{job.id} suspended: #{e.message}")
        return
      rescue RetryIn, Discard => e
        return e.is_a?(Discard) ? failure(slot, Jobq.handler_error(e), nil, true) : failure(slot, Jobq.handler_error(e), e.delay)
      rescue Exception => e # rubocop:disable Lint/RescueException -- every error fails the job
        raise if e.is_a?(SystemExit) || e.is_a?(NoMemoryError)

        return failure(slot, Jobq.handler_error(e), nil)
      end
      success(slot, result)
    end

    def success(slot, result)
      encoded = nil
      unless result.nil?
        begin
          encoded = Calls::Encoded.new(JSON.generate(result))
        rescue StandardError => e
          return failure(slot, Jobq.result_error(e), nil)
        end
      end
      @lock.synchronize do
        next if slot.dropped

        @done << [slot, encoded]
        @report_cv.signal if @dispatcher_waiting || @stopping # otherwise the job loop reports it next
      end
    end

    def failure(slot, error, retry_in, discard = false)
      @lock.synchronize do
        next if slot.dropped

        @log.info("jobq worker #{@name}: job #{slot.job.id} failed: #{error['type']}: #{error['message']}")
        @failed << Failure.new(slot, error, retry_in, discard)
        @report_cv.signal
      end
    end

    # -- the job connection: checkouts, the one-commit protocol, the drain -------------------

    def dispatch_loop
      backoff = 1.0
      loop do
        conn = nil
        begin
          conn = connect("jobs")
          work(conn)
          backoff = 1.0
          drain(conn)
          return
        rescue StandardError => e
          raise unless lost?(e, conn)

          @log.warn("jobq worker #{@name}: connection lost (#{e.message.strip}); again in #{backoff} s")
          stopping, reg = @lock.synchronize do
            if !@pooled && @reg
              # The registration was bound to the session that ended: the server has reaped
              # it, and its jobs run again.
              drop_all("its session ended")
              @reg = nil
            end
            [@stopping, @reg]
          end
          if stopping && (conn.nil? || !@pooled || reg.nil?)
            # Nothing left to report on this registration, or no way to: let the handlers end;
            # the server returns whatever is still held.
            wait_handlers
            @log.warn("jobq worker #{@name}: stopped without unregistering #{reg.id}") if @pooled && reg
            return
          end
          @lock.synchronize { @dispatch_cv.wait(@lock, backoff) unless @stopping }
          backoff = [backoff * 2, MAX_BACKOFF].min
        ensure
          conn&.close unless conn.nil? || conn.finished?
        end
      end
    end

    def work(conn)
      loop do
        reg, free, beat, done = @lock.synchronize do
          break if @stopping

          if @reg.nil? || @reaped.equal?(@reg)
            drop_all("this worker was reaped")
            next [nil]
          end
          free = capacity - @running
          if free <= 0
            @dispatch_cv.wait(@lock)
            next [:again]
          end
          if @running.positive? && free * 2 < capacity && !@stopping
            # Fewer than half the slots free and jobs still running: gather more finished jobs
            # (at most BATCH_WAIT) so that one call and one commit report and replace several.
            @batch_until ||= now + BATCH_WAIT
            left = @batch_until - now
            if left.positive?
              @dispatch_cv.wait(@lock, left)
              next [:again]
            end
          end
          @batch_until = nil
          if @holding_due || now - @holding_at >= @holding_s
            # The periodic heartbeat sends no list while a checkout is on its way, and an idle
            # worker is nearly always inside one: send it here, where this loop (the only one
            # that checks out) has none on its way.
            @holding_due = false
            @holding_at = now # tried: the next try one interval on
            next [@reg, free, true]
          end
          mine, @done = @done.partition { |s, _| s.reg.equal?(@reg) }
          [@reg, free, false, mine]
        end
        return if reg.nil? && @stopping # break above: the stop came

        if reg.nil?
          register(conn)
          next
        end
        next if reg == :again

        if beat
          heartbeat(reg)
          next # reaped, stopping or a slot taken meanwhile: look again
        end
        slots = begin
          done.any? ? complete_and_checkout(conn, reg, done, free) : checkout_waiting(conn, reg, free)
        rescue Exception # rubocop:disable Lint/RescueException
          @lock.synchronize { @holding_due = true } # it may have claimed jobs whose reply was lost
          raise
        end
        if @lock.synchronize { @stopping }
          # Claimed as the stop came: held unstarted (in hand, so no heartbeat gives them back
          # as interrupted); unregistering returns them, their attempt not counted.
          @log.info("jobq worker #{@name}: stopping: jobs #{slots.map { |s| s.job.id }} claimed meanwhile are not started") if slots.any?
          next
        end
        start(slots)
      end
    end

    # How many jobs the worker keeps in hand: its concurrency, and as many again while its jobs
    # are short (their handlers' average under PREFETCH_BELOW), so that its threads have the
    # next jobs at hand while the job loop's call is on its way. A job in hand waits for a free
    # thread; with short jobs that is short, and as soon as jobs take longer the worker takes
    # no more than it runs. Called with @lock held.
    def capacity
      @avg_s && @avg_s < PREFETCH_BELOW ? @concurrency * 2 : @concurrency
    end

    # Called with @lock held, as each handler ends.
    def timed(seconds)
      @avg_s = @avg_s ? @avg_s * 0.9 + seconds * 0.1 : seconds
    end

    def start(slots)
      return if slots.empty?

      @lock.synchronize { @running += slots.size }
      slots.each { |slot| @ready << slot }
    end

    def begin_checkout
      @hand_lock.synchronize { @lock.synchronize { @checkouts += 1 } }
    end

    def end_checkout(jobs, reg)
      @hand_lock.synchronize do
        @lock.synchronize do
          @checkouts -= 1
          @dispatcher_waiting = false
          take(jobs, reg)
        end
      end
    end

    def complete_and_checkout(conn, reg, done, free)
      ids = done.map { |s, _| s.job.id }
      results = done.map { |_, r| r }
      results = nil if results.all?(&:nil?) # every result NULL: send no array
      jobs = []
      begin_checkout
      begin
        begin
          jobs = call(conn, Calls.complete_and_checkout(reg.id, ids, results, queues: @queues, max_jobs: free))
          @lock.synchronize { release(done.map(&:first)) }
        rescue JobsFenced => e # some were finished elsewhere: report the others alone
          @log.info("jobq worker #{@name}: jobs #{e.job_ids} are no longer this worker's")
          complete_alone(conn, reg, done)
        rescue WorkerLost
          @lock.synchronize { @reaped = reg }
        end
      rescue Exception # rubocop:disable Lint/RescueException
        @lock.synchronize { @done.unshift(*done) } # not reported: report them with the next call
        raise
      ensure
        slots = end_checkout(jobs, reg)
      end
      slots
    end

    def checkout_waiting(conn, reg, free)
      jobs = []
      begin_checkout
      begin
        stopping = @lock.synchronize do
          @dispatcher_waiting = true
          @report_cv.signal # jobs that finish while this waits are the reporter's to report
          @stopping
        end
        jobs = call(conn, Calls.checkout(reg.id, queues: @queues, max_jobs: free, wait: @wait)) unless stopping
      rescue WorkerLost
        @lock.synchronize { @reaped = reg }
      rescue Jobq::Error => e
        raise unless e.sqlstate == "57014" # statement_timeout shorter than the wait: nothing claimed
      ensure
        slots = end_checkout(jobs, reg)
      end
      slots
    end

    def complete_alone(conn, reg, done)
      ids = done.map { |s, _| s.job.id }
      ok = call(conn, Calls.complete_many(reg.id, ids, done.map { |_, r| r }))
      lost = ids - ok
      @log.info("jobq worker #{@name}: jobs #{lost} were not this worker's to complete any more") if lost.any?
      @lock.synchronize { release(done.map(&:first)) }
    end

    def wait_handlers
      @lock.synchronize { @dispatch_cv.wait(@lock) while @running.positive? }
    end

    # Stopping: the jobs in flight finish, their outcomes are reported, the worker unregisters.
    def drain(conn)
      @log.info("jobq worker #{@name}: draining: no more checkouts, #{@running} jobs in flight")
      wait_handlers
      reg, done, failed = @lock.synchronize do
        @reporter_exit = true
        @report_cv.broadcast
        @report_cv.wait(@lock) until @reporter_done
        d = @done
        f = @failed
        @done = []
        @failed = []
        [@reg, d, f]
      end
      return if reg.nil? || @reaped.equal?(reg)

      begin
        failed.each { |f| fail_one(conn, reg, f) if f.slot.reg.equal?(reg) }
        mine = done.select { |s, _| s.reg.equal?(reg) }
        complete_alone(conn, reg, mine) if mine.any?
        returned = call(conn, Calls.unregister_worker(reg.id))
        @log.info("jobq worker #{@name}: unregistered #{reg.id} (#{returned} jobs returned)")
      rescue WorkerLost
        @log.info("jobq worker #{@name}: #{reg.id} was reaped before it unregistered")
      end
      @lock.synchronize { @reg = nil }
    end

    def fail_one(conn, reg, failure)
      state = call(conn, Calls.fail(failure.slot.job.id, reg.id, failure.error, retry_in: failure.retry_in,
                                                                                discard: failure.discard || nil))
      @log.debug("jobq worker #{@name}: job #{failure.slot.job.id} is #{state}")
      @lock.synchronize { release([failure.slot]) }
    end

    # -- the report connection: failures at once, completions while the job connection waits --

    def report_loop
      conn = nil
      backoff = 1.0
      loop do
        reg, failed, done = @lock.synchronize do
          reg = @reg
          failed = reg ? @failed.select { |f| f.slot.reg.equal?(reg) } : []
          @failed = []
          done = []
          if @dispatcher_waiting || @stopping
            done = reg ? @done.select { |s, _| s.reg.equal?(reg) } : []
            @done = []
          end
          if failed.empty? && done.empty?
            break :exit if @reporter_exit

            @report_cv.wait(@lock)
            next nil
          end
          [reg, failed, done]
        end
        break if reg == :exit
        next if reg.nil?

        begin
          conn ||= connect("reports")
          until failed.empty?
            begin
              fail_one(conn, reg, failed.first)
            rescue WorkerLost
              raise
            rescue Jobq::Error => e
              raise if lost?(e, conn)

              # Refused (e.g. a retry_in out of range): leave the job to the heartbeat's
              # holding, which returns it to the queue.
              @log.error("jobq worker #{@name}: could not fail job #{failed.first.slot.job.id}: #{e.message}")
              @lock.synchronize { release([failed.first.slot]) }
            end
            failed.shift
          end
          unless done.empty?
            complete_alone(conn, reg, done)
            done = []
          end
          backoff = 1.0
        rescue WorkerLost
          reaped(reg)
        rescue StandardError => e
          @lock.synchronize do
            @failed.unshift(*failed)
            @done.unshift(*done)
          end
          raise unless lost?(e, conn)

          @log.warn("jobq worker #{@name}: report connection lost (#{e.message.strip}); again in #{backoff} s")
          conn&.close unless conn.nil? || conn.finished?
          conn = nil
          exiting = @lock.synchronize do
            @report_cv.wait(@lock, backoff) unless @reporter_exit
            @reporter_exit
          end
          break if exiting # the drain reports what is left on the job connection

          backoff = [backoff * 2, MAX_BACKOFF].min
        end
      end
    rescue StandardError => e
      @log.error("jobq worker #{@name}: the reporter ended with an error: #{e.class}: #{e.message}")
    ensure
      @lock.synchronize do
        @reporter_done = true
        @report_cv.broadcast
      end
      conn&.close unless conn.nil? || conn.finished?
    end

    # -- the heartbeat connection ----------------------------------------------------------------

    def heartbeat_loop
      loop do
        reg = @lock.synchronize do
          break :exit if @heartbeat_exit

          wakes = @hb_wakes
          @hb_cv.wait(@lock, @heartbeat_s)
          # Woken (exit, or registered, which was a heartbeat: wait a full interval), or timed out.
          break :exit if @heartbeat_exit
          next nil if wakes != @hb_wakes || @reg.nil? || @reg.equal?(@reaped)

          @reg
        end
        break if reg == :exit

        heartbeat(reg) if reg
      end
    ensure
      @hb_lock.synchronize { close_heartbeat_conn }
    end

    def close_heartbeat_conn
      @hb_conn.close unless @hb_conn.nil? || @hb_conn.finished?
      @hb_conn = nil
    end

    # One jobq_heartbeat for reg on the heartbeat connection, with holding = the jobs in hand
    # unless a checkout is on its way; delivers the cancellation requests it returns. JQ001
    # drops the jobs in hand (the job loop registers again); a lost connection is opened again
    # by the next heartbeat.
    def heartbeat(reg)
      @hb_lock.synchronize do
        @hb_conn ||= connect("heartbeat")
        cancel = @hand_lock.synchronize do
          # No list while a checkout is on its way: its jobs are claimed but not in hand yet,
          # and the list would give them back.
          holding = @lock.synchronize do
            @checkouts.zero? ? @in_hand.select { |_, s| s.reg.equal?(reg) }.keys.sort : nil
          end
          ids = call(@hb_conn, Calls.heartbeat(reg.id, holding: holding))
          @lock.synchronize { @holding_at = now } unless holding.nil?
          ids
        end
        @lock.synchronize do
          cancel.each do |job_id|
            slot = @in_hand[job_id]
            next if slot.nil? || slot.cancel_requested

            @log.info("jobq worker #{@name}: job #{job_id}: cancellation requested")
            slot.cancel_requested = true
            slot.job._cancel!
          end
        end
      rescue WorkerLost
        reaped(reg)
      rescue StandardError => e
        @log.warn("jobq worker #{@name}: heartbeat failed: #{e.message.strip}")
        close_heartbeat_conn if @hb_conn && lost?(e, @hb_conn)
      end
    end
  end
end
