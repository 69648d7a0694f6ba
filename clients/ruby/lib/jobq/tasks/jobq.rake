# frozen_string_literal: true

namespace :jobq do
  desc "Run ActiveJob jobs from jobq (QUEUES=a,b THREADS=10 POOLED=1)"
  task work: :environment do
    require "jobq/active_job"
    Rails.application.eager_load!
    Jobq::ActiveJob.worker(Jobq::ActiveJob.dsn, queues: ENV["QUEUES"]&.split(","),
                                                concurrency: Integer(ENV.fetch("THREADS", "10")),
                                                pooled: ENV["POOLED"] == "1").run
  end

  desc "Make jobq's schedules equal to Jobq::ActiveJob.recurring (as a role granted jobq_admin)"
  task schedules: :environment do
    require "jobq/active_job"
    ActiveRecord::Base.transaction do
      names = Jobq::ActiveJob.apply_schedules
      puts "jobq: #{names.size} recurring jobs: #{names.join(', ')}"
    end
  end
end
