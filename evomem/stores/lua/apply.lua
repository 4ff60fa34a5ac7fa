-- Apply one event's edit plan atomically (the rules are documented in evomem/editing.py and
-- mirrored by evomem/stores/memory.py; the contract suite holds both to the same tests).
-- ARGV[1] = plan JSON, ARGV[2] = key prefix, ARGV[3] = change stream maxlen, ARGV[4] = history maxlen
-- Returns the result JSON; a replayed event returns its stored result with "replayed" = true.
local plan = cjson.decode(ARGV[1])
local P = ARGV[2]
local changes_maxlen = ARGV[3]
local history_maxlen = ARGV[4]
local MAX_CHAIN = 32

local applied_key = P .. ':applied:' .. plan.event_id
local done = redis.call('GET', applied_key)
if done then
  local r = cjson.decode(done)
  r.replayed = true
  return cjson.encode(r)
end

local ns = plan.namespace
local q = plan.query_id
local at = plan.at

-- namespace is immutable on a node: an event may not reuse a query id of another namespace
local q_ns = redis.call('HGET', P .. ':q:' .. q, 'namespace')
if q_ns and q_ns ~= ns then
  return redis.error_reply('query_id: query ' .. q .. ' belongs to another namespace')
end
local changed = {}
local changed_order = {}

local function ins(id) return P .. ':ins:' .. id end

local function touch(id)
  local v = redis.call('HINCRBY', ins(id), 'version', 1)
  redis.call('HSET', ins(id), 'updated_at', at)
  if not changed[id] then table.insert(changed_order, id) end
  changed[id] = v
end

local function node_ok(id)
  if not id or id == cjson.null then return false end
  return redis.call('HGET', ins(id), 'namespace') == ns
end

local function create(id, text, parent)
  redis.call('HSET', ins(id), 'namespace', ns, 'text', text, 'state', 'active', 'version', 1,
    'created_by_event', plan.event_id, 'created_at', at, 'updated_at', at)
  if parent then redis.call('HSET', ins(id), 'revised_from', parent) end
  redis.call('SADD', P .. ':ns:' .. ns .. ':insights', id)
  if not changed[id] then table.insert(changed_order, id) end
  changed[id] = 1
end

-- the query node and its undirected edges to the similar queries it retrieved
local qkey = P .. ':q:' .. q
redis.call('SADD', P .. ':namespaces', ns)
if redis.call('EXISTS', qkey) == 0 then
  redis.call('HSET', qkey, 'namespace', ns, 'text', plan.query_text, 'status', plan.status,
    'trajectory', plan.trajectory_json, 'event_id', plan.event_id, 'created_at', at)
  redis.call('SADD', P .. ':ns:' .. ns .. ':queries', q)
  -- no retrieval record said which queries it resembles: the projector links it once indexed
  if plan.similar == cjson.null then redis.call('HSET', qkey, 'link', '1') end
  redis.call('XADD', P .. ':changes', 'MAXLEN', '~', changes_maxlen, '*', 'kind', 'query', 'id', q, 'version', 1)
end
local similar = plan.similar
if similar == cjson.null then similar = {} end
for _, other in ipairs(similar) do
  if redis.call('HGET', P .. ':q:' .. other, 'namespace') == ns then
    redis.call('SADD', P .. ':q:' .. q .. ':nbr', other)
    redis.call('SADD', P .. ':q:' .. other .. ':nbr', q)
  end
end

local function active_tip(id)
  local current = id
  for _ = 1, MAX_CHAIN do
    local nxt = redis.call('HGET', ins(current), 'revised_to')
    if not nxt or redis.call('EXISTS', ins(nxt)) == 0 then break end
    current = nxt
  end
  if current ~= id and redis.call('HGET', ins(current), 'state') == 'active' then return current end
  return nil
end

local outcomes = {}
local created = {}
local linked = {}   -- new or revised active nodes, for the edge update (Eq. 18)
local texts = P .. ':ns:' .. ns .. ':texts'

local function active_twin(key)
  if not key or key == cjson.null then return nil end
  local twin = redis.call('HGET', texts, key)
  if twin and node_ok(twin) and redis.call('HGET', ins(twin), 'state') == 'active' then return twin end
  return nil
end

for _, e in ipairs(plan.edits) do
  local o = {op = e.op, insight_id = e.insight_id, outcome = 'rejected'}
  if e.op == 'ADD' then
    local twin = active_twin(e.text_key)
    if twin then
      -- no twin; a resolved task is positive evidence for the insight it re-proposed
      if plan.status == 'resolved' then
        redis.call('SADD', ins(twin) .. ':pos', q)
        touch(twin)
      end
      o.insight_id = twin
      o.outcome = 'duplicate'
    else
      create(e.new_id, e.text, nil)
      redis.call('SADD', ins(e.new_id) .. ':pos', q)
      redis.call('HSET', texts, e.text_key, e.new_id)
      o.insight_id = cjson.null
      o.outcome = 'added'
      o.new_id = e.new_id
      table.insert(created, e.new_id)
      table.insert(linked, e.new_id)
    end
  elseif node_ok(e.insight_id) then
    local id = e.insight_id
    local state = redis.call('HGET', ins(id), 'state')
    if e.op == 'KEEP' then
      redis.call('SADD', ins(id) .. ':pos', q)
      touch(id)
      if state == 'active' then
        o.outcome = 'kept'
      else
        local tip = active_tip(id)
        if tip then
          redis.call('SADD', ins(tip) .. ':pos', q)
          touch(tip)
          o.outcome = 'forwarded'
          o.forwarded_to = tip
        else
          o.outcome = 'evidence_only'
        end
      end
    else
      redis.call('SADD', ins(id) .. ':neg', q)
      local twin = nil
      if e.op == 'REVISE' and state == 'active' then twin = active_twin(e.text_key) end
      if twin and twin ~= id then
        -- the revised text is already an active insight: revise into it rather than make a twin
        redis.call('HSET', ins(id), 'state', 'archived', 'revised_to', twin)
        touch(id)
        redis.call('SUNIONSTORE', ins(twin) .. ':pos', ins(twin) .. ':pos', ins(id) .. ':pos')
        redis.call('SADD', ins(twin) .. ':pos', q)
        touch(twin)
        o.outcome = 'merged'
        o.new_id = twin
        table.insert(linked, twin)
      elseif e.op == 'REVISE' and state == 'active' then
        redis.call('HSET', ins(id), 'state', 'archived', 'revised_to', e.new_id)
        touch(id)
        create(e.new_id, e.text, id)
        redis.call('SUNIONSTORE', ins(e.new_id) .. ':pos', ins(id) .. ':pos')
        redis.call('SADD', ins(e.new_id) .. ':pos', q)
        if e.text_key and e.text_key ~= cjson.null then
          redis.call('HSET', P .. ':ns:' .. ns .. ':texts', e.text_key, e.new_id)
        end
        o.outcome = 'revised'
        o.new_id = e.new_id
        table.insert(created, e.new_id)
        table.insert(linked, e.new_id)
      else
        local archive = false
        if state == 'active' then
          if plan.archive_policy == 'immediate' then
            archive = true
          else
            local neg = redis.call('SCARD', ins(id) .. ':neg')
            local pos = redis.call('SCARD', ins(id) .. ':pos')
            archive = neg >= math.max(1, plan.archive_ratio * pos)
          end
        end
        if archive then
          redis.call('HSET', ins(id), 'state', 'archived')
          o.outcome = 'archived'
        else
          o.outcome = 'negative_evidence'
        end
        touch(id)
      end
    end
  end
  table.insert(outcomes, o)
  local record = cjson.encode({event_id = plan.event_id, op = e.op, outcome = o.outcome,
    insight_id = o.insight_id or cjson.null, new_id = o.new_id or o.forwarded_to or cjson.null,
    query_id = q, decided_by = e.decided_by, at = at})
  redis.call('XADD', P .. ':history', 'MAXLEN', '~', history_maxlen, '*', 'record', record)
  -- a rejected edit named a node it could not touch: it stays out of that node's history.
  -- (numeric loop: new_id is nil for a forwarded KEEP, and ipairs would stop at that hole)
  if o.outcome ~= 'rejected' then
    local hids = {o.insight_id, o.new_id, o.forwarded_to}
    for i = 1, 3 do
      local hid = hids[i]
      if hid and hid ~= cjson.null then redis.call('RPUSH', ins(hid) .. ':hist', record) end
    end
  end
end

if plan.status == 'resolved' then
  for _, b in ipairs(linked) do
    for _, a in ipairs(plan.retrieved) do
      if a ~= b and node_ok(a) then redis.call('SADD', ins(b) .. ':edges', a .. '|' .. q) end
    end
  end
end

for _, id in ipairs(changed_order) do
  redis.call('XADD', P .. ':changes', 'MAXLEN', '~', changes_maxlen, '*', 'kind', 'insight', 'id', id,
    'version', changed[id])
end

local result = {event_id = plan.event_id, replayed = false, outcomes = outcomes, created = created}
if #created == 0 then result.created = cjson.decode('[]') end
if #outcomes == 0 then result.outcomes = cjson.decode('[]') end
local encoded = cjson.encode(result)
redis.call('SET', applied_key, encoded)
return encoded
