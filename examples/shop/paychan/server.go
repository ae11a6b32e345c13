package paychan

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/casebook-dev/casebook/order"
)

// MaxBody bounds the body of a /pay request.
const MaxBody = 4 << 10

// PayRequest is the body of POST /pay: collect Amount (in the smallest unit
// of Currency) for payment PayNo.
type PayRequest struct {
	PayNo    int64  `json:"pay_no"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// handler routes the channel's API; ServeMux answers 405, with Allow, for
// a documented path asked with another method, and 404 for other paths.
func (c *Channel) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay", c.pay)
	mux.HandleFunc("GET /query", c.query)
	mux.HandleFunc("GET /statement", c.statement)
	return mux
}

// pay serves POST /pay: 200 with the collection as an order.Callback, new
// or recorded before; 409 when one was recorded with another amount; 400,
// 413 or 503 (closing) recording nothing.
func (c *Channel) pay(w http.ResponseWriter, r *http.Request) {
	req, status, err := c.decodePay(w, r)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	cb, conflict, err := c.collect(req.PayNo, req.Amount, req.Currency)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case conflict:
		http.Error(w, fmt.Sprintf("pay_no %d was collected as %d %s", cb.PayNo, cb.Amount, cb.Currency), http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(mustJSON(cb))
}

// decodePay reads a PayRequest strictly: one JSON object of known fields,
// nothing after it, within MaxBody, with valid values.
func (c *Channel) decodePay(w http.ResponseWriter, r *http.Request) (PayRequest, int, error) {
	var req PayRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		return req, http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", MaxBody)
	} else if err != nil {
		return req, http.StatusBadRequest, fmt.Errorf("unreadable body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, http.StatusBadRequest, fmt.Errorf("bad pay request: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, http.StatusBadRequest, errors.New("bad pay request: data after the object")
	}
	switch {
	case req.PayNo < 1:
		return req, http.StatusBadRequest, fmt.Errorf("pay_no %d below 1", req.PayNo)
	case req.Amount < 1:
		return req, http.StatusBadRequest, fmt.Errorf("amount %d below 1", req.Amount)
	case req.Currency != c.cfg.Currency:
		return req, http.StatusBadRequest, fmt.Errorf("currency %q: this account collects %s", req.Currency, c.cfg.Currency)
	}
	return req, 0, nil
}

// query serves GET /query?pay_no=N: 200 with the collection as an
// order.Callback (the very bytes of its callback), or 404; both signed.
func (c *Channel) query(w http.ResponseWriter, r *http.Request) {
	payNo, err := strconv.ParseInt(r.URL.Query().Get("pay_no"), 10, 64)
	if err != nil || payNo < 1 {
		http.Error(w, "pay_no must be a number ≥ 1", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	col := c.byPayNo[payNo]
	c.mu.Unlock()
	if col == nil {
		c.reply(w, http.StatusNotFound, "text/plain; charset=utf-8", notFound(payNo))
		return
	}
	c.reply(w, http.StatusOK, "application/json", col.body)
}

// notFound is the body of a 404 to a query, which the client checks so that
// a signed 404 of another payment cannot be replayed.
func notFound(payNo int64) []byte { return fmt.Appendf(nil, "no collection for pay_no %d\n", payNo) }

// statement serves GET /statement?from=T&to=T (RFC 3339): a signed CSV of
// order.StatementHeader and one SUCCESS line per collection paid in [from, to).
func (c *Channel) statement(w http.ResponseWriter, r *http.Request) {
	from, e1 := time.Parse(time.RFC3339, r.URL.Query().Get("from"))
	to, e2 := time.Parse(time.RFC3339, r.URL.Query().Get("to"))
	if e1 != nil || e2 != nil || !from.Before(to) {
		http.Error(w, "from and to must be RFC 3339 times, from before to", http.StatusBadRequest)
		return
	}
	var buf bytes.Buffer
	cw := csv.NewWriter(&buf)
	cw.Write(strings.Split(order.StatementHeader, ","))
	c.mu.Lock()
	for _, col := range c.paid {
		if cb := col.cb; !cb.PaidAt.Before(from) && cb.PaidAt.Before(to) {
			cw.Write([]string{cb.GatewayTxn, strconv.FormatInt(cb.PayNo, 10), strconv.FormatInt(cb.Amount, 10), "SUCCESS", cb.PaidAt.Format(time.RFC3339Nano)})
		}
	}
	c.mu.Unlock()
	cw.Flush()
	c.reply(w, http.StatusOK, "text/csv; charset=utf-8", buf.Bytes())
}

// reply writes body signed as callbacks are: HeaderTimestamp and
// HeaderSignature over timestamp + "\n" + body.
func (c *Channel) reply(w http.ResponseWriter, status int, contentType string, body []byte) {
	ts, sig, err := order.SignRSA(c.cfg.Key, body, c.cfg.Now())
	if err != nil {
		http.Error(w, "cannot sign", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set(order.HeaderTimestamp, ts)
	h.Set(order.HeaderSignature, sig)
	w.WriteHeader(status)
	w.Write(body)
}
