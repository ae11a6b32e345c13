package notify_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed/notify"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// TestKafkaPath: activities, their redeliveries and poison messages (the
// malformed ones, and well-formed ones Add refuses: too old, too new) on
// one partition through a real consumer group: the poison is skipped with
// a count, everything behind it is applied, each activity once.
func TestKafkaPath(t *testing.T) {
	x := newFixture(t, testenv.NewRedis(t), notify.Config{Window: time.Hour})
	x.clk.Add(30 * time.Minute) // mid-window
	now := x.clk.Now()
	var values [][]byte
	enc := func(a notify.Activity) []byte {
		v, err := notify.Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i := range 6 {
		a := notify.Activity{ID: fmt.Sprint("k", i), Actor: fmt.Sprint("u", i%4), Verb: "like", Object: "post:1", Target: "dave", Time: now.Add(-time.Duration(i) * time.Minute)}
		values = append(values, enc(a), enc(a)) // each one redelivered
		if i == 2 {
			for _, p := range poison {
				values = append(values, []byte(p))
			}
		}
	}
	tooOld := notify.Activity{ID: "old", Actor: "u9", Verb: "like", Object: "post:1", Target: "dave", Time: now.Add(-3 * time.Hour)}
	tooNew := tooOld
	tooNew.ID, tooNew.Time = "new", now.Add(time.Hour)
	values = append(values, enc(tooOld), enc(tooNew))
	c, bad := testenv.ConsumeInOrder(t, values, x.f.Handle, notify.ErrBadMessage)
	if want := int64(len(poison) + 2); c.Poisoned() != want || bad != int(want) || c.Handled() != 12 {
		t.Fatalf("poisoned %d (%d ErrBadMessage), handled %d; want %d poisoned, 12 handled", c.Poisoned(), bad, c.Handled(), want)
	}
	gs := x.all("dave", 10)
	if len(gs) != 1 || gs[0].ActorCount != 4 || gs[0].First != now.Add(-5*time.Minute).UTC() || gs[0].Last != now.UTC() {
		t.Fatalf("groups %+v, want one of 4 actors from -5m to now", gs)
	}
	if n, err := x.r.Client.Get(x.ctx, x.f.SeqKey("dave")).Int64(); err != nil || n != 6 {
		t.Fatalf("%d activities applied (%v), want 6", n, err)
	}
}
