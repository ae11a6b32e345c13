package hotlist

// SendEverything makes a's claims send every increment, as flush.lua takes
// them, rather than decide from their copy of the heat set (heatView): the
// reference the copy is tested against.
func SendEverything(a *Aggregator) { a.sendAll = true }

// NativeFlushes counts a's flushes applied by a WATCH transaction
// (nativeflush.go) rather than by flush.lua.
func NativeFlushes(a *Aggregator) int64 { return a.stats.natives.Load() }

// HoldsCopy reports whether c holds a copy of its partition's heat set.
func HoldsCopy(c *Claim) bool { return c.view.known }
