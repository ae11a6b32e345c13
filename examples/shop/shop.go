package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/seckill"
)

// Shop is seed 004's storefront over the blocks: the seckill gate in front,
// the order block behind it, and the HTTP API buyers and the payment channel
// talk to.
type Shop struct {
	rdb     redis.UniversalClient
	orders  *order.Service
	gate    *seckill.Service
	catalog *catalog
	notify  http.Handler // the channel's callbacks, signature-checked
	ns      string
	idemTTL time.Duration

	// sales and batchers are the open campaigns and their coalescing
	// gates, by campaign id.
	sales    map[string]*seckill.Sale
	batchers map[string]*seckill.Batcher

	sessions sessions // who a buyer is: a bearer token (session.go)
	tel      *telemetry
}

// maxBody bounds every request body the shop reads.
const maxBody = 4 << 10

// Handler is the shop's HTTP API. Every route but the product detail and
// the channel's callback is a buyer's: it needs "Authorization: Bearer
// <token>" (401 without a valid one) and sees only that buyer's
// reservations and orders — another buyer's are 404, as if they did not
// exist.
//
//	GET  /products/{sku}                     product detail (cached)
//	POST /seckill/{campaign}/buy             {"qty","request_id"} → 202 reservation
//	GET  /seckill/{campaign}/reservations/{id}  the reservation's order, 202 until created
//	GET  /orders/{id}                        one of the buyer's orders
//	POST /orders/{id}/pay                    → a payment attempt to take to the channel
//	GET  /users/{id}/orders?cursor=C         the buyer's own orders (id is the buyer), newest first
//	POST /pay/notify                         the payment channel's signed callback
//	GET  /metrics                            Prometheus scrape of the blocks' OpenTelemetry metrics (a real shop serves it on an internal port)
func (s *Shop) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /products/{sku}", s.product)
	mux.HandleFunc("POST /seckill/{campaign}/buy", s.authenticated(s.buy))
	mux.HandleFunc("GET /seckill/{campaign}/reservations/{id}", s.authenticated(s.reservation))
	mux.HandleFunc("GET /orders/{id}", s.authenticated(s.getOrder))
	mux.HandleFunc("POST /orders/{id}/pay", s.authenticated(s.pay))
	mux.HandleFunc("GET /users/{id}/orders", s.authenticated(s.userOrders))
	mux.Handle("POST /pay/notify", s.notify)
	mux.Handle("GET /metrics", s.tel.handler)
	return mux
}

func (s *Shop) product(w http.ResponseWriter, r *http.Request) {
	p, err := s.catalog.get(r.Context(), r.PathValue("sku"))
	switch {
	case errors.Is(err, errNoProduct):
		reply(w, http.StatusNotFound, map[string]string{"error": "no such product"})
	case err != nil:
		reply(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		reply(w, http.StatusOK, p)
	}
}

// BuyRequest is the body of POST /seckill/{campaign}/buy; the buyer is the
// session's. Price is accepted and ignored: the server's price is the only
// price.
type BuyRequest struct {
	Qty       int64  `json:"qty"`
	RequestID string `json:"request_id,omitempty"` // idempotency key; default user + campaign
	Price     *int64 `json:"price,omitempty"`      // ignored
}

// BuyAnswer is what a buy returns: the reservation, where its order will be,
// and the price the order will charge.
type BuyAnswer struct {
	Reservation string `json:"reservation"`
	Order       string `json:"order"`
	Repeat      bool   `json:"repeat,omitempty"` // an earlier request with this key made it
	Unconfirmed bool   `json:"unconfirmed,omitempty"`
}

// buy admits one buyer through the gate. A request is idempotent by its key:
// the first one to claim the key (SET NX) buys, a repeat gets the same
// reservation and deducts nothing, a repeat racing the first is told to
// retry; a buy that failed frees its key so that the buyer may try again.
func (s *Shop) buy(w http.ResponseWriter, r *http.Request, user string) {
	ctx := r.Context()
	var req BuyRequest
	if err := decode(w, r, &req); err != nil {
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	campaign := r.PathValue("campaign")
	b, ok := s.batchers[campaign]
	if !ok {
		reply(w, http.StatusNotFound, map[string]string{"error": "no such campaign"})
		return
	}
	if req.Qty == 0 {
		req.Qty = 1
	}
	key := req.RequestID
	if key == "" {
		key = "user:" + user
	}
	if len(key) > 64 {
		reply(w, http.StatusBadRequest, map[string]string{"error": "request_id is 1..64 bytes"})
		return
	}
	idem := s.ns + ":idem:" + campaign + ":" + user + ":" + key
	if s.sales[campaign].SoldOut() {
		// Sold out a moment ago (the gate's local flag): one read for a
		// repeat of a winning request, and the answer without the gate.
		if id, err := s.rdb.Get(ctx, idem).Result(); err == nil && id != "pending" {
			reply(w, http.StatusAccepted, BuyAnswer{Reservation: id, Order: reservationURL(campaign, id), Repeat: true})
			return
		}
		reply(w, http.StatusGone, map[string]string{"error": "sold out"})
		return
	}
	claimed, err := s.rdb.SetNX(ctx, idem, "pending", 30*time.Second).Result()
	if err != nil {
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	if !claimed {
		s.repeat(w, r, idem, campaign)
		return
	}
	id, err := b.Buy(ctx, user, req.Qty)
	if err != nil && !errors.Is(err, seckill.ErrNotReplicated) {
		s.rdb.Del(context.WithoutCancel(ctx), idem) // nothing was bought: the buyer may try again
		status, msg := buyError(err)
		reply(w, status, map[string]string{"error": msg})
		return
	}
	pipe := s.rdb.Pipeline()
	pipe.Set(context.WithoutCancel(ctx), idem, id, s.idemTTL)
	pipe.Set(context.WithoutCancel(ctx), s.ownerKey(id), user, s.idemTTL) // whose reservation, while it is not an order yet
	pipe.Exec(context.WithoutCancel(ctx))
	reply(w, http.StatusAccepted, BuyAnswer{Reservation: id, Order: reservationURL(campaign, id), Unconfirmed: err != nil})
}

func (s *Shop) repeat(w http.ResponseWriter, r *http.Request, idem, campaign string) {
	id, err := s.rdb.Get(r.Context(), idem).Result()
	switch {
	case err != nil && !errors.Is(err, redis.Nil):
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	case id == "pending" || errors.Is(err, redis.Nil):
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusConflict, map[string]string{"error": "the same request is in progress, retry"})
	default:
		reply(w, http.StatusAccepted, BuyAnswer{Reservation: id, Order: reservationURL(campaign, id), Repeat: true})
	}
}

func reservationURL(campaign, id string) string {
	return "/seckill/" + campaign + "/reservations/" + id
}

// buyError maps the gate's refusals to HTTP.
func buyError(err error) (int, string) {
	switch {
	case errors.Is(err, seckill.ErrSoldOut):
		return http.StatusGone, "sold out"
	case errors.Is(err, seckill.ErrLimitReached):
		return http.StatusConflict, "limit reached"
	case errors.Is(err, seckill.ErrRateLimited):
		return http.StatusTooManyRequests, "rate limited"
	case errors.Is(err, seckill.ErrNotStarted), errors.Is(err, seckill.ErrEnded):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, seckill.ErrInvalid):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, seckill.ErrNoCampaign):
		return http.StatusNotFound, err.Error()
	}
	return http.StatusServiceUnavailable, err.Error()
}

// ownerKey names the record of whose reservation id is.
func (s *Shop) ownerKey(id string) string { return s.ns + ":owner:" + id }

// reservation answers with the reservation's order once the consumer made
// it (202 until then). The order is looked up as the caller's; until it
// exists, a buyer asking about a reservation the shop gave another buyer
// gets 404. An id the shop has no owner for (never given out, or its
// record lost with a Redis failover) is 202 for anyone: the answer says
// nothing about whose it is.
func (s *Shop) reservation(w http.ResponseWriter, r *http.Request, user string) {
	o, err := s.gate.OrderOf(r.Context(), user, r.PathValue("id"))
	if errors.Is(err, seckill.ErrNotReady) {
		owner, oerr := s.rdb.Get(r.Context(), s.ownerKey(r.PathValue("id"))).Result()
		switch {
		case oerr == nil && owner != user:
			reply(w, http.StatusNotFound, map[string]string{"error": "no such reservation"})
			return
		case oerr != nil && !errors.Is(oerr, redis.Nil):
			reply(w, http.StatusServiceUnavailable, map[string]string{"error": oerr.Error()})
			return
		}
	}
	switch {
	case errors.Is(err, seckill.ErrNotReady):
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusAccepted, map[string]string{"status": "queued"})
	case errors.Is(err, seckill.ErrInvalid), errors.Is(err, seckill.ErrNoCampaign), errors.Is(err, order.ErrInvalid):
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case err != nil:
		reply(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		reply(w, http.StatusOK, view(o))
	}
}

// OrderView is an order as the API shows it.
type OrderView struct {
	ID          string       `json:"id"`
	User        string       `json:"user"`
	Reservation string       `json:"reservation"`
	Status      order.Status `json:"status"`
	Amount      int64        `json:"amount"`
	Currency    string       `json:"currency"`
	Items       []order.Item `json:"items"`
	PayDeadline time.Time    `json:"pay_deadline"`
	Reason      string       `json:"close_reason,omitempty"`
}

func view(o order.Order) OrderView {
	return OrderView{ID: strconv.FormatInt(o.ID, 10), User: o.User, Reservation: o.RequestID, Status: o.Status, Amount: o.Amount,
		Currency: o.Currency, Items: o.Items, PayDeadline: o.PayDeadline, Reason: o.CloseReason}
}

func (s *Shop) getOrder(w http.ResponseWriter, r *http.Request, user string) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		reply(w, http.StatusBadRequest, map[string]string{"error": "bad order id"})
		return
	}
	o, err := s.orders.Get(r.Context(), id)
	switch {
	case errors.Is(err, order.ErrNotFound), err == nil && o.User != user:
		reply(w, http.StatusNotFound, map[string]string{"error": "no such order"})
	case err != nil:
		reply(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		reply(w, http.StatusOK, view(o))
	}
}

// PayAnswer is a payment attempt: what the buyer pays at the channel.
type PayAnswer struct {
	PayNo    int64  `json:"pay_no"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func (s *Shop) pay(w http.ResponseWriter, r *http.Request, user string) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		reply(w, http.StatusBadRequest, map[string]string{"error": "bad order id"})
		return
	}
	o, err := s.orders.Get(r.Context(), id)
	if errors.Is(err, order.ErrNotFound) || err == nil && o.User != user {
		reply(w, http.StatusNotFound, map[string]string{"error": "no such order"})
		return
	}
	if err != nil {
		reply(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	p, err := s.orders.StartPayment(r.Context(), id, "simpay")
	switch {
	case errors.Is(err, order.ErrIllegalTransition):
		reply(w, http.StatusConflict, map[string]string{"error": err.Error()})
	case err != nil:
		reply(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		reply(w, http.StatusCreated, PayAnswer{PayNo: p.PayNo, Amount: p.Amount, Currency: p.Currency})
	}
}

func (s *Shop) userOrders(w http.ResponseWriter, r *http.Request, user string) {
	if r.PathValue("id") != user {
		reply(w, http.StatusNotFound, map[string]string{"error": "no such user"})
		return
	}
	list, next, err := s.orders.UserOrders(r.Context(), user, r.URL.Query().Get("cursor"), 20)
	switch {
	case errors.Is(err, order.ErrInvalid):
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case err != nil:
		reply(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		views := make([]OrderView, len(list))
		for i, o := range list {
			views[i] = view(o)
		}
		reply(w, http.StatusOK, map[string]any{"orders": views, "next": next})
	}
}

// decode reads one JSON object of at most maxBody bytes strictly, with the
// encoding/json v2 proposal (github.com/go-json-experiment/json): member
// names exactly the fields' and each once (encoding/json folds case and
// keeps the last of a repeated name), no unknown member, valid UTF-8, an
// object (not null) and nothing after it.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return fmt.Errorf("bad body: %w", err)
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("bad body: not a JSON object") // v2 reads null into a struct as nothing
	}
	if err := jsonv2.Unmarshal(body, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf("bad body: %w", err)
	}
	return nil
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
