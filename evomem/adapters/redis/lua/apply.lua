-- Apply one event's edit plan atomically (the rules are documented in evomem/editing.py and
-- mirrored by evomem/stores/memory.py; the contract suite holds both to the same tests).
-- KEYS[1] applied marker, KEYS[2] the namespace's insights, KEYS[3] its queries, KEYS[4] its texts,
-- KEYS[5] its recent outcomes, KEYS[6] the event's query node, KEYS[7] the event's outbox; then, on
-- one server, KEYS[8] the id directory, KEYS[9] the namespaces set, KEYS[10] the history stream,
-- KEYS[11] the change feed. On a Redis Cluster only KEYS[1..7] are given (one slot: the namespace's
-- hash tag) and what the script would write into the other four is returned in "outbox" instead
-- (and kept in KEYS[7] until the caller has written it and deleted KEYS[7]); a replay returns it
-- again while KEYS[7] exists, so a caller that died before writing it writes it on the next try.
-- The node keys the script derives from ids (an insight's hash, its evidence sets, a revision
-- chain read here) are not known before it runs; they are built from the same namespace prefix,
-- so they share KEYS[1]'s hash slot.
-- ARGV[1] = plan JSON, ARGV[2] = key prefix, ARGV[3] = change stream maxlen, ARGV[4] = history maxlen
-- Returns the result JSON; a replayed event returns its stored result with "replayed" = true.
--
-- Keys follow evomem/keys.py: a namespace's keys are N .. ':' .. kind .. ':' .. id with
-- N = prefix .. ':{' .. namespace .. '}'. Evidence is written on both sides (the insight's Ω⁺/Ω⁻
-- and the query's supports/harms), each an O(1) SADD: nothing here reads or copies a whole
-- evidence set except a REVISE, which hands the old node's Ω⁺ to the new one.
local plan = cjson.decode(ARGV[1])
local P = ARGV[2]
local changes_maxlen = ARGV[3]
local history_maxlen = ARGV[4]
local MAX_CHAIN = 32
local clustered = #KEYS == 7
local outbox_key = KEYS[7]

local ns = plan.namespace
local N = P .. ':{' .. ns .. '}'
local function k(kind, id) return N .. ':' .. kind .. ':' .. id end

local applied_key = KEYS[1]
local done = redis.call('GET', applied_key)
if done then
  local r = cjson.decode(done)
  if plan.digest ~= cjson.null and r.digest and r.digest ~= plan.digest then
    return redis.error_reply('event_id: event ' .. plan.event_id .. ' was applied before with other content')
  end
  r.replayed = true
  local unsent = redis.call('GET', outbox_key)
  if unsent then r.outbox = cjson.decode(unsent) end
  return cjson.encode(r)
end

-- what lives outside the namespace's slot: written here on one server, handed back on a cluster
local outbox = {ns = ns, ids = {}, history = {}, changes = {}}
local function directory(id)
  if clustered then table.insert(outbox.ids, id) else redis.call('HSET', KEYS[8], id, ns) end
end
local function history(record)
  if clustered then
    table.insert(outbox.history, record)
  else
    redis.call('XADD', KEYS[10], 'MAXLEN', '~', history_maxlen, '*', 'ns', ns, 'record', record)
  end
end
local function announce(kind, id, version)
  if clustered then
    table.insert(outbox.changes, {kind, id, version})
  else
    redis.call('XADD', KEYS[11], 'MAXLEN', '~', changes_maxlen, '*', 'kind', kind, 'ns', ns, 'id', id,
      'version', version)
  end
end

local q = plan.query_id
local at = plan.at
local qkey = KEYS[6]
local changed = {}        -- insight id -> version, for nodes whose served fields changed
local changed_order = {}
local query_changed = false

local function ins(id) return k('ins', id) end

-- every edit bumps the node's version; only a change retrieval can see (a new node, its state, what
-- it inherits) is announced to the projectors, since evidence reaches them through the query
local function touch(id, visible)
  local v = redis.call('HINCRBY', ins(id), 'version', 1)
  redis.call('HSET', ins(id), 'updated_at', at)
  if visible then
    if not changed[id] then table.insert(changed_order, id) end
    changed[id] = v
  elseif changed[id] then
    changed[id] = v
  end
end

-- evidence on both sides; judged evidence (not inferred from the outcome alone) is also counted in
-- jpos / jneg, what the evidence policy weighs (a set member already there is not counted twice)
local function positive(id, judged)
  local new = redis.call('SADD', k('ins.pos', id), q)
  redis.call('SADD', k('q.pos', q), id)
  query_changed = true
  if judged and new == 1 then
    redis.call('HINCRBY', ins(id), 'jpos', 1)
    redis.call('HDEL', ins(id), 'jrun')
  end
end

local function negative(id, judged)
  local new = redis.call('SADD', k('ins.neg', id), q)
  redis.call('SADD', k('q.neg', q), id)
  query_changed = true
  if judged and new == 1 then
    redis.call('HINCRBY', ins(id), 'jneg', 1)
    redis.call('HINCRBY', ins(id), 'jrun', 1)
  end
end

local function exists(id)
  if not id or id == cjson.null then return false end
  return redis.call('EXISTS', ins(id)) == 1
end

-- the namespace's word counts (keys.insight_words): complete from its first insight on; a namespace
-- with insights from before them is counted afresh by the graph store's count_words
local words_key = N .. ':words'
local function count_words(words)
  if redis.call('SCARD', KEYS[2]) == 0 and redis.call('EXISTS', words_key) == 0 then
    redis.call('HSET', words_key, '#complete', 1)
  end
  if words ~= nil and words ~= cjson.null then
    for _, f in ipairs(words) do redis.call('HINCRBY', words_key, string.format('%d', f), 1) end
  end
  redis.call('HINCRBY', words_key, '#n', 1)
end

local function create(id, text, parent, bands, words)
  count_words(words)
  redis.call('HSET', ins(id), 'text', text, 'state', 'active', 'version', 1,
    'created_by_event', plan.event_id, 'created_at', at, 'updated_at', at)
  if parent then redis.call('HSET', ins(id), 'revised_from', parent) end
  redis.call('SADD', KEYS[2], id)
  directory(id)
  if bands ~= nil and bands ~= cjson.null then
    for _, band in ipairs(bands) do redis.call('SADD', k('dup', band), id) end
  end
  if not changed[id] then table.insert(changed_order, id) end
  changed[id] = 1
end

-- the new (or absorbing) node takes over what ``from`` was supported by
local function inherit(to, from)
  redis.call('HINCRBY', ins(to), 'jpos', tonumber(redis.call('HGET', ins(from), 'jpos') or '0'))
  redis.call('SUNIONSTORE', k('ins.pos', to), k('ins.pos', to), k('ins.pos', from))
  redis.call('SADD', k('ins.inh', to), from)
  redis.call('SUNIONSTORE', k('ins.inh', to), k('ins.inh', to), k('ins.inh', from))
end

-- the query node and its undirected, weighted edges to the similar queries it retrieved. A script
-- is not rolled back when a command fails, so the query's hash is read before anything is written:
-- a corrupt key fails the event here, with nothing of it applied.
local new_query = redis.call('HGET', qkey, 'text') == false
if not clustered then redis.call('SADD', KEYS[9], ns) end
if new_query then
  redis.call('HSET', qkey, 'text', plan.query_text, 'status', plan.status,
    'trajectory', plan.trajectory_json, 'event_id', plan.event_id, 'created_at', at)
  redis.call('SADD', KEYS[3], q)
  -- no retrieval record said which queries it resembles: the projector links it once indexed
  if plan.similar == cjson.null then redis.call('HSET', qkey, 'link', '1') end
  -- the task's vector its retrieval computed: no projector embeds the task again
  if type(plan.query_vector) == 'string' then redis.call('HSET', qkey, 'vec', plan.query_vector) end
  query_changed = true
end
local degree = tonumber(plan.degree) or 0
local function link(a, b, w)
  local key = k('q.nbr', a)
  redis.call('ZADD', key, 'GT', w, b)
  if degree > 0 then redis.call('ZREMRANGEBYRANK', key, 0, -(degree + 1)) end
end
if plan.similar ~= cjson.null then
  local scores = plan.similar_scores
  for n, other in ipairs(plan.similar) do
    if other ~= q and redis.call('EXISTS', k('q', other)) == 1 then
      local w = 1.0
      if scores ~= cjson.null and scores[n] then w = tonumber(scores[n]) end
      link(q, other, w)
      link(other, q, w)
    end
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
local texts = KEYS[4]

-- an active insight this text repeats: the same normalised text, else the near twin found before
local function active_twin(e)
  local candidates = {}
  if e.text_key and e.text_key ~= cjson.null then table.insert(candidates, redis.call('HGET', texts, e.text_key)) end
  if e.twin and e.twin ~= cjson.null then table.insert(candidates, e.twin) end
  for _, twin in ipairs(candidates) do
    if twin and exists(twin) and redis.call('HGET', ins(twin), 'state') == 'active' then return twin end
  end
  return nil
end

-- the archived insight a proposal repeats (ARCHIVED_REPEATS=evidence) when no active one has its
-- text: the last node of the same normalised text, else the near twin found before the plan
local function archived_twin(e)
  if plan.archived_repeats == 'new' or active_twin(e) then return nil end
  local candidates = {}
  if e.text_key and e.text_key ~= cjson.null then table.insert(candidates, redis.call('HGET', texts, e.text_key)) end
  if e.twin and e.twin ~= cjson.null then table.insert(candidates, e.twin) end
  for _, twin in ipairs(candidates) do
    if twin and exists(twin) then return twin end
  end
  return nil
end

for _, e in ipairs(plan.edits) do
  local o = {op = e.op, insight_id = e.insight_id, outcome = 'rejected'}
  local archived = e.op == 'ADD' and archived_twin(e)
  if archived then
    -- no new node starting the lesson over: the proposal is evidence of the archived insight (judged
    -- only from a resolved task, as for an active twin), which stays archived; if it was revised,
    -- the active insight that replaced it gets the evidence too, as a KEEP would forward it
    local judged = plan.status == 'resolved'
    positive(archived, judged)
    o.insight_id = archived
    local tip = active_tip(archived)
    -- ARCHIVED_REPEATS=restore: a judged repeat of an insight the evidence policy archived (not
    -- revised) makes it active again once its judged negatives no longer reach the threshold
    local restored = false
    if not tip and judged and plan.archived_repeats == 'restore' and plan.archive_policy == 'evidence'
      and not redis.call('HGET', ins(archived), 'revised_to') then
      local neg = tonumber(redis.call('HGET', ins(archived), 'jneg') or '0')
      local pos = tonumber(redis.call('HGET', ins(archived), 'jpos') or '0')
      restored = neg < math.max(tonumber(plan.archive_min) or 1, plan.archive_ratio * pos)
    end
    if restored then redis.call('HSET', ins(archived), 'state', 'active') end
    touch(archived, restored)
    if restored then
      o.outcome = 'restored'
    elseif tip then
      positive(tip, judged)
      touch(tip, false)
      o.outcome = 'forwarded'
      o.forwarded_to = tip
    else
      o.outcome = 'evidence_only'
    end
  elseif e.op == 'ADD' then
    local twin = active_twin(e)
    if twin then
      -- no twin; the task is positive evidence for the insight it re-proposed, as it would be for a
      -- new one (Eq. 16), so the query that taught it finds it again; judged only when the task was
      -- resolved (a failed task's proposal ranks, and never counts toward the archive threshold)
      positive(twin, plan.status == 'resolved')
      touch(twin, false)
      o.insight_id = twin
      o.outcome = 'duplicate'
    else
      create(e.new_id, e.text, nil, e.bands, e.words)
      positive(e.new_id, true)
      redis.call('HSET', texts, e.text_key, e.new_id)
      o.insight_id = cjson.null
      o.outcome = 'added'
      o.new_id = e.new_id
      table.insert(created, e.new_id)
      table.insert(linked, e.new_id)
    end
  elseif exists(e.insight_id) then
    local id = e.insight_id
    local state = redis.call('HGET', ins(id), 'state')
    local judged = e.inferred ~= true
    if e.op == 'KEEP' then
      positive(id, judged)
      touch(id, false)
      if state == 'active' then
        o.outcome = 'kept'
      else
        local tip = active_tip(id)
        if tip then
          positive(tip, judged)
          touch(tip, false)
          o.outcome = 'forwarded'
          o.forwarded_to = tip
        else
          o.outcome = 'evidence_only'
        end
      end
    else
      negative(id, judged)
      local twin = nil
      -- an operator's pin: the evidence is kept, the insight stays as it is
      local pinned = redis.call('HGET', ins(id), 'pinned') == '1'
      if e.op == 'REVISE' and state == 'active' and not pinned then twin = active_twin(e) end
      if pinned then
        touch(id, false)
        o.outcome = 'pinned'
      elseif twin and twin ~= id then
        -- the revised text is already an active insight: revise into it rather than make a twin
        redis.call('HSET', ins(id), 'state', 'archived', 'revised_to', twin)
        touch(id, true)
        inherit(twin, id)
        positive(twin, true)
        touch(twin, true)
        o.outcome = 'merged'
        o.new_id = twin
        table.insert(linked, twin)
      elseif e.op == 'REVISE' and state == 'active' then
        redis.call('HSET', ins(id), 'state', 'archived', 'revised_to', e.new_id)
        touch(id, true)
        create(e.new_id, e.text, id, e.bands, e.words)
        inherit(e.new_id, id)
        positive(e.new_id, true)
        if e.text_key and e.text_key ~= cjson.null then redis.call('HSET', texts, e.text_key, e.new_id) end
        o.outcome = 'revised'
        o.new_id = e.new_id
        table.insert(created, e.new_id)
        table.insert(linked, e.new_id)
      else
        local archive = false
        if state == 'active' and judged then
          if plan.archive_policy == 'immediate' then
            archive = true
          else
            local neg = tonumber(redis.call('HGET', ins(id), 'jneg') or '0')
            local pos = tonumber(redis.call('HGET', ins(id), 'jpos') or '0')
            local run = tonumber(redis.call('HGET', ins(id), 'jrun') or '0')
            local streak = tonumber(plan.archive_streak) or 0
            -- editing.streak_needed: the run grows by one per power of ten of the judged support
            local needed = streak + #tostring(math.max(pos, 1)) - 1
            archive = neg >= math.max(tonumber(plan.archive_min) or 1, plan.archive_ratio * pos)
              or (streak > 0 and run >= needed)
          end
        end
        if archive then
          redis.call('HSET', ins(id), 'state', 'archived')
          o.outcome = 'archived'
        else
          o.outcome = 'negative_evidence'
        end
        touch(id, archive)
      end
    end
  end
  -- whether its evidence counts toward the evidence policy (a revert takes back what it counted)
  if e.op == 'ADD' and o.outcome ~= 'added' then o.judged = plan.status == 'resolved' else o.judged = e.inferred ~= true end
  table.insert(outcomes, o)
  local record = cjson.encode({event_id = plan.event_id, op = e.op, outcome = o.outcome,
    insight_id = o.insight_id or cjson.null, new_id = o.new_id or o.forwarded_to or cjson.null,
    query_id = q, decided_by = e.decided_by, at = at})
  history(record)
  -- a rejected edit named a node it could not touch: it stays out of that node's history.
  -- (numeric loop: new_id is nil for a forwarded KEEP, and ipairs would stop at that hole)
  if o.outcome ~= 'rejected' then
    local hids = {o.insight_id, o.new_id, o.forwarded_to}
    for i = 1, 3 do
      local hid = hids[i]
      if hid and hid ~= cjson.null then redis.call('RPUSH', k('ins.hist', hid), record) end
    end
  end
end

-- what the staleness sweep reads (evomem/core/staleness.py): each insight served to this reported
-- task counts one serve, and one help when the event credited it (KEEP); not an edit: no version
local helped = {}
for _, o in ipairs(outcomes) do
  if o.op == 'KEEP' and o.outcome ~= 'rejected' and o.insight_id and o.insight_id ~= cjson.null then
    helped[o.insight_id] = true
  end
end
for _, a in ipairs(plan.retrieved) do
  if plan.served ~= false and exists(a) then
    redis.call('HINCRBY', ins(a), 'served', 1)
    redis.call('HSET', ins(a), 'served_at', at)
    if helped[a] then redis.call('HINCRBY', ins(a), 'helped', 1) end
  end
end

if plan.status == 'resolved' then
  for _, b in ipairs(linked) do
    for _, a in ipairs(plan.retrieved) do
      if a ~= b and exists(a) then redis.call('SADD', k('ins.edges', b), a .. '|' .. q) end
    end
  end
end

-- the live pollution signal (evomem stats): of the insights this event judged, how many it found
-- harmful, and how many it retired
local judged, harmed, retired = #plan.retrieved, 0, 0
for _, o in ipairs(outcomes) do
  if o.op ~= 'ADD' and o.outcome ~= 'rejected' and o.op ~= 'KEEP' then harmed = harmed + 1 end
  if o.outcome == 'archived' or o.outcome == 'revised' or o.outcome == 'merged' then retired = retired + 1 end
end
redis.call('LPUSH', KEYS[5], judged .. ':' .. harmed .. ':' .. retired)
redis.call('LTRIM', KEYS[5], 0, 999)  -- the last 1000 events (ports.RECENT_EVENTS)

if query_changed then
  local v = redis.call('HINCRBY', qkey, 'version', 1)
  announce('query', q, v)
end
for _, id in ipairs(changed_order) do announce('insight', id, changed[id]) end

local result = {event_id = plan.event_id, replayed = false, outcomes = outcomes, created = created,
  digest = plan.digest, query_id = q, at = at}
if #created == 0 then result.created = cjson.decode('[]') end
if #outcomes == 0 then result.outcomes = cjson.decode('[]') end
local encoded = cjson.encode(result)
redis.call('SET', applied_key, encoded)
if not clustered then return encoded end
local unsent = cjson.encode(outbox)
redis.call('SET', outbox_key, unsent)
result.outbox = outbox
return cjson.encode(result)
