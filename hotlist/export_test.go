package hotlist

// SendEverything makes a's claims send every increment, as flush.lua takes
// them, rather than decide from their copy of the heat set (heatView): the
// reference the copy is tested against.
func SendEverything(a *Aggregator) { a.sendAll = true }
