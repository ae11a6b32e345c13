package order

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/casebook-dev/casebook/internal/strictjson"
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
	HeaderSignature = "X-Casebook-Signature" // HMAC: hex; RSA: base64 — over timestamp + "\n" + body
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
	m.Write(signed(timestamp, body))
	return m.Sum(nil)
}

// Verify implements Verifier.
func (v HMACVerifier) Verify(h http.Header, body []byte) error {
	if len(v.Key) == 0 {
		return fmt.Errorf("%w: no key configured", ErrSignature)
	}
	ts, err := checkTimestamp(h, v.Window, v.Now)
	if err != nil {
		return err
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
		ctx, call := s.obs.serveCallback.Start(r.Context())
		call.End(s.serveCallback(ctx, v, w, r))
	})
}

// serveCallback answers one callback request and returns what it was
// counted as: nil, a refusal or an error.
func (s *Service) serveCallback(ctx context.Context, v Verifier, w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return errMethod
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxCallbackBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		s.obs.counted(ctx, cbMalformed)
		return errTooLarge
	case err != nil:
		http.Error(w, "unreadable body", http.StatusBadRequest)
		s.obs.counted(ctx, cbMalformed)
		return fmt.Errorf("%w: unreadable callback body: %w", ErrInvalid, err)
	}
	if err := v.Verify(r.Header, body); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		s.obs.counted(ctx, cbForged)
		return refused("signature", err) // a Verifier's own errors too
	}
	cb, err := DecodeCallback(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		s.obs.counted(ctx, cbMalformed)
		return err
	}
	out, err := s.handleCallback(ctx, cb)
	switch {
	case errors.Is(err, ErrCallback), errors.Is(err, ErrInvalid):
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return err
	case err != nil:
		http.Error(w, "temporarily unavailable", http.StatusInternalServerError)
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"outcome":%q}`+"\n", out)
	return nil
}

// DecodeCallback parses a callback body strictly: one JSON object with
// known fields only, nothing after it.
func DecodeCallback(body []byte) (Callback, error) {
	var cb Callback
	if err := strictjson.Decode(body, &cb); err != nil {
		return Callback{}, fmt.Errorf("%w: callback body: %w", ErrInvalid, err)
	}
	return cb, nil
}

// RSAVerifier verifies RSA-SHA256 (PKCS #1 v1.5) signatures, base64 in
// HeaderSignature, over timestamp + "\n" + body — the scheme of gateways
// such as WeChat Pay v3 — with the same timestamp window as HMACVerifier.
type RSAVerifier struct {
	Key    *rsa.PublicKey
	Window time.Duration    // default 5 minutes
	Now    func() time.Time // default time.Now
}

// Verify implements Verifier.
func (v RSAVerifier) Verify(h http.Header, body []byte) error {
	if v.Key == nil {
		return fmt.Errorf("%w: no key configured", ErrSignature)
	}
	ts, err := checkTimestamp(h, v.Window, v.Now)
	if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(h.Get(HeaderSignature))
	if err != nil {
		return fmt.Errorf("%w: signature is not base64", ErrSignature)
	}
	digest := sha256.Sum256(signed(ts, body))
	if err := rsa.VerifyPKCS1v15(v.Key, crypto.SHA256, digest[:], sig); err != nil {
		return fmt.Errorf("%w: signature does not match", ErrSignature)
	}
	return nil
}

// SignRSA returns the header values an RSAVerifier accepts for body at t:
// what a gateway (or a test standing in for one) sends.
func SignRSA(key *rsa.PrivateKey, body []byte, t time.Time) (timestamp, signature string, err error) {
	timestamp = strconv.FormatInt(t.Unix(), 10)
	digest := sha256.Sum256(signed(timestamp, body))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		return "", "", err
	}
	return timestamp, base64.StdEncoding.EncodeToString(sig), nil
}

// signed is the message a callback signature covers.
func signed(timestamp string, body []byte) []byte {
	return append(append([]byte(timestamp), '\n'), body...)
}

// checkTimestamp reads HeaderTimestamp and refuses it outside window of now.
func checkTimestamp(h http.Header, window time.Duration, now func() time.Time) (string, error) {
	ts := h.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: timestamp %q", ErrSignature, ts)
	}
	if now == nil {
		now = time.Now
	}
	if window <= 0 {
		window = 5 * time.Minute
	}
	if d := now().Sub(time.Unix(sec, 0)); d > window || d < -window {
		return "", fmt.Errorf("%w: timestamp %s is %v from now (window %v)", ErrSignature, ts, d.Round(time.Second), window)
	}
	return ts, nil
}
