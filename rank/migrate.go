package rank

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/luascript"
)

var (
	//go:embed migrate_begin.lua
	migrateBeginLua    string
	migrateBeginScript = redis.NewScript(migrateBeginLua)
	//go:embed migrate_copy.lua
	migrateCopyLua    string
	migrateCopyScript = redis.NewScript(migrateCopyLua)
	//go:embed migrate_switch.lua
	migrateSwitchLua    string
	migrateSwitchScript = redis.NewScript(migrateSwitchLua)
	//go:embed migrate_reset.lua
	migrateResetLua    string
	migrateResetScript = redis.NewScript(migrateResetLua)
)

// migrationKeys are one shard's keys while Migrate copies it: its state
// (phase and cursor) and the EncodingMember copy, a sorted set and a ties
// hash, under the shard's hash tag.
type migrationKeys struct {
	state, rank, ties string
}

// MigrateOptions tunes Migrate. The zero value is ready to use.
type MigrateOptions struct {
	// Chunk is how many entries one step scans and converts: one ZSCAN and
	// one script call, which holds the shard while it writes them (a
	// median 4.7 ms for 500 on a loaded 2-core machine, doc.go). Default
	// 500, at most 5,000.
	Chunk int
	// Step, when set, is called after every step with the shard, the
	// entries the step converted and whether the shard's copy is complete.
	// It runs on Migrate's goroutine.
	Step func(shard, converted int, complete bool)
}

// maxMigrateChunk bounds MigrateOptions.Chunk, so that one step never holds
// a shard for long (unpack in Lua has a limit too).
const maxMigrateChunk = 5000

// Migrate converts a board written in EncodingPacked into EncodingMember,
// online: reads and writes, by this Board and by any other, carry on while
// it runs and see every write exactly once, and afterwards the board is an
// EncodingMember board of the same members, scores, times reached and tie
// order (each member's prefix is the packed value's time, Epoch + tick ×
// Resolution, exactly). It is resumable: the progress of each shard is kept
// in Redis, so a Migrate that stopped (an error, a cancelled ctx, a crash)
// is resumed, from the last completed step, by calling Migrate again in any
// process. Two running at once do the same work twice, correctly. On a
// board already in EncodingMember, or with no entries, it does nothing.
//
// The Board must be EncodingAuto with the packed board's Epoch, Lifetime
// and Resolution, and so must every Board that reads or writes the board
// while it runs (any version that has Migrate): a Board configured
// EncodingPacked is refused once the board is switched, and a version
// without Migrate would write around the copy.
//
// How: each shard's migration state is created first; from then on every
// write and removal on the shard writes the copy too, in the same script
// call. Migrate then scans each shard in chunks (ZSCAN, Chunk entries a
// step) and copies, in one script call per step, the entries whose value
// has not changed since the scan, and stores the cursor. When every
// shard's copy is complete and as large as the shard, one pipelined script
// call per shard swaps the copy in and records EncodingMember, atomically
// on each shard. Until then the packed shards are the board and reads are
// served from them; between the first and last shard's swap (one round
// trip) operations wait for it, and if Migrate stops in that window they
// get ErrMigrating until it is run again. Reads of a packed board check
// the records again after reading, so a Board that has not seen
// the switch reads again rather than misdecoding.
//
// Cost: the copy takes as much memory again as the board's sorted sets and
// ties hashes (doc.go's 186 bytes per member) until the swap; writes to a
// shard being copied cost one more ZADD and HSET; reads of a packed board
// cost one more round trip (the records check) whether or not a migration
// runs. See doc.go for measured figures.
func (b *Board) Migrate(ctx context.Context, opts MigrateOptions) (err error) {
	ctx, call := b.obs.migrate.Start(ctx)
	defer func() { err = call.End(err) }()
	if opts.Chunk == 0 {
		opts.Chunk = 500
	}
	switch {
	case opts.Chunk < 1 || opts.Chunk > maxMigrateChunk:
		return fmt.Errorf("%w: migrate chunk %d is outside 1..%d", ErrInvalid, opts.Chunk, maxMigrateChunk)
	case b.cfg.Encoding != EncodingAuto || b.packed.id == "":
		return fmt.Errorf("%w: Migrate needs an EncodingAuto Board with the packed board's Epoch", ErrConfig)
	}
	stored, err := b.recorded(ctx)
	switch {
	case err != nil:
		return err
	case stored == "" || stored == b.memberID:
		return nil
	case stored != b.packed.id && stored != mixedRecords:
		return fmt.Errorf("%w: board %s was written as %q, Migrate converts %q", ErrEncodingMismatch, b.cfg.Name, stored, b.packed.id)
	}
	// A rescan (a copy found smaller than its shard) sends a shard round
	// again; a board still changing shape after a few rounds is left to the
	// next call.
	for range 3 {
		phases, err := b.beginMigration(ctx)
		if err != nil {
			return err
		}
		for i, p := range phases {
			if p.phase == "copying" {
				if err := b.copyShard(ctx, i, p.cursor, opts); err != nil {
					return err
				}
			}
		}
		whole, err := b.checkCopies(ctx, phases)
		if err != nil {
			return err
		}
		if !whole {
			continue // copy the shards sent back before swapping any
		}
		done, err := b.swapShards(ctx)
		if err != nil || done {
			b.layout.CompareAndSwap(int32(EncodingPacked), int32(EncodingAuto))
			return err
		}
	}
	return fmt.Errorf("rank: migrate %s: copies still incomplete after 3 rounds; call Migrate again", b.cfg.Name)
}

// shardPhase is a shard's migration state: "done" (switched), "copying"
// from cursor, or "copied".
type shardPhase struct {
	phase  string
	cursor string
}

// beginMigration creates every shard's migration state (or reads it), in
// one round trip: from then on every write to a shard writes its copy too.
func (b *Board) beginMigration(ctx context.Context) ([]shardPhase, error) {
	calls := make([]luascript.Call, len(b.shards))
	for i := range b.shards {
		calls[i] = luascript.Call{
			Script: migrateBeginScript,
			Keys:   []string{b.encoded[i], b.mig[i].state},
			Args:   []any{b.packed.id, b.memberID, b.packed.expireMs},
		}
	}
	cmds, err := luascript.RunAll(ctx, b.c, calls)
	if err != nil {
		return nil, b.migrateError(err)
	}
	out := make([]shardPhase, len(cmds))
	for i, cmd := range cmds {
		r, err := cmd.StringSlice()
		if err != nil || len(r) != 2 {
			return nil, fmt.Errorf("rank: migrate %s: begin reply %v: %v", b.cfg.Name, cmd.Val(), err)
		}
		out[i] = shardPhase{phase: r[0], cursor: r[1]}
	}
	return out, nil
}

// copyShard copies shard i from cursor on, a chunk a step, until its scan
// is complete.
func (b *Board) copyShard(ctx context.Context, i int, cursor string, opts MigrateOptions) error {
	m := b.mig[i]
	keys := []string{b.shards[i], b.encoded[i], m.state, m.rank, m.ties}
	for {
		from, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil {
			return fmt.Errorf("rank: migrate %s: shard %d has cursor %q", b.cfg.Name, i, cursor)
		}
		flat, next, err := b.c.ZScan(ctx, b.shards[i], from, "", int64(opts.Chunk)).Result()
		if err != nil {
			return fmt.Errorf("rank: migrate %s: scan shard %d: %w", b.cfg.Name, i, err)
		}
		args := make([]any, 0, 4+2*len(flat))
		args = append(args, b.packed.id, cursor, strconv.FormatUint(next, 10), b.packed.expireMs)
		for j := 0; j+1 < len(flat); j += 2 {
			v, err := strconv.ParseFloat(flat[j+1], 64)
			if err != nil {
				return fmt.Errorf("rank: migrate %s: shard %d holds %q at %q", b.cfg.Name, i, flat[j], flat[j+1])
			}
			e := b.decodePacked(flat[j], int64(v))
			args = append(args, e.Member, flat[j+1], e.Score, prefixOf(e.At.UnixNano()))
		}
		r, err := migrateCopyScript.Run(ctx, b.c, keys, args...).Result()
		if err != nil {
			return b.migrateError(err)
		}
		if r == "moved" { // another Migrate is copying this shard too
			state, err := b.c.HMGet(ctx, m.state, "phase", "cursor").Result()
			if err != nil {
				return fmt.Errorf("rank: migrate %s: %w", b.cfg.Name, err)
			}
			phase, _ := state[0].(string)
			if phase != "copying" {
				return nil
			}
			cursor, _ = state[1].(string)
			continue
		}
		n, _ := r.(int64)
		cursor = strconv.FormatUint(next, 10)
		if opts.Step != nil {
			opts.Step(i, int(n), next == 0)
		}
		if next == 0 {
			return nil
		}
	}
}

// checkCopies compares every copy's size with its shard's before any shard
// is swapped, and sends a shard whose copy differs (a scan that missed
// entries) back to copying, emptied, so that a rescan happens while the
// board is still wholly packed. It reports whether every copy was whole.
func (b *Board) checkCopies(ctx context.Context, phases []shardPhase) (whole bool, err error) {
	pipe := b.c.Pipeline()
	shard := make([]*redis.IntCmd, len(b.shards))
	copied := make([]*redis.IntCmd, len(b.shards))
	for i := range b.shards {
		shard[i] = pipe.ZCard(ctx, b.shards[i])
		copied[i] = pipe.ZCard(ctx, b.mig[i].rank)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("rank: migrate %s: %w", b.cfg.Name, err)
	}
	var resets []luascript.Call
	for i := range b.shards {
		if phases[i].phase != "done" && shard[i].Val() != copied[i].Val() {
			m := b.mig[i]
			resets = append(resets, luascript.Call{Script: migrateResetScript, Keys: []string{m.state, m.rank, m.ties}})
		}
	}
	if _, err := luascript.RunAll(ctx, b.c, resets); err != nil {
		return false, fmt.Errorf("rank: migrate %s: %w", b.cfg.Name, err)
	}
	return len(resets) == 0, nil
}

// swapShards swaps every shard whose copy is complete for its copy, one
// script call per shard in one round trip. It reports whether the whole
// board is now EncodingMember.
func (b *Board) swapShards(ctx context.Context) (bool, error) {
	calls := make([]luascript.Call, len(b.shards))
	for i := range b.shards {
		m := b.mig[i]
		calls[i] = luascript.Call{
			Script: migrateSwitchScript,
			Keys:   []string{b.shards[i], b.ties[i], b.encoded[i], m.state, m.rank, m.ties},
			Args:   []any{b.packed.id, b.memberID},
		}
	}
	cmds, err := luascript.RunAll(ctx, b.c, calls)
	if err != nil {
		return false, b.migrateError(err)
	}
	done := true
	for _, cmd := range cmds {
		r, _ := cmd.Text()
		done = done && (r == "switched" || r == "done")
	}
	return done, nil
}

func (b *Board) migrateError(err error) error {
	if isMismatch(err) {
		return fmt.Errorf("%w: %v", ErrEncodingMismatch, err)
	}
	return fmt.Errorf("rank: migrate %s: %w", b.cfg.Name, err)
}

// asMember is e, a place on the packed board, as Migrate converts it: the
// score as the value and, for an entry, its exact time as the prefix. A
// place with no member (a bound for every member at its value) keeps none.
func (b *Board) asMember(e Entry) Entry {
	if e.key == "" {
		return Entry{value: int64(uint64(e.value) / b.packed.span)}
	}
	p := b.decodePacked(e.key, e.value)
	p.value, p.key = p.Score, prefixOf(p.At.UnixNano())+p.Member
	return p
}
