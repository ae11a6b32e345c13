package paychan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/casebook-dev/casebook/order"
)

// maxAnswer bounds what a Client reads of an answer (a statement of about
// a million lines).
const maxAnswer = 64 << 20

// Client talks to a Channel over HTTP and verifies its signed answers. It
// implements order.Channel, so order.Service.RecoverPayments can query it.
type Client struct {
	base   string
	verify order.RSAVerifier
	hc     *http.Client
}

var _ order.Channel = (*Client)(nil)

// NewClient returns a Client of the channel at baseURL (such as
// Channel.URL()) whose answers v verifies (v.Key: the channel's
// PublicKey). A nil hc is a client with a 10 s timeout.
func NewClient(baseURL string, v order.RSAVerifier, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), verify: v, hc: hc}
}

// Pay asks the channel to collect amount for payNo, as a buyer paying does,
// and returns the collection: the new one, or the one collected before for
// payNo. An error wrapping ErrRejected means the channel refused the request
// (bad input, or payNo collected before with another amount) and recorded
// nothing.
func (cl *Client) Pay(ctx context.Context, payNo, amount int64, currency string) (order.Callback, error) {
	body := mustJSON(PayRequest{PayNo: payNo, Amount: amount, Currency: currency})
	res, err := cl.do(ctx, http.MethodPost, "/pay", body)
	if err != nil {
		return order.Callback{}, fmt.Errorf("paychan: pay %d: %w", payNo, err)
	}
	if err := res.ok(); err != nil {
		return order.Callback{}, fmt.Errorf("paychan: pay %d: %w", payNo, err)
	}
	return order.DecodeCallback(res.body)
}

// Query asks the channel what it knows of payment payNo: the collection as
// its callback would report it, or found false. It implements order.Channel.
// An answer whose signature does not verify is an error wrapping
// order.ErrSignature.
func (cl *Client) Query(ctx context.Context, payNo int64) (order.Callback, bool, error) {
	res, err := cl.do(ctx, http.MethodGet, "/query?pay_no="+strconv.FormatInt(payNo, 10), nil)
	if err != nil {
		return order.Callback{}, false, fmt.Errorf("paychan: query %d: %w", payNo, err)
	}
	if res.status == http.StatusNotFound {
		err := cl.verified(res)
		if err == nil && !bytes.Equal(res.body, notFound(payNo)) {
			err = fmt.Errorf("%w: a not-found answer about another payment", order.ErrSignature)
		}
		if err != nil {
			return order.Callback{}, false, fmt.Errorf("paychan: query %d: %w", payNo, err)
		}
		return order.Callback{}, false, nil
	}
	if err := errors.Join(res.ok(), cl.verified(res)); err != nil {
		return order.Callback{}, false, fmt.Errorf("paychan: query %d: %w", payNo, err)
	}
	cb, err := order.DecodeCallback(res.body)
	if err != nil {
		return order.Callback{}, false, fmt.Errorf("paychan: query %d: %w", payNo, err)
	}
	if cb.PayNo != payNo {
		return order.Callback{}, false, fmt.Errorf("paychan: query %d: %w: answer is about pay_no %d", payNo, order.ErrSignature, cb.PayNo)
	}
	return cb, true, nil
}

// Statement downloads the channel's statement of the collections paid in
// [from, to) and parses it with order.ParseStatement, ready for
// order.Service.Reconcile. An answer whose signature does not verify, or a
// line outside the window, is an error.
func (cl *Client) Statement(ctx context.Context, from, to time.Time) ([]order.StatementLine, error) {
	q := url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}
	res, err := cl.do(ctx, http.MethodGet, "/statement?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("paychan: statement: %w", err)
	}
	if err := errors.Join(res.ok(), cl.verified(res)); err != nil {
		return nil, fmt.Errorf("paychan: statement: %w", err)
	}
	lines, err := order.ParseStatement(bytes.NewReader(res.body))
	if err != nil {
		return nil, fmt.Errorf("paychan: statement: %w", err)
	}
	for _, l := range lines {
		if l.Time.Before(from) || !l.Time.Before(to) {
			return nil, fmt.Errorf("paychan: statement: %s paid at %v, outside [%v, %v)", l.GatewayTxn, l.Time, from, to)
		}
	}
	return lines, nil
}

// answer is a read HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// ok is nil for a 2xx answer, else an error, wrapping ErrRejected for 4xx.
func (a answer) ok() error {
	switch a.status / 100 {
	case 2:
		return nil
	case 4:
		return fmt.Errorf("%w: %d %s", ErrRejected, a.status, bytes.TrimSpace(a.body))
	}
	return fmt.Errorf("channel answered %d %s", a.status, bytes.TrimSpace(a.body))
}

func (cl *Client) verified(a answer) error { return cl.verify.Verify(a.header, a.body) }

func (cl *Client) do(ctx context.Context, method, path string, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, cl.base+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := cl.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return answer{}, err
	}
	return answer{status: res.StatusCode, header: res.Header, body: b}, nil
}

// CloseIdleConnections closes the connections the Client keeps open for
// its next requests.
func (cl *Client) CloseIdleConnections() { cl.hc.CloseIdleConnections() }
