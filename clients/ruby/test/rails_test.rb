# frozen_string_literal: true

require "test_helper"
require "open3"

# jobq in a Rails application (test/rails_app.rb, in a process of its own): the railtie makes
# :jobq resolve, the worker runs jobs inside Rails' executor, the rake tasks exist.
class RailsTest < JobqTest
  def test_a_rails_app_with_the_jobq_adapter
    root = File.expand_path("..", __dir__)
    out, err, status = Open3.capture3("ruby", "-I#{root}/lib", "#{root}/test/rails_app.rb", queue)
    assert status.success?, err
    seen = JSON.parse(out.lines.last)
    assert_equal ["ActiveJob::QueueAdapters::JobqAdapter", queue, true, %w[jobq:schedules jobq:work]],
                 seen.values_at("adapter", "queue", "executor_active", "tasks").tap { |v| v[3] = v[3].sort }
    assert_equal "completed", job_row(seen["job_id"])["state"]
  end
end
