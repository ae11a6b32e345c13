package redpacket_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/redpacket"
)

// A scripted packet's life read through the OpenTelemetry SDK: a packet of
// 3 grabbed and opened by 4 users, a batch of opens, one refund held back
// by claims on their way and two by a packet whose Redis state is gone, a
// poison message, the views — every counter and every span exact.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	reader, mp, spans, tp := obstest.NewSDK()
	logs := obstest.NewLogs()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{MeterProvider: mp, TracerProvider: tp, Logger: logs.Logger})
	s := f.s

	ops := map[string]float64{} // "operation outcome[ reason]" → count
	check := func(op string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) || want == nil && err != nil {
			t.Fatalf("%s: %v, want %v", op, err, want)
		}
		key := op + " ok"
		for _, r := range []struct {
			err    error
			reason string
		}{
			{redpacket.ErrInvalid, "invalid"}, {redpacket.ErrInsufficientFunds, "insufficient_funds"},
			{redpacket.ErrEmpty, "empty"}, {redpacket.ErrAlreadyClaimed, "already_claimed"},
			{redpacket.ErrExpired, "expired"}, {redpacket.ErrFence, "fenced"}, {redpacket.ErrBadMessage, "bad_message"},
		} {
			if want == r.err {
				key = op + " refused " + r.reason
			}
		}
		ops[key]++
	}
	check("deposit", s.Deposit(ctx, "s1", 1000), nil)
	p1, err := s.Send(ctx, redpacket.SendRequest{Sender: "s1", RequestID: "r1", Total: 300, Count: 3})
	check("send", err, nil)
	p2, err := s.Send(ctx, redpacket.SendRequest{Sender: "s1", RequestID: "r2", Total: 200, Count: 2})
	check("send", err, nil)
	_, err = s.Send(ctx, redpacket.SendRequest{Sender: "s1", RequestID: "r3", Total: 1, Count: 3})
	check("send", err, redpacket.ErrInvalid)
	_, err = s.Send(ctx, redpacket.SendRequest{Sender: "s2", RequestID: "r1", Total: 100, Count: 1})
	check("send", err, redpacket.ErrInsufficientFunds)

	for i := 1; i <= 4; i++ {
		check("grab", s.Grab(ctx, p1.ID, fmt.Sprint("u", i)), nil)
	}
	for i := 1; i <= 4; i++ {
		want := error(nil)
		if i == 4 {
			want = redpacket.ErrEmpty
		}
		_, err := s.Open(ctx, p1.ID, fmt.Sprint("u", i))
		check("open", err, want)
	}
	check("grab", s.Grab(ctx, p1.ID, "u1"), redpacket.ErrAlreadyClaimed)
	check("grab", s.Grab(ctx, p1.ID, "u5"), redpacket.ErrEmpty)
	res := s.OpenMany(ctx, []redpacket.OpenRequest{{Packet: p1.ID, User: "u1"}, {Packet: p1.ID, User: "u6"}, {Packet: 0, User: "u7"}})
	if res[0].Err != nil || !errors.Is(res[1].Err, redpacket.ErrEmpty) || !errors.Is(res[2].Err, redpacket.ErrInvalid) {
		t.Fatalf("open many: %+v", res)
	}
	ops["open_many ok"]++

	// p2's Redis state is lost: its refund waits out LostStateGrace.
	state := fmt.Sprintf("%s:rp:{b%d}:p:%d", f.r.Namespace, s.Bucket(p2.ID), p2.ID)
	if n, err := f.r.Client.Del(ctx, state, state+":shares").Result(); n != 2 || err != nil {
		t.Fatalf("deleting p2's state: %d keys, %v", n, err)
	}
	f.clk.Set(time.UnixMilli(p1.ExpiresAt))
	check("grab", s.Grab(ctx, p1.ID, "u7"), redpacket.ErrExpired)
	_, err = s.Refund(ctx, p1.ID) // its 3 claims are still in the outbox
	check("refund", err, redpacket.ErrFence)
	_, err = s.Refund(ctx, p2.ID)
	check("refund", err, redpacket.ErrFence)

	st := newSettler(t, f)
	defer st.relay.Close()
	st.settle(ctx)
	if st.late+st.bad != 0 {
		t.Fatalf("settle: %d late claims, %d bad messages", st.late, st.bad)
	}
	ops["handle_claims ok"] += 3 // one message per Open that took a share
	check("handle_claims", s.Handle(ctx, nil, []byte(`{"v":9}`)), redpacket.ErrBadMessage)
	_, err = s.Refund(ctx, p1.ID)
	check("refund", err, nil)
	if n, fenced, err := s.RefundDue(ctx, 10); n != 0 || fenced != 1 || err != nil {
		t.Fatalf("refunds due within the grace: %d refunded, %d fenced, %v", n, fenced, err)
	}
	ops["refund_due ok"]++
	f.clk.Add(time.Hour) // LostStateGrace
	if n, fenced, err := s.RefundDue(ctx, 10); n != 1 || fenced != 0 || err != nil {
		t.Fatalf("refunds due after the grace: %d refunded, %d fenced, %v", n, fenced, err)
	}
	ops["refund_due ok"]++

	_, err = s.Detail(ctx, p1.ID)
	check("detail", err, nil)
	_, err = s.Get(ctx, 0)
	check("get", err, redpacket.ErrInvalid)
	_, err = s.Claims(ctx, p1.ID)
	check("claims", err, nil)
	_, err = s.Balance(ctx, "u1")
	check("balance", err, nil)
	_, _, err = s.Sent(ctx, "s1", "", 10)
	check("sent", err, nil)
	_, _, err = s.Received(ctx, "u1", "", 0)
	check("received", err, redpacket.ErrInvalid)
	_, err = s.Archive(ctx, f.clk.Now(), 10)
	check("archive", err, nil)
	_, err = s.Reopen(ctx)
	check("reopen", err, nil)
	f.balanced()
	ops["audit ok"]++

	want := map[string]float64{
		"casebook.redpacket.opens casebook.outcome=ok":                              4,
		"casebook.redpacket.opens casebook.outcome=refused,casebook.reason=empty":   2,
		"casebook.redpacket.opens casebook.outcome=refused,casebook.reason=invalid": 1,
		"casebook.redpacket.refunds.fenced casebook.redpacket.fence=in_flight":      1,
		"casebook.redpacket.refunds.fenced casebook.redpacket.fence=lost_state":     2,
	}
	wantSpans := map[string]int{}
	for k, n := range ops {
		parts := strings.Fields(k)
		obstest.AddOp(want, "redpacket", parts[0], parts[1], strings.Join(parts[2:], ""), n)
		wantSpans["redpacket."+parts[0]+" "+parts[1]] += int(n)
	}
	obstest.Expect(t, obstest.Points(t, reader), want)
	lost := fmt.Sprintf("WARN redpacket: refund fenced: the packet has no Redis state casebook.block=redpacket packet=%d refund_after=%v",
		p2.ID, time.UnixMilli(p2.ExpiresAt).Add(time.Hour))
	if lines, want := logs.Lines(), []string{
		fmt.Sprintf("INFO redpacket: refund fenced: claims accepted by Redis are not in SQL yet casebook.block=redpacket packet=%d claims=3", p1.ID),
		lost, lost,
		fmt.Sprintf("WARN redpacket: refunding from SQL alone: the packet's Redis state is gone and its grace has passed casebook.block=redpacket packet=%d claims=0", p2.ID),
	}; fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("logged\n%q\nwant\n%q", lines, want)
	}

	// One span per operation, named redpacket.<operation>, its outcome an
	// attribute; no errors recorded (no operation failed).
	obstest.ExpectSpanOutcomes(t, spans, wantSpans)
}
