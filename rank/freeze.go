package rank

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/sqlutil"
)

var (
	// ErrNotEnded is returned by Freeze for a board whose period has not
	// ended yet by the board's clock; nothing is written.
	ErrNotEnded = errors.New("rank: the board's period has not ended")
	// ErrNotFrozen is returned by Standings and FinalRank for a board that
	// was never frozen.
	ErrNotFrozen = errors.New("rank: board not frozen")
)

// Limits of a freeze.
const (
	maxFreeze    = 10000 // Top's limit
	maxBoardName = 128   // bytes, the key of a freeze in SQL
	maxStandings = 1000  // entries per Standings call
	insertChunk  = 500   // rows per INSERT (placeholders stay under SQLite's and MySQL's limits)
)

// FreezerConfig configures a Freezer.
type FreezerConfig struct {
	// Namespace is the boards' Config.Namespace: a Freezer freezes boards of
	// one namespace, and its rows (in tables shared by every namespace) are
	// keyed by namespace and board name, so two namespaces never see each
	// other's freezes or prizes. Freeze refuses a board of another one.
	Namespace string
	// Now is the clock RelayPrizes marks rows sent with. Default time.Now.
	// (Freeze reads the board's own clock, Config.Now.)
	Now func() time.Time
	// MeterProvider and TracerProvider receive the freezer's metrics and
	// spans (operations freeze, standings, final_rank, relay_prizes; doc.go,
	// Observability). Default the global ones.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Freezer writes the final standings of boards to SQL, once per board, with
// one prize message per frozen member in an SQL outbox in the same
// transaction. It takes no Redis client: each Board brings its own. It is
// safe for concurrent use, and several processes may freeze the same board
// at once.
type Freezer struct {
	ns    string
	db    *sqlx.DB
	mysql bool
	now   func() time.Time
	obs   *instruments
}

// NewFreezer returns a freezer on db (MySQL 8 / MariaDB 10.6+ or SQLite).
// Run Migrate once before use.
func NewFreezer(db *sqlx.DB, cfg FreezerConfig) (*Freezer, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := sqlutil.Check(db, "rank"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if len(cfg.Namespace) > maxBoardName {
		return nil, fmt.Errorf("%w: namespace of %d bytes, a freezer takes up to %d", ErrConfig, len(cfg.Namespace), maxBoardName)
	}
	return &Freezer{ns: cfg.Namespace, db: db, mysql: sqlutil.IsMySQL(db), now: cfg.Now, obs: newInstruments(cfg.MeterProvider, cfg.TracerProvider)}, nil
}

// Final is one member's frozen standing.
type Final struct {
	Entry        // Member, Score, Rank (numbered as the board's Ties said), At
	Place int64  `json:"place"` // 1-based position in the frozen list (Ordinal)
	Meta  string `json:"meta,omitempty"`
}

// Frozen is a board's freeze.
type Frozen struct {
	Board string    `json:"board"`
	N     int       `json:"n"`  // the size asked for by the first Freeze
	At    time.Time `json:"at"` // when it was frozen, by the board's clock
	// Standings are the frozen entries, at most N, in board order.
	Standings []Final `json:"standings"`
	// Fresh is true for the call that wrote the freeze, false when it was
	// found already written (a retry, or another process won the race).
	Fresh bool `json:"fresh"`
}

// tables are the freezer's: one header per board, its standings, the prize
// outbox. Member and board columns are byte strings (any UTF-8, compared
// exactly): VARBINARY in MySQL, BLOB in SQLite (whose VARBINARY would have
// numeric affinity and turn "007" into 7).
func (f *Freezer) tables() []sqlutil.Table {
	board, member, meta := "BLOB", "BLOB", "TEXT"
	if f.mysql { // MEDIUMTEXT: metadata is not bounded by MySQL's 64 KiB TEXT
		board, member, meta = fmt.Sprintf("VARBINARY(%d)", maxBoardName), fmt.Sprintf("VARBINARY(%d)", maxMember), "MEDIUMTEXT"
	}
	return []sqlutil.Table{{
		Name: "rank_freeze",
		Columns: `namespace ` + board + ` NOT NULL,
			board ` + board + ` NOT NULL,
			n BIGINT NOT NULL,
			entries BIGINT NOT NULL,
			frozen_at BIGINT NOT NULL,
			PRIMARY KEY (namespace, board)`,
	}, {
		Name: "rank_final",
		Columns: `namespace ` + board + ` NOT NULL,
			board ` + board + ` NOT NULL,
			place BIGINT NOT NULL,
			member ` + member + ` NOT NULL,
			score BIGINT NOT NULL,
			board_rank BIGINT NOT NULL,
			reached_at BIGINT NOT NULL,
			meta ` + meta + ` NOT NULL,
			PRIMARY KEY (namespace, board, place)`,
		Indexes: []string{"UNIQUE uq_member (namespace, board, member)"},
	}, {
		Name: "rank_prize_outbox",
		Columns: `id {{serial}},
			namespace ` + board + ` NOT NULL,
			board ` + board + ` NOT NULL,
			member ` + member + ` NOT NULL,
			payload TEXT NOT NULL,
			created_at BIGINT NOT NULL,
			sent_at BIGINT NOT NULL`,
		Indexes: []string{"UNIQUE uq_prize (namespace, board, member)", "ix_unsent (namespace, sent_at, id)"},
	}}
}

// Migrate creates the freezer's tables where they do not exist yet. Safe to
// run again and from several processes.
func (f *Freezer) Migrate(ctx context.Context) error {
	for _, t := range f.tables() {
		if err := t.Create(ctx, f.db); err != nil {
			return fmt.Errorf("rank: migrate: %w", err)
		}
	}
	return nil
}

// errAlreadyFrozen aborts a freeze transaction that found the header.
var errAlreadyFrozen = errors.New("rank: already frozen")

// Freeze writes the final top n (1..10,000) of b — member, score, rank as
// b's Ties numbers it, when reached, metadata — to SQL, with one Prize per
// member in the outbox, all in one transaction, once per board name: a
// board already frozen returns its stored standings with Fresh false and
// reads nothing from Redis (whatever n this call asked for). A board with
// a period (a Periodic board) is refused with ErrNotEnded until the
// period's end by the board's clock, and with ErrTimeRange once its keys
// have expired (ExpireAfter, a Periodic's Retention: freezing then would
// record an empty board); a board without a period is frozen as it stands
// when Freeze is called. Bad input returns ErrInvalid and writes nothing.
func (f *Freezer) Freeze(ctx context.Context, b *Board, n int) (_ Frozen, err error) {
	ctx, call := f.obs.freeze.Start(ctx)
	defer func() { err = call.End(err) }()
	if b == nil {
		return Frozen{}, fmt.Errorf("%w: nil board", ErrInvalid)
	}
	name := b.cfg.Name
	if b.cfg.Namespace != f.ns {
		return Frozen{}, fmt.Errorf("%w: board %s is of namespace %q, this freezer's is %q", ErrInvalid, name, b.cfg.Namespace, f.ns)
	}
	if n < 1 || n > maxFreeze {
		return Frozen{}, fmt.Errorf("%w: freeze %d is outside 1..%d", ErrInvalid, n, maxFreeze)
	}
	if len(name) > maxBoardName {
		return Frozen{}, fmt.Errorf("%w: board name of %d bytes, a freeze takes up to %d", ErrInvalid, len(name), maxBoardName)
	}
	now := b.cfg.Now()
	if _, end := b.Period(); !end.IsZero() && now.Before(end) {
		return Frozen{}, fmt.Errorf("%w: %s ends at %v, now %v", ErrNotEnded, name, end, now)
	}
	if fr, err := f.load(ctx, name); err == nil || !errors.Is(err, ErrNotFrozen) {
		return fr, err
	}
	if ms := b.expiry(); ms > 0 && now.UnixMilli() >= ms {
		return Frozen{}, fmt.Errorf("%w: %s expired at %v, its standings are gone", ErrTimeRange, name, msTime(ms))
	}
	top, err := b.top(ctx, n)
	if err != nil {
		return Frozen{}, err
	}
	meta, err := b.metaOf(ctx, members(top))
	if err != nil {
		return Frozen{}, err
	}
	fr := Frozen{Board: name, N: n, At: time.UnixMilli(now.UnixMilli()), Fresh: true, Standings: make([]Final, len(top))}
	for i, e := range top {
		fr.Standings[i] = Final{Entry: e, Place: int64(i + 1), Meta: meta[e.Member]}
	}
	err = sqlutil.InTx(ctx, f.db, func(tx *sqlx.Tx) error { return f.write(ctx, tx, fr) })
	if errors.Is(err, errAlreadyFrozen) {
		return f.load(ctx, name)
	}
	if err != nil {
		return Frozen{}, fmt.Errorf("rank: freeze %s: %w", name, err)
	}
	return fr, nil
}

func members(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Member
	}
	return out
}

// write records fr in tx: the header first, whose primary key makes a
// second freeze of the board (a retry, a racing process) fail with a
// duplicate — in MySQL it waits on the first's row lock until that commits
// or rolls back — then the standings and the prizes.
func (f *Freezer) write(ctx context.Context, tx *sqlx.Tx, fr Frozen) error {
	at := fr.At.UnixMilli()
	_, err := tx.ExecContext(ctx, `INSERT INTO rank_freeze (namespace, board, n, entries, frozen_at) VALUES (?, ?, ?, ?, ?)`,
		f.ns, fr.Board, fr.N, len(fr.Standings), at)
	if sqlutil.IsDuplicate(err) {
		return errAlreadyFrozen
	}
	if err != nil {
		return err
	}
	for lo := 0; lo < len(fr.Standings); lo += insertChunk {
		chunk := fr.Standings[lo:min(lo+insertChunk, len(fr.Standings))]
		finals := make([]any, 0, 8*len(chunk))
		prizes := make([]any, 0, 5*len(chunk))
		for _, s := range chunk {
			finals = append(finals, f.ns, fr.Board, s.Place, s.Member, s.Score, s.Rank, s.At.UnixNano(), s.Meta)
			payload, err := json.Marshal(Prize{V: PrizeVersion, ID: prizeID(f.ns, fr.Board, s.Member), Namespace: f.ns, Board: fr.Board, Member: s.Member,
				Rank: s.Rank, Place: s.Place, Score: s.Score, Of: len(fr.Standings), At: at})
			if err != nil {
				return err
			}
			prizes = append(prizes, f.ns, fr.Board, s.Member, payload, at)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO rank_final (namespace, board, place, member, score, board_rank, reached_at, meta) VALUES `+
			values("(?, ?, ?, ?, ?, ?, ?, ?)", len(chunk)), finals...); err != nil {
			return fmt.Errorf("standings: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO rank_prize_outbox (namespace, board, member, payload, created_at, sent_at) VALUES `+
			values("(?, ?, ?, ?, ?, 0)", len(chunk)), prizes...); err != nil {
			return fmt.Errorf("prize outbox: %w", err)
		}
	}
	return nil
}

// values is n copies of row, comma-separated.
func values(row string, n int) string {
	return strings.TrimSuffix(strings.Repeat(row+",", n), ",")
}

// finalRow is a rank_final row.
type finalRow struct {
	Place     int64  `db:"place"`
	Member    string `db:"member"`
	Score     int64  `db:"score"`
	BoardRank int64  `db:"board_rank"`
	ReachedAt int64  `db:"reached_at"`
	Meta      string `db:"meta"`
}

func (r finalRow) final() Final {
	return Final{Entry: Entry{Member: r.Member, Score: r.Score, Rank: r.BoardRank, At: time.Unix(0, r.ReachedAt)}, Place: r.Place, Meta: r.Meta}
}

const finalColumns = `place, member, score, board_rank, reached_at, meta`

// load reads a board's freeze, ErrNotFrozen if there is none.
func (f *Freezer) load(ctx context.Context, board string) (Frozen, error) {
	var h struct {
		N        int   `db:"n"`
		FrozenAt int64 `db:"frozen_at"`
	}
	err := f.db.GetContext(ctx, &h, `SELECT n, frozen_at FROM rank_freeze WHERE namespace = ? AND board = ?`, f.ns, board)
	if errors.Is(err, sql.ErrNoRows) {
		return Frozen{}, fmt.Errorf("%w: %s", ErrNotFrozen, board)
	}
	if err != nil {
		return Frozen{}, fmt.Errorf("rank: read freeze of %s: %w", board, err)
	}
	var rows []finalRow
	if err := f.db.SelectContext(ctx, &rows, `SELECT `+finalColumns+` FROM rank_final WHERE namespace = ? AND board = ? ORDER BY place`, f.ns, board); err != nil {
		return Frozen{}, fmt.Errorf("rank: read standings of %s: %w", board, err)
	}
	fr := Frozen{Board: board, N: h.N, At: time.UnixMilli(h.FrozenAt), Standings: make([]Final, len(rows))}
	for i, r := range rows {
		fr.Standings[i] = r.final()
	}
	return fr, nil
}

// Standings returns up to n (1..1,000) frozen entries of board after the
// first offset, in board order, from SQL: they never change once frozen,
// whatever is later written to the Redis board. ErrNotFrozen for a board
// never frozen; an offset past the end gives none.
func (f *Freezer) Standings(ctx context.Context, board string, offset, n int) (_ []Final, err error) {
	ctx, call := f.obs.standings.Start(ctx)
	defer func() { err = call.End(err) }()
	if n < 1 || n > maxStandings || offset < 0 {
		return nil, fmt.Errorf("%w: standings offset %d, n %d (1..%d)", ErrInvalid, offset, n, maxStandings)
	}
	var rows []finalRow
	if err := f.db.SelectContext(ctx, &rows, `SELECT `+finalColumns+` FROM rank_final WHERE namespace = ? AND board = ? AND place > ? ORDER BY place LIMIT ?`,
		f.ns, board, offset, n); err != nil {
		return nil, fmt.Errorf("rank: read standings of %s: %w", board, err)
	}
	if len(rows) == 0 {
		if err := f.frozen(ctx, board); err != nil {
			return nil, err
		}
	}
	out := make([]Final, len(rows))
	for i, r := range rows {
		out[i] = r.final()
	}
	return out, nil
}

// FinalRank returns member's frozen standing on board: ErrNotFrozen for a
// board never frozen, ErrNotFound for a member not among its frozen
// entries.
func (f *Freezer) FinalRank(ctx context.Context, board, member string) (_ Final, err error) {
	ctx, call := f.obs.finalRank.Start(ctx)
	defer func() { err = call.End(err) }()
	var r finalRow
	err = f.db.GetContext(ctx, &r, `SELECT `+finalColumns+` FROM rank_final WHERE namespace = ? AND board = ? AND member = ?`, f.ns, board, member)
	if errors.Is(err, sql.ErrNoRows) {
		if err := f.frozen(ctx, board); err != nil {
			return Final{}, err
		}
		return Final{}, fmt.Errorf("%w: %q in the final standings of %s", ErrNotFound, member, board)
	}
	if err != nil {
		return Final{}, fmt.Errorf("rank: final rank on %s: %w", board, err)
	}
	return r.final(), nil
}

// frozen returns nil if board has a freeze, ErrNotFrozen if not.
func (f *Freezer) frozen(ctx context.Context, board string) error {
	var n int
	if err := f.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM rank_freeze WHERE namespace = ? AND board = ?`, f.ns, board); err != nil {
		return fmt.Errorf("rank: read freeze of %s: %w", board, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrNotFrozen, board)
	}
	return nil
}
