package order

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// StatementLine is one successful collection on a gateway's statement.
type StatementLine struct {
	GatewayTxn string
	PayNo      int64
	Amount     int64
	Time       time.Time
}

// StatementHeader is the first line of a statement CSV.
const StatementHeader = "gateway_txn,pay_no,amount,status,time"

// ParseStatement reads a gateway statement: CSV with StatementHeader, one
// line per transaction, status SUCCESS (other statuses are skipped), time in
// RFC 3339, amount in fen (a collection of 0 or less is malformed). A
// malformed line is an error naming it; nothing is applied.
func ParseStatement(r io.Reader) ([]StatementLine, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 5
	head, err := cr.Read()
	if err != nil || strings.Join(head, ",") != StatementHeader {
		return nil, fmt.Errorf("%w: statement header %q, want %q (%v)", ErrInvalid, strings.Join(head, ","), StatementHeader, err)
	}
	var out []StatementLine
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: statement: %w", ErrInvalid, err)
		}
		line, _ := cr.FieldPos(0) // only valid after a successful Read

		if rec[3] != "SUCCESS" {
			continue
		}
		payNo, e1 := strconv.ParseInt(rec[1], 10, 64)
		amount, e2 := strconv.ParseInt(rec[2], 10, 64)
		at, e3 := time.Parse(time.RFC3339, rec[4])
		if e := errors.Join(e1, e2, e3, validUser(rec[0])); e != nil || payNo <= 0 || amount <= 0 {
			return nil, fmt.Errorf("%w: statement line %d: %q", ErrInvalid, line, rec)
		}
		out = append(out, StatementLine{GatewayTxn: rec[0], PayNo: payNo, Amount: amount, Time: at})
	}
}

// Kinds of reconciliation differences.
const (
	DiffMissedCallback = "missed_callback" // collected, no callback arrived: applied now
	DiffAmount         = "amount_mismatch" // collected amount differs from the attempt's
	DiffNotAtGateway   = "not_at_gateway"  // paid here, absent from the statement
	DiffDuplicateLine  = "duplicate_line"  // one gateway txn listed twice
	DiffUnknownPayment = "unknown_payment" // a payment number this service never issued
)

// Diff is one difference between the statement and the records.
type Diff struct {
	Kind       string
	GatewayTxn string
	PayNo      int64
	Detail     string
	New        bool // first found by this run (a review row was written)
}

// ReconcileReport is what Reconcile found.
type ReconcileReport struct {
	Lines    int // statement lines considered
	Matched  int // lines whose callback was applied with the same amount
	Awaiting int // lines without a callback yet, younger than the grace
	Diffs    []Diff
}

// DefaultGrace is how long Reconcile waits for a collection's callback
// before it applies the collection itself: WeChat Pay's retry schedule
// (15 s … 3 h) lasts 24 h 4 min.
const DefaultGrace = 24*time.Hour + 4*time.Minute

// Reconcile compares a gateway statement covering [from, to) with the
// records: every statement line must match a callback already applied, and
// every payment succeeded here in [from, to) must be on the statement.
// A collection whose callback never came (older than grace; 0 means
// DefaultGrace — pass less only when the gateway has stopped retrying) is
// repaired by applying it now (so the order is paid, or refunded if it was
// closed) and recorded in the order_review table as DiffMissedCallback, so
// a person sees what was repaired; every other difference goes there too,
// for a person to settle. Running it again writes nothing new: review rows are unique by
// kind and transaction, and applied callbacks are idempotent. A negative
// grace or an empty window is ErrInvalid.
func (s *Service) Reconcile(ctx context.Context, lines []StatementLine, from, to time.Time, grace time.Duration) (ReconcileReport, error) {
	ctx, call := s.obs.reconcile.Start(ctx)
	rep, err := s.reconcile(ctx, lines, from, to, grace)
	return rep, call.End(err)
}

func (s *Service) reconcile(ctx context.Context, lines []StatementLine, from, to time.Time, grace time.Duration) (ReconcileReport, error) {
	var rep ReconcileReport
	if grace < 0 || !from.Before(to) {
		return rep, fmt.Errorf("%w: reconcile [%v, %v) with grace %v", ErrInvalid, from, to, grace)
	}
	grace = cmp.Or(grace, DefaultGrace)
	onStatement := map[string]bool{}
	now := s.cfg.Now()
	for _, l := range lines {
		if l.Time.Before(from) || !l.Time.Before(to) {
			continue
		}
		rep.Lines++
		if onStatement[l.GatewayTxn] {
			if err := s.review(ctx, &rep, Diff{Kind: DiffDuplicateLine, GatewayTxn: l.GatewayTxn, PayNo: l.PayNo, Detail: "listed twice"}); err != nil {
				return rep, err
			}
			continue
		}
		onStatement[l.GatewayTxn] = true
		if err := s.reconcileLine(ctx, &rep, l, now, grace); err != nil {
			return rep, err
		}
	}
	paid, err := shard.Gather(ctx, s.orders.All(), 16, func(ctx context.Context, sh shard.Shard) ([]Payment, error) {
		var ps []Payment
		err := sh.DB.SelectContext(ctx, &ps, `SELECT pay_no, order_id, channel, amount, currency, status, COALESCE(gateway_txn, '') AS gateway_txn, created_at, paid_at
			FROM `+gene.Sibling(sh, "payments")+` WHERE status = ? AND paid_at >= ? AND paid_at < ?`, PaymentSucceeded, ms(from), ms(to))
		return ps, err
	}, func(a, b Payment) bool { return a.PayNo < b.PayNo }, 0)
	if err != nil {
		return rep, fmt.Errorf("order: reconcile: %w", err)
	}
	for _, p := range paid {
		if !onStatement[p.GatewayTxn] {
			if err := s.review(ctx, &rep, Diff{Kind: DiffNotAtGateway, GatewayTxn: p.GatewayTxn, PayNo: p.PayNo,
				Detail: fmt.Sprintf("%d %s paid here, not on the statement", p.Amount, p.Currency)}); err != nil {
				return rep, err
			}
		}
	}
	slices.SortFunc(rep.Diffs, func(a, b Diff) int { return strings.Compare(a.Kind+a.GatewayTxn, b.Kind+b.GatewayTxn) })
	return rep, nil
}

func (s *Service) reconcileLine(ctx context.Context, rep *ReconcileReport, l StatementLine, now time.Time, grace time.Duration) error {
	sh := s.shardOfID(l.PayNo)
	p, err := s.paymentOf(ctx, l.PayNo)
	if errors.Is(err, ErrNotFound) {
		return s.review(ctx, rep, Diff{Kind: DiffUnknownPayment, GatewayTxn: l.GatewayTxn, PayNo: l.PayNo, Detail: "no such payment"})
	}
	if err != nil {
		return err
	}
	if p.Amount != l.Amount {
		return s.review(ctx, rep, Diff{Kind: DiffAmount, GatewayTxn: l.GatewayTxn, PayNo: l.PayNo,
			Detail: fmt.Sprintf("statement %d, payment %d", l.Amount, p.Amount)})
	}
	if _, seen, err := s.seen(ctx, sh.DB, sh, l.GatewayTxn); err != nil {
		return err
	} else if seen {
		rep.Matched++
		return nil
	}
	if now.Sub(l.Time) < grace {
		rep.Awaiting++
		return nil
	}
	out, err := s.handleCallback(ctx, Callback{PayNo: l.PayNo, GatewayTxn: l.GatewayTxn, Amount: l.Amount, Currency: p.Currency, Success: true, PaidAt: l.Time})
	if err != nil && !errors.Is(err, ErrCallback) {
		return err
	}
	return s.review(ctx, rep, Diff{Kind: DiffMissedCallback, GatewayTxn: l.GatewayTxn, PayNo: l.PayNo, Detail: "applied: " + string(out)})
}

// review records d in the review table (once) and in the report.
func (s *Service) review(ctx context.Context, rep *ReconcileReport, d Diff) error {
	db := s.dbs[0]
	_, err := db.ExecContext(ctx, `INSERT INTO order_review (dedupe, kind, gateway_txn, order_id, detail, found_at) VALUES (?, ?, ?, ?, ?, ?)`,
		dedupeKey("diff", d.Kind, d.GatewayTxn, strconv.FormatInt(d.PayNo, 10)), d.Kind, d.GatewayTxn, d.PayNo, truncate(d.Detail, 255), s.now())
	switch {
	case err == nil:
		d.New = true
		s.log.Warn("order: reconcile found a difference; recorded for review", "kind", d.Kind, "gateway_txn", d.GatewayTxn,
			"pay_no", d.PayNo, "detail", d.Detail)
	case !sqlutil.IsDuplicate(err):
		return fmt.Errorf("order: review: %w", err)
	}
	rep.Diffs = append(rep.Diffs, d)
	return nil
}
