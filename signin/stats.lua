-- Read a user's statistics as of today, writing nothing: the days before
-- today not settled yet are settled in memory only.
-- KEYS and ARGV[1..15] as in days.lua; KEYS[12] unused. ARGV[16] today.
-- Returns {current, longest, total, freezes, frozen days}; an error when the
-- bucket holds another layout.
local mismatch = open_layout(KEYS[10], ARGV[2], ARGV[1], true)
if mismatch then return mismatch end
load_state()
local today = tonumber(ARGV[16])
settle(today, false)
local current = 0
if st.L ~= NONE and st.L >= today - 1 then current = st.cur end
return {current, st.longest, st.total, st.freezes, st.frozen}
