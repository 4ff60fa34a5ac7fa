-- Apply one control plan atomically (evomem/core/lifecycle.py says what a revert undoes; the
-- in-memory store mirrors this script and the contract suite holds both to the same tests).
-- KEYS[1] the request's marker, KEYS[2] the namespace's set of reverted edits, KEYS[3] the request's
-- outbox; then, on one server, KEYS[4] the history stream, KEYS[5] the change feed. On a Redis
-- Cluster only KEYS[1..3] are given and what would go to the streams is returned in "outbox" (kept
-- in KEYS[3] until the caller has written it), as apply.lua does.
-- ARGV[1] = plan JSON, ARGV[2] = key prefix, ARGV[3] = change stream maxlen, ARGV[4] = history maxlen
local plan = cjson.decode(ARGV[1])
local P = ARGV[2]
local changes_maxlen = ARGV[3]
local history_maxlen = ARGV[4]
local clustered = #KEYS == 3
local ns = plan.namespace
local N = P .. ':{' .. ns .. '}'
local function k(kind, id) return N .. ':' .. kind .. ':' .. id end
local function ins(id) return k('ins', id) end

local done = redis.call('GET', KEYS[1])
if done then
  local r = cjson.decode(done)
  r.replayed = true
  local unsent = redis.call('GET', KEYS[3])
  if unsent then r.outbox = cjson.decode(unsent) end
  return cjson.encode(r)
end

local outbox = {ns = ns, ids = cjson.decode('[]'), history = {}, changes = {}}
local function history(record)
  if clustered then
    table.insert(outbox.history, record)
  else
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', history_maxlen, '*', 'ns', ns, 'record', record)
  end
end
local function announce(kind, id, version)
  if clustered then
    table.insert(outbox.changes, {kind, id, version})
  else
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', changes_maxlen, '*', 'kind', kind, 'ns', ns, 'id', id,
      'version', version)
  end
end

local at = plan.at
local changed, changed_order = {}, {}
local queries, query_order = {}, {}

local function touch(id, visible)
  local v = redis.call('HINCRBY', ins(id), 'version', 1)
  redis.call('HSET', ins(id), 'updated_at', at)
  if visible or changed[id] then
    if not changed[id] then table.insert(changed_order, id) end
    changed[id] = v
  end
end

-- take q back out of an insight's evidence, on both sides, and out of the judged counts
local function withdraw(id, q, negative, judged)
  local side, qside, count = 'ins.pos', 'q.pos', 'jpos'
  if negative then side, qside, count = 'ins.neg', 'q.neg', 'jneg' end
  if redis.call('SREM', k(side, id), q) == 1 and judged then
    if tonumber(redis.call('HGET', ins(id), count) or '0') > 0 then redis.call('HINCRBY', ins(id), count, -1) end
    if negative and tonumber(redis.call('HGET', ins(id), 'jrun') or '0') > 0 then
      redis.call('HINCRBY', ins(id), 'jrun', -1)
    end
  end
  redis.call('SREM', k(qside, q), id)
  if not queries[q] and redis.call('EXISTS', k('q', q)) == 1 then
    queries[q] = true
    table.insert(query_order, q)
  end
end

local function record(op, outcome, insight_id, new_id, query_id, note, undoes)
  local r = cjson.encode({event_id = plan.request_id, op = op, outcome = outcome,
    insight_id = insight_id, new_id = new_id, query_id = query_id, decided_by = plan.by, at = at,
    note = note, undoes = undoes or cjson.null})
  history(r)
  for _, hid in ipairs({insight_id, new_id}) do
    if hid ~= cjson.null then redis.call('RPUSH', k('ins.hist', hid), r) end
  end
end

local reverted, skipped, pin_changed = 0, 0, false
for _, step in ipairs(plan.steps) do
  if redis.call('SADD', KEYS[2], step.key) == 0 then
    skipped = skipped + 1
  else
    reverted = reverted + 1
    for _, a in ipairs(step.actions) do
      local id = a.insight_id
      if redis.call('EXISTS', ins(id)) == 1 then
        local visible = false
        local state = redis.call('HGET', ins(id), 'state')
        if a.kind == '-pos' or a.kind == '-neg' then
          withdraw(id, step.query_id, a.kind == '-neg', step.judged)
        elseif a.kind == 'activate' and state ~= 'active' then
          redis.call('HSET', ins(id), 'state', 'active')
          -- back from a staleness archive: its serves are counted afresh (else the next sweep
          -- would find it stale again at once)
          if step.outcome == 'stale' then redis.call('HSET', ins(id), 'served', 0, 'served_at', at) end
          visible = true
        elseif a.kind == 'archive' and state == 'active' then
          redis.call('HSET', ins(id), 'state', 'archived')
          visible = true
        end
        touch(id, visible)
      end
    end
    record('REVERT', 'reverted', step.insight_id, step.new_id, step.query_id, step.note, step.outcome)
  end
end

if plan.action == 'pin' or plan.action == 'unpin' then
  local id = plan.insight_id
  if id ~= cjson.null and redis.call('EXISTS', ins(id)) == 1 then
    local want = plan.action == 'pin'
    if (redis.call('HGET', ins(id), 'pinned') == '1') ~= want then
      if want then redis.call('HSET', ins(id), 'pinned', '1') else redis.call('HDEL', ins(id), 'pinned') end
      touch(id, false)
      pin_changed = true
      record(string.upper(plan.action), plan.action .. 'ned', id, cjson.null, '', plan.note)
    end
  end
end

-- the staleness sweep's request: archive an active, unpinned insight still at the version found
-- stale, recorded as an edit of its own (the request id is its event id, so a revert reactivates it)
if plan.action == 'retire' then
  local id = plan.insight_id
  local expected = plan.expected_version
  if id ~= cjson.null and redis.call('EXISTS', ins(id)) == 1
    and redis.call('HGET', ins(id), 'state') == 'active'
    and redis.call('HGET', ins(id), 'pinned') ~= '1'
    and (expected == nil or expected == cjson.null
      or tonumber(redis.call('HGET', ins(id), 'version') or '0') == tonumber(expected)) then
    redis.call('HSET', ins(id), 'state', 'archived')
    touch(id, true)
    pin_changed = true
    record('ARCHIVE', 'stale', id, cjson.null, '', plan.note)
    redis.call('SET', N .. ':applied:' .. plan.request_id, cjson.encode({event_id = plan.request_id,
      replayed = false, outcomes = {{op = 'ARCHIVE', insight_id = id, outcome = 'stale', judged = false}},
      created = cjson.decode('[]'), query_id = '', at = at}))
  end
end

for _, q in ipairs(query_order) do
  announce('query', q, redis.call('HINCRBY', k('q', q), 'version', 1))
end
for _, id in ipairs(changed_order) do announce('insight', id, changed[id]) end

local result = {request_id = plan.request_id, replayed = false, reverted = reverted, skipped = skipped,
  changed = pin_changed}
local encoded = cjson.encode(result)
redis.call('SET', KEYS[1], encoded)
if not clustered then return encoded end
redis.call('SET', KEYS[3], cjson.encode(outbox))
result.outbox = outbox
return cjson.encode(result)
