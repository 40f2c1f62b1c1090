-- wrk script: POST /v1/votes with a new event_id on every request.
--
--   TALLY_TOKEN=... TALLY_RUN=r1 wrk -t2 -c64 -d20s --latency \
--     -s bench/testdata/post_vote.lua http://127.0.0.1:8090
--
-- TALLY_TOKEN is the bearer token, TALLY_POLL and TALLY_CHOICE the poll
-- and candidate (default p1 and a), TALLY_RUN a prefix that keeps the event
-- ids of one run apart from another's. Answers other than 202 are counted
-- and printed at the end.

local token = os.getenv("TALLY_TOKEN") or "tly_bare"
local poll = os.getenv("TALLY_POLL") or "p1"
local choice = os.getenv("TALLY_CHOICE") or "a"
local run = os.getenv("TALLY_RUN") or ("r" .. os.time())

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local counter = 0
refused = 0

function request()
  counter = counter + 1
  local body = string.format('{"event_id":"%s-%d-%d","poll_id":"%s","candidate_id":"%s"}',
    run, tid, counter, poll, choice)
  return wrk.format("POST", "/v1/votes",
    { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }, body)
end

function response(status, headers, body)
  if status ~= 202 then
    refused = refused + 1
  end
end

function done(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do
    total = total + t:get("refused")
  end
  io.write(string.format("answers other than 202: %d\n", total))
end
