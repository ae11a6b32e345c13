-- Store a link in the cache unless the cache already holds this version of
-- it or a newer one, so that a reader filling the cache from an old row
-- never replaces what an edit wrote after it.
-- KEYS[1] the link's cache entry
-- ARGV[1] the link's version
-- ARGV[2] the entry: the link as JSON, its version in "version"
-- ARGV[3] the entry's lifetime in ms
-- Returns 1 when stored, 0 when the cache holds the same or a newer version.
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= '-' then
  local ok, l = pcall(cjson.decode, cur)
  if ok and type(l) == 'table' and (tonumber(l.version) or 0) >= tonumber(ARGV[1]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
