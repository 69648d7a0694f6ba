# frozen_string_literal: true

module Jobq
  # Every jobq call on one connection: a PG::Connection, or an ActiveRecord connection
  # (ActiveRecord::Base.connection). A call runs in that connection's transaction when one is
  # open, so a job enqueued inside it exists only if the transaction commits:
  #
  #   client = Jobq::Client.new(PG.connect("postgresql://app@db/app"))
  #   id = client.enqueue("mail", { to: "a@example.com" }, kind: "welcome")
  #
  #   ActiveRecord::Base.transaction do
  #     order = Order.create!(...)
  #     Jobq::Client.new(ActiveRecord::Base.connection).enqueue("orders", { id: order.id })
  #   end
  #
  # Each method is the SQL function of its name (jobq_<name>; retry_job is jobq_retry), with its
  # arguments after the first by keyword (Jobq::Calls); options left nil are not sent, so the
  # server's defaults apply. Refusals raise Jobq::Error or its subclasses (Jobq::UniqueConflict,
  # Jobq::InvalidArgument, Jobq::PermissionDenied, ...).
  class Client
    CALLS = %i[
      enqueue enqueue_batch enqueue_graph cancel retry_job results emit_event pause resume
      schedule unschedule set_rate_limit acquire_lock release_lock lock_holder reap queue_stats
      register_worker heartbeat unregister_worker stop_checkouts checkout complete fail
      complete_many fail_many complete_and_checkout fail_and_checkout checkpoint snooze
      await_jobs await_event version
    ].freeze

    # A client on a new PG::Connection to dsn (autocommit: each call is its own transaction).
    def self.connect(dsn, **options)
      new(PG.connect(dsn, **options))
    end

    attr_reader :connection

    def initialize(connection)
      @connection = connection
    end

    CALLS.each do |name|
      define_method(name) { |*args, **options| run(Calls.public_send(name, *args, **options)) }
    end

    # Runs a Jobq::Calls::Call on the connection and returns its decoded answer.
    def run(call)
      Client.run(raw, call)
    end

    # Runs call on the PG::Connection pg.
    def self.run(pg, call)
      res = pg.exec_params(call.sql, call.params, 0, PARAMS)
      begin
        res.type_map = STRINGS # whatever the connection's own map (ActiveRecord sets one)
        call.decode.call(res)
      ensure
        res.clear
      end
    rescue PG::Error => e
      raise Jobq.error_from(e)
    end

    PARAMS = PG::TypeMapAllStrings.new
    STRINGS = PG::TypeMapAllStrings.new

    private

    # The PG::Connection: ActiveRecord's, with its lazily opened transaction made real first
    # (so that a call inside `transaction do ... end` is in that transaction).
    def raw
      c = @connection
      return c if c.is_a?(PG::Connection)

      c.materialize_transactions if c.respond_to?(:materialize_transactions)
      c.raw_connection
    end
  end
end
