package rank

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
)

// instruments are the Board's metrics and spans (see doc.go,
// Observability).
type instruments struct {
	set, add, best, applyOp, applyOnce, remove, setMeta, meta,
	score, rank, around, topOp, page, size,
	rankOfScore, countInRange, percentile,
	rangeOp, removeByScore, removeByRank, rankIn, rankAcross, applyAcross,
	migrate, freeze, standings, finalRank, relayPrizes *obs.Op
}

// reasons are the refusals, as the metrics name them.
var reasons = []obs.Reason{
	{Err: ErrInvalid, Name: "invalid"},
	{Err: ErrScoreRange, Name: "score_range"},
	{Err: ErrTimeRange, Name: "time_range"},
	{Err: ErrNotFound, Name: "not_found"},
	{Err: ErrBadCursor, Name: "bad_cursor"},
	{Err: ErrEncodingMismatch, Name: "encoding_mismatch"},
	{Err: ErrMigrating, Name: "migrating"},
	{Err: ErrNotEnded, Name: "not_ended"},
	{Err: ErrNotFrozen, Name: "not_frozen"},
}

func newInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("rank", mp, tp)
	classify, names := obs.Refuse(reasons...), obs.Names(reasons)
	op := func(name string) *obs.Op { return b.Op(name, classify, names...) }
	return &instruments{
		set: op("set"), add: op("add"), best: op("best"), applyOp: op("apply"), applyOnce: op("apply_once"),
		remove: op("remove"), setMeta: op("set_meta"), meta: op("meta"),
		score: op("score"), rank: op("rank"), around: op("around"), topOp: op("top"), page: op("page"), size: op("size"),
		rankOfScore: op("rank_of_score"), countInRange: op("count_in_range"), percentile: op("percentile"),
		rangeOp: op("range"), removeByScore: op("remove_range_by_score"), removeByRank: op("remove_range_by_rank"),
		rankIn: op("rank_in"), rankAcross: op("rank_across"), applyAcross: op("apply_across"),
		migrate: op("migrate"), freeze: op("freeze"), standings: op("standings"), finalRank: op("final_rank"), relayPrizes: op("relay_prizes"),
	}
}
