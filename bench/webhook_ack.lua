-- wrk script for bench/webhook_ack.py: GitHub webhook deliveries of one signed body.
--
-- Set by the Python script through the environment:
--   WEBHOOK_ACK_BODY       path of the request body (the same bytes every request)
--   WEBHOOK_ACK_SIGNATURE  its X-Hub-Signature-256 ("sha256=<hex>"), computed in advance
--   WEBHOOK_ACK_PREFIX     random "xxxxxxxx-xxxx-xxxx" prefix, fresh for every wrk run
--
-- Every request carries a unique X-GitHub-Delivery, UUID-shaped like GitHub's:
-- PREFIX-<thread, 4 hex>-<per-thread counter, 12 hex>, so no delivery is a redelivery.
-- done() prints one parseable line starting with "WEBHOOK_ACK ".

local body_path = assert(os.getenv("WEBHOOK_ACK_BODY"), "WEBHOOK_ACK_BODY is not set")
local signature = assert(os.getenv("WEBHOOK_ACK_SIGNATURE"), "WEBHOOK_ACK_SIGNATURE is not set")
local prefix = assert(os.getenv("WEBHOOK_ACK_PREFIX"), "WEBHOOK_ACK_PREFIX is not set")

local fh = assert(io.open(body_path, "rb"))
local body = fh:read("*a")
fh:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["User-Agent"] = "GitHub-Hookshot/bench"
wrk.headers["X-GitHub-Event"] = "pull_request"
wrk.headers["X-GitHub-Hook-ID"] = "1"
wrk.headers["X-Hub-Signature-256"] = signature

-- Main state: remember the threads so done() can add up what each one sent.
local threads = {}
local thread_count = 0

function setup(thread)
   thread_count = thread_count + 1
   thread:set("tid", thread_count)
   thread:set("sent", 0)
   table.insert(threads, thread)
end

-- Thread states: `tid` and `sent` are globals set by setup().
function request()
   sent = sent + 1
   wrk.headers["X-GitHub-Delivery"] = string.format("%s-%04x-%012x", prefix, tid, sent)
   return wrk.format(nil, nil, nil, body)
end

function done(summary, latency, requests)
   local sent_total = 0
   for _, thread in ipairs(threads) do
      sent_total = sent_total + thread:get("sent")
   end
   local e = summary.errors
   io.write(string.format(
      "WEBHOOK_ACK requests=%d sent=%d duration_us=%d bytes=%d non2xx=%d connect=%d"
         .. " read=%d write=%d timeout=%d p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f"
         .. " max_ms=%.3f mean_ms=%.3f\n",
      summary.requests, sent_total, summary.duration, summary.bytes, e.status, e.connect,
      e.read, e.write, e.timeout, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
      latency:percentile(99) / 1000, latency.max / 1000, latency.mean / 1000))
end
