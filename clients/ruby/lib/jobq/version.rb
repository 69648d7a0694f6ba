# frozen_string_literal: true

module Jobq
  VERSION = "0.4.0"
end
