# frozen_string_literal: true

require "test_helper"
require "open3"
require "tmpdir"

# The library's worker as real OS processes (test/worker_proc.rb): exactly once under several
# of them, a SIGKILLed worker's jobs run elsewhere, SIGTERM drains.
class ProcessesTest < JobqTest
  ROOT = File.expand_path("..", __dir__)

  # A worker process with its stderr collected line by line.
  class WorkerProcess
    attr_reader :pid, :lines

    def initialize(queue, concurrency: 4, dsn: TestEnv::DSN, pooled: false)
      args = ["ruby", "-I#{ROOT}/lib", "#{ROOT}/test/worker_proc.rb", dsn, queue, concurrency.to_s]
      args << "pooled" if pooled
      stdin, @stderr, @thread = Open3.popen2e(*args)
      stdin.close
      @pid = @thread.pid
      @lines = []
      @lock = Mutex.new
      @changed = ConditionVariable.new
      @reader = Thread.new do
        @stderr.each_line do |line|
          @lock.synchronize do
            @lines << line.chomp
            @changed.broadcast
          end
        end
      end
    end

    def signal(sig) = Process.kill(sig, @pid)
    def alive? = @thread.alive?

    def wait_for_line(text, timeout: 20)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      @lock.synchronize do
        until (line = @lines.find { |l| l.include?(text) })
          left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          raise Minitest::Assertion, "worker #{@pid} logged no #{text.inspect}:\n#{@lines.join("\n")}" if left <= 0 || !alive? && @reader.join(0)

          @changed.wait(@lock, [left, 0.5].min)
        end
        line
      end
    end

    # The process's exit status (waits for it).
    def status(timeout: 20)
      raise Minitest::Assertion, "worker #{@pid} did not exit within #{timeout} s:\n#{@lines.join("\n")}" unless @thread.join(timeout)

      @thread.value
    end

    def kill_if_running
      return unless alive?

      Process.kill("KILL", @pid)
      @thread.join
    end
  end

  def setup
    super
    @procs = []
  end

  def teardown
    @procs.each(&:kill_if_running)
    super
  end

  def spawn(...)
    WorkerProcess.new(...).tap { |p| @procs << p }
  end

  # The process's current registration, as jobq.workers shows it (polled until there).
  def registration(proc)
    wait_until("worker process #{proc.pid} to register") do
      admin.exec_params("SELECT id FROM jobq.workers WHERE (metadata->>'pid')::int = $1", [proc.pid]).first&.fetch("id")
    end
  end

  def runs_per_job(ids)
    admin.exec_params("SELECT job_id, array_agg(pid ORDER BY at) FROM public.handler_runs WHERE job_id = ANY($1::bigint[]) " \
                      "GROUP BY job_id", ["{#{ids.join(',')}}"]).values.to_h { |j, p| [j.to_i, p.delete("{}").split(",").map(&:to_i)] }
  end

  def test_exactly_once_under_6_worker_processes
    workers = Array.new(6) { spawn(queue, concurrency: 4) }
    workers.each { |w| registration(w) }
    ids = client.enqueue_batch(queue, (0...300).map { |n| { "n" => n } })
    rows = wait_state(ids, "completed", timeout: 60)
    pids = workers.map(&:pid)
    results = rows.map { |r| [r["id"].to_i, r["attempt"], JSON.parse(r["result"])["pid"]] }
    assert(results.all? { |_, attempt, pid| attempt == "1" && pids.include?(pid) })
    runs = runs_per_job(ids)
    assert_equal ids.sort, runs.keys.sort
    assert_equal({}, runs.reject { |_, p| p.size == 1 }, "jobs run more than once")
    assert(results.all? { |id, _, pid| runs[id] == [pid] }) # completed by the process that ran it
    assert_operator results.map(&:last).uniq.size, :>, 1 # the processes shared the work
    workers.each { |w| w.signal("TERM") }
    assert_equal [0] * 6, workers.map { |w| w.status.exitstatus }
  end

  def test_a_sigkilled_workers_jobs_run_again_elsewhere
    doomed = spawn(queue, concurrency: 2)
    doomed_id = registration(doomed)
    ids = client.enqueue_batch(queue, [{ "block_first_attempt" => true }] * 2)
    assert_equal [doomed_id] * 2, wait_state(ids, "executing").map { |r| r["worker_id"] }
    wait_until("both handlers to start") { runs_per_job(ids).size == 2 }
    doomed.signal("KILL")
    assert_equal "KILL", Signal.signame(doomed.status(timeout: 10).termsig)
    rescuer = spawn(queue, concurrency: 2)
    rows = wait_state(ids, "completed", timeout: 30)
    assert(rows.all? { |r| JSON.parse(r["result"]) == { "pid" => rescuer.pid } && r["attempt"] == "2" && r["interrupted_at"] })
    assert_equal ids.to_h { |i| [i, [doomed.pid, rescuer.pid]] }, runs_per_job(ids)
    assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.workers WHERE id = $1", [doomed_id]).getvalue(0, 0)
    rescuer.signal("TERM")
    assert_equal 0, rescuer.status.exitstatus
  end

  def test_sigterm_drains_and_exits_0_direct_and_pooled
    [false, true].each do |pooled|
      Dir.mktmpdir do |dir|
        release = File.join(dir, "release")
        worker = spawn(queue, concurrency: 4, dsn: pooled ? TestEnv::POOLER_DSN : TestEnv::DSN, pooled: pooled)
        wid = registration(worker)
        held = client.enqueue_batch(queue, [{ "hold_until_file" => release }] * 3)
        # Their handlers run (not only claimed: a job claimed as the stop comes is never started).
        wait_until("the three handlers to start") { runs_per_job(held).size == 3 }
        worker.signal("TERM")
        worker.wait_for_line("draining") # it has stopped checking out, one slot still free
        late = client.enqueue(queue)
        assert worker.alive? # the jobs in flight hold it
        File.write(release, "")
        assert_equal 0, worker.status.exitstatus
        rows = wait_state(held, "completed", timeout: 1)
        assert(rows.all? { |r| JSON.parse(r["result"]) == { "pid" => worker.pid } && r["attempt"] == "1" })
        assert_equal %w[ready 0], job_row(late).values_at("state", "attempt") # never taken
        assert_equal "cancelled", client.cancel(late) # not for the next round's worker
        assert_equal "0", admin.exec_params("SELECT count(*) FROM jobq.workers WHERE id = $1", [wid]).getvalue(0, 0)
        assert(worker.lines.any? { |l| l.include?("unregistered") })
      end
    end
  end
end
