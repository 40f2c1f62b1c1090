-- wrk script of the burst: every request is a vote of its own, read from a
-- file the bench writes, and sent once.
--
--   wrk -t2 -c64 -d90s --timeout 10s --latency -s bench/testdata/burst_vote.lua \
--     http://127.0.0.1:18195 -- FILE WANT
--
-- FILE.i holds the votes of wrk's thread i (0-based), one a line: the
-- Authorization header's value, a tab, the JSON body. Each thread posts
-- each of its lines once to /v1/votes and stops once each was answered; a
-- connection with no line left waits (delay) rather than send another
-- request. wrk itself runs until -d has passed or it is interrupted
-- (SIGINT), so the script times the burst itself: done() prints, besides
-- the counts of answers and of those other than WANT (the status, 202 by
-- default), the wall-clock time of the first request and of the last
-- answer, in µs.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_usec; } burst_timeval;
int gettimeofday(burst_timeval *tv, void *tz);
]]
local tv = ffi.new("burst_timeval")
local function now_us()
  ffi.C.gettimeofday(tv, nil)
  return tonumber(tv.tv_sec) * 1000000 + tonumber(tv.tv_usec)
end

local lines = {}
local claimed = 0
-- Globals, so that done() can read them with thread:get.
total, sent, answered, refused, first_us, last_us = 0, 0, 0, 0, 0, 0

-- tid is set by setup() before init() runs in the thread's own state.
function init(args)
  want = tonumber(args[2] or "202")
  for line in io.lines(args[1] .. "." .. tid) do
    local tab = line:find("\t", 1, true)
    lines[#lines + 1] = { line:sub(1, tab - 1), line:sub(tab + 1) }
  end
  total = #lines
end

local threads = {}
local next_tid = 0

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
  table.insert(threads, thread)
end

-- delay runs before each request of a connection: it claims a line for
-- the request that follows, or parks the connection for an hour when none
-- is left.
function delay()
  if claimed < #lines then
    claimed = claimed + 1
    return 0
  end
  return 3600 * 1000
end

local headers = { ["Content-Type"] = "application/json" }

local function post(l)
  headers["Authorization"] = l[1]
  return wrk.format("POST", "/v1/votes", headers, l[2])
end

function request()
  if claimed == 0 then
    -- wrk's check of the script, before the run: nothing is sent.
    return post(lines[1])
  end
  if sent == 0 then
    first_us = now_us()
  end
  -- A connection wrk reconnected after an error may ask without delay():
  -- past the last line it sends that one again, an identical retry (the
  -- bench fails a run with socket errors anyway).
  sent = sent + 1
  return post(lines[math.min(sent, #lines)])
end

function response(status, headers, body)
  answered = answered + 1
  if status ~= want then
    refused = refused + 1
  end
  if answered == #lines then
    last_us = now_us()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local total_, sent_, answered_, refused_, first, last = 0, 0, 0, 0, math.huge, 0
  for _, t in ipairs(threads) do
    total_ = total_ + t:get("total")
    sent_ = sent_ + t:get("sent")
    answered_ = answered_ + t:get("answered")
    refused_ = refused_ + t:get("refused")
    first = math.min(first, t:get("first_us"))
    last = math.max(last, t:get("last_us"))
  end
  io.write(string.format("burst: lines %d, sent %d, answered %d, other than %d: %d; first request %.0f us, last answer %.0f us\n",
    total_, sent_, answered_, threads[1]:get("want"), refused_, first, last))
end
