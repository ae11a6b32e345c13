package order

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Verifier checks that a callback request comes from the gateway: its
// signature over the raw body bytes (never a re-serialised body) and its
// timestamp window.
type Verifier interface {
	Verify(header http.Header, body []byte) error
}

// ErrSignature is returned by a Verifier for a missing or wrong signature, or
// a timestamp outside its window.
var ErrSignature = errors.New("order: bad callback signature")

// HMAC headers.
const (
	HeaderTimestamp = "X-Casebook-Timestamp" // Unix seconds
	HeaderSignature = "X-Casebook-Signature" // hex HMAC-SHA256(key, timestamp + "\n" + body)
)

// HMACVerifier verifies HMAC-SHA256 signatures of timestamp + "\n" + body,
// refusing timestamps further than Window from Now (replays of old requests;
// a replay inside the window is harmless, callbacks being idempotent).
type HMACVerifier struct {
	Key    []byte
	Window time.Duration    // default 5 minutes
	Now    func() time.Time // default time.Now
}

// Sign returns the signature headers' values for body at t.
func (v HMACVerifier) Sign(body []byte, t time.Time) (timestamp, signature string) {
	timestamp = strconv.FormatInt(t.Unix(), 10)
	return timestamp, hex.EncodeToString(v.mac(timestamp, body))
}

func (v HMACVerifier) mac(timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, v.Key)
	m.Write([]byte(timestamp))
	m.Write([]byte{'\n'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify implements Verifier.
func (v HMACVerifier) Verify(h http.Header, body []byte) error {
	if len(v.Key) == 0 {
		return fmt.Errorf("%w: no key configured", ErrSignature)
	}
	ts := h.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrSignature, ts)
	}
	now, window := time.Now, 5*time.Minute
	if v.Now != nil {
		now = v.Now
	}
	if v.Window > 0 {
		window = v.Window
	}
	if d := now().Sub(time.Unix(sec, 0)); d > window || d < -window {
		return fmt.Errorf("%w: timestamp %s is %v from now (window %v)", ErrSignature, ts, d.Round(time.Second), window)
	}
	sig, err := hex.DecodeString(h.Get(HeaderSignature))
	if err != nil || !hmac.Equal(sig, v.mac(ts, body)) {
		return fmt.Errorf("%w: signature does not match", ErrSignature)
	}
	return nil
}

// MaxCallbackBody bounds a callback request body.
const MaxCallbackBody = 16 << 10

// CallbackHandler serves a gateway's POSTs of a Callback as JSON. It answers
// 200 with the outcome for an applied or repeated callback; 401 for a bad
// signature or timestamp, 400 for a malformed body, 413 for one over
// MaxCallbackBody, 405 for other methods — each writing nothing; 422 for a
// callback refused by HandleCallback (recorded); 500 when the database
// failed (the gateway retries).
func (s *Service) CallbackHandler(v Verifier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxCallbackBody))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := v.Verify(r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		cb, err := DecodeCallback(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := s.HandleCallback(r.Context(), cb)
		switch {
		case errors.Is(err, ErrCallback), errors.Is(err, ErrInvalid):
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		case err != nil:
			http.Error(w, "temporarily unavailable", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"outcome":%q}`+"\n", out)
	})
}

// DecodeCallback parses a callback body strictly: one JSON object with
// known fields only, nothing after it.
func DecodeCallback(body []byte) (Callback, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var cb Callback
	if err := dec.Decode(&cb); err != nil {
		return Callback{}, fmt.Errorf("%w: callback body: %w", ErrInvalid, err)
	}
	if dec.More() || dec.InputOffset() != int64(len(bytes.TrimRight(body, " \t\r\n"))) {
		return Callback{}, fmt.Errorf("%w: data after the callback object", ErrInvalid)
	}
	return cb, nil
}
