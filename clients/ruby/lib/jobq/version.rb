# frozen_string_literal: true

module Jobq
  VERSION = "0.5.0"
end
