package paychan

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"time"

	"github.com/casebook-dev/casebook/order"
)

// delivery is one callback on its way: a collection's, or the second copy
// of a duplicated one. Only the goroutine holding it uses rng.
type delivery struct {
	col     *collection
	rng     *mrand.Rand // the jitter of this delivery's attempts
	attempt int         // requests made so far
	due     time.Time
}

// deliveries is a min-heap of deliveries by due time.
type deliveries []*delivery

func (q deliveries) Len() int           { return len(q) }
func (q deliveries) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q deliveries) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *deliveries) Push(x any)        { *q = append(*q, x.(*delivery)) }
func (q *deliveries) Pop() any {
	old := *q
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return d
}

// enqueue schedules d's next attempt: at once for the first, after the
// retry wait for the others, plus jitter. c.mu must be held.
func (c *Channel) enqueue(d *delivery) {
	var wait time.Duration
	if d.attempt > 0 {
		wait = time.Duration(float64(c.cfg.Retries[d.attempt-1]) * c.cfg.Scale)
	}
	if c.cfg.Jitter > 0 {
		wait += time.Duration(d.rng.Int64N(int64(c.cfg.Jitter)))
	}
	d.due = time.Now().Add(wait)
	heap.Push(&c.queue, d)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// schedule hands each delivery to a sender when it is due, until Close.
func (c *Channel) schedule() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		var due *delivery
		wait := time.Hour
		if len(c.queue) > 0 {
			if wait = time.Until(c.queue[0].due); wait <= 0 {
				due = heap.Pop(&c.queue).(*delivery)
			}
		}
		c.mu.Unlock()
		if due != nil {
			select {
			case c.work <- due:
			case <-c.done:
				return
			}
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-c.wake:
		case <-c.done:
			return
		}
	}
}

// send delivers what schedule hands it, until Close; ctx is cancelled by
// Close.
func (c *Channel) send(ctx context.Context) {
	for {
		select {
		case d := <-c.work:
			c.deliver(ctx, d)
		case <-c.done:
			return
		}
	}
}

// deliver makes one attempt of d and decides: settled on a 2xx or 4xx
// answer or when the retries ran out, else scheduled again.
func (c *Channel) deliver(ctx context.Context, d *delivery) {
	status, answer := c.post(ctx, d.col)
	if ctx.Err() != nil {
		return // closing: the callback stays pending
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Sent++
	d.attempt++
	switch class := status / 100; {
	case class == 2 || class == 4:
		c.settle(d.col, status, answer)
	case d.attempt > len(c.cfg.Retries):
		c.stats.Failed++
		c.settle(d.col, status, answer)
	default:
		c.stats.Failed++
		c.enqueue(d)
	}
}

// post sends col's callback, signed now, and returns the answer's status
// (0 for no answer) and the start of its body.
func (c *Channel) post(ctx context.Context, col *collection) (status int, answer string) {
	ts, sig, err := order.SignRSA(c.cfg.Key, col.body, c.cfg.Now())
	if err != nil {
		return 0, err.Error()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.NotifyURL, bytes.NewReader(col.body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(order.HeaderTimestamp, ts)
	req.Header.Set(order.HeaderSignature, sig)
	res, err := c.cfg.Client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(res.Body, 200))
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)) // lets the connection be reused
	return res.StatusCode, string(head)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only types of this package, which always marshal
	}
	return b
}
